# Example: require a person's approval for every capability whose name matches a pattern, even
# when it is among a linked host's default capabilities.
# To adopt: copy `needs_approval` into agentgate.rego and add `not needs_approval(r)` to both
# `pre_approved` rules. glob.match is evaluated natively in WebAssembly.
package examples.approval_by_pattern

import rego.v1

# "." separates name segments, so "payments.*" matches payments.refund but not payments.eu.refund.
approval_patterns := ["payments.*", "admin.**", "*.delete"]

needs_approval(r) if {
	some pattern in approval_patterns
	glob.match(pattern, ["."], r.capability)
}

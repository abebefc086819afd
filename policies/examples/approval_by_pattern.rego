# Example (b): a person approves every capability whose name matches a pattern, even one that is a
# linked host's default or on the autonomous list.
#
# To adopt it in agentgate.rego (policies/README.md, "Adopting an example"):
#   1. Copy the rules of the "Copy into agentgate.rego" section below to the end of agentgate.rego.
#   2. In `verdict`, right after the branch with the reason "host may not receive grants" (so every
#      deny still wins), add the branch
#          } else := {"decision": "approval", "reason": pattern_approval_reason} if {
#              needs_approval(r)
#   3. Copy the tests of approval_by_pattern_test.rego into agentgate_test.rego, with `policy.` in
#      place of `ex.`, then run `npm run policy:build`.
# Only builtins that run in WebAssembly are available (policies/capabilities.json): glob.match,
# regex.match, startswith and endswith all are; regex.globs_match and strings.any_prefix_match are not.
package agentgate.examples.approval_by_pattern

import rego.v1

import data.agentgate as policy

# ---- Copy into agentgate.rego ------------------------------------------------------------------

# Globs over dot-separated names: "*" stays inside one segment, "**" crosses segments, so
# "payments.*" matches payments.refund but not payments.eu.refund.
approval_patterns := ["payments.*", "admin.**", "*.delete"]

needs_approval(r) if {
	some pattern in approval_patterns
	glob.match(pattern, ["."], r.capability)
}

pattern_approval_reason := "approval required for this kind of capability"

# ---- The default policy with this example adopted ----------------------------------------------
# What agentgate.rego decides once the steps above are done, so the tests show agentgate's answers.

grants := {"decisions": [decision(r) | some r in input.requests]}

decision(r) := object.union_n([{"capability": r.capability}, v, policy.imposed(r, v.decision)]) if {
	v := verdict(r)
}

# Inserting a branch after the deny branches is the same as: whatever the policy did not deny.
verdict(r) := {"decision": "approval", "reason": pattern_approval_reason} if {
	policy.verdict(r).decision != "deny"
	needs_approval(r)
} else := policy.verdict(r)

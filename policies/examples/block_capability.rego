# Example: block a capability for everyone, or only for one host.
# To adopt: copy `blocked_reason` into agentgate.rego and add, right after the "unknown capability"
# branch of `verdict`:
#     } else := {"decision": "deny", "reason": reason} if {
#         reason := blocked_reason(r)
# A denied request makes register and request-capability answer 400 invalid_capabilities.
package examples.block_capability

import rego.v1

blocked_everywhere := {"purge_all_data"}

# Host ids (as agentgate reports them in input.host.id) and what each may never receive.
blocked_for_host := {"hst_untrusted": {"transfer_money"}}

blocked_reason(r) := "blocked for every host" if {
	r.capability in blocked_everywhere
} else := "blocked for this host" if {
	r.capability in object.get(blocked_for_host, input.host.id, set())
}

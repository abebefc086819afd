# Example (a): block a capability for everyone, or only for one host.
#
# To adopt it in agentgate.rego (policies/README.md, "Adopting an example"):
#   1. Copy the rules of the "Copy into agentgate.rego" section below to the end of agentgate.rego.
#   2. In `verdict`, right after the branch with the reason "unknown capability", add the branch
#          } else := {"decision": "deny", "reason": reason} if {
#              reason := block_reason(r.capability, input.host.id)
#   3. A grant made before the change still executes. To stop those at once, rename the current
#      `execute` to `execute_before_block` and copy `execute` from the "adopted" section below,
#      with `execute_before_block` in place of `policy.execute`.
#   4. Copy the tests of block_capability_test.rego into agentgate_test.rego, with `policy.` in
#      place of `ex.`, then run `npm run policy:build`.
# A denied request makes register and request-capability answer 400 invalid_capabilities; the
# execute refusal is 403 capability_not_granted with the reason. For "everyone" alone, adding the
# name to blocked_capabilities in data.json is enough; this rule form also covers single hosts.
package agentgate.examples.block_capability

import rego.v1

import data.agentgate as policy

# ---- Copy into agentgate.rego ------------------------------------------------------------------

# Never granted to any agent (here, a report slated for removal).
blocked_everywhere := {"legacy_report"}

# Host id (input.host.id at grant time, input.agent.host_id at execute) -> what it may never get.
blocked_for_host := {"hst_untrusted": {"export_customer_data"}}

block_reason(capability, host_id) := "blocked for every host" if {
	capability in blocked_everywhere
} else := "blocked for this host" if {
	capability in object.get(blocked_for_host, host_id, set())
}

# ---- The default policy with this example adopted ----------------------------------------------
# What agentgate.rego decides once the steps above are done, so the tests show agentgate's answers.

grants := {"decisions": [decision(r) | some r in input.requests]}

decision(r) := {"capability": r.capability, "decision": "deny", "reason": reason} if {
	r.exists == true # an unknown capability keeps its own reason
	reason := block_reason(r.capability, input.host.id)
} else := policy.decision(r)

execute := {"allow": false, "violations": [], "reason": reason} if {
	reason := block_reason(input.capability, input.agent.host_id)
} else := policy.execute

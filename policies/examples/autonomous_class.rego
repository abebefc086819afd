# Example (d): autonomous agents (no person behind them) may never hold or use a class of
# capabilities, here every name starting with "payments.".
#
# To adopt it in agentgate.rego (policies/README.md, "Adopting an example"):
#   1. Copy the rules of the "Copy into agentgate.rego" section below to the end of agentgate.rego.
#   2. In `verdict`, right after the branch with the reason "unknown capability", add the branch
#          } else := {"decision": "deny", "reason": reason} if {
#              reason := autonomous_refusal(r.capability)
#   3. For grants made before the change (an administrator may have approved one), rename the
#      current `execute` to `execute_before_autonomous_class` and copy `execute` from the "adopted"
#      section below, with `execute_before_autonomous_class` in place of `policy.execute`.
#   4. Copy the tests of autonomous_class_test.rego into agentgate_test.rego, with `policy.` in
#      place of `ex.`, then run `npm run policy:build`.
# The grant is refused (400 invalid_capabilities at register and request-capability); an execute
# on an older grant is 403 capability_not_granted with the reason.
package agentgate.examples.autonomous_class

import rego.v1

import data.agentgate as policy

# ---- Copy into agentgate.rego ------------------------------------------------------------------

autonomous_forbidden_prefixes := ["payments."]

# input.agent.mode is in the input of both entrypoints.
autonomous_refusal(capability) := "autonomous agents may not use this class of capabilities" if {
	input.agent.mode == "autonomous"
	some prefix in autonomous_forbidden_prefixes
	startswith(capability, prefix)
}

# ---- The default policy with this example adopted ----------------------------------------------
# What agentgate.rego decides once the steps above are done, so the tests show agentgate's answers.

grants := {"decisions": [decision(r) | some r in input.requests]}

decision(r) := {"capability": r.capability, "decision": "deny", "reason": reason} if {
	r.exists == true # an unknown capability keeps its own reason
	reason := autonomous_refusal(r.capability)
} else := policy.decision(r)

execute := {"allow": false, "violations": [], "reason": reason} if {
	reason := autonomous_refusal(input.capability)
} else := policy.execute

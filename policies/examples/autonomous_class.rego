# Example: autonomous agents (no person behind them) may never hold a class of capabilities.
# To adopt: copy `autonomous_refusal` into agentgate.rego and add, right after the "unknown
# capability" branch of `verdict`:
#     } else := {"decision": "deny", "reason": reason} if {
#         reason := autonomous_refusal(r)
package examples.autonomous_class

import rego.v1

autonomous_forbidden_prefixes := ["payments.", "admin."]

autonomous_refusal(r) := "autonomous agents may not hold this class of capabilities" if {
	input.agent.mode == "autonomous"
	some prefix in autonomous_forbidden_prefixes
	startswith(r.capability, prefix)
}

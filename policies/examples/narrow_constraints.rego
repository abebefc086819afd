# Example: impose server-side constraints. agentgate intersects them with what the agent asked
# for (max takes the smaller, min the larger, in intersects, not_in unites), so they can only
# narrow a grant, never widen it.
# To adopt: in agentgate.rego, replace the body of `imposed` (or extend data.json's
# imposed_constraints when the constraint does not depend on the request).
package examples.narrow_constraints

import rego.v1

# Delegated agents move at most 500 per call, and only in EUR or USD.
imposed_constraints(r) := {"amount": {"max": 500}, "currency": {"in": ["EUR", "USD"]}} if {
	r.capability == "transfer_money"
	input.agent.mode == "delegated"
}

# What `grants` would answer for one approved request, with the constraints attached.
decision(r) := object.union({"capability": r.capability, "decision": "grant"}, {"constraints": c}) if {
	c := imposed_constraints(r)
} else := {"capability": r.capability, "decision": "grant"}

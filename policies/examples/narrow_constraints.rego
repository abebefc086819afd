# Example (c): impose server-side constraints that narrow what an agent asked for: delegated agents
# move at most 500 per transfer_money call. agentgate intersects imposed constraints with the
# agent's proposal (max takes the smaller, min the larger, in intersects, not_in unites), so they
# only ever narrow: a proposal of {"amount": {"max": 10000}} becomes a grant of max 500, and a
# proposal of max 100 stays 100.
#
# To adopt it in agentgate.rego (policies/README.md, "Adopting an example"):
#   1. Delete the current `imposed` from agentgate.rego (the one copied next replaces it, and still
#      reads data.agentgate.imposed_constraints).
#   2. Copy the rules of the "Copy into agentgate.rego" section below to the end of agentgate.rego.
#   3. Copy the tests of narrow_constraints_test.rego into agentgate_test.rego, with `policy.` in
#      place of `ex.`, then run `npm run policy:build`.
# A constraint that depends only on the capability needs no Rego at all: put it in data.json's
# imposed_constraints. Imposed constraints apply to new grants and approvals; grants made before the
# change keep the constraints they were made with.
package agentgate.examples.narrow_constraints

import rego.v1

import data.agentgate as policy

# ---- Copy into agentgate.rego ------------------------------------------------------------------

# Constraints that depend on who asks, not only on the capability.
rule_constraints(r) := {"amount": {"max": 500}} if {
	r.capability == "transfer_money"
	input.agent.mode == "delegated"
} else := {}

# data.json's imposed_constraints for the capability, merged with the rule's (the rule's operand
# wins when both set the same operator on the same field). A deny carries none.
imposed(r, verdict_name) := {"constraints": c} if {
	verdict_name != "deny"
	c := object.union(data_constraints(r), rule_constraints(r))
	count(c) > 0
} else := {}

data_constraints(r) := c if {
	c := data.agentgate.imposed_constraints[r.capability]
	is_object(c)
} else := {}

# ---- The default policy with this example adopted ----------------------------------------------
# What agentgate.rego decides once the steps above are done, so the tests show agentgate's answers.

grants := {"decisions": [decision(r) | some r in input.requests]}

decision(r) := object.union_n([{"capability": r.capability}, v, imposed(r, v.decision)]) if {
	v := policy.verdict(r)
}

package agentgate.examples.narrow_constraints_test

import rego.v1

import data.agentgate.examples.narrow_constraints as ex

# Every helper and test here starts with narrow_ (or test_narrow_), so they stay unique when
# copied into agentgate_test.rego next to its own tests and another example's. The capabilities are
# ones no other example touches at grant time, so adopting another example does not change these
# answers.

# A grants input exactly as agentgate sends it (src/policy/types.ts); the agent proposes max 10000.
narrow_grants_input(mode, capability) := {
	"now_ms": 1767225600000,
	"action": "request_capability",
	"host": {"id": "hst_1", "status": "active", "linked": true, "default_capabilities": ["transfer_money"]},
	"agent": {"id": "agt_1", "mode": mode},
	"requests": [{"capability": capability, "exists": true, "constraints": {"amount": {"max": 10000}}, "previous_status": null}],
}

test_narrow_delegated_transfers_are_capped if {
	out := ex.grants with input as narrow_grants_input("delegated", "transfer_money")
	out == {"decisions": [{"capability": "transfer_money", "decision": "grant", "constraints": {"amount": {"max": 500}}}]}
}

test_narrow_leaves_autonomous_agents_and_other_capabilities_alone if {
	autonomous := ex.grants with input as narrow_grants_input("autonomous", "transfer_money")
	autonomous == {"decisions": [{"capability": "transfer_money", "decision": "grant"}]}
	other := ex.grants with input as narrow_grants_input("delegated", "read_file")
	other == {"decisions": [{"capability": "read_file", "decision": "approval", "reason": "user approval required"}]}
}

test_narrow_data_json_constraints_still_apply_and_merge if {
	out := ex.grants with input as narrow_grants_input("delegated", "transfer_money")
		with data.agentgate.imposed_constraints as {"transfer_money": {"currency": {"in": ["EUR", "USD"]}, "amount": {"min": 1}}}
	out.decisions == [{
		"capability": "transfer_money",
		"decision": "grant",
		"constraints": {"amount": {"min": 1, "max": 500}, "currency": {"in": ["EUR", "USD"]}},
	}]
}

test_narrow_a_deny_carries_no_constraints if {
	out := ex.grants with input as narrow_grants_input("delegated", "transfer_money")
		with data.agentgate.blocked_capabilities as ["transfer_money"]
	out == {"decisions": [{"capability": "transfer_money", "decision": "deny", "reason": "blocked by policy"}]}
}

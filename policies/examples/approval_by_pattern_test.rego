package agentgate.examples.approval_by_pattern_test

import rego.v1

import data.agentgate.examples.approval_by_pattern as ex

# Every helper and test here starts with pattern_ (or test_pattern_), so they stay unique when
# copied into agentgate_test.rego next to its own tests and another example's. The capabilities are
# ones no other example touches, so adopting another example does not change these answers.

# A grants input exactly as agentgate sends it (src/policy/types.ts).
pattern_grants_input(mode, defaults, requests) := {
	"now_ms": 1767225600000,
	"action": "register",
	"host": {"id": "hst_1", "status": "active", "linked": true, "default_capabilities": defaults},
	"agent": {"id": null, "mode": mode},
	"requests": [{"capability": c, "exists": true, "constraints": null, "previous_status": null} | some c in requests],
}

pattern_approval := "approval required for this kind of capability"

test_pattern_matching_defaults_need_approval_instead_of_a_grant if {
	defaults := ["payments.refund", "admin.users.reset", "files.delete", "read_file"]
	out := ex.grants with input as pattern_grants_input("delegated", defaults, defaults)
	out == {"decisions": [
		{"capability": "payments.refund", "decision": "approval", "reason": pattern_approval},
		{"capability": "admin.users.reset", "decision": "approval", "reason": pattern_approval},
		{"capability": "files.delete", "decision": "approval", "reason": pattern_approval},
		{"capability": "read_file", "decision": "grant"},
	]}
}

test_pattern_applies_to_autonomous_agents_too if {
	out := ex.grants with input as pattern_grants_input("autonomous", ["admin.users.reset"], ["admin.users.reset", "echo"])
	out.decisions == [
		{"capability": "admin.users.reset", "decision": "approval", "reason": pattern_approval},
		{"capability": "echo", "decision": "grant"},
	]
}

test_pattern_one_star_stays_inside_one_segment if {
	out := ex.grants with input as pattern_grants_input("delegated", ["payments.eu.refund"], ["payments.eu.refund"])
	out.decisions == [{"capability": "payments.eu.refund", "decision": "grant"}]
}

test_pattern_a_deny_still_wins if {
	out := ex.grants with input as pattern_grants_input("delegated", ["payments.refund"], ["payments.refund"])
		with data.agentgate.blocked_capabilities as ["payments.refund"]
	out.decisions == [{"capability": "payments.refund", "decision": "deny", "reason": "blocked by policy"}]
}

test_pattern_imposed_constraints_stay_attached if {
	out := ex.grants with input as pattern_grants_input("delegated", [], ["payments.refund"])
		with data.agentgate.imposed_constraints as {"payments.refund": {"amount": {"max": 50}}}
	out.decisions == [{
		"capability": "payments.refund",
		"decision": "approval",
		"reason": pattern_approval,
		"constraints": {"amount": {"max": 50}},
	}]
}

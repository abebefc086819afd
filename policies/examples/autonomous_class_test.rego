package agentgate.examples.autonomous_class_test

import rego.v1

import data.agentgate.examples.autonomous_class as ex

# Inputs exactly as agentgate sends them (src/policy/types.ts).
grants_input(mode, requests) := {
	"now_ms": 1767225600000,
	"action": "register",
	"host": {"id": "hst_1", "status": "active", "linked": true, "default_capabilities": ["payments.refund", "read_file"]},
	"agent": {"id": null, "mode": mode},
	"requests": [{"capability": c, "exists": true, "constraints": null, "previous_status": null} | some c in requests],
}

execute_input(mode, capability) := {
	"now_ms": 1767225600000,
	"agent": {"id": "agt_1", "mode": mode, "host_id": "hst_1"},
	"capability": capability,
	"arguments": {},
	"grants": [{"id": "grt_1", "constraints": null}],
}

test_autonomous_agents_are_denied_the_class_even_as_a_host_default if {
	out := ex.grants with input as grants_input("autonomous", ["payments.refund", "payments.eu.payout", "read_file"])
	out == {"decisions": [
		{"capability": "payments.refund", "decision": "deny", "reason": "autonomous agents may not use this class of capabilities"},
		{"capability": "payments.eu.payout", "decision": "deny", "reason": "autonomous agents may not use this class of capabilities"},
		{"capability": "read_file", "decision": "grant"},
	]}
}

test_delegated_agents_are_not_affected if {
	out := ex.grants with input as grants_input("delegated", ["payments.refund", "payments_report"])
	out == {"decisions": [
		{"capability": "payments.refund", "decision": "grant"},
		{"capability": "payments_report", "decision": "approval", "reason": "user approval required"},
	]}
}

test_older_grants_of_autonomous_agents_no_longer_execute if {
	out := ex.execute with input as execute_input("autonomous", "payments.refund")
	out == {"allow": false, "violations": [], "reason": "autonomous agents may not use this class of capabilities"}
	delegated := ex.execute with input as execute_input("delegated", "payments.refund")
	delegated == {"allow": true, "grant_id": "grt_1", "violations": []}
	other := ex.execute with input as execute_input("autonomous", "read_file")
	other == {"allow": true, "grant_id": "grt_1", "violations": []}
}

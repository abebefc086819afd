package agentgate.examples.autonomous_class_test

import rego.v1

import data.agentgate.examples.autonomous_class as ex

# Every helper and test here starts with class_ (or test_class_), so they stay unique when copied
# into agentgate_test.rego next to its own tests and another example's. What the rule leaves alone
# is checked as "not denied", not as one exact answer, because another example may change that
# answer (approval_by_pattern asks a person for payments.*).

# Inputs exactly as agentgate sends them (src/policy/types.ts).
class_grants_input(mode, requests) := {
	"now_ms": 1767225600000,
	"action": "register",
	"host": {"id": "hst_1", "status": "active", "linked": true, "default_capabilities": ["payments.refund", "read_file"]},
	"agent": {"id": null, "mode": mode},
	"requests": [{"capability": c, "exists": true, "constraints": null, "previous_status": null} | some c in requests],
}

class_execute_input(mode, capability) := {
	"now_ms": 1767225600000,
	"agent": {"id": "agt_1", "mode": mode, "host_id": "hst_1"},
	"capability": capability,
	"arguments": {},
	"grants": [{"id": "grt_1", "constraints": null}],
}

class_refusal := "autonomous agents may not use this class of capabilities"

test_class_autonomous_agents_are_denied_the_class_even_as_a_host_default if {
	out := ex.grants with input as class_grants_input("autonomous", ["payments.refund", "payments.eu.payout", "read_file"])
	out == {"decisions": [
		{"capability": "payments.refund", "decision": "deny", "reason": class_refusal},
		{"capability": "payments.eu.payout", "decision": "deny", "reason": class_refusal},
		{"capability": "read_file", "decision": "grant"},
	]}
}

test_class_delegated_agents_are_not_denied if {
	out := ex.grants with input as class_grants_input("delegated", ["payments.refund", "payments_report"])
	[d.capability | some d in out.decisions] == ["payments.refund", "payments_report"]
	every d in out.decisions {
		d.decision != "deny"
	}
}

test_class_older_grants_of_autonomous_agents_no_longer_execute if {
	out := ex.execute with input as class_execute_input("autonomous", "payments.refund")
	out == {"allow": false, "violations": [], "reason": class_refusal}
	delegated := ex.execute with input as class_execute_input("delegated", "payments.refund")
	delegated == {"allow": true, "grant_id": "grt_1", "violations": []}
	other := ex.execute with input as class_execute_input("autonomous", "read_file")
	other == {"allow": true, "grant_id": "grt_1", "violations": []}
}

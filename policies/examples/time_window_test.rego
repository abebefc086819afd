package agentgate.examples.time_window_test

import rego.v1

import data.agentgate.examples.time_window as ex

# 2026-11-23 is a Monday, 2026-11-22 a Sunday (UTC).
monday_0800 := 1795420800000

monday_0930 := 1795426200000

monday_1759 := 1795456799999

monday_1800 := 1795456800000

monday_2000 := 1795464000000

sunday_1000 := 1795341600000

# An execute input exactly as agentgate sends it (src/policy/types.ts).
execute_input(now_ms, capability, amount) := {
	"now_ms": now_ms,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": "hst_1"},
	"capability": capability,
	"arguments": {"amount": amount},
	"grants": [{"id": "grt_1", "constraints": {"amount": {"max": 500}}}],
}

refused := {"allow": false, "violations": [], "reason": "outside the permitted hours (weekdays 08:00-18:00 UTC)"}

allowed := {"allow": true, "grant_id": "grt_1", "violations": []}

test_inside_the_window_the_constraints_decide if {
	ex.execute == allowed with input as execute_input(monday_0930, "transfer_money", 100)
	ex.execute == allowed with input as execute_input(monday_0800, "transfer_money", 100)
	ex.execute == allowed with input as execute_input(monday_1759, "transfer_money", 100)
	violated := ex.execute with input as execute_input(monday_0930, "transfer_money", 900)
	violated.violations == [{"field": "amount", "constraint": {"max": 500}, "actual": 900}]
}

test_evenings_and_weekends_are_refused_with_a_reason_and_no_violations if {
	ex.execute == refused with input as execute_input(monday_1800, "transfer_money", 100)
	ex.execute == refused with input as execute_input(monday_2000, "transfer_money", 100)
	ex.execute == refused with input as execute_input(sunday_1000, "transfer_money", 100)
}

test_the_window_refusal_comes_before_the_constraints if {
	ex.execute == refused with input as execute_input(sunday_1000, "transfer_money", 900)
}

test_other_capabilities_are_not_windowed if {
	ex.execute == allowed with input as execute_input(sunday_1000, "echo", 100)
}

test_no_time_means_no_window if {
	ex.execute == refused with input as object.remove(execute_input(monday_0930, "transfer_money", 100), ["now_ms"])
	ex.execute == refused with input as execute_input("09:30", "transfer_money", 100)
}

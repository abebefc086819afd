package agentgate.examples.time_window_test

import rego.v1

import data.agentgate.examples.time_window as ex

# Every helper and test here starts with window_ (or test_window_), so they stay unique when copied
# into agentgate_test.rego next to its own tests and another example's. The capabilities are ones
# no other example refuses at execute, so adopting another example does not change these answers.

# 2026-11-23 is a Monday, 2026-11-22 a Sunday (UTC).
window_monday_0800 := 1795420800000

window_monday_0930 := 1795426200000

window_monday_1759 := 1795456799999

window_monday_1800 := 1795456800000

window_monday_2000 := 1795464000000

window_sunday_1000 := 1795341600000

# An execute input exactly as agentgate sends it (src/policy/types.ts).
window_execute_input(now_ms, capability, amount) := {
	"now_ms": now_ms,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": "hst_1"},
	"capability": capability,
	"arguments": {"amount": amount},
	"grants": [{"id": "grt_1", "constraints": {"amount": {"max": 500}}}],
}

window_refused := {"allow": false, "violations": [], "reason": "outside the permitted hours (weekdays 08:00-18:00 UTC)"}

window_allowed := {"allow": true, "grant_id": "grt_1", "violations": []}

test_window_inside_it_the_constraints_decide if {
	ex.execute == window_allowed with input as window_execute_input(window_monday_0930, "transfer_money", 100)
	ex.execute == window_allowed with input as window_execute_input(window_monday_0800, "transfer_money", 100)
	ex.execute == window_allowed with input as window_execute_input(window_monday_1759, "transfer_money", 100)
	violated := ex.execute with input as window_execute_input(window_monday_0930, "transfer_money", 900)
	violated.violations == [{"field": "amount", "constraint": {"max": 500}, "actual": 900}]
}

test_window_evenings_and_weekends_are_refused_with_a_reason_and_no_violations if {
	ex.execute == window_refused with input as window_execute_input(window_monday_1800, "transfer_money", 100)
	ex.execute == window_refused with input as window_execute_input(window_monday_2000, "transfer_money", 100)
	ex.execute == window_refused with input as window_execute_input(window_sunday_1000, "transfer_money", 100)
}

test_window_refusal_comes_before_the_constraints if {
	ex.execute == window_refused with input as window_execute_input(window_sunday_1000, "transfer_money", 900)
}

test_window_other_capabilities_are_not_windowed if {
	ex.execute == window_allowed with input as window_execute_input(window_sunday_1000, "echo", 100)
}

test_window_no_time_means_no_window if {
	ex.execute == window_refused with input as object.remove(window_execute_input(window_monday_0930, "transfer_money", 100), ["now_ms"])
	ex.execute == window_refused with input as window_execute_input("09:30", "transfer_money", 100)
}

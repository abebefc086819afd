package examples.time_window_test

import rego.v1

import data.examples.time_window as ex

# 2026-11-23 is a Monday; 2026-11-22 a Sunday.
monday_0930 := 1795426200000

monday_2000 := 1795464000000

sunday_1000 := 1795341600000

test_inside_the_window_is_allowed if {
	not ex.outside_window with input as {"capability": "transfer_money", "now_ms": monday_0930}
}

test_evening_and_weekend_are_refused if {
	ex.outside_window with input as {"capability": "transfer_money", "now_ms": monday_2000}
	ex.outside_window with input as {"capability": "transfer_money", "now_ms": sunday_1000}
}

test_other_capabilities_are_not_windowed if {
	not ex.outside_window with input as {"capability": "echo", "now_ms": sunday_1000}
}

test_the_refusal_has_a_reason_and_no_violations if {
	ex.outside_window_refusal.allow == false
	ex.outside_window_refusal.violations == []
}

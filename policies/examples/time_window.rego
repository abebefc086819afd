# Example (e): refuse execution outside a time window: transfer_money runs on weekdays from 08:00
# to 18:00 UTC only. WebAssembly has no clock, so agentgate puts the time of the call in
# input.now_ms (epoch milliseconds); time.* builtins do not exist here. Outside the window the
# execute decision refuses with a reason and no violations, which agentgate answers with
# 403 capability_not_granted and that reason; inside it, the constraints decide as before.
#
# To adopt it in agentgate.rego (policies/README.md, "Adopting an example"):
#   1. Copy the rules of the "Copy into agentgate.rego" section below to the end of agentgate.rego.
#   2. Rename the current `execute` to `execute_before_window` and copy `execute` from the
#      "adopted" section below, with `execute_before_window` in place of `policy.execute`.
#   3. Copy the tests of time_window_test.rego into agentgate_test.rego, with `policy.` in place
#      of `ex.`, then run `npm run policy:build`. golden.json's executes are not of a windowed
#      capability; a golden decision that is must run inside the window, or expect the refusal.
package agentgate.examples.time_window

import rego.v1

import data.agentgate as policy

# ---- Copy into agentgate.rego ------------------------------------------------------------------

windowed_capabilities := {"transfer_money"}

window_start_hour_utc := 8 # inclusive

window_end_hour_utc := 18 # exclusive

hour_utc := floor(input.now_ms / 3600000) % 24

# 1970-01-01 was a Thursday, so day 0 is a Thursday and days 2 and 3 are Saturday and Sunday.
weekday_utc := floor(input.now_ms / 86400000) % 7

weekend_days := {2, 3}

# Also true when now_ms is missing or not a number: no time, no window, fail closed.
outside_window if {
	input.capability in windowed_capabilities
	not inside_window
}

inside_window if {
	is_number(input.now_ms)
	hour_utc >= window_start_hour_utc
	hour_utc < window_end_hour_utc
	not weekday_utc in weekend_days
}

window_refusal := {"allow": false, "violations": [], "reason": "outside the permitted hours (weekdays 08:00-18:00 UTC)"}

# ---- The default policy with this example adopted ----------------------------------------------
# What agentgate.rego decides once the steps above are done, so the tests show agentgate's answers.

execute := window_refusal if {
	outside_window
} else := policy.execute

# Example: refuse execution outside a time window. WebAssembly has no clock, so agentgate puts the
# time in input.now_ms (epoch milliseconds, UTC); time.* builtins do not exist here.
# To adopt: in agentgate.rego, rename the current `execute` to `constraint_decision` and define
#     execute := outside_window_refusal if outside_window else := constraint_decision
# agentgate answers a refusal without violations with 403 capability_not_granted and the reason.
package examples.time_window

import rego.v1

# Capabilities that may only run on weekdays between 08:00 and 18:00 UTC.
windowed := {"transfer_money"}

start_hour_utc := 8

end_hour_utc := 18

hour_utc := floor(input.now_ms / 3600000) % 24

# 1970-01-01 was a Thursday: day 0 is Thursday, so days 2 and 3 are Saturday and Sunday.
weekday_utc := floor(input.now_ms / 86400000) % 7

outside_window if {
	input.capability in windowed
	not inside_window
}

inside_window if {
	hour_utc >= start_hour_utc
	hour_utc < end_hour_utc
	not weekday_utc in {2, 3}
}

outside_window_refusal := {"allow": false, "violations": [], "reason": "outside the permitted hours (weekdays 08:00-18:00 UTC)"}

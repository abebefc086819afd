# Unit tests for agentgate.rego, run by `npm run policy:build` (opa test) before every build.
# A failing test fails the build, so the artefact never ships a policy that breaks them.
#
# Run by hand with the capabilities file, which declares the custom builtin agentgate.operator:
#   opa test --capabilities policies/capabilities.json policies/agentgate.rego \
#     policies/agentgate_test.rego policies/data.json
package agentgate_test

import rego.v1

# The policy is imported as `policy`, not as `agentgate`: an import named `agentgate` would make
# `agentgate.operator` below mean data.agentgate.operator, so `with agentgate.operator as ...`
# would silently mock nothing and every plugin test would hit the real (absent) builtin.
import data.agentgate as policy

# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

host(status, linked, defaults) := {"id": "hst_1", "status": status, "linked": linked, "default_capabilities": defaults}

request(capability) := {"capability": capability, "exists": true, "constraints": null, "previous_status": null}

grants_input(h, mode, requests) := {
	"now_ms": 1700000000000,
	"action": "register",
	"host": h,
	"agent": {"id": null, "mode": mode},
	"requests": requests,
}

# The single decision for one request.
decide(h, mode, r) := d if {
	out := policy.grants with input as grants_input(h, mode, [r])
	count(out.decisions) == 1
	d := out.decisions[0]
}

active_linked := host("active", true, ["read_file"])

execute_input(args, grants) := {
	"now_ms": 1700000000000,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": "hst_1"},
	"capability": "transfer",
	"arguments": args,
	"grants": grants,
}

# Execute with one grant holding `constraints`.
run(constraints, args) := out if {
	out := policy.execute with input as execute_input(args, [{"id": "g1", "constraints": constraints}])
}

allowed(constraints, args) if {
	run(constraints, args) == {"allow": true, "grant_id": "g1", "violations": []}
}

refused_with(constraints, args, violations) if {
	run(constraints, args) == {"allow": false, "violations": violations, "reason": "constraint violated"}
}

# ------------------------------------------------------------------------------------------------
# agentgate/grants: deny
# ------------------------------------------------------------------------------------------------

test_unknown_capability_is_denied if {
	r := object.union(request("nope"), {"exists": false})
	decide(active_linked, "delegated", r) == {"capability": "nope", "decision": "deny", "reason": "unknown capability"}
}

test_missing_exists_flag_is_denied if {
	decide(active_linked, "delegated", {"capability": "read_file"}).decision == "deny"
}

test_blocked_capability_is_denied_even_when_a_default if {
	d := decide(host("active", true, ["purge_all_data"]), "delegated", request("purge_all_data"))
	d == {"capability": "purge_all_data", "decision": "deny", "reason": "blocked by policy"}
}

test_blocked_capability_is_denied_for_autonomous_agents if {
	d := decide(host("active", false, ["purge_all_data"]), "autonomous", request("purge_all_data"))
	d.decision == "deny"
}

test_blocked_list_comes_from_data if {
	d := decide(active_linked, "delegated", request("read_file")) with data.agentgate.blocked_capabilities as ["read_file"]
	d.reason == "blocked by policy"
}

test_revoked_host_is_denied if {
	decide(host("revoked", true, ["read_file"]), "delegated", request("read_file")).decision == "deny"
}

test_rejected_host_is_denied if {
	decide(host("rejected", false, ["echo"]), "autonomous", request("echo")).decision == "deny"
}

test_unknown_host_status_is_denied if {
	decide(host("weird", true, ["read_file"]), "delegated", request("read_file")).decision == "deny"
}

test_unknown_capability_reason_wins_over_host_status if {
	r := object.union(request("nope"), {"exists": false})
	decide(host("revoked", true, []), "delegated", r).reason == "unknown capability"
}

# ------------------------------------------------------------------------------------------------
# agentgate/grants: autonomous mode
# ------------------------------------------------------------------------------------------------

test_autonomous_default_capability_is_granted if {
	decide(host("active", false, ["read_file"]), "autonomous", request("read_file")) == {"capability": "read_file", "decision": "grant"}
}

test_autonomous_capability_from_data_is_granted if {
	decide(host("active", false, []), "autonomous", request("echo")).decision == "grant"
}

test_autonomous_on_pending_host_uses_the_same_rule if {
	decide(host("pending", false, ["read_file"]), "autonomous", request("read_file")).decision == "grant"
}

test_autonomous_other_capability_needs_an_administrator if {
	d := decide(host("active", false, ["read_file"]), "autonomous", request("write_file"))
	d == {"capability": "write_file", "decision": "approval", "reason": "administrator approval required"}
}

test_autonomous_previously_revoked_needs_approval if {
	r := object.union(request("echo"), {"previous_status": "revoked"})
	decide(host("active", false, []), "autonomous", r).decision == "approval"
}

test_autonomous_previously_denied_needs_approval if {
	r := object.union(request("read_file"), {"previous_status": "denied"})
	decide(host("active", false, ["read_file"]), "autonomous", r).decision == "approval"
}

# ------------------------------------------------------------------------------------------------
# agentgate/grants: delegated mode
# ------------------------------------------------------------------------------------------------

test_delegated_default_on_active_linked_host_is_granted if {
	decide(active_linked, "delegated", request("read_file")) == {"capability": "read_file", "decision": "grant"}
}

test_delegated_previously_active_is_granted if {
	r := object.union(request("read_file"), {"previous_status": "active"})
	decide(active_linked, "delegated", r).decision == "grant"
}

test_delegated_unlinked_host_needs_approval if {
	d := decide(host("active", false, ["read_file"]), "delegated", request("read_file"))
	d == {"capability": "read_file", "decision": "approval", "reason": "user approval required"}
}

test_delegated_pending_host_needs_approval if {
	decide(host("pending", true, ["read_file"]), "delegated", request("read_file")).decision == "approval"
}

test_delegated_non_default_needs_approval if {
	decide(active_linked, "delegated", request("write_file")).decision == "approval"
}

test_delegated_ignores_the_autonomous_list if {
	decide(active_linked, "delegated", request("echo")).decision == "approval"
}

test_delegated_previously_revoked_needs_approval if {
	r := object.union(request("read_file"), {"previous_status": "revoked"})
	decide(active_linked, "delegated", r).decision == "approval"
}

test_delegated_previously_denied_needs_approval if {
	r := object.union(request("read_file"), {"previous_status": "denied"})
	decide(active_linked, "delegated", r).decision == "approval"
}

test_unknown_mode_needs_approval if {
	decide(active_linked, "robot", request("read_file")).decision == "approval"
}

# ------------------------------------------------------------------------------------------------
# agentgate/grants: one decision per request, imposed constraints
# ------------------------------------------------------------------------------------------------

test_every_request_gets_exactly_one_decision_in_order if {
	requests := [
		request("read_file"),
		request("write_file"),
		request("purge_all_data"),
		object.union(request("ghost"), {"exists": false}),
		request("read_file"),
	]
	out := policy.grants with input as grants_input(active_linked, "delegated", requests)
	[d.decision | some d in out.decisions] == ["grant", "approval", "deny", "deny", "grant"]
	[d.capability | some d in out.decisions] == ["read_file", "write_file", "purge_all_data", "ghost", "read_file"]
}

test_no_requests_gives_no_decisions if {
	out := policy.grants with input as grants_input(active_linked, "delegated", [])
	out == {"decisions": []}
}

test_imposed_constraints_are_attached_to_grants_and_approvals if {
	imposed := {"read_file": {"path": {"in": ["/tmp"]}}, "write_file": {"size": {"max": 10}}}
	out := policy.grants with input as grants_input(active_linked, "delegated", [request("read_file"), request("write_file")])
		with data.agentgate.imposed_constraints as imposed
	out.decisions == [
		{"capability": "read_file", "decision": "grant", "constraints": {"path": {"in": ["/tmp"]}}},
		{"capability": "write_file", "decision": "approval", "reason": "user approval required", "constraints": {"size": {"max": 10}}},
	]
}

test_imposed_constraints_are_not_attached_to_denials if {
	d := decide(active_linked, "delegated", request("purge_all_data")) with data.agentgate.imposed_constraints as {"purge_all_data": {"x": 1}}
	not d.constraints
}

test_no_constraints_key_without_imposed_constraints if {
	d := decide(active_linked, "delegated", request("read_file"))
	not "constraints" in object.keys(d)
}

test_empty_imposed_constraints_add_no_key if {
	d := decide(active_linked, "delegated", request("read_file")) with data.agentgate.imposed_constraints as {"read_file": {}}
	not "constraints" in object.keys(d)
}

test_malformed_imposed_constraints_are_ignored if {
	d := decide(active_linked, "delegated", request("read_file")) with data.agentgate.imposed_constraints as {"read_file": ["not", "an", "object"]}
	not "constraints" in object.keys(d)
}

# ------------------------------------------------------------------------------------------------
# agentgate/execute: grants
# ------------------------------------------------------------------------------------------------

test_unconstrained_grant_allows if {
	allowed(null, {"anything": 1})
}

test_grant_without_constraints_member_allows if {
	out := policy.execute with input as execute_input({}, [{"id": "g1"}])
	out == {"allow": true, "grant_id": "g1", "violations": []}
}

test_empty_constraints_allow if {
	allowed({}, {})
}

test_missing_arguments_member_reads_as_no_arguments if {
	out := policy.execute with input as object.remove(execute_input({}, [{"id": "g1", "constraints": {"n": {"not_in": [1]}}}]), ["arguments"])
	out.allow == true
}

test_no_grants_refuses if {
	out := policy.execute with input as execute_input({}, [])
	out == {"allow": false, "violations": [], "reason": "no active grant"}
}

test_second_grant_allows_and_is_named if {
	grants := [
		{"id": "g1", "constraints": {"amount": {"max": 10}}},
		{"id": "g2", "constraints": {"amount": {"max": 100}}},
		{"id": "g3", "constraints": null},
	]
	out := policy.execute with input as execute_input({"amount": 50}, grants)
	out == {"allow": true, "grant_id": "g2", "violations": []}
}

test_refusal_reports_the_first_grant_only if {
	grants := [
		{"id": "g1", "constraints": {"amount": {"max": 10}}},
		{"id": "g2", "constraints": {"currency": "EUR"}},
	]
	out := policy.execute with input as execute_input({"amount": 50, "currency": "USD"}, grants)
	out == {"allow": false, "reason": "constraint violated", "violations": [{"field": "amount", "constraint": {"max": 10}, "actual": 50}]}
}

test_malformed_constraints_admit_nothing if {
	out := run(["amount"], {"amount": 1})
	out.allow == false
	out.violations == [{"field": "*", "constraint": {"malformed_constraints": true}}]
}

# ------------------------------------------------------------------------------------------------
# agentgate/execute: operators
# ------------------------------------------------------------------------------------------------

test_exact_value_equal_allows if {
	allowed({"currency": "EUR"}, {"currency": "EUR"})
}

test_exact_value_differs_reads_as_eq if {
	refused_with({"currency": "EUR"}, {"currency": "USD"}, [{"field": "currency", "constraint": {"eq": "EUR"}, "actual": "USD"}])
}

test_exact_value_missing_violates if {
	refused_with({"currency": "EUR"}, {}, [{"field": "currency", "constraint": {"eq": "EUR"}}])
}

test_exact_null_requires_a_supplied_null if {
	allowed({"x": null}, {"x": null})
	refused_with({"x": null}, {}, [{"field": "x", "constraint": {"eq": null}}])
}

test_supplied_null_is_reported_as_actual if {
	refused_with({"x": 1}, {"x": null}, [{"field": "x", "constraint": {"eq": 1}, "actual": null}])
}

test_eq_structural_equality_of_objects if {
	allowed({"opts": {"eq": {"a": [1, 2], "b": {"c": true}}}}, {"opts": {"b": {"c": true}, "a": [1, 2]}})
	refused_with({"opts": {"eq": {"a": [1, 2]}}}, {"opts": {"a": [2, 1]}}, [{"field": "opts", "constraint": {"eq": {"a": [1, 2]}}, "actual": {"a": [2, 1]}}])
}

test_exact_array_value if {
	allowed({"tags": ["a", "b"]}, {"tags": ["a", "b"]})
	not allowed({"tags": ["a", "b"]}, {"tags": ["b", "a"]})
}

test_eq_number_and_float_are_equal if {
	allowed({"amount": {"eq": 500}}, {"amount": 500.0})
	allowed({"amount": 500.0}, {"amount": 500})
}

test_eq_number_and_string_differ if {
	not allowed({"amount": {"eq": 500}}, {"amount": "500"})
}

test_eq_missing_violates if {
	refused_with({"a": {"eq": 1}}, {}, [{"field": "a", "constraint": {"eq": 1}}])
}

test_min_bound_is_inclusive if {
	allowed({"n": {"min": 5}}, {"n": 5})
	refused_with({"n": {"min": 5}}, {"n": 4.5}, [{"field": "n", "constraint": {"min": 5}, "actual": 4.5}])
}

test_max_bound_is_inclusive if {
	allowed({"n": {"max": 5}}, {"n": 5})
	refused_with({"n": {"max": 5}}, {"n": 6}, [{"field": "n", "constraint": {"max": 5}, "actual": 6}])
}

test_min_max_missing_violates if {
	refused_with({"n": {"min": 1}}, {}, [{"field": "n", "constraint": {"min": 1}}])
	refused_with({"n": {"max": 1}}, {}, [{"field": "n", "constraint": {"max": 1}}])
}

test_min_max_need_a_number_not_a_numeric_string if {
	refused_with({"n": {"min": 1}}, {"n": "5"}, [{"field": "n", "constraint": {"min": 1}, "actual": "5"}])
	refused_with({"n": {"max": 10}}, {"n": "5"}, [{"field": "n", "constraint": {"max": 10}, "actual": "5"}])
}

test_min_max_with_a_non_number_operand_admit_nothing if {
	not allowed({"n": {"min": "1"}}, {"n": 5})
	not allowed({"n": {"max": null}}, {"n": 5})
}

test_combined_min_max_reports_only_the_failing_bound if {
	allowed({"n": {"min": 1, "max": 10}}, {"n": 10})
	refused_with({"n": {"min": 1, "max": 10}}, {"n": 11}, [{"field": "n", "constraint": {"max": 10}, "actual": 11}])
	refused_with({"n": {"min": 1, "max": 10}}, {"n": 0}, [{"field": "n", "constraint": {"min": 1}, "actual": 0}])
}

test_combined_min_max_missing_reports_both if {
	refused_with({"n": {"min": 1, "max": 10}}, {}, [{"field": "n", "constraint": {"min": 1, "max": 10}}])
}

test_in_admits_listed_values if {
	allowed({"c": {"in": ["EUR", "USD"]}}, {"c": "USD"})
	refused_with({"c": {"in": ["EUR", "USD"]}}, {"c": "GBP"}, [{"field": "c", "constraint": {"in": ["EUR", "USD"]}, "actual": "GBP"}])
}

test_in_uses_structural_equality if {
	allowed({"p": {"in": [{"a": 1}, [1, 2]]}}, {"p": [1, 2]})
	allowed({"p": {"in": [500]}}, {"p": 500.0})
}

test_in_empty_admits_nothing if {
	refused_with({"c": {"in": []}}, {"c": "x"}, [{"field": "c", "constraint": {"in": []}, "actual": "x"}])
}

test_in_missing_violates if {
	refused_with({"c": {"in": ["x"]}}, {}, [{"field": "c", "constraint": {"in": ["x"]}}])
}

test_in_non_list_operand_admits_nothing if {
	not allowed({"c": {"in": "x"}}, {"c": "x"})
}

test_not_in_refuses_listed_values if {
	allowed({"c": {"not_in": ["GBP"]}}, {"c": "EUR"})
	refused_with({"c": {"not_in": ["GBP"]}}, {"c": "GBP"}, [{"field": "c", "constraint": {"not_in": ["GBP"]}, "actual": "GBP"}])
}

test_not_in_missing_passes if {
	allowed({"c": {"not_in": ["GBP"]}}, {})
}

test_not_in_empty_admits_everything if {
	allowed({"c": {"not_in": []}}, {"c": "anything"})
}

test_not_in_non_list_operand_admits_nothing if {
	not allowed({"c": {"not_in": "GBP"}}, {"c": "EUR"})
	not allowed({"c": {"not_in": "GBP"}}, {})
}

test_empty_operator_object_is_an_exact_empty_object if {
	allowed({"o": {}}, {"o": {}})
	refused_with({"o": {}}, {"o": 1}, [{"field": "o", "constraint": {"eq": {}}, "actual": 1}])
}

test_several_violated_fields_sorted_by_name if {
	constraints := {"z": {"max": 1}, "a": "x", "m": {"in": [1]}, "ok": {"min": 0}}
	refused_with(constraints, {"z": 2, "a": "y", "ok": 3}, [
		{"field": "a", "constraint": {"eq": "x"}, "actual": "y"},
		{"field": "m", "constraint": {"in": [1]}},
		{"field": "z", "constraint": {"max": 1}, "actual": 2},
	])
}

test_unconstrained_arguments_are_ignored if {
	allowed({"a": 1}, {"a": 1, "b": "extra"})
}

# ------------------------------------------------------------------------------------------------
# agentgate/execute: plugin operators, through the custom builtin agentgate.operator
#
# agentgate answers the builtin from its plugin registry; these tests replace it with stand-in
# functions (`with agentgate.operator as f`). opa test knows the builtin only through the
# capabilities file (--capabilities policies/capabilities.json, which the build passes). Every test
# that reaches a plugin operator must mock it: an unmocked call is an error ("unsupported
# built-in"), not false. Only a function mock works: `with agentgate.operator as true` is an
# error too.
# ------------------------------------------------------------------------------------------------

# A stand-in registry with one plugin, `ends_with`. Like agentgate's builtin it always answers a
# boolean, and false for a name no plugin registers.
stand_in(name, operand, actual) if {
	name == "ends_with"
	is_string(actual)
	endswith(actual, operand)
} else := false

# A registry that knows no plugin at all.
no_plugins(_, _, _) := false

# A registry that says yes to everything, to show what never reaches it.
says_yes(_, _, _) := true

# True only for the exact call this test expects, so a wrong name, operand or value is a violation.
expects_call(name, operand, actual) := [name, operand, actual] == ["within", {"zones": ["a", "b"], "strict": true}, {"zone": "a"}]

# True only when the plugin was given null.
null_only(_, _, actual) := actual == null

plugin_input(arguments, constraints) := execute_input(arguments, [{"id": "g1", "constraints": constraints}])

test_plugin_operator_allows_when_the_plugin_answers_true if {
	out := policy.execute with input as plugin_input({"code": "ABZ"}, {"code": {"ends_with": "Z"}}) with agentgate.operator as stand_in
	out == {"allow": true, "grant_id": "g1", "violations": []}
}

test_plugin_operator_that_answers_false_is_named_in_the_violation if {
	out := policy.execute with input as plugin_input({"code": "ABC"}, {"code": {"ends_with": "Z"}}) with agentgate.operator as stand_in
	out == {"allow": false, "reason": "constraint violated", "violations": [{"field": "code", "constraint": {"ends_with": "Z"}, "actual": "ABC"}]}
}

test_plugin_operator_next_to_built_ins_reports_only_the_failing_ones if {
	constraints := {"code": {"ends_with": "Z", "in": ["ABC", "ABZ"]}, "n": {"max": 1}}
	out := policy.execute with input as plugin_input({"code": "ABC", "n": 1}, constraints) with agentgate.operator as stand_in
	out.violations == [{"field": "code", "constraint": {"ends_with": "Z"}, "actual": "ABC"}]
}

test_plugin_operator_receives_its_name_operand_and_the_value_unchanged if {
	constraints := {"target": {"within": {"zones": ["a", "b"], "strict": true}}}
	allowed := policy.execute with input as plugin_input({"target": {"zone": "a"}}, constraints) with agentgate.operator as expects_call
	allowed.allow == true
	refused := policy.execute with input as plugin_input({"target": {"zone": "c"}}, constraints) with agentgate.operator as expects_call
	refused.allow == false
}

test_plugin_operator_receives_null_for_a_missing_argument if {
	out := policy.execute with input as plugin_input({}, {"code": {"must_be_absent": true}}) with agentgate.operator as null_only
	out.allow == true
	refused := policy.execute with input as plugin_input({"code": "x"}, {"code": {"must_be_absent": true}}) with agentgate.operator as null_only
	refused.violations == [{"field": "code", "constraint": {"must_be_absent": true}, "actual": "x"}]
}

test_a_supplied_null_also_reaches_the_plugin_as_null if {
	out := policy.execute with input as plugin_input({"code": null}, {"code": {"must_be_absent": true}}) with agentgate.operator as null_only
	out.allow == true
}

test_plugin_violation_on_a_missing_argument_has_no_actual if {
	out := policy.execute with input as plugin_input({}, {"code": {"ends_with": "Z"}}) with agentgate.operator as stand_in
	out.violations == [{"field": "code", "constraint": {"ends_with": "Z"}}]
}

test_unregistered_operator_fails_closed if {
	out := policy.execute with input as plugin_input({"code": "Z"}, {"code": {"soundex": "Z000"}}) with agentgate.operator as stand_in
	out.violations == [{"field": "code", "constraint": {"soundex": "Z000"}, "actual": "Z"}]
}

test_no_plugins_means_every_plugin_operator_violates if {
	out := policy.execute with input as plugin_input({"n": 1}, {"n": {"min": 0, "regex": ".*"}}) with agentgate.operator as no_plugins
	out.violations == [{"field": "n", "constraint": {"regex": ".*"}, "actual": 1}]
}

test_built_in_operators_never_reach_the_plugin_registry if {
	out := policy.execute with input as plugin_input({"n": 5, "c": "GBP"}, {"n": {"max": 1}, "c": "EUR"}) with agentgate.operator as says_yes
	out.violations == [
		{"field": "c", "constraint": {"eq": "EUR"}, "actual": "GBP"},
		{"field": "n", "constraint": {"max": 1}, "actual": 5},
	]
}

test_plugin_operator_on_a_later_grant_allows_and_is_named if {
	grants := [
		{"id": "g1", "constraints": {"code": {"ends_with": "Q"}}},
		{"id": "g2", "constraints": {"code": {"ends_with": "Z"}}},
	]
	out := policy.execute with input as execute_input({"code": "ABZ"}, grants) with agentgate.operator as stand_in
	out == {"allow": true, "grant_id": "g2", "violations": []}
}

# Unit tests of plugin operators: the policy reaches them through the custom builtin
# agentgate.operator, which these tests replace with a stand-in registry. A separate package, so
# the builtin's name is not shadowed by an import of data.agentgate.
package agentgate_plugins_test

import rego.v1

# A stand-in for agentgate's plugin registry: `ends_with` is the only plugin it knows.
mock_operator(name, operand, actual) := true if {
	name == "ends_with"
	is_string(actual)
	endswith(actual, operand)
}

mock_operator(name, _, _) := false if name != "ends_with"

mock_operator("ends_with", _, actual) := false if not is_string(actual)

mock_operator("ends_with", operand, actual) := false if {
	is_string(actual)
	not endswith(actual, operand)
}

plugin_input(arguments) := {
	"now_ms": 0,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": "hst_1"},
	"capability": "echo",
	"arguments": arguments,
	"grants": [{"id": "grt_1", "constraints": {"code": {"ends_with": "Z"}}}],
}

test_plugin_operator_allows_when_the_plugin_says_true if {
	out := data.agentgate.execute with input as plugin_input({"code": "ABZ"}) with agentgate.operator as mock_operator
	out.allow == true
	out.grant_id == "grt_1"
}

test_plugin_operator_violation_names_the_operator if {
	out := data.agentgate.execute with input as plugin_input({"code": "ABC"}) with agentgate.operator as mock_operator
	out.allow == false
	out.violations == [{"field": "code", "constraint": {"ends_with": "Z"}, "actual": "ABC"}]
}

test_plugin_operator_sees_a_missing_argument_as_null if {
	out := data.agentgate.execute with input as plugin_input({}) with agentgate.operator as mock_operator
	out.violations == [{"field": "code", "constraint": {"ends_with": "Z"}}]
}

test_unregistered_operator_fails_closed if {
	inp := object.union(plugin_input({"code": "Z"}), {"grants": [{"id": "grt_1", "constraints": {"code": {"soundex": "Z000"}}}]})
	out := data.agentgate.execute with input as inp with agentgate.operator as mock_operator
	out.allow == false
	out.violations == [{"field": "code", "constraint": {"soundex": "Z000"}, "actual": "Z"}]
}

# A registry that knows no plugin at all, as agentgate's builtin is for an unregistered name.
no_plugins(_, _, _) := false

test_unknown_operator_next_to_a_passing_one if {
	inp := object.union(plugin_input({"n": 1}), {"grants": [{"id": "grt_1", "constraints": {"n": {"min": 0, "regex": ".*"}}}]})
	out := data.agentgate.execute with input as inp with agentgate.operator as no_plugins
	out.violations == [{"field": "n", "constraint": {"regex": ".*"}, "actual": 1}]
}

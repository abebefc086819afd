# agentgate's default policy (DESIGN §5 and §6). The security team owns this file.
#
# Two entrypoints are compiled to WebAssembly by `npm run policy:build`:
#   agentgate/grants   decides every capability an agent asks for (at register, request-capability
#                      and reactivate): "grant", "approval" (a person decides) or "deny".
#   agentgate/execute  decides whether the arguments of one execute call satisfy the constraints of
#                      at least one of the agent's active grants for that capability.
#
# Tunables live in policies/data.json and are compiled into the artefact (data.agentgate.*).
# Only the builtins listed in policies/capabilities.json exist at runtime. WebAssembly has no clock,
# so use input.now_ms (epoch milliseconds), never time.now_ns().
package agentgate

import rego.v1

# ------------------------------------------------------------------------------------------------
# agentgate/grants
# Input: {now_ms, action, host: {id, status, linked, default_capabilities}, agent: {id, mode},
#         requests: [{capability, exists, constraints, previous_status}]}
# ------------------------------------------------------------------------------------------------

# Exactly one decision per request, in request order.
grants := {"decisions": [decision(r) | some r in input.requests]}

decision(r) := object.union_n([{"capability": r.capability}, v, imposed(r, v.decision)]) if {
	v := verdict(r)
}

# The first matching branch wins, so a deny beats an approval and an approval beats a grant.
verdict(r) := {"decision": "deny", "reason": "unknown capability"} if {
	not known(r)
} else := {"decision": "deny", "reason": "blocked by policy"} if {
	r.capability in data.agentgate.blocked_capabilities
} else := {"decision": "deny", "reason": "host may not receive grants"} if {
	# Revoked and rejected hosts (and any status this policy does not know) get nothing.
	not input.host.status in {"active", "pending"}
} else := {"decision": "grant"} if {
	pre_approved(r)
} else := {"decision": "approval", "reason": reason} if {
	reason := approval_reason
}

# A request is known only when agentgate says the catalog has it; anything else is unknown.
known(r) if r.exists == true

# An autonomous agent acts for no user, so only the host's default capabilities (set by an
# administrator) and the global list in data.json are pre-approved; the rest waits for an admin.
pre_approved(r) if {
	input.agent.mode == "autonomous"
	autonomous_default(r.capability)
	not previously_refused(r)
}

autonomous_default(capability) if capability in input.host.default_capabilities

autonomous_default(capability) if capability in data.agentgate.autonomous_capabilities

# A delegated agent acts for the user its host is linked to: the host's default capabilities are
# granted only once the host is active and linked; everything else asks the user.
pre_approved(r) if {
	input.agent.mode == "delegated"
	input.host.status == "active"
	input.host.linked == true
	r.capability in input.host.default_capabilities
	not previously_refused(r)
}

# A capability a person revoked or denied before is never granted again without asking.
previously_refused(r) if r.previous_status in {"revoked", "denied"}

approval_reason := "administrator approval required" if {
	input.agent.mode == "autonomous"
} else := "user approval required"

# Server-imposed constraints for a capability (data.agentgate.imposed_constraints[capability]).
# agentgate intersects them with the agent's proposal, so they can only narrow. Deny carries none.
imposed(r, verdict_name) := {"constraints": c} if {
	verdict_name != "deny"
	c := data.agentgate.imposed_constraints[r.capability]
	is_object(c)
	count(c) > 0
} else := {}

# ------------------------------------------------------------------------------------------------
# agentgate/execute
# Input: {now_ms, agent: {id, mode, host_id}, capability, arguments,
#         grants: [{id, constraints}]}   (the agent's active grants for the capability)
# A constraint maps a top-level argument name to an exact value or to an operator object such as
# {"min": 1, "max": 10}. Built-in operators: eq, min, max, in, not_in (DESIGN §6); any other name is a
# plugin operator, answered by agentgate through agentgate.operator (see the end of this file).
# ------------------------------------------------------------------------------------------------

# Allowed when some grant has no violations; the first such grant (in input order) is named.
# Otherwise the violations reported are those of the first grant.
execute := {"allow": true, "grant_id": input.grants[i].id, "violations": []} if {
	i := allowing_grants[0]
} else := {"allow": false, "violations": vs, "reason": "constraint violated"} if {
	vs := violations_by_grant[0]
} else := {"allow": false, "violations": [], "reason": "no active grant"}

# Each grant is evaluated once: a refusal reuses the first grant's violations rather than
# evaluating it again, so a plugin operator is asked once per grant and field.
violations_by_grant := [grant_violations(g) | some g in input.grants]

allowing_grants := [i | some i, vs in violations_by_grant; count(vs) == 0]

# The call's arguments; a missing or non-object member reads as no arguments at all.
args := a if {
	a := input.arguments
	is_object(a)
} else := {}

# One violation per violated field, sorted by field name so the output is deterministic.
# A grant without constraints (null or absent) admits every call. Constraints that are neither
# null nor an object cannot be understood, so they admit nothing (fail closed).
grant_violations(g) := [] if {
	object.get(g, "constraints", null) == null
} else := vs if {
	cs := g.constraints
	is_object(cs)
	vs := [v | some field in sort(object.keys(cs)); v := field_violation(field, cs[field])]
} else := [{"field": "*", "constraint": {"malformed_constraints": true}}]

field_violation(field, constraint) := v if {
	failing := failing_operators(field, constraint)
	count(failing) > 0
	v := object.union({"field": field, "constraint": failing}, actual(field))
}

# Only the operators that fail, as {op: operand}. A non-empty object lists operators; any other
# value (including {}, which names no operator) is an exact value and reads as {"eq": value}.
failing_operators(field, constraint) := ops if {
	is_object(constraint)
	count(constraint) > 0
	ops := {op: operand | some op, operand in constraint; violates(op, operand, field)}
} else := {"eq": constraint} if {
	violates("eq", constraint, field)
} else := {}

# The supplied value, present only when the argument was supplied (null counts as supplied).
actual(field) := {"actual": x} if {
	x := args[field]
} else := {}

builtin_operators := {"eq", "min", "max", "in", "not_in"}

# eq: the argument is supplied and equals the operand. Equality is JSON structural equality, so
# objects and arrays compare by content and 500 equals 500.0.
violates("eq", operand, field) if not equals(field, operand)

equals(field, operand) if args[field] == operand

# min / max: the argument is a number (no coercion here: agentgate converts numeric strings before
# calling when the capability's input schema says number) within the bound.
violates("min", bound, field) if not at_least(field, bound)

at_least(field, bound) if {
	x := args[field]
	is_number(x)
	is_number(bound)
	x >= bound
}

violates("max", bound, field) if not at_most(field, bound)

at_most(field, bound) if {
	x := args[field]
	is_number(x)
	is_number(bound)
	x <= bound
}

# in: the argument is supplied and equals one of the listed values; `in: []` admits nothing.
violates("in", values, field) if not one_of(field, values)

one_of(field, values) if {
	is_array(values)
	args[field] in values
}

# not_in: a supplied argument equals none of the listed values; a missing argument passes and
# `not_in: []` admits everything. An operand that is not a list admits nothing.
violates("not_in", values, _) if not is_array(values)

violates("not_in", values, field) if {
	is_array(values)
	args[field] in values
}

# Every other operator is a plugin operator (plugins/, DESIGN §6), evaluated by agentgate through
# the custom builtin agentgate.operator(name, operand, actual) -> boolean, declared in
# capabilities.json. The plugin gets the argument's value, or null when the argument is missing (so
# a missing argument and a supplied null look the same to a plugin; the violation still tells them
# apart by the presence of `actual`). The field is violated unless the builtin answers true. It
# answers false for a name no plugin registers and for any failure inside a plugin, so an unknown
# or broken operator still fails closed.
violates(op, operand, field) if {
	not op in builtin_operators
	not plugin_allows(op, operand, field)
}

plugin_allows(op, operand, field) if agentgate.operator(op, operand, object.get(args, field, null))

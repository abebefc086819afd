package agentgate.examples.block_capability_test

import rego.v1

import data.agentgate.examples.block_capability as ex

# Every helper and test here starts with block_ (or test_block_), so they stay unique when copied
# into agentgate_test.rego next to its own tests and another example's. The capabilities are ones
# no other example touches, so adopting another example does not change these answers.

# Inputs exactly as agentgate sends them (src/policy/types.ts).
block_grants_input(host_id, requests) := {
	"now_ms": 1767225600000,
	"action": "register",
	"host": {"id": host_id, "status": "active", "linked": true, "default_capabilities": ["read_file", "export_customer_data", "legacy_report"]},
	"agent": {"id": null, "mode": "delegated"},
	"requests": [{"capability": c, "exists": true, "constraints": null, "previous_status": null} | some c in requests],
}

block_execute_input(host_id, capability) := {
	"now_ms": 1767225600000,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": host_id},
	"capability": capability,
	"arguments": {"format": "csv"},
	"grants": [{"id": "grt_1", "constraints": null}],
}

test_block_everywhere_even_a_host_default if {
	out := ex.grants with input as block_grants_input("hst_trusted", ["legacy_report", "read_file"])
	out == {"decisions": [
		{"capability": "legacy_report", "decision": "deny", "reason": "blocked for every host"},
		{"capability": "read_file", "decision": "grant"},
	]}
}

test_block_for_one_host_only if {
	untrusted := ex.grants with input as block_grants_input("hst_untrusted", ["export_customer_data"])
	untrusted == {"decisions": [{"capability": "export_customer_data", "decision": "deny", "reason": "blocked for this host"}]}
	trusted := ex.grants with input as block_grants_input("hst_trusted", ["export_customer_data"])
	trusted == {"decisions": [{"capability": "export_customer_data", "decision": "grant"}]}
}

test_block_keeps_the_unknown_capability_reason if {
	inp := object.union(block_grants_input("hst_untrusted", []), {"requests": [{"capability": "export_customer_data", "exists": false, "constraints": null, "previous_status": null}]})
	out := ex.grants with input as inp
	out.decisions == [{"capability": "export_customer_data", "decision": "deny", "reason": "unknown capability"}]
}

test_block_stops_grants_made_before_at_execute if {
	out := ex.execute with input as block_execute_input("hst_untrusted", "export_customer_data")
	out == {"allow": false, "violations": [], "reason": "blocked for this host"}
	everywhere := ex.execute with input as block_execute_input("hst_trusted", "legacy_report")
	everywhere == {"allow": false, "violations": [], "reason": "blocked for every host"}
}

test_block_leaves_other_hosts_and_capabilities_alone if {
	out := ex.execute with input as block_execute_input("hst_trusted", "export_customer_data")
	out == {"allow": true, "grant_id": "grt_1", "violations": []}
}

package agentgate.examples.block_capability_test

import rego.v1

import data.agentgate.examples.block_capability as ex

# Inputs exactly as agentgate sends them (src/policy/types.ts).
grants_input(host_id, requests) := {
	"now_ms": 1767225600000,
	"action": "register",
	"host": {"id": host_id, "status": "active", "linked": true, "default_capabilities": ["read_file", "transfer_money", "purge_all_data"]},
	"agent": {"id": null, "mode": "delegated"},
	"requests": [{"capability": c, "exists": true, "constraints": null, "previous_status": null} | some c in requests],
}

execute_input(host_id, capability) := {
	"now_ms": 1767225600000,
	"agent": {"id": "agt_1", "mode": "delegated", "host_id": host_id},
	"capability": capability,
	"arguments": {"amount": 5},
	"grants": [{"id": "grt_1", "constraints": null}],
}

test_blocked_everywhere_is_denied_even_as_a_host_default if {
	out := ex.grants with input as grants_input("hst_trusted", ["purge_all_data", "read_file"])
	out == {"decisions": [
		{"capability": "purge_all_data", "decision": "deny", "reason": "blocked for every host"},
		{"capability": "read_file", "decision": "grant"},
	]}
}

test_blocked_for_one_host_only if {
	untrusted := ex.grants with input as grants_input("hst_untrusted", ["transfer_money"])
	untrusted == {"decisions": [{"capability": "transfer_money", "decision": "deny", "reason": "blocked for this host"}]}
	trusted := ex.grants with input as grants_input("hst_trusted", ["transfer_money"])
	trusted == {"decisions": [{"capability": "transfer_money", "decision": "grant"}]}
}

test_an_unknown_capability_keeps_its_reason if {
	inp := object.union(grants_input("hst_untrusted", []), {"requests": [{"capability": "transfer_money", "exists": false, "constraints": null, "previous_status": null}]})
	out := ex.grants with input as inp
	out.decisions == [{"capability": "transfer_money", "decision": "deny", "reason": "unknown capability"}]
}

test_grants_made_before_the_block_no_longer_execute if {
	out := ex.execute with input as execute_input("hst_untrusted", "transfer_money")
	out == {"allow": false, "violations": [], "reason": "blocked for this host"}
	everywhere := ex.execute with input as execute_input("hst_trusted", "purge_all_data")
	everywhere == {"allow": false, "violations": [], "reason": "blocked for every host"}
}

test_other_hosts_and_capabilities_execute_as_before if {
	out := ex.execute with input as execute_input("hst_trusted", "transfer_money")
	out == {"allow": true, "grant_id": "grt_1", "violations": []}
}

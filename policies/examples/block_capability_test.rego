package examples.block_capability_test

import rego.v1

import data.examples.block_capability as ex

req(capability) := {"capability": capability, "exists": true, "constraints": null, "previous_status": null}

test_blocked_everywhere if {
	ex.blocked_reason(req("purge_all_data")) == "blocked for every host" with input as {"host": {"id": "hst_any"}}
}

test_blocked_for_one_host_only if {
	ex.blocked_reason(req("transfer_money")) == "blocked for this host" with input as {"host": {"id": "hst_untrusted"}}
	not ex.blocked_reason(req("transfer_money")) with input as {"host": {"id": "hst_trusted"}}
}

package examples.narrow_constraints_test

import rego.v1

import data.examples.narrow_constraints as ex

transfer := {"capability": "transfer_money", "exists": true, "constraints": {"amount": {"max": 10000}}, "previous_status": null}

test_delegated_transfers_are_capped if {
	d := ex.decision(transfer) with input as {"agent": {"mode": "delegated"}}
	d.constraints == {"amount": {"max": 500}, "currency": {"in": ["EUR", "USD"]}}
}

test_other_requests_are_untouched if {
	d := ex.decision({"capability": "echo"}) with input as {"agent": {"mode": "delegated"}}
	not d.constraints
	d2 := ex.decision(transfer) with input as {"agent": {"mode": "autonomous"}}
	not d2.constraints
}

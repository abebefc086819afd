package examples.autonomous_class_test

import rego.v1

import data.examples.autonomous_class as ex

test_autonomous_agents_are_refused_the_class if {
	ex.autonomous_refusal({"capability": "payments.refund"}) with input as {"agent": {"mode": "autonomous"}}
}

test_delegated_agents_and_other_classes_are_not_affected if {
	not ex.autonomous_refusal({"capability": "payments.refund"}) with input as {"agent": {"mode": "delegated"}}
	not ex.autonomous_refusal({"capability": "weather_lookup"}) with input as {"agent": {"mode": "autonomous"}}
}

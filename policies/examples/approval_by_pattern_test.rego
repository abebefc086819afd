package examples.approval_by_pattern_test

import rego.v1

import data.examples.approval_by_pattern as ex

test_matching_names_need_approval if {
	ex.needs_approval({"capability": "payments.refund"})
	ex.needs_approval({"capability": "admin.users.reset"})
	ex.needs_approval({"capability": "files.delete"})
}

test_other_names_do_not if {
	not ex.needs_approval({"capability": "payments.eu.refund"})
	not ex.needs_approval({"capability": "weather_lookup"})
}

"""state_matches and state_unchanged: every compared path is reported; no state is missing."""

import pytest
from pydantic import ValidationError

from oloproof.evaluate.paths import (
    ABSENT,
    PathError,
    equal,
    format_path,
    parse_path,
    resolve,
)
from oloproof.evaluate.registry import registry
from oloproof.views import NO_STATE
from tests.helpers import view


def make(type_name, **cfg):
    cls = registry()[type_name]
    return cls(cls.config_model.model_validate({"type": type_name, **cfg}))


def state_view(state=NO_STATE, expected=None, initial=None, error=None):
    import msgspec

    return msgspec.structs.replace(view(None, expected=expected or {}, error=error), state=state,
                                   initial_state=initial)


INITIAL = {"orders": {"ord-001": {"status": "delivered", "amount": 40.0},
                      "ord-999": {"status": "delivered", "amount": 25}},
           "log": [{"event": "open"}]}


def test_paths_parse_format_resolve():
    assert parse_path("orders.ord-001.status") == ("orders", "ord-001", "status")
    assert parse_path("log[0].event") == ("log", 0, "event")
    assert resolve(INITIAL, parse_path("log.0.event")) == "open"
    assert resolve(INITIAL, parse_path("log[0].event")) == "open"
    assert resolve(INITIAL, parse_path("log[3]")) is ABSENT
    assert resolve(INITIAL, parse_path("orders.nope.status")) is ABSENT
    assert resolve(INITIAL, parse_path("orders.ord-001.status.deeper")) is ABSENT
    assert format_path(("log", 0, "event")) == "log[0].event"
    for bad in ["", "a..b", "a[x]", "a[1", 3]:
        with pytest.raises(PathError):
            parse_path(bad)


def test_equal_is_strict_about_types_but_tolerant_with_numbers():
    assert equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not equal(True, 1)
    assert equal(10.0, 10.05, 0.1) and not equal(10.0, 10.2, 0.1)
    assert not equal({"a": 1}, {"a": 1, "b": 2})


def test_subset_mode():
    ev = make("state_matches", mode="subset")
    recorded = {"orders": {"ord-001": {"status": "refunded", "amount": 40.0}, "ord-999": {"status": "delivered"}}}
    expected = {"state": {"orders": {"ord-001": {"status": "refunded"}}}}
    verdict, checks = ev.evaluate_paths(state_view(recorded, expected, INITIAL))
    assert verdict == ("pass", None)
    assert [(c.path, c.initial, c.expected, c.recorded, c.verdict) for c in checks] == [
        ("orders.ord-001.status", "delivered", "refunded", "refunded", "pass")]
    recorded["orders"]["ord-001"]["status"] = "delivered"
    verdict, checks = ev.evaluate_paths(state_view(recorded, expected, INITIAL))
    assert verdict[0] == "fail" and checks[0].recorded == "delivered"


def test_a_path_missing_from_the_recorded_state_is_reported_not_a_crash():
    ev = make("state_matches", mode="subset")
    verdict, checks = ev.evaluate_paths(state_view({"orders": {}}, {"state": {"orders": {"ord-001": {"status": "x"}}}},
                                                   INITIAL))
    assert verdict[0] == "fail"
    assert checks[0].recorded is ABSENT and checks[0].note == "not in the recorded state"


def test_whole_mode_reports_differing_and_extra_leaves():
    ev = make("state_matches", mode="whole")
    expected = {"state": {"a": 1, "b": {"c": 2}}}
    assert ev.evaluate_paths(state_view({"a": 1, "b": {"c": 2}}, expected))[0] == ("pass", None)
    verdict, checks = ev.evaluate_paths(state_view({"a": 1, "b": {"c": 3}, "z": 0}, expected))
    assert verdict[0] == "fail"
    by_path = {c.path: c for c in checks}
    assert by_path["b.c"].verdict == "fail" and by_path["b.c"].recorded == 3
    assert by_path["z"].verdict == "fail" and by_path["z"].note == "not in the expected state"


def test_declared_paths_and_tolerance():
    ev = make("state_matches", mode="whole", paths=["orders.ord-001.amount", "orders.ord-777"], tolerance=0.5)
    expected = {"state": {"orders": {"ord-001": {"amount": 40.3}}}}
    verdict, checks = ev.evaluate_paths(state_view(INITIAL, expected, INITIAL))
    assert verdict == ("pass", None)
    assert [c.path for c in checks] == ["orders.ord-001.amount"]  # ord-777 not expected: skipped
    strict = make("state_matches", mode="whole", paths=["orders.ord-001.amount"])
    assert strict.evaluate_paths(state_view(INITIAL, expected, INITIAL))[0][0] == "fail"


def test_list_indexes_in_expected_state():
    ev = make("state_matches", mode="subset")
    verdict, checks = ev.evaluate_paths(state_view(INITIAL, {"state": {"log": [{"event": "open"}]}}, INITIAL))
    assert verdict == ("pass", None) and checks[0].path == "log[0].event"


def test_missing_and_excluded():
    ev = make("state_matches", mode="subset")
    assert ev.evaluate_paths(state_view(NO_STATE, {"state": {"a": 1}}))[0] == ("missing", "no_state_recorded")
    assert ev.evaluate_paths(state_view({"a": 1}, {}))[0] == ("excluded", "no_expected_state")
    assert ev.evaluate_paths(state_view({"a": 1}, {"state": {"a": 1}}, error="boom"))[0] == ("missing", "system_error")
    assert ev.evaluate(state_view(NO_STATE, {"state": {"a": 1}})) == ("missing", "no_state_recorded")


def test_state_unchanged():
    ev = make("state_unchanged", criterion="other_order_untouched", paths=["orders.ord-999"])
    assert ev.criterion == "other_order_untouched"
    verdict, checks = ev.evaluate_paths(state_view(INITIAL, {}, INITIAL))
    assert verdict == ("pass", None)
    assert checks[0].initial == checks[0].expected == checks[0].recorded == INITIAL["orders"]["ord-999"]
    changed = {"orders": {"ord-999": {"status": "refunded", "amount": 25}}}
    assert ev.evaluate_paths(state_view(changed, {}, INITIAL))[0][0] == "fail"
    gone = {"orders": {}}
    verdict, checks = ev.evaluate_paths(state_view(gone, {}, INITIAL))
    assert verdict[0] == "fail" and checks[0].note == "not in the recorded state"
    assert ev.evaluate_paths(state_view(NO_STATE, {}, INITIAL))[0] == ("missing", "no_state_recorded")


def test_state_unchanged_path_absent_from_initial_state():
    ev = make("state_unchanged", paths=["orders.ord-555"])
    verdict, checks = ev.evaluate_paths(state_view(INITIAL, {}, INITIAL))
    assert verdict == ("excluded", "path_not_in_initial_state")
    assert checks[0].note == "not in initial_state"


@pytest.mark.parametrize("cfg", [
    {"type": "state_matches", "tolerance": -1},
    {"type": "state_matches", "paths": [1, 2]},
    {"type": "state_matches", "paths": ["a..b"]},
    {"type": "state_matches", "mode": "partial"},
    {"type": "state_unchanged", "paths": []},
])
def test_bad_config(cfg):
    cls = registry()[cfg["type"]]
    with pytest.raises(ValidationError):
        cls.config_model.model_validate(cfg)

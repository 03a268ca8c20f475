import pytest

from oloproof.config.models import ReleaseConfig
from oloproof.evaluate.engine import SuiteEvaluation
from oloproof.evaluate.gate import judge_gate
from oloproof.evaluate.slices import Slice, SliceSpecError
from oloproof.stats.intervals import rate_interval
from tests.helpers import calls, view


def group(spec, v):
    return Slice.parse(spec).group(v)


def test_metadata_slice():
    assert group("metadata.surface", view(calls("a"), metadata={"surface": "chat"})) == "metadata.surface=chat"
    assert group("metadata.surface", view(calls("a"), metadata={"surface": True})) == "metadata.surface=true"
    assert group("metadata.surface", view(calls("a"))) is None


def test_first_tool_and_prefix_rule():
    assert group("first_tool", view(calls("search", "lookup"))) == "first_tool=search"
    assert group("first_tool", view(calls("search", truncated=True))) == "first_tool=search"
    assert group("first_tool", view(calls())) == "first_tool=(none)"
    assert group("first_tool", view(calls(truncated=True))) is None
    assert group("first_tool", view(None)) is None


def test_repeated_action_and_prefix_rule():
    same = ("s", {"q": 1})
    assert group("repeated_action", view(calls(same, "x", same))) == "repeated_action=true"
    assert group("repeated_action", view(calls(same, ("s", {"q": 2})))) == "repeated_action=false"
    assert group("repeated_action", view(calls(same, same, truncated=True))) == "repeated_action=true"
    assert group("repeated_action", view(calls(same, truncated=True))) is None  # never false


def test_length_bins_and_prefix_rule():
    s = Slice.parse("trajectory_length:4,8")
    assert [b[2] for b in s.bins()] == ["trajectory_length=1-4", "trajectory_length=5-8",
                                        "trajectory_length=9+"]
    assert s.group(view(calls("a", "b"))) == "trajectory_length=1-4"  # 4 steps
    assert s.group(view(calls("a", "b", "c"))) == "trajectory_length=5-8"
    assert s.group(view(calls(*"abcde"))) == "trajectory_length=9+"
    assert s.group(view(calls(*"abcde", truncated=True))) == "trajectory_length=9+"
    assert s.group(view(calls("a", "b", "c", truncated=True))) is None


def test_tool_call_bins():
    s = Slice.parse("tool_calls:1,2")
    assert [b[2] for b in s.bins()] == ["tool_calls=0-1", "tool_calls=2", "tool_calls=3+"]
    assert s.group(view(calls())) == "tool_calls=0-1"
    assert s.group(view(calls("a", "b"))) == "tool_calls=2"
    assert s.group(view(calls("a", "b", "c", "d"))) == "tool_calls=3+"


@pytest.mark.parametrize("spec", ["", "metadata.", "first", "tool_calls", "tool_calls:2,1", "tool_calls:a",
                                  "trajectory_length:0,4"])
def test_bad_specs(spec):
    with pytest.raises(SliceSpecError):
        Slice.parse(spec)


def test_min_slice_support_marks_rows():
    from oloproof.evaluate.registry import registry

    cls = registry()["agent_max_steps"]
    ev = cls(cls.config_model.model_validate({"type": "agent_max_steps", "max_steps": 100}))
    suite = SuiteEvaluation([ev], [], [Slice.parse("first_tool")], 3, None)
    results = [suite.evaluate(view(calls(t), case_id=f"c{i}"), replays={}, pair_source=None) for i, t in
               enumerate(["a", "a", "a", "b", "b"])]
    rows = {r.slice: r for r in suite.summarize(results).slices}
    assert rows["first_tool=a"].low_support is False and rows["first_tool=a"].interval.observed == 3
    assert rows["first_tool=b"].low_support is True


def release(*rules):
    return ReleaseConfig.model_validate({"rules": list(rules)})


def test_gate_rules():
    crit = {"c": rate_interval(37, 40, 0), "m": rate_interval(39, 39, 1)}
    g = judge_gate(release({"name": "a", "criterion": "c", "max_failures": 0}), crit)
    assert g.decision == "FAIL" and g.rules[0].reason == "observed_failures_exceed_limit" and g.exit_code == 1
    g = judge_gate(release({"name": "a", "criterion": "c", "max_failures": 3}), crit)
    assert g.decision == "PASS" and g.exit_code == 0
    g = judge_gate(release({"name": "a", "criterion": "c", "min_lower_bound": 0.8}), crit)
    assert (g.decision, g.rules[0].reason) == ("FAIL", "lower_bound_below_threshold")  # low 79.6 %
    g = judge_gate(release({"name": "a", "criterion": "c", "min_lower_bound": 0.79}), crit)
    assert g.decision == "PASS"
    g = judge_gate(release({"name": "a", "criterion": "c", "min_rate": 0.95}), crit)
    assert (g.decision, g.rules[0].reason) == ("FAIL", "rate_below_threshold")


def test_missing_is_never_counted_as_passed_by_the_gate():
    crit = {"m": rate_interval(39, 39, 1)}
    g = judge_gate(release({"name": "a", "criterion": "m", "max_failures": 0}), crit)
    assert (g.decision, g.rules[0].status, g.rules[0].reason) == \
        ("INSUFFICIENT_EVIDENCE", "INSUFFICIENT_EVIDENCE", "missing_cases")
    assert g.exit_code == 1
    crit = {"e": rate_interval(0, 0, 0, 5)}
    g = judge_gate(release({"name": "a", "criterion": "e", "min_lower_bound": 0.5}), crit)
    assert (g.decision, g.rules[0].reason) == ("INSUFFICIENT_EVIDENCE", "no_observations")


def test_any_fail_beats_insufficient():
    crit = {"m": rate_interval(39, 39, 1), "c": rate_interval(1, 2, 0)}
    g = judge_gate(release({"name": "a", "criterion": "m", "max_failures": 0},
                           {"name": "b", "criterion": "c", "max_failures": 0}), crit)
    assert g.decision == "FAIL"
    assert [r.status for r in g.rules] == ["INSUFFICIENT_EVIDENCE", "FAIL"]

"""Failure attribution: each rule fires where it should and not on its near miss; the earliest
finding is primary; the judge seam; errored, truncated and hostile cases."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from pydantic import ValidationError

from oloproof.evaluate.attribution import (
    RULES,
    Attribution,
    AttributionSettings,
    acceptance_weakened,
    attribute,
    declared_complete_without_verification,
    report_contradicts_observation,
    tool_error_ignored,
)
from oloproof.events import CaseFinished, CaseStarted, StepRecorded, TrajectoryRecorded
from oloproof.views import CaseView, fold_case

SETTINGS = AttributionSettings()


# ---- builders -------------------------------------------------------------------------------

def call(tool: str, args: Any = None) -> tuple:
    return ("tool_call", tool, args or {}, None, {})


def result(tool: str | None, value: Any = None, **extra: Any) -> tuple:
    return ("tool_result", tool, None, {"ok": True} if value is None else value, extra)


def error(tool: str, **extra: Any) -> tuple:
    return result(tool, {"error": {"type": "RuntimeError", "message": "boom"}}, **extra)


def say(text: str) -> tuple:
    return ("message", None, {"text": text}, None, {})


def final(answer: Any = "Finished.") -> tuple:
    return ("final", None, None, answer, {})


def steps_of(*spec: tuple) -> list[StepRecorded]:
    return [StepRecorded(i, kind, tool, args, res, **extra)
            for i, (kind, tool, args, res, extra) in enumerate(spec, start=1)]


def case(*spec: tuple, truncated: bool = False, error: str | None = None,
         error_kind: str | None = None, trajectory: bool = True) -> CaseView:
    events: list[Any] = [CaseStarted("r1", "c1", 0, "f", {})]
    events.extend(steps_of(*spec))
    if trajectory:
        events.append(TrajectoryRecorded("success", truncated, 50 if truncated else None,
                                         len(spec)))
    events.append(CaseFinished({}, error, error_kind))
    return fold_case(events)


def fired(rule, *spec: tuple, settings: AttributionSettings = SETTINGS) -> list[tuple[int, str]]:
    return [(f.step, f.category) for f in rule(steps_of(*spec), settings)]


# ---- declared_complete_without_verification -------------------------------------------------

def test_declared_complete_without_verification_fires_on_the_claim():
    spec = (call("edit_file", {"path": "src/app.py"}), result("edit_file"),
            say("Fixed the bug, all done."), final())
    assert fired(declared_complete_without_verification, *spec) == [(3, "stopping_too_early")]
    f = declared_complete_without_verification(steps_of(*spec), SETTINGS)[0]
    assert f.layer == "model" and f.evidence[0].step == 1
    assert "no verification tool (run_tests" in f.evidence[0].text


def test_declared_complete_near_misses():
    # verification ran (and succeeded) after the last change
    verified = (call("edit_file"), result("edit_file"), call("run_tests"), result("run_tests"),
                final())
    assert fired(declared_complete_without_verification, *verified) == []
    # no change tool at all and no success claimed: nothing to verify
    assert fired(declared_complete_without_verification, call("search"), result("search"),
                 final("Here is what I found.")) == []
    # a message that claims nothing is no completion claim
    assert fired(declared_complete_without_verification, call("edit_file"), result("edit_file"),
                 say("Let me look at the next file.")) == []
    # a verification tool is never a change tool, even when a change glob matches it
    assert fired(declared_complete_without_verification, call("check_and_update"),
                 result("check_and_update"), final()) == []


def test_a_failed_verification_is_no_verification():
    spec = (call("edit_file"), result("edit_file"), call("run_tests"), error("run_tests"),
            final())
    findings = declared_complete_without_verification(steps_of(*spec), SETTINGS)
    assert [(f.step, f.category) for f in findings] == [(5, "stopping_too_early")]
    assert any(e.step == 4 and "verified nothing" in e.text for e in findings[0].evidence)


def test_only_the_last_change_counts():
    # verified after the first edit, then edited again and reported
    spec = (call("edit_file"), result("edit_file"), call("run_tests"), result("run_tests"),
            call("write_file"), result("write_file"), final())
    assert fired(declared_complete_without_verification, *spec) == [(7, "stopping_too_early")]


# ---- acceptance_weakened --------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    {"path": "tests/test_app.py"}, {"file": "./tests/test_app.py"}, {"filename": "test_app.py"},
    {"target": "pkg/tests/conftest.py"}, {"path": "src/app_test.py"},
    {"path": "pkg\\tests\\x.py"}, {"path": ["src/a.py", "tests/b.py"]},
])
def test_acceptance_weakened_fires_on_the_edit(args):
    spec = (call("search"), result("search"), call("edit_file", args), result("edit_file"))
    assert fired(acceptance_weakened, *spec) == [(3, "weakened_acceptance")]


@pytest.mark.parametrize("spec", [
    (call("edit_file", {"path": "src/app.py"}),),          # not protected
    (call("read_file", {"path": "tests/test_app.py"}),),   # reading is no change
    (call("run_tests", {"path": "tests/test_app.py"}),),   # verifying is no change
    (call("edit_file", {"content": "tests/test_app.py"}),),  # not a path argument
])
def test_acceptance_weakened_near_misses(spec):
    assert fired(acceptance_weakened, *spec) == []


# ---- report_contradicts_observation ---------------------------------------------------------

REFUND = (call("get_order", {"id": "ORD-7"}), result("get_order", {"id": "ORD-7", "amount": 40.0}),
          call("refund_order", {"id": "ORD-7"}), result("refund_order", {"amount": 40.0}))


def test_report_contradicts_observation_fires_on_the_final():
    findings = report_contradicts_observation(steps_of(*REFUND, final("Refunded 45.00 EUR")),
                                              SETTINGS)
    assert [(f.step, f.category, f.layer) for f in findings] == [(5, "wrong_report", "model")]
    assert [e.step for e in findings[0].evidence] == [5, 4]
    assert "45.0" in findings[0].evidence[0].text and "contradicted" in findings[0].evidence[0].text


def test_report_contradicts_observation_near_misses():
    assert fired(report_contradicts_observation, *REFUND, final("Refunded 40.00 EUR for ORD-7")) == []
    assert fired(report_contradicts_observation, *REFUND, final("Done, thanks.")) == []
    assert fired(report_contradicts_observation, *REFUND) == []


def test_report_rule_uses_the_configured_claim_patterns():
    settings = AttributionSettings(claim_patterns=[{"name": "ticket", "pattern": r"\b(T\d+)\b"}])
    # 45 EUR is no claim under these patterns; T9 is unsupported
    assert fired(report_contradicts_observation, *REFUND, final("45 EUR"), settings=settings) == []
    assert fired(report_contradicts_observation, *REFUND, final("T9"),
                 settings=settings) == [(5, "wrong_report")]


# ---- tool_error_ignored ---------------------------------------------------------------------

def test_tool_error_ignored_fires_on_the_claim():
    spec = (call("fetch_page"), error("fetch_page"), say("Looked around."), final())
    findings = tool_error_ignored(steps_of(*spec), SETTINGS)
    assert [(f.step, f.category, f.layer) for f in findings] == [(4, "error_ignored", "model")]
    assert findings[0].evidence[0].step == 2
    assert [a.layer for a in findings[0].alternatives] == ["harness"]


def test_an_ignored_injected_fault_names_the_tool_as_alternative():
    spec = (call("fetch_page"), result("fetch_page", {"status": 503}, fault="http_503"),
            say("All done!"))
    findings = tool_error_ignored(steps_of(*spec), SETTINGS)
    assert [(f.step, f.category) for f in findings] == [(3, "error_ignored")]
    assert [a.layer for a in findings[0].alternatives] == ["harness", "tool"]


def test_tool_error_ignored_near_misses():
    # a successful retry of the same tool
    assert fired(tool_error_ignored, call("fetch_page"), error("fetch_page"), call("fetch_page"),
                 result("fetch_page"), final()) == []
    # no completion claim after the error
    assert fired(tool_error_ignored, call("fetch_page"), error("fetch_page"),
                 say("Retrying later.")) == []
    # a success of another tool does not resolve it
    assert fired(tool_error_ignored, call("fetch_page"), error("fetch_page"), call("search"),
                 result("search"), final()) == [(5, "error_ignored")]
    # a raised result without a tool name belongs to the call before it
    assert fired(tool_error_ignored, call("fetch_page"), result(None, {"x": 1}, raised=True),
                 call("fetch_page"), result(None), final()) == []


# ---- attribute ------------------------------------------------------------------------------

def test_earliest_finding_is_primary_and_later_ones_are_consequences():
    spec = [call("read_file", {"path": "src/app.py"}), result("read_file"),
            call("run_tests"), error("run_tests"),
            call("edit_file", {"path": "tests/test_app.py"}), result("edit_file")]
    spec += [call("search"), result("search")] * 2 + [say("Thinking."), say("Still thinking."),
                                                      final()]
    c = case(*spec)
    assert len(c.trajectory.steps) == 13
    a = attribute(c, ["tests_pass"], SETTINGS)
    assert a.status == "attributed" and a.source == "rules"
    assert a.first_unacceptable_step == 5
    assert (a.category, a.layer) == ("weakened_acceptance", "model")
    assert a.primary["rule"] == "acceptance_weakened"
    assert [(s["rule"], s["step"], s["role"]) for s in a.secondary] == [
        ("declared_complete_without_verification", 13, "consequence"),
        ("tool_error_ignored", 13, "consequence")]
    assert a.confidence == "medium" and a.needs_review
    hypotheses = " ".join(x["hypothesis"] for x in a.alternatives)
    assert "declared_complete_without_verification at step 13" in hypotheses
    assert "tool_error_ignored at step 13" in hypotheses
    assert a.evidence[:len(a.primary["evidence"])] == a.primary["evidence"] and a.evidence[0]["step"] == 5
    # then how the primary reaches the failure: the outcome at the end, through assumed links
    assert a.evidence[-1]["step"] == 13 and "reached from step 5" in a.evidence[-1]["text"]
    assert a.failed_criteria == ["tests_pass"]
    assert a.recoverability == {"status": "unknown"}


def test_one_category_gives_high_confidence():
    lookup = (call("get_order"), result("get_order", {"amount": 40.0}))
    a = attribute(case(*lookup, final("It cost 45.00 EUR")), ["report_true"], SETTINGS)
    assert (a.first_unacceptable_step, a.category, a.confidence, a.needs_review) == (
        3, "wrong_report", "high", False)
    assert a.secondary == [] and a.alternatives == []
    # the same rule firing twice is still one category
    spec = (call("edit_file", {"path": "tests/a.py"}), call("edit_file", {"path": "tests/b.py"}),
            call("run_tests"), result("run_tests"))
    a = attribute(case(*spec), ["x"], SETTINGS)
    assert (a.first_unacceptable_step, a.confidence, len(a.secondary)) == (1, "high", 1)


def test_findings_on_one_step_agree():
    # a refund not verified, then reported wrongly: both rules fire on the final step
    a = attribute(case(*REFUND, final("Refunded 45.00 EUR")), ["x"], SETTINGS)
    assert a.primary["rule"] == RULES[0]
    assert [(s["rule"], s["step"]) for s in a.secondary] == [(RULES[2], 5)]
    assert (a.confidence, a.needs_review) == ("high", False)


def test_not_failed():
    ok = case(call("edit_file"), result("edit_file"), call("run_tests"), result("run_tests"),
              final())
    a = attribute(ok, [], SETTINGS)
    assert (a.status, a.needs_review, a.first_unacceptable_step, a.source) == (
        "not_failed", False, None, "none")
    # a rule firing still attributes a case no criterion failed
    assert attribute(case(call("edit_file"), final()), [], SETTINGS).status == "attributed"


def test_unattributed_failure_is_low_confidence():
    a = attribute(case(call("search"), result("search"), final()), ["answer_correct"], SETTINGS)
    assert (a.status, a.confidence, a.needs_review, a.source) == (
        "unattributed", "low", True, "none")
    assert a.first_unacceptable_step is None


@pytest.mark.parametrize("kind,layer,rival", [
    ("reset_error", "environment", None), ("snapshot_error", "environment", None),
    ("case_timeout", "environment", None), ("system_error", "harness", "model"),
])
def test_errored_case(kind, layer, rival):
    c = case(call("search"), result("search"), error="it broke", error_kind=kind)
    a = attribute(c, [], SETTINGS, judge=lambda *_: pytest.fail("judge called"))
    assert (a.status, a.source, a.category, a.layer) == ("attributed", "rules", kind, layer)
    assert a.first_unacceptable_step == 3
    assert (a.confidence, a.needs_review) == ("medium", True)
    assert [x["layer"] for x in a.alternatives] == ([rival] if rival else [])
    assert "it broke" in a.evidence[0]["text"]


def test_an_errored_case_without_trajectory_fails_after_step_zero():
    a = attribute(case(trajectory=False, error="reset failed", error_kind="reset_error"), [],
                  SETTINGS)
    assert (a.first_unacceptable_step, a.layer) == (1, "environment")


def test_rules_win_over_the_case_error():
    c = case(call("edit_file", {"path": "tests/test_x.py"}), result("edit_file"),
             error="late", error_kind="case_timeout")
    a = attribute(c, ["x"], SETTINGS)
    assert (a.category, a.first_unacceptable_step) == ("weakened_acceptance", 1)
    assert any("case_timeout" in x["hypothesis"] for x in a.alternatives)


def test_truncated_trajectory_names_the_harness():
    c = case(call("edit_file", {"path": "tests/test_x.py"}), result("edit_file"), truncated=True)
    a = attribute(c, ["x"], SETTINGS)
    assert a.first_unacceptable_step == 1  # fired on the prefix: stays fired
    assert {"layer": "harness",
            "hypothesis": "the trajectory was truncated at its step limit"} in a.alternatives


# ---- the judge seam -------------------------------------------------------------------------

def test_judge_is_called_only_when_no_rule_fires():
    calls: list[tuple] = []

    def judge(c, failed):
        calls.append((c.case_id, failed))
        return {"step": 2, "category": "wrong_tool", "layer": "model", "rationale": "searched"}

    a = attribute(case(call("edit_file", {"path": "tests/t.py"}), result("edit_file")), ["x"],
                  SETTINGS, judge=judge)
    assert a.source == "rules" and calls == []
    a = attribute(case(call("search"), result("search"), final()), ["x"], SETTINGS, judge=judge)
    assert calls == [("c1", ["x"])]
    assert (a.status, a.source, a.first_unacceptable_step, a.category, a.layer) == (
        "attributed", "judge", 2, "wrong_tool", "model")
    assert (a.confidence, a.needs_review) == ("low", True)
    assert a.evidence == [{"step": 2, "text": "searched"}]
    # a passing case is not judged
    attribute(case(call("search"), result("search")), [], SETTINGS, judge=judge)
    assert len(calls) == 1


@pytest.mark.parametrize("bad", [
    {"step": 0, "category": "x", "layer": "model"},
    {"step": 4, "category": "x", "layer": "model"},
    {"step": True, "category": "x", "layer": "model"},
    {"step": "1", "category": "x", "layer": "model"},
    {"step": 1, "category": "", "layer": "model"},
    {"step": 1, "category": "x", "layer": "the model"},
    {"step": 1, "category": "x", "layer": "model", "rationale": 3},
    ["not", "a", "dict"],
])
def test_a_bad_judge_result_is_ignored(bad):
    a = attribute(case(call("search"), result("search"), final()), ["x"], SETTINGS,
                  judge=lambda *_: bad)
    assert (a.status, a.source, a.confidence, a.needs_review) == (
        "unattributed", "none", "low", True)
    assert any("judge result ignored" in x["hypothesis"] for x in a.alternatives)


def test_a_judge_returning_none_leaves_it_unattributed():
    a = attribute(case(call("search"), result("search")), ["x"], SETTINGS, judge=lambda *_: None)
    assert a.status == "unattributed" and a.alternatives == []


# ---- settings, storage, hostile input -------------------------------------------------------

def test_settings_are_validated():
    with pytest.raises(ValidationError):
        AttributionSettings(verification_tool=["x"])
    with pytest.raises(ValidationError):
        AttributionSettings(success_patterns=["(unclosed"])
    with pytest.raises(ValidationError):
        AttributionSettings(claim_patterns=[{"name": "a", "pattern": "(a)(b)"}])
    custom = AttributionSettings(change_tools=["deploy"], verification_tools=["smoke"])
    assert fired(declared_complete_without_verification, call("deploy"), say("Deployed, done"),
                 settings=custom) == [(2, "stopping_too_early")]
    assert fired(declared_complete_without_verification, call("deploy"), call("smoke"),
                 result("smoke"), final(), settings=custom) == []


def test_attribution_round_trips_as_json():
    spec = (call("edit_file", {"path": "tests/t.py"}), result("edit_file"), final("Fixed."))
    for a in (attribute(case(*spec), ["x"], SETTINGS),
              attribute(case(call("s"), result("s")), [], SETTINGS),
              attribute(case(error="e", error_kind="system_error"), ["x"], SETTINGS)):
        assert msgspec.json.decode(msgspec.json.encode(a), type=Attribution) == a


def test_a_hundred_thousand_steps():
    spec: list[tuple] = []
    for i in range(24_999):
        spec += [call("edit_file", {"path": f"src/m{i}.py"}), result("edit_file"),
                 call("lookup"), result("lookup", {"n": i}) if i % 2 else error("lookup")]
    # 4 is no odd n: unsupported
    spec += [say("All done."), final("Refunded 4 EUR"), call("run_tests"), result("run_tests")]
    c = case(*spec)
    assert len(c.trajectory.steps) == 100_000
    a = attribute(c, ["x"], SETTINGS)
    # the last lookup (step 99,996) failed, then the message claimed completion
    assert a.first_unacceptable_step == 99_997
    assert a.primary["rule"] == "declared_complete_without_verification"
    assert [(s["rule"], s["step"]) for s in a.secondary] == [
        ("tool_error_ignored", 99_997), ("report_contradicts_observation", 99_998)]
    assert (a.confidence, a.needs_review) == ("medium", True)

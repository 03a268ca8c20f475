"""The release classifier: one class per trial, in a tested order of precedence, from the
environment's evidence alone; and the evidence records themselves."""

from __future__ import annotations

import pytest

from oloproof.errors import RecordError
from oloproof.evaluate.release import CLASSES, REPAIR_HINTS, ReleaseClass, ReleaseClassConfig, classify, effect_counts
from oloproof.events import EffectRecorded, EvidenceRecorded
from oloproof.recorder.case import CaseRecorder
from oloproof.records import Case
from oloproof.views import CaseView, TrajectoryView

T0, T1, T2 = "2026-01-01T09:00:00Z", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z"


def ev(kind, **data):
    base = {"access": {"required_scope": None}, "wait": {}, "deliverable": {"contract_ok": True},
            "deadline": {}, "continuity": {}}[kind]
    return EvidenceRecorded(kind, {**base, **data})


def effect(op="charge", key="k1", applied=True):
    return EffectRecorded(op, key, applied)


DENIED = ev("access", tool="write_report", allowed=False)
DELIVERED = ev("deliverable", name="report", exists=True, contract_ok=True)
ABSENT = ev("deliverable", name="report", exists=False, contract_ok=None)
ROUTED = ev("wait", owner="finance", deadline=T2, resume_token="r-1")
UNROUTED = ev("wait", owner=None, deadline=T2, resume_token="r-1")
LATE = ev("deadline", at=T1, finished_at=T2)
ON_TIME = ev("deadline", at=T1, finished_at=T0)
LOST = ev("continuity", expected="amount=1", observed="amount=None")
KEPT = ev("continuity", expected="amount=1", observed="amount=1")


def case(*evidence, effects=(), status="success"):
    traj = TrajectoryView((), status, False, None, (), ())
    return CaseView(case_id="c", position=0, fingerprint="f", input={}, initial_state=None, expected={},
                    metadata={}, trajectory=traj, evidence=tuple(evidence), effects=tuple(effects))


@pytest.mark.parametrize("evidence,effects,expected", [
    # one condition each
    ((DELIVERED, ON_TIME), (effect(),), "PASS"),
    ((ROUTED,), (), "EXPECTED_WAIT"),
    ((ABSENT,), (effect(),), "FAIL_OUTCOME"),
    ((DELIVERED,), (effect(key="a"), effect(key="b")), "FAIL_DUPLICATE_EFFECT"),
    ((DENIED,), (), "FAIL_TOOL_ACCESS"),
    ((LOST, DELIVERED), (), "FAIL_MEMORY"),
    ((UNROUTED,), (), "FAIL_UNROUTED_WAIT"),
    ((LATE, DELIVERED), (), "FAIL_DEADLINE"),
    # the ambiguous pairs, decided by precedence
    ((DENIED, DELIVERED), (effect(key="a"), effect(key="b")), "FAIL_TOOL_ACCESS"),  # denied and duplicated
    ((DELIVERED,), (effect(key="a"), effect(key="b")), "FAIL_DUPLICATE_EFFECT"),  # duplicated and verified
    ((ROUTED,), (), "EXPECTED_WAIT"),  # a routed wait with no deliverable: not due yet
    ((ROUTED, LATE), (), "EXPECTED_WAIT"),  # the deadline passes during a routed wait
    ((UNROUTED, LATE), (), "FAIL_UNROUTED_WAIT"),  # the wait is judged before the deadline
    ((LOST, ROUTED), (), "FAIL_MEMORY"),  # memory before the wait
    ((LOST, DENIED), (), "FAIL_TOOL_ACCESS"),
    ((DELIVERED, LATE), (effect(key="a"), effect(key="b")), "FAIL_DUPLICATE_EFFECT"),
    ((ABSENT, LATE), (), "FAIL_DEADLINE"),  # late before absent
    ((KEPT, DELIVERED, ON_TIME), (), "PASS"),
    # a healthy retry: two attempts, one stable key, one effect
    ((DELIVERED,), (effect(key="a"), effect(key="a", applied=False)), "PASS"),
])
def test_precedence(evidence, effects, expected):
    assert classify(case(*evidence, effects=effects)) == (expected, None)


def test_the_verdict_carries_the_class_and_undecidable_trials_are_missing():
    judge = ReleaseClass(ReleaseClassConfig(type="release_class")).evaluate
    assert judge(case(DELIVERED)) == ("pass", "PASS")
    assert judge(case(ROUTED)) == ("pass", "EXPECTED_WAIT")
    assert judge(case(ABSENT)) == ("fail", "FAIL_OUTCOME")
    assert judge(case()) == ("missing", "no_release_evidence")
    assert judge(case(ON_TIME)) == ("missing", "no_outcome_evidence")
    assert judge(case(ev("deliverable", name="r", exists=True, contract_ok=None))) == \
        ("missing", "contract_not_checked")


def test_every_fail_class_has_a_repair_hint():
    assert set(REPAIR_HINTS) == {c for c in CLASSES if c.startswith("FAIL_")}


def test_effect_counts_tell_attempts_from_effects():
    counts = effect_counts(case(effects=(effect(key="a"), effect(key="a", applied=False), effect("mail", "m"))))
    assert counts["charge"] == {"effect_attempts": 2, "effect_count": 1, "keys": ["a"]}
    assert counts["mail"]["effect_count"] == 1


def recorder():
    return CaseRecorder(Case("c", {}))


def test_evidence_is_validated_when_recorded():
    rec = recorder()
    rec.effect("charge", idempotency_key="k", applied=True)
    rec.access("tool", allowed=False, required_scope="scope:x")
    rec.wait(owner="o", deadline=T2, resume_token="t")
    rec.continuity(expected={"a": 1}, observed={"a": 1})
    rec.deadline(at=T1, finished_at=T0)
    rec.deliverable("r", exists=True, contract_ok=True)
    kinds = [getattr(e, "kind", "effect") for e in rec.evidence_events()]
    assert kinds == ["effect", "access", "wait", "continuity", "deadline", "deliverable"]
    bad = [
        lambda r: r.effect("", idempotency_key="k", applied=True),
        lambda r: r.effect("op", idempotency_key="k", applied=1),
        lambda r: r.access("t", allowed="no"),
        lambda r: r.wait(owner="o", deadline="tomorrow", resume_token="t"),
        lambda r: r.deadline(at="2026-01-01T10:00:00", finished_at=None),  # no time zone
        lambda r: r.deliverable("r", exists=None),
        lambda r: r.continuity(expected=float("nan"), observed=1),
    ]
    for call in bad:
        with pytest.raises(RecordError, match="case 'c'"):
            call(recorder())


def test_continuity_compares_json_values_not_python_equality():
    assert classify(case(ev("continuity", expected=True, observed=1), DELIVERED))[0] == "FAIL_MEMORY"
    assert classify(case(ev("continuity", expected={"x": [False]}, observed={"x": [0]}), DELIVERED))[0] == \
        "FAIL_MEMORY"


def test_an_agent_that_raised_after_a_duplicate_effect_still_fails():
    import msgspec

    judge = ReleaseClass(ReleaseClassConfig(type="release_class")).evaluate
    raised = msgspec.structs.replace(case(effects=(effect(key="a"), effect(key="b"))), error="boom",
                                     error_kind="system_error")
    assert judge(raised) == ("fail", "FAIL_DUPLICATE_EFFECT")
    quiet = msgspec.structs.replace(case(DELIVERED), error="boom", error_kind="system_error")
    assert judge(quiet) == ("missing", "system_error")


def test_evidence_must_be_declared(cli, tmp_path):
    from tests.conftest import write

    p = tmp_path / "undeclared"
    write(p / "app.py", "from oloproof import current_case\n\n"
                        "def agent(case):\n"
                        "    current_case().effect('pay', idempotency_key='k', applied=True)\n"
                        "    return {'answer': 'ok'}\n")
    write(p / "oloproof.yaml", "system: {name: s, version: '1', callable: app:agent, records: [agent_trajectory/v1]}\n"
                               "cases: cases.jsonl\nevaluators:\n"
                               "  - {type: contains, criterion: ok, field: answer, expected_field: answer}\n")
    write(p / "cases.jsonl", '{"id": "a", "input": {}, "expected": {"answer": "ok"}}\n')
    r = cli("run", "--json", "r.json", cwd=p)
    import json

    data = json.loads((p / "r.json").read_text())
    assert data["cases"][0]["verdicts"]["ok"]["verdict"] == "missing"
    assert "without declaring it" in r.output and "effect_ledger/v1" in r.output

"""The fault-injection release gate's classifier (SPEC §13): ``{type: release_class}``.

Three kinds of evidence are kept apart and never folded into one score: the **transcript**
(what the agent said, the tools it called), the **effects** (``effect_ledger/v1``: every attempt
at an external effect with its idempotency key) and the **outcome** (``release_evidence/v1``:
tool access, waits, continuity, deadlines, the deliverable). The class is decided from the
environment's evidence alone; the transcript never decides it — an agent that says "done" while
the deliverable is absent is exactly what this catches (``response_only_false_passes``).

Each trial gets exactly one class, the first that applies in this order of precedence:

1. ``FAIL_TOOL_ACCESS`` — an access was denied (the first boundary the trial failed);
2. ``FAIL_DUPLICATE_EFFECT`` — an operation was applied more than once (it outranks a
   verified deliverable: producing the right object twice is not a healthy finish). Two
   attempts with one stable key and one applied effect is a healthy retry;
3. ``FAIL_MEMORY`` — a continuity receipt does not match what was expected;
4. the wait — owner, deadline and resume token all present: ``EXPECTED_WAIT`` (a pass: the
   work is not due yet); any missing: ``FAIL_UNROUTED_WAIT``. Judged before the deadline and
   the outcome, since waiting work is not expected to be done;
5. ``FAIL_DEADLINE`` — finished after the absolute deadline, or not finished by it;
6. ``FAIL_OUTCOME`` — the deliverable is absent or fails its contract;
7. ``PASS``.

Continuity receipts compare as JSON (``true`` is not ``1``). A trial whose agent raised is
still a FAIL when the evidence recorded before shows a denied access, a duplicate effect or a
lost decision; otherwise it is missing, as for any evaluator.

Where the seed is silent (see docs/fault-injection.md): a routed wait is ``EXPECTED_WAIT`` even
when the work's own deadline passes during it (the wait's owner and deadline now hold the
work); a trial with no release evidence at all, or no deliverable evidence and no wait, is
``missing`` (``no_release_evidence`` / ``no_outcome_evidence``); a deliverable whose contract was
not checked is ``missing`` (``contract_not_checked``) — never a pass by default.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from oloproof.evaluate.base import Evaluator, EvaluatorConfig, Verdict, _verdict, evaluator, missing
from oloproof.events import EffectRecorded, canonical_json
from oloproof.records import EFFECT_LEDGER_V1, RELEASE_EVIDENCE_V1
from oloproof.views import CaseView

CLASSES = ("PASS", "EXPECTED_WAIT", "FAIL_TOOL_ACCESS", "FAIL_DUPLICATE_EFFECT", "FAIL_MEMORY",
           "FAIL_UNROUTED_WAIT", "FAIL_DEADLINE", "FAIL_OUTCOME")
PASSING = ("PASS", "EXPECTED_WAIT")

#: every FAIL is a repair request, never something the harness retries away
REPAIR_HINTS = {
    "FAIL_TOOL_ACCESS": "fix the trial's credentials or the agent's path when access is denied; do not widen "
                        "production permissions just to make the trial green",
    "FAIL_DUPLICATE_EFFECT": "keep one logical operation identity (idempotency key) across retries and verify "
                             "the effect before another attempt",
    "FAIL_MEMORY": "define the minimal decision receipt that must survive a restart, then test the real "
                   "persistence boundary",
    "FAIL_UNROUTED_WAIT": "give the wait an owner, a deadline, a decision receipt and the identity of the "
                          "work to resume",
    "FAIL_DEADLINE": "propagate an absolute deadline, with reserve time for cancellation, cleanup and "
                     "checking the outcome",
    "FAIL_OUTCOME": "repair the delivery path or its oracle; changing the completion wording does not fix "
                    "the failure",
}


class ReleaseClassConfig(EvaluatorConfig):
    """Config of ``type: release_class``: nothing beyond ``type`` and ``criterion`` (the
    class is decided from the recorded evidence alone)."""

    pass


def effect_counts(case: CaseView) -> dict[str, dict[str, Any]]:
    """Per operation: ``effect_attempts``, ``effect_count`` (applied) and the keys used."""
    return ledger_counts(case.effects)


def ledger_counts(effects: Iterable[EffectRecorded]) -> dict[str, dict[str, Any]]:
    """Per operation of an effect ledger: ``effect_attempts``, ``effect_count`` (applied)
    and the idempotency keys used, in order. An operation applied more than once is one
    logical operation done twice — the duplicate effect of the seed's dangerous ambiguity."""
    out: dict[str, dict[str, Any]] = {}
    for e in effects:
        entry = out.setdefault(e.operation, {"effect_attempts": 0, "effect_count": 0, "keys": []})
        entry["effect_attempts"] += 1
        entry["effect_count"] += bool(e.applied)
        if e.idempotency_key not in entry["keys"]:
            entry["keys"].append(e.idempotency_key)
    return out


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def classify(case: CaseView) -> tuple[str | None, str | None]:
    """(class, None) or (None, why it cannot be decided)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for ev in case.evidence:
        by_kind.setdefault(ev.kind, []).append(ev.data)
    if not by_kind and not case.effects:
        return None, "no_release_evidence"
    if any(not a["allowed"] for a in by_kind.get("access", [])):
        return "FAIL_TOOL_ACCESS", None
    if any(entry["effect_count"] > 1 for entry in effect_counts(case).values()):
        return "FAIL_DUPLICATE_EFFECT", None
    if any(canonical_json(c["expected"]) != canonical_json(c["observed"]) for c in by_kind.get("continuity", [])):
        return "FAIL_MEMORY", None
    waits = by_kind.get("wait", [])
    if waits:
        routed = all(w["owner"] and w["deadline"] and w["resume_token"] for w in waits)
        return ("EXPECTED_WAIT" if routed else "FAIL_UNROUTED_WAIT"), None
    for d in by_kind.get("deadline", []):
        if d["finished_at"] is None or _instant(d["finished_at"]) > _instant(d["at"]):
            return "FAIL_DEADLINE", None
    deliverables = by_kind.get("deliverable", [])
    if not deliverables:
        return None, "no_outcome_evidence"
    if any(not d["exists"] or d["contract_ok"] is False for d in deliverables):
        return "FAIL_OUTCOME", None
    if any(d["contract_ok"] is None for d in deliverables):
        return None, "contract_not_checked"
    return "PASS", None


def claimed_success(case: CaseView) -> bool:
    """What a grader reading only the transcript would conclude: the agent said it finished."""
    return case.trajectory is not None and case.trajectory.terminal_status == "success"


@evaluator("release_class")
class ReleaseClass(Evaluator):
    """One class per trial from the environment's evidence (see the module docstring); the
    class is the verdict's reason: ``PASS`` and ``EXPECTED_WAIT`` pass, every ``FAIL_*`` fails."""

    config_model = ReleaseClassConfig
    config: ReleaseClassConfig
    requires = (EFFECT_LEDGER_V1, RELEASE_EVIDENCE_V1)

    def default_criterion(self) -> str:
        return "release_class"

    def evaluate(self, case: CaseView) -> Verdict:
        """A trial whose agent raised is still judged on what the environment recorded before:
        a denied access, a duplicate effect or a lost decision is a FAIL whatever came after.
        Anything less decisive leaves it missing, as for any evaluator."""
        if case.error is not None:
            cls, _ = classify(case)
            if cls in ("FAIL_TOOL_ACCESS", "FAIL_DUPLICATE_EFFECT", "FAIL_MEMORY"):
                return _verdict("fail", cls)
            return missing(case.error_kind or "system_error")
        return self.judge(case)

    def judge(self, case: CaseView) -> Verdict:
        cls, why = classify(case)
        if cls is None:
            return missing(why or "no_release_evidence")
        return _verdict("pass" if cls in PASSING else "fail", cls)

"""``oloproof export``: a run's records as JSON lines another tool can read.

Each case gives an ``agent_trajectory/v1`` line (when it recorded a trajectory), an
``environment_state/v1`` line (when it recorded a state), and ``effect_ledger/v1`` and
``release_evidence/v1`` lines (when its sandbox recorded them), an ``attribution`` line (when
``oloproof attribute`` stored one: the latest), an ``attempt`` line for each earlier attempt
of a case run again after an infrastructure error (``retries:``: its error, error kind,
traceback and steps; every other line is the last attempt's); each line carries the run, the
case and the case's verdicts under the run's own configuration::

    {"record": "agent_trajectory/v1", "run_id": ..., "case_id": ..., "verdicts": {...},
     "data": {"steps": [...], "terminal_status": ..., "truncated": ..., "step_limit": ...,
              "constraints": [...], "checkpoints": [...]}}
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from oloproof.events import canonical_json
from oloproof.report.panel import release_panel
from oloproof.views import NO_STATE, CaseView


def export_records(run_id: str, view: CaseView, verdicts: dict[str, Any],
                   attribution: dict[str, Any] | None = None) -> Iterator[str]:
    """The JSON lines of one case: its records, each carrying the case's verdicts."""
    head = {"run_id": run_id, "case_id": view.case_id, "verdicts": verdicts}
    t = view.trajectory
    if t is not None:
        data: dict[str, Any] = {
                "steps": [msgspec.to_builtins(s) for s in t.steps], "terminal_status": t.terminal_status,
                "truncated": t.truncated, "step_limit": t.step_limit,
                "constraints": [msgspec.to_builtins(c) for c in t.constraints],
                "checkpoints": [msgspec.to_builtins(c) for c in t.checkpoints]}
        for step in data["steps"]:
            step.pop("type", None)
        for item in data["constraints"] + data["checkpoints"]:
            item.pop("type", None)
        yield canonical_json({"record": "agent_trajectory/v1", **head, "data": data}).decode()
    if view.state is not NO_STATE:
        yield canonical_json({"record": "environment_state/v1", **head, "data": {"state": view.state}}).decode()
    if view.effects:
        yield canonical_json({"record": "effect_ledger/v1", **head, "data": release_panel(view)["effects"]}).decode()
    if view.evidence:
        yield canonical_json({"record": "release_evidence/v1", **head,
                              "data": release_panel(view)["evidence"]}).decode()
    if attribution is not None:
        yield canonical_json({"record": "attribution", **head, "data": attribution}).decode()
    if t is None and view.state is NO_STATE and not view.effects and not view.evidence:
        yield canonical_json({"record": "case/v1", **head, "data": {"output": view.output,
                                                                     "error": view.error}}).decode()
    for n, a in enumerate(view.attempts, start=1):  # retries: the earlier attempts stay visible
        yield canonical_json({"record": "attempt", **head, "data": {
            "attempt": n, "error": a.error, "error_kind": a.error_kind, "traceback": a.traceback,
            "steps": len(a.trajectory.steps) if a.trajectory is not None else None}}).decode()
    if view.traceback is not None:  # where the system raised, whatever else was recorded
        yield canonical_json({"record": "error", **head, "data": {"error": view.error, "error_kind": view.error_kind,
                                                                  "traceback": view.traceback}}).decode()


def export_lines(store: Any, run_id: str) -> Iterator[str]:
    """The run's records as JSON lines (``oloproof export --format jsonl``), in suite order."""
    from oloproof.app.attribution import latest_attribution
    from oloproof.app.reports import judged_cases

    for view, verdicts in judged_cases(store, run_id):
        shown = {c: {"verdict": v[0], **({"reason": v[1]} if v[1] else {})} for c, v in verdicts.items()}
        yield from export_records(run_id, view, shown, latest_attribution(store, run_id, view.case_id))

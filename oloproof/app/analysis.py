"""``oloproof export RUN --format sqlite FILE``: one run as an analysis database (issue 16).

Everything comes from the events, judged as ``oloproof eval`` would under the run's own
configuration (a run that fails its audit is refused); :mod:`oloproof.store.analysis` writes
the tables. The database is for questions the terminal cannot answer — the failure rate per
first tool, the cases whose final state differs at a path — never for decisions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from oloproof.events import canonical_json
from oloproof.store.base import EventStore
from oloproof.views import NO_STATE, CaseView, ReplayView


def _json(value: Any) -> str | None:
    return None if value is None else canonical_json(msgspec.to_builtins(value)).decode()


_PLAIN_KEY = re.compile(r"[^.\[\]\"$]+")


def _key(path: str, key: Any) -> str:
    key = str(key)
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"  # a key with . [ ] " or $, or empty: quoted


def flatten(value: Any, path: str = "") -> list[tuple[str, Any]]:
    """The leaves of a JSON value with their paths (``orders.ord-001.status``, ``items[0]``;
    a key holding ``.``, ``[``, ``]``, ``"`` or ``$``, or an empty one, quoted:
    ``["a.b"]``), one path per leaf; an empty object or list is a leaf of its own; the whole
    value when it is no container is ``$``."""
    if isinstance(value, dict) and value:
        out = []
        for key, item in value.items():
            out.extend(flatten(item, _key(path, key)))
        return out
    if isinstance(value, (list, tuple)) and value:
        out = []
        for i, item in enumerate(value):
            out.extend(flatten(item, f"{path}[{i}]"))
        return out
    return [(path or "$", value)]


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return "array" if isinstance(value, (list, tuple)) else "object"


def _replay_row(case_id: str, tool: str, fault: str, replay: ReplayView) -> dict[str, Any]:
    s = replay.started
    t = replay.trajectory
    return {"replay_key": s.cache_key, "case_id": case_id, "kind": s.kind, "tool_name": tool,
            "fault": fault if s.kind == "fault" else None, "checkpoint_step": s.checkpoint_step, "method": s.method,
            "steps": len(t.steps) if t is not None else None, "terminal_status": t.terminal_status if t else None,
            "error": replay.error, "diverged": replay.diverged, "injected": int(replay.injected),
            "output": _json(replay.output)}


def analysis_rows(store: EventStore, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows for one run (see :data:`oloproof.store.analysis.TABLES`)."""
    from oloproof.app.audit import require_intact
    from oloproof.app.evidence import RunEvidence
    from oloproof.app.project import suite_from_stored
    from oloproof.app.runs import iter_case_views, load_run

    audit = require_intact(store, run_id)
    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    evidence = RunEvidence(store, run, suite, sealed_only=True)
    views = sorted(iter_case_views(store, run_id), key=lambda v: v.position)
    ids = {v.case_id for v in views}
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in
                                             ("runs", "cases", "steps", "verdicts", "states", "replays", "pairs")}
    rows["runs"].append({"run_id": run_id, "system": run.started.system_name, "version": run.started.system_version,
                         "started_at": run.started.started_at,
                         "finished_at": getattr(run.finished, "finished_at", None),
                         "case_count": run.started.case_count, "cases_committed": len(views),
                         "sealed": int(audit.sealed is not None), "log_digest": audit.digest,
                         "config_digest": run.started.config_digest})
    replays_seen: set[str] = set()
    for view in views:
        judged: CaseView = evidence.with_evidence(view)
        result = suite.evaluate(judged, replays=judged.replays, pair_source=judged.pair_source)
        t = view.trajectory
        calls = t.tool_names if t is not None else []
        source = view.cluster if view.is_derived and view.cluster in ids else None
        rows["cases"].append({
            "case_id": view.case_id, "run_id": run_id, "position": view.position,
            "status": "error" if view.error else "ok", "error": view.error, "error_kind": view.error_kind,
            "traceback": view.traceback, "terminal_status": t.terminal_status if t else None,
            "steps": len(t.steps) if t else None,
            "tool_calls": len(calls) if t else None, "first_tool": calls[0] if calls else None,
            "last_tool": calls[-1] if calls else None, "truncated": int(t.truncated) if t else None,
            "derived_from": source, "input": _json(view.input), "output": _json(view.output),
            "metadata": _json(dict(view.metadata))})
        for s in t.steps if t is not None else ():
            rows["steps"].append({"case_id": view.case_id, "step": s.index, "kind": s.kind, "tool_name": s.tool_name,
                                  "agent": s.agent, "to_agent": s.to_agent, "raised": int(s.raised), "fault": s.fault,
                                  "arguments": _json(s.arguments), "result": _json(s.result)})
        for criterion, (verdict, reason) in zip(suite.criteria, result.verdicts):
            rows["verdicts"].append({"case_id": view.case_id, "criterion": criterion, "verdict": verdict,
                                     "reason": reason})
        if view.state is not NO_STATE:
            for path, value in flatten(msgspec.to_builtins(view.state)):
                rows["states"].append({"case_id": view.case_id, "path": path, "value": _json(value),
                                       "type": _type(value)})
        for (tool, fault), found in (judged.replays or {}).items():
            for replay in (found.control, found.fault):
                if replay is not None and replay.started.cache_key not in replays_seen:
                    replays_seen.add(replay.started.cache_key)
                    rows["replays"].append(_replay_row(view.case_id, tool, fault, replay))
        if source is not None:
            rows["pairs"].append({"derived_case_id": view.case_id, "source_case_id": source,
                                  "transform": view.case_id.split("~", 1)[1] if "~" in view.case_id else None})
    return rows


def export_analysis(store: EventStore, run_id: str, path: Path) -> dict[str, int]:
    """Write the analysis database of ``run_id`` to ``path``; the row count of each table."""
    from oloproof.store.analysis import write_analysis

    rows = analysis_rows(store, run_id)
    write_analysis(path, rows)
    return {name: len(table) for name, table in rows.items()}

"""``oloproof replay``: control and fault replays of a stored run, case by case."""

from __future__ import annotations

from typing import Any, Iterable

from oloproof.config.locate import did_you_mean
from oloproof.errors import UsageError
from oloproof.evaluate.view import CaseView
from oloproof.events import canonical_json
from oloproof.replay.faults import FAULT_KINDS


def parse_fault(spec: str) -> tuple[str, str]:
    tool, sep, kind = spec.rpartition(":")
    if not sep or not tool or not kind:
        raise UsageError(f"--fault {spec!r}: expected TOOL:KIND, e.g. issue_refund:error")
    if kind not in FAULT_KINDS:
        raise UsageError(f"--fault {spec!r}: unknown kind {kind!r}{did_you_mean(kind, FAULT_KINDS)} "
                         f"(one of {', '.join(FAULT_KINDS)})")
    return tool, kind


def after_fault(replay: Any, call_index: int) -> list[str]:
    """What the agent did after the faulted call, step by step, then how it ended."""
    t = replay.trajectory
    lines = []
    if t is not None:
        for s in t.steps:
            if s.index < call_index:
                continue
            if s.kind == "tool_call":
                lines.append(f"{s.tool_name}({canonical_json(s.arguments).decode()})")
            elif s.kind == "tool_result" and s.index == call_index + 1:
                lines.append(f"→ {canonical_json(s.result).decode()} (injected)")
            elif s.kind in ("message", "final", "handoff", "decision"):
                lines.append(f"{s.kind}")
        lines.append(f"status {t.terminal_status}")
    if replay.error:
        lines.append(f"raised {replay.error}")
    lines.append(f"output {canonical_json(replay.output).decode()}")
    return lines


def replay_run(store: Any, project_dir: str, run_id: str, fault_spec: str, *,
               case_ids: Iterable[str] = (), escalate: Iterable[str] = (),
               allow_version_change: bool = False) -> dict[str, Any]:
    """Check every input, then run (or find) the replays and judge each case."""
    from oloproof.evaluate.base import registry
    from oloproof.history import iter_case_views, load_run
    from oloproof.project import declared_tools, load_project, load_system
    from oloproof.replay.fidelity import compare
    from oloproof.replay.plan import Plan, plan_fault
    from oloproof.replay.service import FaultSpec, ReplayService

    tool, kind = parse_fault(fault_spec)
    project = load_project(project_dir)
    system = load_system(project)
    stored = load_run(store, run_id)
    s = stored.started
    if s.system_name != system.name:
        raise UsageError(f"run {run_id!r} recorded system {s.system_name!r}; the installed system is "
                         f"{system.name!r}")
    if s.system_version != system.version and not allow_version_change:
        raise UsageError(
            f"run {run_id!r} was recorded by {s.system_name} version {s.system_version!r}; the "
            f"installed version is {system.version!r}. Replaying would test the installed version "
            "against another version's recording: pass --allow-version-change to do it anyway")
    views = list(iter_case_views(store, run_id))
    known = {v.case_id for v in views}
    wanted = list(case_ids)
    for cid in wanted:
        if cid not in known:
            raise UsageError(f"run {run_id!r} has no case {cid!r}{did_you_mean(cid, known)}")
    tools = declared_tools(system) | {n for v in views if v.trajectory for n in v.trajectory.tool_names}
    if tool not in tools:
        raise UsageError(f"--fault {fault_spec!r}: the system never declared or called a tool {tool!r}"
                         f"{did_you_mean(tool, tools)} (tools: {', '.join(sorted(tools)) or 'none'})")
    escalate_tools = list(escalate)
    if not escalate_tools:
        for ev in project.suite.evaluators:
            if ev.replay_spec is not None and ev.replay_spec[0] == tool:
                escalate_tools = list(ev.config.escalate_tools)  # type: ignore[attr-defined]
                break
    cls = registry()["fault_recovery"]
    evaluator = cls(cls.config_model.model_validate(
        {"type": "fault_recovery", "tool": tool, "fault": kind, "escalate_tools": escalate_tools}))
    service = ReplayService(store, system.name, system.version, system=system)
    specs = [FaultSpec(tool, kind)]
    selected: list[CaseView] = [v for v in views if not wanted or v.case_id in wanted]
    counts = {"passed": 0, "observed": 0, "missing": 0, "excluded": 0}
    cases = []
    looked_up = 0
    for view in selected:
        service.attach(f"{run_id}/{view.case_id}", view, specs)
        verdict, reason = evaluator.evaluate(view)
        entry: dict[str, Any] = {"case_id": view.case_id, "verdict": verdict}
        if reason:
            entry["reason"] = reason
        plan = plan_fault(view, tool) if view.trajectory is not None else None
        pair = view.replays.get((tool, kind))
        if isinstance(plan, Plan):
            cp = plan.checkpoint
            entry["checkpoint"] = {"step_index": cp.step_index, "id": cp.id}
            entry["faulted_step"] = plan.call_index
        if pair is not None:
            looked_up += 1 + (pair.fault is not None)
            if pair.control is not None:
                if pair.control.error_kind is not None:
                    entry["control"] = {"faithful": False, "first_difference": {
                        "message": f"the control replay raised: {pair.control.error}"}}
                else:
                    f = compare(view, pair.control, pair.plan.checkpoint.step_index)
                    entry["control"] = {"faithful": f.faithful, "first_difference": f.first_difference}
            if pair.fault is not None:
                entry["after_fault"] = after_fault(pair.fault, pair.plan.call_index)
        if verdict == "pass":
            counts["passed"] += 1
            counts["observed"] += 1
        elif verdict == "fail":
            counts["observed"] += 1
        else:
            counts[verdict] += 1
        cases.append(entry)
    return {
        "run_id": run_id,
        "system": {"name": system.name, "version": system.version, "recorded_version": s.system_version},
        "fault": {"tool": tool, "kind": kind, "escalate_tools": escalate_tools},
        "executed": service.executed,
        "cached": looked_up - service.executed,
        "cases": cases,
        "summary": {"criterion": evaluator.criterion, **counts},
    }

"""``oloproof replay``: control and fault replays of a stored run, case by case.

The replays run as :data:`~oloproof.replay.engine.REPLAY_JOB` s on the chosen executor, like a
run's; the driver commits each case's new replays in one transaction and judges the case with
a ``fault_recovery`` evaluator through the one evaluation path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from oloproof.app.evidence import accumulator
from oloproof.app.project import check_tool_names, declared_tools, load_project, load_system, model_calls
from oloproof.app.runs import iter_case_views, load_run
from oloproof.config.locate import did_you_mean
from oloproof.errors import UsageError
from oloproof.evaluate.engine import SuiteEvaluation
from oloproof.evaluate.fault import replay_ledger
from oloproof.evaluate.release import ledger_counts
from oloproof.events import CODEC
from oloproof.recorder.executors import Executor, SerialExecutor
from oloproof.recorder.jobs import Job
from oloproof.recorder.record import contained_exit
from oloproof.replay.cache import ReplayCache
from oloproof.replay.engine import PREFIX, REPLAY_JOB, ReplayArgs
from oloproof.replay.faults import ALL_FAULT_KINDS
from oloproof.replay.fidelity import after_fault, compare
from oloproof.replay.plan import FaultSpec, Needed, Plan, plan_fault
from oloproof.store.base import EventStore, StreamAppend
from oloproof.views import CaseView, fold_replay


def parse_fault(spec: str) -> tuple[str, str]:
    """``--fault TOOL:KIND`` → ``(tool, kind)``; the split is at the last colon.

    Raises:
        UsageError: not ``TOOL:KIND``, or an unknown fault kind (with a did-you-mean).
    """
    tool, sep, kind = spec.rpartition(":")
    if not sep or not tool or not kind:
        raise UsageError(f"--fault {spec!r}: expected TOOL:KIND, e.g. issue_refund:error")
    if kind not in ALL_FAULT_KINDS:
        raise UsageError(f"--fault {spec!r}: unknown kind {kind!r}{did_you_mean(kind, ALL_FAULT_KINDS)} "
                         f"(one of {', '.join(ALL_FAULT_KINDS)})")
    return tool, kind


def replay_run(store: EventStore, project_dir: str, run_id: str, fault_spec: str, *,
               case_ids: Iterable[str] = (), escalate: Iterable[str] = (),
               allow_version_change: bool = False, executor: Executor | None = None) -> dict[str, Any]:
    """Check every input, then run (or find) the replays and judge each case."""
    from oloproof.evaluate.registry import registry

    tool, kind = parse_fault(fault_spec)
    project = load_project(project_dir)
    system = load_system(project)
    check_tool_names(project, None, system)  # the evaluators' tools, as a run checks them: exit 2
    from oloproof.app.audit import require_intact

    require_intact(store, run_id)  # a run that fails its audit is not replayed
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
    known: set[str] = set()
    tools = declared_tools(system.factory)
    for v in iter_case_views(store, run_id):
        known.add(v.case_id)
        if v.trajectory is not None:
            tools.update(v.trajectory.tool_names)
    wanted = list(case_ids)
    for cid in wanted:
        if cid not in known:
            raise UsageError(f"run {run_id!r} has no case {cid!r}{did_you_mean(cid, known)}")
    if tool not in tools:
        raise UsageError(f"--fault {fault_spec!r}: the system never declared or called a tool {tool!r}"
                         f"{did_you_mean(tool, tools)} (tools: {', '.join(sorted(tools)) or 'none'})")
    models = model_calls(system.factory)
    if tool in models:  # as a fault_recovery on it is refused: it would judge every case call_not_made
        raise UsageError(f"--fault {fault_spec!r}: {tool!r} is a model call, and model calls are never faulted; "
                         f"fault one of its tools ({', '.join(sorted(tools - models)) or 'none'})")
    escalate_tools = list(escalate)
    if not escalate_tools:
        for ev in project.suite.evaluators:
            if ev.replay_spec is not None and ev.replay_spec[0] == tool:
                escalate_tools = list(ev.config.escalate_tools)  # type: ignore[attr-defined]
                break
    cls = registry()["fault_recovery"]
    evaluator = cls(cls.config_model.model_validate(
        {"type": "fault_recovery", "tool": tool, "fault": kind, "escalate_tools": escalate_tools}))
    suite = SuiteEvaluation([evaluator], [], [], 1, None)
    spec = FaultSpec(tool, kind)
    cache = ReplayCache(store, system.name, system.version, system.code_digest)
    executor = executor or SerialExecutor()
    system.factory.check_slots(executor.slots_per_process)

    executed = looked_up = 0
    results: dict[str, dict[str, Any]] = {}
    # the rate and its interval as a run computes them: cluster-aware when the run's cases
    # share clusters (a source and its derived cases), exact otherwise
    acc = accumulator(stored, suite, keep_cases=False)

    def judge(view: CaseView, replays: Any) -> None:
        nonlocal looked_up
        result = suite.evaluate(view, replays=replays, pair_source=None)
        acc.add(result)
        verdict, reason = result.verdicts[0]
        entry: dict[str, Any] = {"case_id": view.case_id, "verdict": verdict}
        if reason:
            entry["reason"] = reason
        plan = plan_fault(view, tool) if view.trajectory is not None else None
        pair = replays.get((tool, kind))
        if isinstance(plan, Plan):
            cp = plan.checkpoint
            entry["checkpoint"] = {"step_index": cp.step_index, "id": cp.id}
            entry["faulted_step"] = plan.call_index
        if pair is not None:
            looked_up += (pair.control is not None) + (pair.fault is not None)
            if pair.control is not None:
                if pair.control.error_kind is not None:
                    entry["control"] = {"faithful": False, "first_difference": {
                        "message": f"the control replay raised: {pair.control.error}"}}
                else:
                    f = compare(view, pair.control, pair.plan.checkpoint.step_index)
                    entry["control"] = {"faithful": f.faithful, "first_difference": f.first_difference}
            if pair.fault is not None:
                entry["after_fault"] = after_fault(pair.fault, pair.plan.call_index)
                ledger = replay_ledger(view, pair.fault, pair.plan)
                if ledger:  # attempts and applied effects per operation, in the replay's world
                    entry["effects"] = ledger_counts(ledger)
        results[view.case_id] = entry

    executor.start(system.factory, system.slot)
    order: list[str] = []
    stopped = True
    try:
        job_id = 0
        views = (v for v in iter_case_views(store, run_id) if not wanted or v.case_id in wanted)
        exhausted = False
        # replays that run in this process cannot end it: os._exit errors the replay instead
        with contextlib.nullcontext() if executor.remote else contained_exit():
            while True:
                while not exhausted and executor.outstanding < executor.capacity:
                    view = next(views, None)
                    if view is None:
                        exhausted = True
                        break
                    order.append(view.case_id)
                    missing: list[Needed] = []
                    found: dict[str, list[bytes]] = {}
                    replays = cache.collect(view, [spec], missing=missing, found=found)
                    if not missing:
                        judge(view, replays)
                        continue
                    payloads = [e.payload for e in store.read_stream(f"{run_id}/{view.case_id}")]
                    job_id += 1  # the job runs what is missing, given what is stored
                    executor.submit(Job(job_id, REPLAY_JOB, ReplayArgs(f"{run_id}/{view.case_id}", payloads,
                                                                       [(tool, kind)], found,
                                                                       system.code_digest),
                                        project.config.timeout, view, 2))
                if executor.outstanding == 0 and exhausted:
                    break
                for done in executor.poll(0.25):
                    if done.error is not None:
                        raise RuntimeError(f"a replay job failed: {done.error}") from done.error
                    streams = done.result.streams
                    new = list({x.stream: x for x in streams if store.stream_length(x.stream) == 0}.values())
                    if new:
                        store.commit([StreamAppend(x.stream, 0, x.payloads, x.types) for x in new])
                    executed += len(new)
                    extra = {x.stream[len(PREFIX):]: fold_replay(CODEC.decode_stream(x.stream, x.payloads), x.stream)
                             for x in streams}
                    judge(done.job.tag, cache.collect(done.job.tag, [spec], extra=extra))
        stopped = False
    finally:
        executor.close(cancel=stopped)
        from oloproof.app.runs import refresh_search

        refresh_search(store)  # the replays stored, searchable
    counts = {"passed": 0, "observed": 0, "missing": 0, "excluded": 0}
    cases = [results[cid] for cid in order]
    for entry in cases:
        verdict = entry["verdict"]
        if verdict in ("pass", "fail"):
            counts["observed"] += 1
            counts["passed"] += verdict == "pass"
        else:
            counts[verdict] += 1
    row = acc.summary().criteria[evaluator.criterion]
    interval: dict[str, Any] = {"rate": row.rate, "low": row.low, "high": row.high, "method": row.method}
    if row.clusters is not None:
        interval["clusters"] = row.clusters
    return {
        "run_id": run_id,
        "system": {"name": system.name, "version": system.version, "recorded_version": s.system_version},
        "fault": {"tool": tool, "kind": kind, "escalate_tools": escalate_tools},
        "executed": executed,
        "cached": looked_up - executed,
        "cases": cases,
        "summary": {"criterion": evaluator.criterion, **counts},
        "interval": interval,
    }


"""Which replays a case needs, and where each starts (SPEC §7.1). Pure.

A fault replay starts at the latest checkpoint before the first call of the faulted tool.
Replays are keyed by (system name, system version, case fingerprint, checkpoint, change), so
the same replay is never run twice for one system version. :func:`replay_plan` is the one
description of what a case's fault evaluators need — a control replay per checkpoint, then a
fault replay only when the control reproduced the recording — shared by the run (which runs
what is missing), re-evaluation and the case panel (which only read).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from oloproof.events import CheckpointRecorded, canonical_json
from oloproof.replay.fidelity import compare
from oloproof.views import CaseView, FaultReplays, ReplayView


@dataclass(frozen=True)
class FaultSpec:
    """A fault an evaluator asks to replay: the first call of ``tool`` gets a ``fault`` result."""

    tool: str
    fault: str


@dataclass(frozen=True)
class Plan:
    """Where a fault replay of one tool starts: the latest checkpoint at or before the tool's
    first call, and that call's step index (the call that is faulted, SPEC §7.1)."""

    checkpoint: CheckpointRecorded
    call_index: int  # the step index of the first call of the tool: the one that is faulted

    @property
    def digest(self) -> str:
        """SHA-256 of the checkpoint's step index, id and state: the part of a replay key
        that says where the replay starts."""
        return hashlib.sha256(canonical_json([self.checkpoint.step_index, self.checkpoint.id,
                                              self.checkpoint.state])).hexdigest()


def plan_fault(case: CaseView, tool: str) -> Plan | tuple[str, str]:
    """A :class:`Plan`, or the ``(verdict, reason)`` that says why there is none."""
    t = case.trajectory
    if t is None:
        return ("missing", "no_trajectory_recorded")
    call = next((s for s in t.steps if s.kind == "tool_call" and s.tool_name == tool), None)
    if call is None:
        return ("missing", "truncated") if t.truncated else ("excluded", "call_not_made")
    before = [c for c in t.checkpoints if c.step_index <= call.index]
    if not before:
        return ("missing", "no_checkpoint")
    return Plan(max(before, key=lambda c: c.step_index), call.index)


def change_for(plan: Plan, tool: str, fault: str) -> dict[str, Any]:
    """The change of a fault replay: the faulted call, the kind and what the caller gets. For
    ``timeout_after_effect`` the replay runs the tool live at that call, then hands back
    ``result`` (the timeout shape); for every other kind the tool does not run."""
    from oloproof.replay.faults import fault_result

    return {"step_index": plan.call_index, "tool_name": tool, "fault": fault,
            "result": fault_result(fault, tool)}


def replay_identity(case: CaseView) -> str:
    """What a replay of ``case`` is keyed by besides the system and the plan: its fingerprint,
    and under ``trials: k`` its trial (the agent can tell trials apart: current_case().trial)."""
    trial = case.started.trial if case.started is not None else None
    return case.fingerprint if trial is None else f"{case.fingerprint}/trial/{trial}"


def keyed_version(version: str, code_digest: str) -> str:
    """What replays are keyed by: the system version and, when known, its code's digest."""
    return f"{version}+code:{code_digest}" if code_digest else version


def cache_key(system_name: str, version: str, fingerprint: str, plan: Plan,
              change: dict[str, Any] | None) -> str:
    """The key of one replay (its stream is ``replay/<key>``): SHA-256 over the system name,
    the keyed version (:func:`keyed_version`), the case's identity (:func:`replay_identity`),
    the plan's digest and the change (None: the control). A replay is reused only under the
    same key, so a new version or changed code replays again."""
    change_digest = hashlib.sha256(canonical_json(change)).hexdigest()
    return hashlib.sha256(canonical_json(
        [system_name, version, fingerprint, plan.digest, change_digest])).hexdigest()


def trustworthy(case: CaseView, control: ReplayView, plan: Plan) -> bool:
    """A control replay that ran cleanly and reproduced the recording from the checkpoint."""
    return control.error_kind is None and not control.diverged and \
        compare(case, control, plan.checkpoint.step_index).faithful


@dataclass(frozen=True)
class Needed:
    """A replay :func:`replay_plan` needs and the lookup did not have."""

    key: str
    plan: Plan
    change: dict[str, Any] | None  # None: a control replay


Lookup = Callable[[str], "ReplayView | None"]
PlanSteps = Generator[Needed, "ReplayView | None", dict[tuple[str, str], FaultReplays]]


def replay_plan(case: CaseView, specs: Iterable[FaultSpec], system_name: str, version: str,
                lookup: Lookup) -> PlanSteps:
    """Walk a case's fault replays: yields each :class:`Needed` replay that ``lookup``
    (replay key -> stored replay) lacks and receives it (``None``: it will not run); returns
    the case's replays, (tool, fault) -> :class:`FaultReplays`. See :func:`collect`."""
    out: dict[tuple[str, str], FaultReplays] = {}
    if case.error is not None:
        return out
    for spec in specs:
        plan = plan_fault(case, spec.tool)
        if not isinstance(plan, Plan):
            continue
        identity = replay_identity(case)
        key = cache_key(system_name, version, identity, plan, None)
        control = lookup(key)
        if control is None:
            control = yield Needed(key, plan, None)
        fault = None
        # an untrustworthy control replay never yields a verdict: no fault replay after it
        if control is not None and trustworthy(case, control, plan):
            change = change_for(plan, spec.tool, spec.fault)
            key = cache_key(system_name, version, identity, plan, change)
            fault = lookup(key)
            if fault is None:
                fault = yield Needed(key, plan, change)
        out[(spec.tool, spec.fault)] = FaultReplays(plan, control, fault)
    return out


def collect(case: CaseView, specs: Iterable[FaultSpec], system_name: str, version: str,
            lookup: Lookup, missing: list[Needed] | None = None) -> dict[tuple[str, str], FaultReplays]:
    """The case's replays as far as ``lookup`` has them (nothing runs). ``missing``, when
    given, receives what is lacking."""
    steps = replay_plan(case, specs, system_name, version, lookup)
    try:
        needed = next(steps)
        while True:
            if missing is not None:
                missing.append(needed)
            needed = steps.send(None)
    except StopIteration as stop:
        return stop.value

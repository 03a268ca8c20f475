"""``oloproof attribute RUN CASE``: where a stored failing case first went wrong (SPEC §14).

The case is judged under its run's own rules (from the events), the deterministic rules of
:mod:`oloproof.evaluate.attribution` run over its steps, and the record is stored as an
``attribution.v1`` event (stream ``attribution/<run_id>/<case_id>``, the latest wins) — a
reading of the record for a person and for ``prefix create``, never a verdict the gate reads.

**Model judge seam.** ``attribution: {judge: module:function}`` in ``oloproof.yaml`` names a
callable ``(case_view, failed_criteria) -> dict | None`` that is asked only when no rule
decides; what it says is marked ``source: judge``, low confidence, needs review.

**Recoverability by bisection** (``--bisect --control NAME``): the case is replayed from its
checkpoints with a control system (``prefix.controls: {NAME: module:attribute}``, or
``module:attribute`` itself): calls before the checkpoint are answered from the recorded tape,
the control acts live after it, and the replay is judged under the run's rules. A binary
search over the checkpoints finds the last one from which the control still finishes
correctly — the boundary is not set too late when that is at or after the first unacceptable
step. Each probe is a replay stored in the log (``replay/<key>``, kind ``probe``), keyed by
the control's name, version and code, the case and the checkpoint: a second bisection reuses
it. A probe whose replay leaves the tape before its checkpoint (the control would not have
made the same earlier calls) proves nothing and counts as not recoverable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from oloproof.app.project import Project, load_project, suite_from_stored
from oloproof.config.locate import validate_model
from oloproof.errors import ConfigError, CorruptLogError, UsageError
from oloproof.evaluate.attribution import Attribution, AttributionSettings, attribute, from_bisection, symptoms_of
from oloproof.events import AttributionRecorded, ReplayStarted, canonical_json
from oloproof.store.base import EventStore, StreamAppend
from oloproof.store.log import EventLog
from oloproof.views import NO_REPLAYS, CaseView, ReplayView, fold_replay

STREAM = "attribution/"


def attribution_settings(project: Project) -> AttributionSettings:
    """The project's ``attribution:`` settings, validated (errors located in
    ``oloproof.yaml``); the ``judge`` key is left to :func:`load_judge`."""
    raw = dict(project.config.attribution or {})
    raw.pop("judge", None)
    return validate_model(AttributionSettings, raw, project.locator.where, prefix=("attribution",))


def load_judge(project: Project) -> Callable[..., Any] | None:
    """The model judge ``attribution.judge: module:function`` names, imported from the
    project; None when none is configured.

    Raises:
        ConfigError: the spec is not ``module:function``, or what it names is not callable.
    """
    spec = (project.config.attribution or {}).get("judge")
    if spec is None:
        return None
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigError(f"{project.locator.where(('attribution', 'judge'))}: attribution.judge: must be "
                          f"module:function, got {spec!r}")
    from oloproof.app.project import _import

    judge = _import(project, spec, "judge", "attribution")
    if not callable(judge):
        raise ConfigError(f"{project.locator.where(('attribution', 'judge'))}: attribution.judge {spec!r} "
                          "is not callable")
    return judge


@dataclass
class AttributionResult:
    """What :func:`attribute_case` stored and returns: the attribution ``record`` (with its
    ``recoverability`` when bisected), the case's verdicts under the run's own rules
    (criterion -> verdict) and the bisection's probes."""

    run_id: str
    case_id: str
    record: dict[str, Any]
    verdicts: dict[str, tuple[str, str | None]]
    probes: list[dict[str, Any]] = field(default_factory=list)


def state_criteria(suite: Any) -> set[str]:
    """The criteria of ``suite`` judged by a state evaluator: their failed paths are state
    paths, which the attribution's trace locates at the step that wrote them."""
    from oloproof.evaluate.state import StateEvaluator

    return {e.criterion for e in suite.evaluators if isinstance(e, StateEvaluator)}


def latest_attribution(store: EventStore, run_id: str, case_id: str) -> dict[str, Any] | None:
    """The latest stored attribution of a case, or None. Its stream's chain is checked first:
    a record altered in the log is refused (CorruptLogError), never used."""
    stream = f"{STREAM}{run_id}/{case_id}"
    if store.head(stream) is None:
        return None
    report = store.verify(streams=[stream])
    if report.problems:
        p = report.problems[0]
        raise CorruptLogError(f"{p.stream} #{p.seq}: {p.problem} (the attribution was altered in the log; "
                              "'oloproof audit verify' names what else is)")
    event = EventLog(store).last_of(stream, AttributionRecorded, "an attribution")
    return None if event is None else event.attribution


def attribute_case(store: EventStore, project: Project, run_ref: str, case_id: str, *,
                   control: str | None = None, clock: Callable[[], str] | None = None,
                   timeout: float | None = None) -> AttributionResult:
    """Attribute stored case ``case_id`` of ``run_ref`` (with ``control``: and bisect its
    recoverability), store the record, return it."""
    from oloproof.app.audit import require_intact
    from oloproof.app.evidence import RunEvidence
    from oloproof.app.runs import case_view, load_run, resolve_run, utc_now

    clock = clock or utc_now
    run_id = resolve_run(store, run_ref)
    require_intact(store, run_id)
    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    evidence = RunEvidence(store, run, suite, sealed_only=True)
    view = evidence.with_evidence(case_view(store, run_id, case_id))
    result = suite.evaluate(view, replays=view.replays, pair_source=view.pair_source)
    verdicts = dict(zip(suite.criteria, result.verdicts))
    failed = [c for c, (v, _) in verdicts.items() if v == "fail"]
    settings = attribution_settings(project)
    symptoms = symptoms_of(failed, result.paths, state_criteria(suite))
    attribution = attribute(view, failed, settings, load_judge(project), symptoms)
    probes: list[dict[str, Any]] = []
    if control is not None:
        recoverability, probes = bisect(store, project, run, suite, view, control, attribution, timeout=timeout)
        n_steps = len(view.trajectory.steps) if view.trajectory is not None else 0
        # a silent failure nothing named: the bisection's last recoverable prefix is its boundary
        attribution = from_bisection(attribution, recoverability, probes, n_steps)
        attribution = msgspec.structs.replace(attribution, recoverability=recoverability)
    record = msgspec.to_builtins(attribution)
    EventLog(store).append_at_end(f"{STREAM}{run_id}/{view.case_id}",
                                  AttributionRecorded(run_id, view.case_id, record, clock()))
    return AttributionResult(run_id, view.case_id, record, verdicts, probes)


# ---- bisection ---------------------------------------------------------------------------

def load_control(project: Project, name: str) -> Any:
    """The control system ``name``: ``prefix.controls[name]`` or ``module:attribute``; a
    :class:`~oloproof.system.SystemSlot` of its own."""
    import dataclasses

    from oloproof.app.project import _import, code_digest, system_surface
    from oloproof.system import SystemFactory, system_info

    controls = (project.config.prefix.controls if project.config.prefix else {}) or {}
    spec = controls.get(name)
    if spec is None:
        if ":" not in name:
            known = ", ".join(sorted(controls)) or "none configured"
            raise UsageError(f"--control {name!r}: no control of that name (prefix.controls: {known}); name one "
                             "under prefix.controls in oloproof.yaml, or give module:attribute")
        spec = name
    if name in controls:
        obj = _import(project, spec, name, "prefix.controls")
    else:
        try:
            obj = _import(project, spec, "control", "attribute")
        except ConfigError as e:
            reason = str(e).split(f"{spec!r}: ", 1)[-1]
            raise UsageError(f"--control {spec!r}: {reason}") from e
    info = system_info(obj)
    cfg = project.config.system
    factory = SystemFactory(info.name if info else cfg.name, info.version if info else name,
                            info.records if info else cfg.records, obj, spec, root=str(project.root))
    factory = dataclasses.replace(factory, surface=system_surface(factory))
    try:
        slot = factory.make_slot()
    except ConfigError as e:
        raise UsageError(f"--control {name!r}: {str(e).split(': ', 1)[-1]}") from e
    return slot, code_digest(project.root, obj)


def _probe_key(slot: Any, code: str, view: CaseView, checkpoint: Any, attempt: int = 0) -> str:
    """A probe's replay key: the control itself (its ``module:attribute``, name, version and
    the project's code), the case and the checkpoint — and the attempt, for a probe whose
    earlier replay errored (it is run again, never reused)."""
    from oloproof.replay.plan import Plan, replay_identity

    plan = Plan(checkpoint, checkpoint.step_index)
    return hashlib.sha256(canonical_json(["probe", slot.factory.label, slot.name, slot.version, code,
                                          replay_identity(view), plan.digest, attempt])).hexdigest()


def _probe(store: EventStore, slot: Any, code: str, view: CaseView, checkpoint: Any,
           timeout: float | None) -> ReplayView:
    """The control's replay from ``checkpoint``: stored, or run and stored now."""
    from oloproof.recorder.record import contained_exit
    from oloproof.replay.engine import PREFIX, run_replay
    from oloproof.replay.plan import Plan

    log = EventLog(store)
    for attempt in range(1000):
        key = _probe_key(slot, code, view, checkpoint, attempt)
        stream = PREFIX + key
        events = log.read(stream)
        if not events:
            break
        replay = fold_replay(events, stream)
        if replay.error_kind is None:
            return replay  # a probe that ran through is reused; one that errored is run again
    plan = Plan(checkpoint, checkpoint.step_index)
    with contained_exit():
        payloads, types = run_replay(slot, view, plan, None, timeout)
    if view.started is None:  # a view folded from a case stream always has it
        raise ValueError(f"case {view.case_id!r}: no case_started, so no case stream to name")
    started = ReplayStarted(cache_key=key, kind="probe", case_id=view.case_id,
                            case_stream=f"{view.started.run_id}/{view.case_id}",
                            fingerprint=view.fingerprint, system_name=slot.name, system_version=slot.version,
                            checkpoint_step=checkpoint.step_index, checkpoint_id=checkpoint.id,
                            checkpoint_digest=plan.digest, method="replayable" if slot.replayable else "tape",
                            code_digest=code)
    head, head_type = log.codec.pack([started])
    payloads, types = [*head, *payloads], [*head_type, *types]
    log.commit([StreamAppend(stream, 0, payloads, types)])
    return fold_replay(log.unpack(stream, payloads), stream)


def _finishes_correctly(suite: Any, view: CaseView, replay: ReplayView) -> tuple[bool, str]:
    if replay.diverged:
        return False, f"diverged: {replay.diverged}"
    if replay.error is not None:
        return False, f"{replay.error_kind}: {replay.error}"
    replayed = msgspec.structs.replace(view, output=replay.output, error=None, error_kind=None,
                                       trajectory=replay.trajectory, state=replay.state, replays=NO_REPLAYS)
    result = suite.evaluate(replayed, replays=NO_REPLAYS, pair_source=None)
    verdicts = dict(zip(suite.criteria, result.verdicts))
    failed = [c for c, (v, _) in verdicts.items() if v == "fail"]
    passed = [c for c, (v, _) in verdicts.items() if v == "pass"]
    if failed:
        return False, "fails " + ", ".join(failed)
    if not passed:
        return False, "no criterion could be judged"
    return True, "passes " + ", ".join(passed)


def _boundary_checkpoint(view: CaseView, attribution: Attribution) -> Any:
    """A resume point at the prefix boundary of the first unacceptable step (its state read
    from the record), so that bisection probes the boundary itself; None when unknown."""
    from oloproof.app.boundary import default_boundary, state_at
    from oloproof.events import CheckpointRecorded
    from oloproof.views import NO_STATE

    step = attribution.first_unacceptable_step
    t = view.trajectory
    if step is None or t is None or not 1 <= step <= len(t.steps):
        return None
    before = default_boundary(view, step)
    state = state_at(view, before)
    if state is NO_STATE:
        return None
    return CheckpointRecorded(before, state, f"boundary-{before}")


def bisect(store: EventStore, project: Project, run: Any, suite: Any, view: CaseView, control: str,
           attribution: Attribution, timeout: float | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Binary search over the case's checkpoints for the last one from which the control
    finishes correctly (see the module docstring). Returns the recoverability record and
    the probes, in the order they were made."""
    t = view.trajectory
    by_step = {c.step_index: c for c in (t.checkpoints if t else ())}
    boundary = _boundary_checkpoint(view, attribution)
    if boundary is not None:
        by_step.setdefault(boundary.step_index, boundary)
    checkpoints = sorted(by_step.values(), key=lambda c: c.step_index)
    slot, code = load_control(project, control)
    out: dict[str, Any] = {"status": "unknown", "control": f"{slot.name} {slot.version}", "method": "bisection"}
    if not checkpoints:
        out["reason"] = "the case recorded no checkpoints (a Stateful @tool system records one before each call)"
        return out, []
    probes: list[dict[str, Any]] = []
    seen: dict[int, bool] = {}

    def ok(i: int) -> bool:
        if i not in seen:
            cp = checkpoints[i]
            replay = _probe(store, slot, code, view, cp, timeout)
            good, why = _finishes_correctly(suite, view, replay)
            seen[i] = good
            probes.append({"before_step": cp.step_index, "recovers": good, "why": why,
                           "errored": replay.error_kind is not None, "replay": replay.started.cache_key})
        return seen[i]

    lo, hi = 0, len(checkpoints) - 1  # invariant: every checkpoint past the answer fails
    last = None
    if ok(lo):
        last = lo
        lo += 1
        while lo <= hi:
            mid = (lo + hi) // 2
            if ok(mid):
                last, lo = mid, mid + 1
            else:
                hi = mid - 1
    if last is None and all(p["errored"] for p in probes):
        out.update(status="unknown", reason="the control errored in every probe (" + probes[0]["why"][:200]
                   + "): it says nothing about the case")
    elif last is None:
        out.update(status="unrecoverable", reason="the control does not finish correctly even from the first "
                   f"checkpoint (before step {checkpoints[0].step_index})")
    else:
        step = checkpoints[last].step_index
        first = attribution.first_unacceptable_step
        out.update(status="recoverable", last_recoverable_prefix=step,
                   reason=f"the control finishes correctly from before step {step}"
                   + (f"; the first unacceptable step is {first}" if first else ""))
        if first is not None:
            out["boundary_not_too_late"] = step >= first
    out["probes"] = len(probes)
    return out, probes


def attribute_in(project_dir: str, store: EventStore, run: str, case: str, *, control: str | None) -> AttributionResult:
    """The CLI's entry: load the project, attribute, store."""
    project = load_project(project_dir)
    return attribute_case(store, project, run, case, control=control, timeout=project.config.timeout)

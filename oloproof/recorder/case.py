"""The recorder of the case in progress: what ``current_case()`` returns and ``@tool`` writes to.

A recorder buffers a case's steps, constraints and checkpoints in memory; they are turned into
events and committed in one transaction when the case ends. The hand-built path
(:meth:`CaseRecorder.agent_trajectory`) and the ``@tool`` path produce the same events: both
fill the same buffers, and events are emitted in one canonical order (steps, constraints,
checkpoints, trajectory end) whatever order the calls came in. A sync and an ``async def``
agent making the same calls record byte-identical events.

**Step order when a case runs concurrent tasks.** A case that never creates an ``asyncio``
task records its steps in the order they happen; a call's result step follows its call step
(after any tool calls made inside the tool). Once the agent creates tasks (``asyncio.gather``,
``create_task``, a ``TaskGroup``) in an event loop Oloproof runs, the order no longer depends
on timing: every task is a *branch* of the case's task tree, numbered when it is created, and
steps are ordered depth-first — a task's steps come, all of them, at the point where the task
was created, sibling tasks in creation order. So ``await asyncio.gather(a(), b())`` records
all of ``a``'s steps, then all of ``b``'s, whichever finished first. Each such step stores its
place in the tree (``branch``), which is how the replay tape answers the calls of concurrent
tasks. Tasks created *inside* a tool call (by an HTTP client, say) belong to that call.
Automatic checkpoints are taken only while no other task of the agent runs — before each call
of a lone task, and just before the agent starts concurrent tasks — since a snapshot taken
while another task changes the sandbox would depend on timing. Steps
are numbered when the case ends; the index a helper returns before then (``message()``,
``checkpoint()``) is the step's position in the order steps were made, and ``constraint(...,
step_index=)`` accepts exactly that value.
"""

from __future__ import annotations

import contextvars
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import msgspec

from oloproof.errors import RecordError
from oloproof.events import (
    CheckpointRecorded,
    ConstraintRecorded,
    EffectRecorded,
    Event,
    EvidenceKind,
    EvidenceRecorded,
    FaultKind,
    StepKind,
    StepRecorded,
    TerminalStatus,
    TrajectoryRecorded,
    UsageRecorded,
)
from oloproof.records import (
    STEP_KINDS,
    TERMINAL_STATUSES,
    AgentTrajectory,
    Case,
    UnfitValue,
    encode_recorded,
    validate_effect,
    validate_evidence,
    validate_trajectory,
)
from oloproof.system import _AGENT, _BRANCH, _CURRENT, RUNS_THE_TOOL, ToolCodec, current_case, fault_result

_INF = float("inf")

if TYPE_CHECKING:
    import asyncio

__all__ = ["ROUTED", "Branch", "CaseRecorder", "current_case", "install_task_factory"]

#: the state key a framework integration's routed call sets on its case
#: (:func:`oloproof.integrations.route`): the OpenTelemetry span processor (oloproof.otel),
#: registered too, leaves such a case to the integration rather than record its calls twice
ROUTED = "oloproof.integrations.routed"

_Raw = msgspec.Raw
_replace = msgspec.structs.replace


def _frozen(value: Any) -> Any:
    """Encode now, so a later mutation by the agent cannot rewrite what was recorded."""
    try:
        return _Raw(encode_recorded(value))
    except UnfitValue as e:
        return e  # NaN, too deep, self-referencing: reported, naming the step, when the case is encoded
    except (TypeError, ValueError, OverflowError):
        return value  # reported, naming the step, when the case's events are encoded


def encode_checked(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """Evidence fields as they will be stored: NaN, self-references and excess depth are
    refused now, naming the field (the values must survive the log)."""
    try:
        encode_recorded(data, kind)
    except UnfitValue as e:
        raise ValueError(str(e)) from None
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"{kind}: a value cannot be stored as JSON ({e})") from None
    return data


#: an exception's message longer than this is kept by its head and tail (a 5 MB message would
#: be stored, printed and indexed whole)
MAX_MESSAGE = 10_000


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, never raising (an exception whose ``__str__`` raises is still recorded),
    at most :data:`MAX_MESSAGE` characters."""
    try:
        text = str(exc)
    except Exception as e:  # noqa: BLE001 - the message of a broken exception is not ours to lose
        try:
            text = f"<str() of the exception raised {type(e).__name__}>"
        except Exception:  # noqa: BLE001
            text = "<str() of the exception raised>"
    return keep_ends(text, MAX_MESSAGE, " ")


def keep_ends(text: str, limit: int, gap: str) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and tail around a note of
    what was left out (``gap``: what surrounds the note — a space, a newline)."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}{gap}… ({len(text) - 2 * half:,} characters left out) …{gap}{text[-half:]}"


def _error_result(exc: BaseException) -> dict[str, Any]:
    return {"error": {"type": type(exc).__name__, "message": exception_text(exc)}}


class Branch:
    """One task of a case's task tree: its path (the ticks of the tasks it descends from) and
    the next tick it hands out, to a step entry or to a task it creates. ``in_call``: the
    branch of a tool call in progress (what the tool itself does)."""

    __slots__ = ("path", "n", "last", "in_call")

    def __init__(self, path: tuple[int, ...], n: int = 0, in_call: bool = False):
        self.path = path
        self.n = n
        self.last = 0  # provisional index of this branch's latest step
        self.in_call = in_call

    def tick(self) -> tuple[int, ...]:
        """Hand out this branch's next place in the task tree (its path plus the next tick);
        steps are ordered, and a replay's concurrent calls matched, by these places."""
        t = self.n
        self.n = t + 1
        return self.path + (t,)


class CaseRecorder:
    """Collects what one case records. Obtain it with :func:`current_case`."""

    __slots__ = ("case", "_steps", "_keys", "_entries", "_root", "_depth", "_active", "_tasks", "_constraints",
                 "_checkpoints", "_status", "_truncated", "_step_limit", "_hand_built",
                 "_snapshot", "_touched", "_auto_checkpoints", "_evidence",
                 "_fault", "_fault_calls", "_trial", "_usage", "_extras", "_in_control")

    def __init__(self, case: Case, snapshot: Callable[[], Any] | None = None,
                 auto_checkpoints: bool = False, fault: dict[str, Any] | None = None,
                 fault_calls: int = 0, trial: int | None = None):
        self.case = case
        self._trial = trial
        self._steps: list[StepRecorded] = []
        # keyed mode (the case created tasks): a sort key and an entry key per step
        self._keys: list[tuple] | None = None
        self._entries: list[tuple] | None = None
        self._root: Branch | None = None
        self._depth = 0  # calls in progress (linear mode: one agent task)
        self._active = 0  # the agent's tasks still running (keyed mode)
        self._tasks: list[Any] = []  # every task created inside the case
        self._constraints: list[tuple[str, bool, int]] = []  # (name, passed, provisional index)
        # linear mode: (step_index, state, id); keyed mode: (sort key, state, id)
        self._checkpoints: list[tuple[Any, Any, str | None]] = []
        self._status: TerminalStatus = "unknown"
        self._truncated = False
        self._step_limit: int | None = None
        self._hand_built = False
        self._touched = False
        self._snapshot = snapshot
        # a Stateful @tool system gets a checkpoint (with the sandbox's snapshot) before
        # every decorated call: the resume points of the built-in replay
        self._auto_checkpoints = auto_checkpoints and snapshot is not None
        #: effect_ledger/v1 and release_evidence/v1 events, in the order they were recorded
        self._evidence: list[Event] = []
        #: model usage the agent reported (usage.v1)
        self._usage: list[Event] = []
        #: state an integration keeps for this case only (oloproof.otel's agent stack): it
        #: lives and dies with the case, never carried into the next
        self._extras: dict[str, Any] = {}
        #: the agent in control as a framework integration said last (:meth:`take_control`):
        #: what a step names when no agent is given and none is set for the task (``_AGENT``)
        self._in_control: str | None = None
        #: the case's declared fault ``{"tool", "kind", "call"[, "scope"]}`` (SPEC §13a), applied
        #: to that call of that tool; the calls of the tool so far (a replay starts with those
        #: its tape answered). The system never sees it: it is not part of ``case``.
        self._fault = fault
        self._fault_calls = fault_calls

    # ---- what the system sees ----------------------------------------------------------

    @property
    def id(self) -> str:
        """The case's id (without a trial suffix: the trial is :attr:`trial`)."""
        return self.case.id

    @property
    def trial(self) -> int | None:
        """Which trial of the case this is (1…k under ``trials: k``); None for a single trial
        (and in a replay)."""
        return self._trial

    @property
    def input(self) -> Any:
        """The case's ``input``, as the system was called with it."""
        return self.case.input

    def agent_trajectory(self, trajectory: AgentTrajectory) -> None:
        """Record a hand-built ``agent_trajectory/v1``; validated now (SPEC §2.2)."""
        if self._hand_built:
            raise RecordError(f"case {self.id!r}: agent_trajectory() was already recorded for this case")
        if self._touched:
            raise RecordError(
                f"case {self.id!r}: agent_trajectory() after steps were recorded with @tool or "
                "current_case() helpers; use one way of recording per case"
            )
        validate_trajectory(trajectory, self.id)
        self._keys = self._entries = self._root = None  # a hand-built record is linear
        self._steps = [
            StepRecorded(s.index, cast(StepKind, s.kind), s.tool_name, s.arguments, s.result, s.agent, s.to_agent)
            for s in trajectory.steps  # validate_trajectory checked every kind
        ]
        self._constraints = [(c.name, c.passed, c.step_index) for c in trajectory.constraints]
        self._checkpoints = [(c.step_index, c.state, c.id) for c in trajectory.checkpoints]
        self._status = cast(TerminalStatus, trajectory.terminal_status)  # validated above
        self._truncated = trajectory.truncated
        self._step_limit = trajectory.step_limit
        self._hand_built = True

    def _guard(self) -> None:
        if self._hand_built:
            raise RecordError(
                f"case {self.id!r}: a hand-built trajectory was already recorded; "
                "use one way of recording per case"
            )
        self._touched = True

    def _step(self, kind: StepKind, *, tool_name: str | None = None, arguments: Any = None,
              result: Any = None, agent: str | None = None, to_agent: str | None = None) -> int:
        self._guard()
        if agent is None:
            agent = self._agent()
        if self._keys is not None:
            entry = self._branch().tick()
            return self._add(entry, entry, StepRecorded(0, kind, tool_name, _frozen(arguments),
                                                        _frozen(result), agent, to_agent))
        index = len(self._steps) + 1
        self._steps.append(
            StepRecorded(index, kind, tool_name, _frozen(arguments), _frozen(result), agent, to_agent)
        )
        return index

    def step(self, kind: str, *, tool_name: str | None = None, arguments: Any = None, result: Any = None,
             agent: str | None = None, to_agent: str | None = None, raised: bool = False) -> int:
        """Append one step of any kind (the low-level way: what the OpenTelemetry span
        processor records); ``raised`` marks a tool result that is an error. Returns its index."""
        if kind not in STEP_KINDS:
            raise RecordError(f"case {self.id!r}: step(): unknown kind {kind!r} "
                              f"(one of {', '.join(sorted(STEP_KINDS))})")
        index = self._step(cast(StepKind, kind), tool_name=tool_name, arguments=arguments, result=result,
                           agent=agent, to_agent=to_agent)
        if raised:
            self._steps[-1] = _replace(self._steps[-1], raised=True)
        return index

    def message(self, text: str, *, agent: str | None = None) -> int:
        """Append a ``message`` step; returns its index."""
        return self._step("message", arguments={"text": text}, agent=agent)

    def final(self, text: Any, *, agent: str | None = None, claims: dict[str, Any] | None = None) -> int:
        """Append a ``final`` step (the agent's answer); returns its index. ``claims``: the
        answer's factual claims as ``{name: value}`` (``{"refunded_total": 40.0}``), checked one
        by one against the tool results by ``claims_supported``; the step's result is then
        ``{"text": text, "claims": claims}``."""
        if claims is None:
            return self._step("final", result=text, agent=agent)
        if not isinstance(claims, dict) or not all(isinstance(k, str) for k in claims):
            raise RecordError(f"case {self.id!r}: final(claims=...) must be a mapping of claim names to values, "
                              f"got {type(claims).__name__}")
        return self._step("final", result={"text": text, "claims": claims}, agent=agent)

    def _agent(self) -> str | None:
        """The agent a step names when none is given: the one set for this task by an
        integration (``_AGENT``), else the one in control (:meth:`take_control`)."""
        return _AGENT.get() or self._in_control

    def take_control(self, agent: str) -> None:
        """``agent`` has control from now on (what a framework integration says when one of
        its agents acts): when another agent had it, a ``handoff`` step from that agent is
        recorded, once, at the moment control passes."""
        previous, self._in_control = self._in_control, agent
        if previous is not None and previous != agent:
            self.handoff(agent, agent=previous)

    def handoff(self, to_agent: str, *, agent: str | None = None) -> int:
        """Append a ``handoff`` step passing control to ``to_agent``."""
        if not to_agent:
            raise RecordError(f"case {self.id!r}: handoff() needs a to_agent")
        return self._step("handoff", agent=agent, to_agent=to_agent)

    def constraint(self, name: str, passed: bool, *, step_index: int | None = None) -> None:
        """Record an environment check about a step (default: the latest step of the task
        that records it)."""
        self._guard()
        if step_index is None:
            index = self._branch().last if self._keys is not None else len(self._steps)
        else:
            index = step_index
        if not 1 <= index <= len(self._steps):
            raise RecordError(
                f"case {self.id!r}: constraint {name!r} points at step {index}, which does not exist "
                f"(the trajectory has {len(self._steps)} steps)"
            )
        self._constraints.append((name, bool(passed), index))

    def checkpoint(self, *, id: str | None = None, state: Any = None) -> int:
        """Mark a resume point before the next step (with the sandbox's snapshot if Stateful)."""
        self._guard()
        if state is None and self._snapshot is not None:
            state = self._snapshot()
        if self._keys is not None:
            branch = self._branch()
            self._checkpoints.append((branch.path + (branch.n,), _frozen(state), id))
        else:
            self._checkpoints.append((len(self._steps) + 1, _frozen(state), id))
        return len(self._steps) + 1

    def finish(self, status: str, *, truncated: bool = False, step_limit: int | None = None) -> None:
        """Set the trajectory's terminal status (and whether the agent hit its step limit)."""
        self._guard()
        if status not in TERMINAL_STATUSES:
            raise RecordError(f"case {self.id!r}: finish(): status {status!r} is not one of "
                              "success, failure, unknown")
        self._status = cast(TerminalStatus, status)
        self._truncated = bool(truncated)
        self._step_limit = step_limit

    # ---- release evidence (effect_ledger/v1, release_evidence/v1) ------------------------
    # What the environment says, recorded by the sandbox or the harness's adapters — kept
    # apart from the transcript and judged apart (oloproof.evaluate.release).

    def _evidence_event(self, make: Callable[[], Event]) -> None:
        try:
            event = make()
        except (ValueError, KeyError) as e:
            raise RecordError(f"case {self.id!r}: {e}") from None
        self._evidence.append(event)

    def effect(self, operation: str, *, idempotency_key: str, applied: bool) -> None:
        """One attempt at an external effect (``effect_ledger/v1``): its operation, its
        idempotency key, and whether it changed the world (``applied``)."""
        def make() -> Event:
            op, key, done = validate_effect(operation, idempotency_key, applied)
            return EffectRecorded(op, key, done, len(self._steps))
        self._evidence_event(make)

    def _record(self, kind: EvidenceKind, **fields: Any) -> None:
        def make() -> Event:
            return EvidenceRecorded(kind, encode_checked(validate_evidence(kind, **fields), kind), len(self._steps))
        self._evidence_event(make)

    def access(self, tool: str, *, allowed: bool, required_scope: str | None = None) -> None:
        """Whether a tool's credentials allowed the call (``release_evidence/v1``)."""
        self._record("access", tool=tool, allowed=allowed, required_scope=required_scope)

    def wait(self, *, owner: str | None, deadline: str | None, resume_token: str | None) -> None:
        """The agent paused for someone: a legitimate wait names its owner, a deadline (an
        ISO-8601 instant) and a resume token; any of them missing is an unrouted wait."""
        self._record("wait", owner=owner, deadline=deadline, resume_token=resume_token)

    def continuity(self, *, expected: Any, observed: Any) -> None:
        """A decision that must survive a restart: the receipt expected, and the one observed."""
        self._record("continuity", expected=expected, observed=observed)

    def deadline(self, *, at: str, finished_at: str | None) -> None:
        """The absolute deadline and when the work finished (ISO-8601 instants, from the
        clock the harness passes in; ``finished_at`` None: not finished)."""
        self._record("deadline", at=at, finished_at=finished_at)

    def deliverable(self, name: str, *, exists: bool, contract_ok: bool | None = None) -> None:
        """The user-visible deliverable: whether it exists and meets its deterministic
        contract (``contract_ok`` None: not checked)."""
        self._record("deliverable", name=name, exists=exists, contract_ok=contract_ok)

    def evidence_events(self) -> list[Event]:
        """The ``release_evidence/v1`` events recorded so far, in order (a copy)."""
        return list(self._evidence)

    # ---- model usage -------------------------------------------------------------------

    def usage(self, *, input_tokens: int = 0, output_tokens: int = 0, cost: float = 0.0,
              latency_ms: float | None = None, model: str | None = None) -> None:
        """Report one model call's usage: tokens, cost (in your currency) and the latency your
        model client measured (ms). Summed per case by the metric sources ``tokens``,
        ``cost`` and ``latency_ms``."""
        if (type(input_tokens) is int and type(output_tokens) is int and input_tokens >= 0 and output_tokens >= 0
                and type(cost) is float and 0.0 <= cost < _INF and latency_ms is None
                and (model is None or type(model) is str)):  # the common case (an integration's report), checked
            self._usage.append(UsageRecorded(input_tokens, output_tokens, cost, None, model, len(self._steps)))
            return
        import math

        for name, count in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if type(count) is not int or count < 0:
                raise RecordError(f"case {self.id!r}: usage({name}=...) must be a whole number >= 0, got {count!r}")
        for name, value in (("cost", cost), ("latency_ms", latency_ms)):
            if value is None and name == "latency_ms":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise RecordError(f"case {self.id!r}: usage({name}=...) must be a finite number >= 0, got {value!r}")
        if model is not None and not isinstance(model, str):
            raise RecordError(f"case {self.id!r}: usage(model=...) must be text, got {type(model).__name__}")
        self._usage.append(UsageRecorded(input_tokens, output_tokens, float(cost),
                                         None if latency_ms is None else float(latency_ms), model, len(self._steps)))

    def usage_events(self) -> list[Event]:
        """The :class:`~oloproof.events.UsageRecorded` events reported so far, in order (a copy)."""
        return list(self._usage)

    def has_extra(self, key: str) -> bool:
        """Whether an integration set its state ``key`` for this case (:meth:`extra`)."""
        return key in self._extras

    def extra(self, key: str, make: Callable[[], Any]) -> Any:
        """This case's state for an integration (``make()`` on first use)."""
        value = self._extras.get(key)
        if value is None:
            value = self._extras[key] = make()
        return value

    # ---- the task tree (keyed mode) ----------------------------------------------------

    def _branch(self) -> Branch:
        branch = _BRANCH.get() or self._root
        if branch is None:
            raise RuntimeError(f"case {self.id!r}: no task tree (the record is not keyed)")
        return branch

    def _tree(self) -> tuple[list[tuple], list[tuple]]:
        """Keyed mode's sort key and entry key of every step."""
        if self._keys is None or self._entries is None:
            raise RuntimeError(f"case {self.id!r}: no task tree (the record is not keyed)")
        return self._keys, self._entries

    def _add(self, key: tuple, entry: tuple, step: StepRecorded) -> int:
        keys, entries = self._tree()
        self._steps.append(step)
        keys.append(key)
        entries.append(entry)
        index = len(self._steps)
        self._branch().last = index
        return index

    def fork(self) -> Branch | None:
        """A task is being created in the current context: its branch (or None when the task
        belongs to a tool call in progress, or the record is hand-built)."""
        if self._hand_built:
            return None
        if self._keys is None:
            if self._depth:  # created by a tool, inside its call: part of that call
                return None
            # the first task of the case: steps so far become root entries 0..n-1
            n = len(self._steps)
            self._keys = [(i,) for i in range(n)]
            self._entries = list(self._keys)
            self._root = Branch((), n)
            self._root.last = n
            self._checkpoints = [((index - 1,), state, cid) for index, state, cid in self._checkpoints]
        parent = self._branch()
        if parent is self._root and self._quiet() and self._snapshot is not None:  # auto checkpoints imply a snapshot
            # nothing else of the agent runs: the sandbox is a clean resume point before the
            # task, and a replay from here re-runs the concurrent part live
            self._checkpoints.append((parent.path + (parent.n,), _frozen(self._snapshot()), None))
        return Branch(parent.tick(), in_call=parent.in_call)

    def _quiet(self) -> bool:
        """An automatic checkpoint may be taken: no other task of the agent is running (a
        snapshot taken while one runs would depend on timing)."""
        return self._auto_checkpoints and self._active == 0 and _BRANCH.get() is None

    def tasks(self) -> list[Any]:
        """The asyncio tasks created inside the case (those still running when it ends are
        cancelled)."""
        return self._tasks

    def task_started(self, branch: Branch | None, task: asyncio.Task) -> None:
        """Keep ``task`` (cancelled if still running when the case ends); a task of the agent
        itself (not of a tool call in progress) counts as active until it is done, so no
        automatic checkpoint is taken meanwhile."""
        self._tasks.append(task)
        if branch is not None and not branch.in_call:
            self._active += 1
            task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._active -= 1

    # ---- what @tool calls ---------------------------------------------------------------
    # A call is recorded in three moves shared by sync and async calls, and by the linear and
    # the keyed (concurrent tasks) modes: _begin (the call step, the checkpoint before it),
    # the call itself, _end (the result step; a model call's one decision step).

    def call_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                  kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        """Run one decorated call: a ``tool_call`` and a ``tool_result`` step (a model call,
        ``kind="model"``, is one ``decision`` step with its arguments and result). ``arguments``
        are recorded as given (already encoded); ``codec`` encodes the result as recorded."""
        if self._keys is None and self._fault is None and kind != "model" and not self._hand_built \
                and type(self) is CaseRecorder:  # a replay's tape, a prefix: their own _fault_for, _begin
            # the common call, in one frame: a tool of a linear record in a case without a
            # declared fault (the steps _begin and _end would make, the same events)
            self._touched = True
            steps = self._steps
            if self._auto_checkpoints and not self._depth:  # auto checkpoints imply a snapshot
                self._checkpoints.append((len(steps) + 1, _frozen(self._snapshot()), None))  # type: ignore[misc]
            steps.append(StepRecorded(len(steps) + 1, "tool_call", name, _frozen(arguments), None,
                                      _AGENT.get() or self._in_control))
            self._depth += 1
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                self._end(None, name, arguments, kind, None, exc)
                raise
            self._depth -= 1
            recorded = _frozen(result if codec is None else codec.recorded(name, result))
            steps.append(StepRecorded(len(steps) + 1, "tool_result", name, None, recorded,
                                      _AGENT.get() or self._in_control))
            return result
        opened = self._begin(name, arguments, kind)
        fault = self._fault_for(name, kind)
        if fault is not None and fault[0] not in RUNS_THE_TOOL:
            return self._faulted(opened, name, arguments, fault)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            if fault is not None and isinstance(exc, Exception):
                return self._faulted(opened, name, arguments, fault)
            self._end(opened, name, arguments, kind, None, exc)
            raise
        if fault is not None:
            return self._faulted(opened, name, arguments, fault)
        self._end(opened, name, arguments, kind, result if codec is None else codec.recorded(name, result))
        return result

    async def acall_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                         kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        """:meth:`call_tool` for an ``async def`` tool or model call: the same steps."""
        opened = self._begin(name, arguments, kind)
        fault = self._fault_for(name, kind)
        if fault is not None and fault[0] not in RUNS_THE_TOOL:
            return self._faulted(opened, name, arguments, fault)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            if fault is not None and isinstance(exc, Exception):
                return self._faulted(opened, name, arguments, fault)
            self._end(opened, name, arguments, kind, None, exc)
            raise
        if fault is not None:
            return self._faulted(opened, name, arguments, fault)
        self._end(opened, name, arguments, kind, result if codec is None else codec.recorded(name, result))
        return result

    # A declared fault (SPEC §13a): the N-th call of its tool in the case (nested calls and
    # calls a replay's tape answers included; with concurrent tasks, in the order the calls
    # start) gets the fault's shape. error/timeout/malformed/denied: the tool does not run;
    # timeout_after_effect: it runs — returns or raises — and the caller gets the timeout.

    def _fault_for(self, name: str, kind: str) -> tuple[str, Any, FaultKind | None] | None:
        """``(kind, result, mark)`` when this call is the faulted one (``mark``: the kind
        recorded on its result step), else None."""
        fault = self._fault
        if fault is None or kind == "model" or name != fault["tool"]:
            return None
        self._fault_calls += 1
        if self._fault_calls != fault["call"]:
            return None
        return fault["kind"], fault_result(fault["kind"], name, fault.get("scope")), fault["kind"]

    def _faulted(self, opened: Any, name: str, arguments: dict, fault: tuple[str, Any, FaultKind | None]) -> Any:
        kind, result, mark = fault
        self._end(opened, name, arguments, "tool", result, fault=mark)
        if kind == "denied":
            self._harness_denial(name, result)
        return result

    def _harness_denial(self, name: str, result: Any) -> None:
        """A ``denied`` fault the harness injected is the harness's evidence (SPEC §18.1): the
        denial is recorded as an ``access`` with ``allowed=False``, whatever the agent's own
        code records — the trial hit a permission boundary, and the classifier must know it."""
        error = result.get("error") if isinstance(result, dict) else None
        scope = error.get("required_scope") if isinstance(error, dict) else None
        data = validate_evidence("access", tool=name, allowed=False,
                                 required_scope=scope if isinstance(scope, str) and scope else name)
        self._evidence.append(EvidenceRecorded("access", data, len(self._steps), source="harness"))

    def _begin(self, name: str, arguments: dict, kind: str) -> Any:
        if self._hand_built:
            self._guard()
        self._touched = True
        if self._keys is not None:
            entry = self._branch().tick()
            if kind != "model":
                if self._quiet() and self._snapshot is not None:  # auto checkpoints imply a snapshot
                    self._checkpoints.append((entry + (0,), _frozen(self._snapshot()), None))
                self._add(entry + (0,), entry, StepRecorded(0, "tool_call", name, _frozen(arguments),
                                                            agent=self._agent()))
            # what the tool itself does belongs to the call: its own branch
            return entry, _BRANCH.set(Branch(entry + (1,), in_call=True))
        if kind != "model":
            steps = self._steps
            # not inside another call: the tape answers a call whole (what its tool called with
            # it), so a replay can never resume from a point inside one
            if self._auto_checkpoints and self._snapshot is not None and not self._depth:
                self._checkpoints.append((len(steps) + 1, _frozen(self._snapshot()), None))
            steps.append(StepRecorded(len(steps) + 1, "tool_call", name, _frozen(arguments), agent=self._agent()))
        self._depth += 1
        return None

    def _end(self, opened: Any, name: str, arguments: dict, kind: str, result: Any,
             raised: BaseException | None = None, fault: FaultKind | None = None) -> None:
        """Record how the call ended. An exception is the error result (and re-raised by the
        caller); anything else that is not an Exception (a cancellation, an exit) records no
        result, and the call stays open in the record."""
        if opened is None:
            self._depth -= 1
        else:
            _BRANCH.reset(opened[1])
        if raised is not None and not isinstance(raised, Exception):
            return
        agent = self._agent()
        if kind == "model":
            if raised is not None:
                return
            step = StepRecorded(0, "decision", name, _frozen(arguments), _frozen(result), agent)
        elif raised is not None:
            step = StepRecorded(0, "tool_result", name, None, _error_result(raised), agent, raised=True)
        else:
            step = StepRecorded(0, "tool_result", name, None, _frozen(result), agent, fault=fault)
        if opened is None:
            steps = self._steps
            steps.append(_replace(step, index=len(steps) + 1))
        else:
            entry = opened[0]
            self._add(entry + (2,), entry, step)

    # ---- what the runner reads ----------------------------------------------------------

    @property
    def recorded_trajectory(self) -> bool:
        """Whether the case recorded a trajectory at all (hand-built, or through ``@tool`` and
        the ``current_case()`` helpers); without one no trajectory events are written."""
        return self._hand_built or self._touched

    def trajectory_events(self) -> list[Event]:
        """The trajectory's events in canonical order (empty when nothing was recorded)."""
        if not self.recorded_trajectory:
            return []
        if self._keys is None:
            steps = list(self._steps)
            final = None
            checkpoints = [CheckpointRecorded(i, s, cid) for i, s, cid in self._checkpoints]
        else:
            steps, final, checkpoints = self._ordered()
        if not self._hand_built:
            # Indexes, kinds and call/result pairs are right by construction here; what the
            # helpers cannot guarantee is that every step names its agent or none does.
            _check_agents(steps, self.id)
        constraints = [ConstraintRecorded(n, p, i if final is None else final[i - 1])
                       for n, p, i in self._constraints]
        return [
            *steps,
            *constraints,
            *checkpoints,
            TrajectoryRecorded(self._status, self._truncated, self._step_limit, len(steps)),
        ]

    def _ordered(self) -> tuple[list[StepRecorded], list[int], list[CheckpointRecorded]]:
        """Keyed mode: steps in tree order, numbered; provisional -> final index."""
        (keys, entries), made = self._tree(), self._steps
        order = sorted(range(len(made)), key=keys.__getitem__)
        final = [0] * len(made)
        steps = []
        for position, i in enumerate(order, start=1):
            final[i] = position
            steps.append(_replace(made[i], index=position, branch=list(entries[i])))
        sorted_keys = [keys[i] for i in order]
        checkpoints = [CheckpointRecorded(bisect_left(sorted_keys, key) + 1, state, cid)
                       for key, state, cid in self._checkpoints]
        checkpoints.sort(key=lambda c: c.step_index)
        return steps, final, checkpoints


def _check_agents(steps: list[StepRecorded], case_id: str) -> None:
    unnamed = [s.agent for s in steps].count(None)
    if 0 < unnamed < len(steps):  # some steps name an agent, others do not
        first = next(s.index for s in steps if s.agent is None)
        raise RecordError(
            f"case {case_id!r}: agent_trajectory/v1 field steps.agent: some steps name an agent and "
            f"others do not (first unnamed: step {first}); name the agent of every step or of none"
        )


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
    """Give every task a case creates its branch of the case's task tree."""
    context = kwargs.pop("context", None)
    if context is None:
        context = contextvars.copy_context()
    rec = context.get(_CURRENT)
    branch = None
    if rec is not None:
        branch = context.run(rec.fork)
        if branch is not None:
            context.run(_BRANCH.set, branch)
    import asyncio

    inner = coro
    if rec is not None:
        coro = _contained(coro)
    task = asyncio.Task(coro, loop=loop, context=context, **kwargs)
    if rec is not None:
        rec.task_started(branch, task)
        # a task cancelled before it starts never runs the wrapper: close what it wraps
        task.add_done_callback(lambda _: inner.close())
    return task


class TaskExit(Exception):
    """A task of a case raised ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit``:
    asyncio would let it end the whole event loop (the run); it fails the task instead, so
    that it errors its case only."""


async def _contained(coro: Any) -> Any:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as e:
        raise TaskExit(f"{type(e).__name__} raised in a task of the case: {e}") from e


def install_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    """Order the steps of the tasks cases create on ``loop`` deterministically (see module)."""
    loop.set_task_factory(_task_factory)

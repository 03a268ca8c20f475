"""Recording ONE case: reset the sandbox, run the system, snapshot, encode.

:func:`record` (and :func:`arecord` for ``async def`` systems) is the single recording path:
a run's cases (:data:`CASE_JOB`), a resumed run's, and every control and fault replay
(:mod:`oloproof.replay.engine`) go through it — only the recorder (a plain
:class:`~oloproof.recorder.case.CaseRecorder` or the replay tape) and the call differ.

Whatever the system does — raise anything, ``sys.exit()``, raise ``KeyboardInterrupt``, return
garbage, overrun its ``timeout`` — becomes that case's error, never the run's: only the
operator's Ctrl-C (:class:`~oloproof.errors.Interrupted`) ends a run.

What a case records (its output, its steps' arguments and results, its checkpoints' and the
sandbox's state) is encoded with :func:`oloproof.records.encode_recorded`: a NaN or infinite
number, a value that contains itself or one nested deeper than
:data:`~oloproof.records.MAX_RECORDED_NESTING` (128) levels errors the case
(``invalid_record``, or ``snapshot_error`` for the sandbox's state) with the path in the
message — never a silent ``null``, never a ``RecursionError`` that would stop the run (and
meet ``--resume`` again). The case is committed like any errored case.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

import msgspec

from oloproof.config.cases import SuiteCase
from oloproof.config.limits import trial_case_id
from oloproof.errors import Interrupted, RecordError
from oloproof.events import (
    CODEC,
    CaseFinished,
    CaseObserved,
    CaseStarted,
    CheckpointRecorded,
    EnvironmentStateRecorded,
    Event,
    StepRecorded,
)
from oloproof.recorder.case import CaseRecorder, exception_text, install_task_factory, keep_ends
from oloproof.recorder.jobs import JobKind
from oloproof.recorder.prefix import BoundaryReached, PrefixRecorder, snapshot_of, stale_reason
from oloproof.records import Case, UnfitValue, encode_recorded
from oloproof.system import _CURRENT, SystemSlot

if TYPE_CHECKING:
    import asyncio


class ProcessExit(BaseException):
    """A system under test called ``os._exit`` in the process that records it: the call
    raises this instead (a BaseException, like ``SystemExit``), and the case errors with it.
    The process's exit code stays the run's."""


@contextlib.contextmanager
def contained_exit() -> Iterator[None]:
    """While cases run in this process: ``os._exit`` (and ``posix._exit``) raise
    :class:`ProcessExit` instead of ending the process. Worker processes keep their own
    reference to the real function."""
    import os
    import posix

    real = os._exit

    def refuse(code: int) -> NoReturn:
        raise ProcessExit(f"the system called os._exit({code!r}); a case cannot end the run's process")

    os._exit = posix._exit = refuse  # type: ignore[assignment]  # a stand-in (its parameter: code, not status)
    try:
        yield
    finally:
        os._exit = posix._exit = real


class CaseTimeout(BaseException):
    """Raised inside a case that overran its ``timeout`` (a BaseException, so that an agent's
    ``except Exception`` does not swallow it)."""


@dataclass
class Recording:
    """What one recording left: its encoded events (trajectory, state) and how it ended."""

    payloads: list[bytes]
    types: list[str]
    output: Any
    error: str | None
    error_kind: str | None
    #: the output's canonical JSON, checked (None when there is no output)
    output_json: bytes | None = None
    #: where the system raised: the frames of the user's code (None: it did not raise)
    traceback: str | None = None


class _Failed(Exception):
    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


# ---- the recording skeleton, shared by the sync and the async path ------------------------

def _begin(slot: SystemSlot, reset_to: Any) -> None:
    if slot.instance is not None:
        try:
            # a fresh deep copy for every case: no case ever sees another's state
            slot.instance.reset(copy.deepcopy(reset_to if reset_to is not None else {}))
        except Exception as e:
            raise _Failed(f"reset() raised {type(e).__name__}: {e}", "reset_error") from e


def _classify(exc: BaseException, timeout: float | None, timed_out: bool = False) -> tuple[str, str]:
    if isinstance(exc, Interrupted):
        raise exc
    if isinstance(exc, _Failed):
        return str(exc), exc.kind
    if isinstance(exc, CaseTimeout) or (timed_out and _cancelled(exc)):
        return f"the case overran its timeout of {timeout:g} s", "case_timeout"
    if isinstance(exc, RecordError):
        return str(exc), "invalid_record"
    return _text(f"{type(exc).__name__}: {exception_text(exc)}"), "system_error"


#: a traceback longer than this keeps its head and its tail (the frames nearest the raise)
MAX_TRACEBACK = 32_000
_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the oloproof package


def user_traceback(exc: BaseException) -> str | None:
    """The traceback of an exception the system raised, as Python prints it, with Oloproof's
    own frames left out (the recorder, the executor, the wrappers of ``@tool``): what a user
    debugging their agent needs, and nothing that changes with Oloproof's internals. Chained
    exceptions (``raise … from``, an error while handling another) are kept."""
    import traceback

    try:
        te = traceback.TracebackException.from_exception(exc, limit=None)
        seen: set[int] = set()
        todo = [te]
        while todo:
            t = todo.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            mine = [f for f in t.stack if not _is_own(f.filename)]
            t.stack = traceback.StackSummary.from_list(mine or list(t.stack)[-1:])
            todo.extend(x for x in (t.__cause__, t.__context__) if x is not None)
        text = _text("".join(te.format()))
    except Exception:  # noqa: BLE001 - a traceback that cannot be formatted is no error of the case
        return None
    return keep_ends(text, MAX_TRACEBACK, "\n")


def _traceback_of(exc: BaseException) -> str | None:
    """The user's traceback of how a case ended: the system's exception (for a failing
    ``reset()``/``snapshot()``, the exception behind it); None when nothing of theirs raised."""
    if isinstance(exc, _Failed):
        exc = exc.__cause__ or exc
        if isinstance(exc, _Failed):
            return None
    return user_traceback(exc)


def _is_own(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_OWN + os.sep)


def _text(message: str) -> str:
    """A message that encodes as UTF-8 (a model's truncated emoji leaves a lone surrogate)."""
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _cancelled(exc: BaseException) -> bool:
    asyncio = sys.modules.get("asyncio")  # not imported: nothing can have been cancelled
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _check_output(output: Any, what: str) -> None:
    if not isinstance(output, dict):
        raise RecordError(f"{what} returned {type(output).__name__}, expected its output as a dict")


def _finish(slot: SystemSlot, recorder: CaseRecorder, output: Any, error: str | None,
            kind: str | None, tb: str | None = None) -> Recording:
    """Collect the trajectory and the state the case left, and encode them."""
    events: list[Event] = []
    if kind != "invalid_record":
        try:
            events.extend(recorder.trajectory_events())
            evidence = recorder.evidence_events()
            _check_declared(evidence, slot.factory.records, recorder.id)
            events.extend(evidence)
            events.extend(recorder.usage_events())
        except RecordError as e:
            events, output, error, kind = [], None, str(e), "invalid_record"
    if kind == "case_timeout":
        slot.discard()  # the case may still be running in there: a new sandbox for the next
    elif slot.instance is not None and kind != "reset_error":
        # the state a case left is recorded even when the case raised: it shows what changed
        try:
            events.append(EnvironmentStateRecorded(msgspec.Raw(encode_recorded(slot.instance.snapshot(), "state"))))
        except UnfitValue as e:
            if error is None:
                error, kind = f"snapshot() returned a state that cannot be stored: {e}", "snapshot_error"
        except Exception as e:  # noqa: BLE001 - user snapshot() may raise anything: recorded as the case's error
            problem = ("returned something that is not JSON-serialisable"
                       if isinstance(e, (TypeError, ValueError, OverflowError)) else "raised")
            if error is None:
                error, kind = f"snapshot() {problem}: {type(e).__name__}: {e}", "snapshot_error"
                tb = user_traceback(e)
    try:
        _check_values(events)
        payloads, types = CODEC.pack(events)
    except UnfitValue as e:
        return Recording([], [], None, str(e), "invalid_record")
    except (TypeError, ValueError, OverflowError, RecursionError):
        return Recording([], [], None, _describe_unencodable(events, output), "invalid_record")
    output_json = None
    if output is not None:
        try:
            output_json = encode_recorded(output, "output")
        except UnfitValue as e:  # the steps and the state are kept: they show what happened
            output, error, kind = None, str(e), "invalid_record"
        except (TypeError, ValueError, OverflowError):
            return Recording([], [], None, _describe_unencodable(events, output), "invalid_record")
    return Recording(payloads, types, output, error, kind, output_json,
                     tb if error is not None else None)


def _check_declared(evidence: list[Event], records: Any, case_id: str) -> None:
    """Evidence a system records must be declared in ``records=`` (as evaluators require it)."""
    if not evidence:  # most cases record none: nothing to import or look at
        return
    from oloproof.events import EffectRecorded
    from oloproof.records import EFFECT_LEDGER_V1, RELEASE_EVIDENCE_V1

    for ev in evidence:
        if getattr(ev, "source", "system") == "harness":
            continue  # the harness's own evidence of a fault it injected: not the system's record
        record = EFFECT_LEDGER_V1 if isinstance(ev, EffectRecorded) else RELEASE_EVIDENCE_V1
        if record not in records:
            raise RecordError(f"case {case_id!r}: the system recorded {record} evidence without declaring it; "
                              f"add {record!r} to records= in @system and to system.records")


def _where(ev: Event, field: str) -> str:
    if isinstance(ev, StepRecorded):
        return f"step {ev.index} ({ev.kind} {ev.tool_name or ''}).{field}"
    if isinstance(ev, CheckpointRecorded):
        return f"checkpoint before step {ev.step_index}.{field}"
    return f"{CODEC.tag_of(ev)}.{field}"


_Raw = msgspec.Raw


def _check_values(events: list[Event]) -> None:
    """The values the events carry were checked when they were recorded (a ``msgspec.Raw``);
    one that was not — it failed the check then (an :class:`UnfitValue` in its place), could
    not be encoded, or was built by hand — is checked now, for a message naming the step."""
    for ev in events:
        t = type(ev)
        if t is StepRecorded:
            step = cast(StepRecorded, ev)
            a, r = step.arguments, step.result
            if a is not None and type(a) is not _Raw:
                _check(a, ev, "arguments")
            if r is not None and type(r) is not _Raw:
                _check(r, ev, "result")
        elif t is CheckpointRecorded or t is EnvironmentStateRecorded:
            state = cast("CheckpointRecorded | EnvironmentStateRecorded", ev).state
            if state is not None and type(state) is not _Raw:
                _check(state, ev, "state")


def _check(value: Any, ev: Event, field: str) -> None:
    if isinstance(value, UnfitValue):
        raise value.at(_where(ev, field))
    encode_recorded(value, _where(ev, field))


def _describe_unencodable(events: list[Event], output: Any) -> str:
    for ev in events:
        try:
            CODEC.encode(ev)
        except (TypeError, ValueError, OverflowError, RecursionError) as e:
            if isinstance(ev, StepRecorded):
                field = "result" if ev.kind == "tool_result" else "arguments"
                return f"step {ev.index} ({ev.kind} {ev.tool_name or ''}).{field} is not JSON-serialisable: {e}"
            return f"{CODEC.tag_of(ev)} is not JSON-serialisable: {e}"
    try:
        encode_recorded(output, "output")
    except UnfitValue as e:
        return str(e)
    except (TypeError, ValueError, OverflowError) as e:
        return f"the output is not JSON-serialisable: {e}"
    return "an event is not JSON-serialisable"


def record(slot: SystemSlot, recorder: CaseRecorder, invoke: Callable[[], Any], *, reset_to: Any,
           timeout: float | None, what: str = "the system") -> Recording:
    """Record one run of ``invoke()`` (the system's call, or its replay) with ``recorder`` as
    ``current_case()``. An ``async def`` system is run to completion on this thread's loop."""
    if slot.is_async:
        work = arecord(slot, recorder, invoke, reset_to=reset_to, timeout=timeout, what=what)
        if timeout is None:
            return _loop().run_until_complete(work)
        return _loop().run_until_complete(_at_most(work, timeout, slot, recorder))
    output: Any = None
    error = kind = tb = None
    set_token = _CURRENT.set(recorder)
    token: contextvars.Token[Any] | None = set_token  # None once reset
    try:
        _begin(slot, reset_to)
        output = call_with_timeout(invoke, timeout)
        if type(output) is not dict and inspect.isawaitable(output):  # a sync-looking callable returning a coroutine
            _CURRENT.reset(set_token)  # the task that awaits it holds the recorder itself
            token = None
            output = _loop().run_until_complete(_bounded(output, timeout, recorder))
        _check_output(output, what)
    except BoundaryReached:  # a prefix case's first action past its boundary: its normal end
        output = None
    except BaseException as e:  # noqa: BLE001 - the system under test may raise anything, SystemExit included
        output = None
        error, kind = _classify(e, timeout)
        tb = _traceback_of(e)
    finally:
        if token is not None:
            _CURRENT.reset(token)
    return _finish(slot, recorder, output, error, kind, tb)


async def arecord(slot: SystemSlot, recorder: CaseRecorder, invoke: Callable[[], Any], *, reset_to: Any,
                  timeout: float | None, what: str = "the system") -> Recording:
    """:func:`record` for an ``async def`` system, inside a running event loop."""
    import asyncio

    output: Any = None
    error = kind = tb = None
    token = _CURRENT.set(recorder)  # set inside this task: the task itself is not a branch
    timer = _Timer(timeout)
    task = asyncio.current_task()
    try:
        _begin(slot, reset_to)
        output = invoke()
        if inspect.isawaitable(output):
            with timer:
                output = await output
            if timer.expired:
                raise CaseTimeout
        _check_output(output, what)
    except BoundaryReached:
        output = None
    except BaseException as e:
        if _cancelled(e) and not timer.expired and task is not None and \
                task.cancelling() > (1 if timer.fired else 0):
            raise  # cancelled from outside (the run stops): not this case's doing
        output = None
        error, kind = _classify(e, timeout, timer.expired)
        tb = _traceback_of(e)
    finally:
        _CURRENT.reset(token)
        if timer.fired and task is not None:
            task.uncancel()
    await _settle(recorder)
    return _finish(slot, recorder, output, error, kind, tb)


async def _at_most(work: Any, timeout: float, slot: SystemSlot, recorder: CaseRecorder) -> Recording:
    """An async case that ignores its cancellation is given up a few seconds past its
    deadline (left behind with its sandbox), so that the run goes on."""
    import asyncio

    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=timeout + 2 * REPEAT)
    if done:
        return task.result()
    slot.discard()
    return _finish(slot, recorder, None, f"the case overran its timeout of {timeout:g} s and did not stop",
                   "case_timeout")


async def _settle(recorder: CaseRecorder) -> None:
    """Tasks the case left running are cancelled when it ends: nothing of a case may change
    the sandbox after its state is recorded, nor run into the next case."""
    import asyncio

    left = [t for t in recorder.tasks() if not t.done()]
    for t in left:
        t.cancel()
    if left:
        await asyncio.wait(left, timeout=1.0)


# ---- timeouts ----------------------------------------------------------------------------

class _Timer:
    """Cancels the current task when ``timeout`` seconds pass (an async case's deadline)."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.expired = False
        self.fired = False  # it cancelled the task (once)
        self._handle: asyncio.TimerHandle | None = None

    def __enter__(self) -> _Timer:
        import asyncio

        if self.timeout is not None:
            task = asyncio.current_task()
            if task is None:
                raise RuntimeError("a case's timer runs inside an asyncio task")
            self._handle = asyncio.get_running_loop().call_later(self.timeout, self._expire, task)
        return self

    def _expire(self, task: asyncio.Task) -> None:
        self.expired = True
        self.fired = True
        task.cancel()

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def _bounded(awaitable: Any, timeout: float | None, recorder: Any) -> Any:
    """Await a system's coroutine in a task of its own whose context holds the recorder (set
    inside the task: the task itself is the case's root, not a branch of it)."""
    token = _CURRENT.set(recorder)
    timer = _Timer(timeout)
    try:
        with timer:
            result = await awaitable
    except BaseException as e:
        if _cancelled(e) and timer.expired:
            raise CaseTimeout from None
        raise
    finally:
        _CURRENT.reset(token)
        await _settle(recorder)
    if timer.expired:
        raise CaseTimeout
    return result


def call_with_timeout(fn: Callable[[], Any], timeout: float | None) -> Any:
    """``fn()``, raising :class:`CaseTimeout` once ``timeout`` seconds pass.

    On the main thread a timer signal interrupts the case where it is (a blocking ``sleep``
    included). Elsewhere (a thread pool, a Dask worker) the case runs on a helper thread that
    is abandoned at the deadline — its sandbox is then discarded with its slot.
    """
    if timeout is None:
        return fn()
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        return _alarm(fn, timeout)
    box: list[Any] = []
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box.append((True, context.run(fn)))
        except BaseException as e:  # noqa: BLE001 - handed back to the caller's thread
            box.append((False, e))

    helper = threading.Thread(target=target, name="oloproof-case", daemon=True)
    helper.start()
    helper.join(timeout)
    if not box:
        raise CaseTimeout
    ok, value = box[0]
    if ok:
        return value
    raise value


def _alarm(fn: Callable[[], Any], timeout: float) -> Any:
    fired = []

    def on_alarm(signum: int, frame: Any) -> None:
        fired.append(True)
        raise CaseTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    # and again every few seconds, for a case that swallows the first one and goes on
    signal.setitimer(signal.ITIMER_REAL, timeout, REPEAT)
    try:
        result = fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if fired:  # the system caught the timeout and went on: still past its deadline
        raise CaseTimeout
    return result


REPEAT = 2.0  # seconds between further interruptions of a case past its deadline
_LOOPS = threading.local()


def _loop() -> asyncio.AbstractEventLoop:
    """This thread's event loop for ``async def`` systems (kept for the whole run)."""
    import asyncio

    loop = getattr(_LOOPS, "loop", None)
    if loop is None or loop.is_closed():
        loop = asyncio.new_event_loop()
        install_task_factory(loop)
        _LOOPS.loop = loop
    return loop


# ---- the case job ----------------------------------------------------------------------

class CaseArgs(msgspec.Struct, frozen=True):
    """A case to record: what travels to a worker."""

    run_id: str
    position: int
    case: SuiteCase
    #: which trial of the case (1…k under ``trials: k``); None for a single trial
    trial: int | None = None

    @property
    def case_id(self) -> str:
        """The id of the case's stream: ``c``, or ``c/2`` for its second trial."""
        return trial_case_id(self.case.id, self.trial)


class CaseRecord(msgspec.Struct, frozen=True):
    """A recorded case: its stream's events, encoded (what comes back from a worker)."""

    case_id: str
    payloads: list[bytes]
    types: list[str]


def case_started(run_id: str, position: int, sc: SuiteCase, trial: int | None = None) -> CaseStarted:
    """The event that opens the stream of case ``sc`` (trial ``trial``) in run ``run_id``:
    the case as the suite holds it, encoded before the system can alter it."""
    # a trial is its own stream, ``c/2``, of the same fingerprint; a derived case's trial
    # pairs with the same trial of its source (oloproof.config.limits.trial_case_id)
    cluster = trial_case_id(sc.cluster, trial) if sc.cluster is not None else None
    return CaseStarted(run_id, trial_case_id(sc.id, trial), position, sc.fingerprint, sc.input, sc.initial_state,
                       sc.expected, sc.metadata, cluster, fault=sc.fault, trial=trial, prefix=sc.prefix,
                       tags=list(sc.tags) or None)


def failed_case(args: CaseArgs, error: str, kind: str) -> CaseRecord:
    """The record of a case that could not finish where it ran (``worker_died``,
    ``case_timeout``): its start and its error."""
    sc = args.case
    events = [case_started(args.run_id, args.position, sc, args.trial), CaseFinished(None, error, kind)]
    return CaseRecord(args.case_id, *CODEC.pack(events))


def _prepare(slot: SystemSlot, args: CaseArgs) -> tuple[bytes, Case, CaseRecorder]:
    sc = args.case
    head = CODEC.encode(case_started(args.run_id, args.position, sc, args.trial))  # before the agent can alter it
    # sc was encoded above, so the system may have it as is; the sandbox gets a deep copy
    case = Case(sc.id, sc.input, sc.initial_state, sc.metadata)
    if sc.prefix is not None:  # a frozen prefix case (oloproof.recorder.prefix)
        return head, case, PrefixRecorder(case, sc.prefix, resumed=slot.resumable)
    instance = slot.instance
    recorder = CaseRecorder(case, snapshot=instance.snapshot if instance is not None else None,
                            auto_checkpoints=getattr(instance, "auto_checkpoints", True),
                            fault=sc.fault,  # applied by @tool; the system's Case never holds it
                            trial=args.trial)  # current_case().trial; the Case keeps the case's own id
    return head, case, recorder


_NAMED = ("reset_error", "snapshot_error", "invalid_record")
_CASE_STARTED = cast(str, CaseStarted.__struct_config__.tag)  # msgspec types a tag str | int | None


def _case_record(args: CaseArgs, head: bytes, rec: Recording, observed: CaseObserved | None = None) -> CaseRecord:
    error = rec.error
    if rec.error_kind in _NAMED and error is not None and not error.startswith("case "):
        error = f"case {args.case_id!r}: {error}"  # the system's own exception is stored as it was raised
    output = msgspec.Raw(rec.output_json) if rec.output_json is not None else rec.output
    finished = CaseFinished(output, error, rec.error_kind, rec.traceback)
    end, end_type = CODEC.pack([finished] if observed is None else [observed, finished])
    return CaseRecord(args.case_id, [head, *rec.payloads, *end], [_CASE_STARTED, *rec.types, *end_type])


#: the recording driver's clock (seconds, monotonic). Only :func:`record_case` reads it, around
#: a run's case: :func:`record` — the path replays take too — never does (STYLE habit 7)
CLOCK: Callable[[], float] = time.perf_counter


def observed(recorder: CaseRecorder, seconds: float) -> CaseObserved:
    """The observation of a case that ran for ``seconds``: its wall time and the model and
    tool calls that ran (:class:`~oloproof.events.CaseObserved`)."""
    live = getattr(recorder, "live_calls", None)
    if live is not None:  # a prefix case: its frozen calls and its boundary action did not run
        model_calls, tool_calls = live()
    else:
        kinds = [s.kind for s in recorder._steps]
        model_calls, tool_calls = kinds.count("decision"), kinds.count("tool_call")
    return CaseObserved(round(max(seconds, 0.0) * 1000.0, 3), model_calls, tool_calls)


def _invocation(slot: SystemSlot, args: CaseArgs, case: Case) -> Callable[[], Any] | Recording:
    """How the system is called for the case — or, for a stale prefix case, the recording
    that says so (the system is not run on a world it no longer has)."""
    prefix = args.case.prefix
    if prefix is None:
        return lambda: slot.call(case)
    stale = stale_reason(prefix, slot.factory.surface)
    if stale is not None:
        return Recording([], [], None, stale, "stale")
    if slot.resumable:
        snapshot = snapshot_of(case, prefix, args.case.initial_state)
        return lambda: slot.target.resume(snapshot)
    return lambda: slot.call(case)


def record_case(slot: SystemSlot, args: CaseArgs, timeout: float | None,
                clock: Callable[[], float] | None = None) -> CaseRecord:
    """Record one case of a run: its whole stream, encoded, nothing written yet — with what
    the driver observed of it (:func:`observed`, timed by ``clock``, default :data:`CLOCK`).
    A stale prefix case is not run, and observed not at all."""
    head, case, recorder = _prepare(slot, args)
    invoke = _invocation(slot, args, case)
    if isinstance(invoke, Recording):
        return _case_record(args, head, invoke)
    clock = clock or CLOCK
    started = clock()
    rec = record(slot, recorder, invoke, reset_to=args.case.initial_state, timeout=timeout)
    return _case_record(args, head, rec, observed(recorder, clock() - started))


async def arecord_case(slot: SystemSlot, args: CaseArgs, timeout: float | None,
                       clock: Callable[[], float] | None = None) -> CaseRecord:
    """:func:`record_case` for an ``async def`` system, inside a running event loop."""
    head, case, recorder = _prepare(slot, args)
    invoke = _invocation(slot, args, case)
    if isinstance(invoke, Recording):
        return _case_record(args, head, invoke)
    clock = clock or CLOCK
    started = clock()
    rec = await arecord(slot, recorder, invoke, reset_to=args.case.initial_state, timeout=timeout)
    return _case_record(args, head, rec, observed(recorder, clock() - started))


CASE_JOB = JobKind("oloproof.recorder.record:CASE_JOB", CaseArgs, CaseRecord, record_case, arecord_case,
                   failed_case)

"""The system contract (SPEC §2): ``@system``, ``@tool``, ``current_case()``, ``Stateful``,
``Replayable`` — and the :class:`SystemFactory` that gives every concurrent slot its own
system object, so that no two cases ever share a sandbox (SPEC §2.3, §9).

``@tool`` and ``current_case()`` only read the context variable :data:`_CURRENT`; the recorder
that sits in it is built by :mod:`oloproof.recorder` (this module imports nothing above it).
Context variables follow ``await`` and are copied into the tasks a case creates, so
``current_case()`` works in coroutines and in ``asyncio`` tasks alike.
"""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from oloproof.errors import ConfigError, RecordError
from oloproof.records import KNOWN_RECORDS

SYSTEM_ATTR = "__oloproof_system__"

#: the recorder of the case in progress (a :class:`oloproof.recorder.case.CaseRecorder`)
_CURRENT: ContextVar[Any] = ContextVar("oloproof_current_case", default=None)
#: the branch of the case's task tree the code runs in (None: the case's root task)
_BRANCH: ContextVar[Any] = ContextVar("oloproof_branch", default=None)
#: the agent in control, set by a framework integration (:mod:`oloproof.integrations`):
#: every step recorded meanwhile names it (None: steps name no agent)
_AGENT: ContextVar[str | None] = ContextVar("oloproof_agent", default=None)


@dataclass(frozen=True)
class ToolCodec:
    """How a call whose values are not JSON goes on the tape (``@tool(encode=, decode=)``, and
    the framework integrations' model calls): ``encode`` turns each argument and the result
    into JSON-able data as recorded; ``decode`` turns the recorded result back into the object
    the caller expects when a replay or a prefix run answers the call from the tape."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]

    def arguments(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Each argument's value encoded (the keys are the parameters' names)."""
        return {k: self.recorded(tool, v, f"argument {k!r}") for k, v in arguments.items()}

    def recorded(self, tool: str, value: Any, what: str = "result") -> Any:
        """``encode(value)``; an ``encode`` that raises is a :class:`RecordError` naming the
        tool and the value."""
        try:
            return self.encode(value)
        except Exception as e:
            raise RecordError(f"tool {tool!r}: encode() raised {type(e).__name__} on its {what} "
                              f"({type(value).__name__}): {e}") from e

    def rebuilt(self, tool: str, data: Any) -> Any:
        """``decode(data)`` of a result answered from the tape; a ``decode`` that raises is a
        :class:`RecordError` naming the tool."""
        try:
            return self.decode(data)
        except Exception as e:
            raise RecordError(f"tool {tool!r}: decode() raised {type(e).__name__} on the recorded result: {e}") from e


def _identity(value: Any) -> Any:
    return value


def current_case() -> Any:
    """The recorder of the case in progress. Raises :class:`RecordError` outside a case."""
    rec = _CURRENT.get()
    if rec is None:
        raise RecordError("current_case() called outside a case: no case is running")
    return rec


def _recorder() -> Any:
    # a module-level function (pickled by reference), not a bound ContextVar method, so that
    # a decorated tool can travel to worker processes with cloudpickle
    return _CURRENT.get()


@dataclass(frozen=True)
class SystemInfo:
    """What ``@system(...)`` declared: name, version and the records it promises (SPEC §2.1)."""

    name: str
    version: str
    records: tuple[str, ...]


def system(*, name: str, version: str, records: tuple[str, ...] | list[str] = ()) -> Callable:
    """Declare a system under test: a function (sync or ``async def``), an object or a class.

    ``records`` lists what it promises to record (``agent_trajectory/v1``,
    ``environment_state/v1``). When ``oloproof.yaml`` also declares ``system:``, both must agree.
    """
    records = tuple(records)
    for r in records:
        if r not in KNOWN_RECORDS:
            raise RecordError(f"@system(records=...): unknown record {r!r} (known: {', '.join(KNOWN_RECORDS)})")
    info = SystemInfo(str(name), str(version), records)

    def mark(obj: Any) -> Any:
        setattr(obj, SYSTEM_ATTR, info)
        return obj

    return mark


def system_info(obj: Any) -> SystemInfo | None:
    """The :class:`SystemInfo` ``@system`` set on ``obj``, or None when it was not declared."""
    info = getattr(obj, SYSTEM_ATTR, None)
    return info if isinstance(info, SystemInfo) else None


# ---- faults a case declares (SPEC §7.1, §13a) ---------------------------------------------
# A case line may carry ``"fault": {"tool": T, "kind": K, "call": N}``: the recorder behind
# ``@tool`` applies it to the N-th call of T in that case (oloproof.recorder.case). The same
# shapes are what ``oloproof replay --fault TOOL:KIND`` substitutes (oloproof.replay.faults).

#: the kinds whose result is substituted without running the tool's effect: fixed shapes
FIXED_FAULT_KINDS = ("error", "timeout", "malformed")
#: every kind a case (or ``oloproof replay --fault``) may declare
ALL_FAULT_KINDS = FIXED_FAULT_KINDS + ("timeout_after_effect", "denied")
#: the kinds under which the tool does run (its effect lands), then the caller gets the fault
RUNS_THE_TOOL = ("timeout_after_effect",)
MALFORMED = '{"status": "ok", "resu'


def fault_result(kind: str, tool: str, scope: str | None = None) -> Any:
    """What the caller of a faulted ``tool`` gets: a fresh value on every call.

    ``timeout_after_effect`` gets the ``timeout`` shape (the tool ran first); ``denied`` the
    production-shaped permission denial, whose ``required_scope`` is ``scope`` (default: the
    tool's name)."""
    if kind == "error":
        return {"error": {"type": "ToolError", "message": f"{tool} failed"}}
    if kind in ("timeout", "timeout_after_effect"):
        return {"error": {"type": "TimeoutError", "message": f"{tool} timed out"}}
    if kind == "malformed":
        return MALFORMED
    if kind == "denied":
        required = tool if scope is None else scope
        return {"error": {"type": "PermissionDenied",
                          "message": f"{tool}: permission denied (requires scope {required})",
                          "required_scope": required}}
    raise ValueError(f"unknown fault kind {kind!r} (one of {', '.join(ALL_FAULT_KINDS)})")


def tool(fn: Callable | None = None, *, name: str | None = None, kind: str = "tool",
         encode: Callable[[Any], Any] | None = None, decode: Callable[[Any], Any] | None = None) -> Any:
    """Record every call of a tool function (or method), sync or ``async def``, inside a case.

    Each call appends a ``tool_call`` step with its arguments and a ``tool_result`` step with
    its result; an exception is recorded as the error result ``{"error": {"type", "message"}}``
    and re-raised unchanged. Outside a case the decorated function behaves exactly like the
    bare function. ``kind="model"`` marks a model call: one ``decision`` step with its arguments
    and result, on the same replay tape as the tools (and not counted as a tool call).

    In a case that declares a ``fault`` (docs/fault-injection.md), the faulted call returns
    :func:`fault_result` instead — without running the tool, or, for
    ``timeout_after_effect``, after running it — and its ``tool_result`` step records that
    value with the fault's kind. Model calls are never faulted.

    ``encode``/``decode`` put a call whose values are not JSON on the tape (a model client's
    request and response objects): ``encode(value)`` makes each argument and the result
    JSON-able as recorded, ``decode(data)`` rebuilds the result from its recorded form when a
    replay or a prefix run answers the call from the tape (default: the recorded data as is).
    """
    if kind not in ("tool", "model"):
        raise RecordError(f"@tool(kind=...) must be 'tool' or 'model', got {kind!r}")
    for label, hook in (("encode", encode), ("decode", decode)):
        if hook is not None and not callable(hook):
            raise RecordError(f"@tool({label}=...) must be a function, got {type(hook).__name__}")
    if decode is not None and encode is None:
        raise RecordError("@tool(decode=...) needs encode=... too: decode rebuilds what encode recorded")
    codec = None if encode is None else ToolCodec(encode, decode or _identity)

    def decorate(func: Callable) -> Callable:
        tool_name = name or func.__name__
        params = list(inspect.signature(func).parameters.values())
        skip = 1 if params and params[0].name in ("self", "cls") else 0
        names = tuple(p.name for p in params[skip:]
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        n_names = len(names)

        def arguments_of(args: tuple, kwargs: dict) -> dict:
            positional = args[skip:]
            if not positional:
                return kwargs
            arguments = dict(zip(names, positional))
            if len(positional) > n_names:
                arguments["*args"] = list(positional[n_names:])
            if kwargs:
                arguments.update(kwargs)
            return arguments

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                rec = _recorder()
                if rec is None:
                    return await func(*args, **kwargs)
                arguments = arguments_of(args, kwargs)
                if codec is not None:
                    arguments = codec.arguments(tool_name, arguments)
                return await rec.acall_tool(tool_name, func, args, kwargs, arguments, kind, codec)

            wrapper: Callable = awrapper
        else:
            @functools.wraps(func)
            def swrapper(*args: Any, **kwargs: Any) -> Any:
                rec = _recorder()
                if rec is None:
                    return func(*args, **kwargs)
                arguments = arguments_of(args, kwargs)
                if codec is not None:
                    arguments = codec.arguments(tool_name, arguments)
                return rec.call_tool(tool_name, func, args, kwargs, arguments, kind, codec)

            wrapper = swrapper
        wrapper.__oloproof_tool__ = {"name": tool_name, "kind": kind}  # type: ignore[attr-defined]
        return wrapper

    if fn is not None:
        return decorate(fn)
    return decorate


@runtime_checkable
class _StatefulProtocol(Protocol):
    def reset(self, state: Any) -> None: ...
    def snapshot(self) -> Any: ...


class Stateful(abc.ABC):
    """A system that owns a sandbox: ``reset(state)`` before each case, ``snapshot()`` after.

    Usable as a base class or as a protocol: any object with both methods counts
    (``isinstance(obj, Stateful)`` is true for it). A Stateful system whose tools use ``@tool``
    gets a checkpoint before every decorated call (the resume points of the built-in replay);
    set ``auto_checkpoints = False`` on the class to turn that off.

    Concurrency never shares a sandbox: each concurrent slot or worker gets its own system
    object (a class named in ``system.callable`` is instantiated per slot; a single object
    needs ``system.factory``), see :class:`SystemFactory`.
    """

    auto_checkpoints: bool = True

    @abc.abstractmethod
    def reset(self, state: Any) -> None:
        """Put the sandbox in ``state`` (a fresh deep copy of the case's initial_state)."""

    @abc.abstractmethod
    def snapshot(self) -> Any:
        """Return the sandbox's state as JSON-serialisable data."""

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is Stateful:
            return all(callable(getattr(other, m, None)) for m in ("reset", "snapshot"))
        return NotImplemented


class Replayable(abc.ABC):
    """A system that replays itself from a checkpoint with one tool result changed (SPEC §2.4).

    ``change`` is ``None`` for a control replay, else has ``.step_index``, ``.tool_name`` and
    ``.result``. The replay records its new trajectory with ``current_case().agent_trajectory``
    and returns its output exactly as a run does. ``replay`` may be ``async def``.
    """

    @abc.abstractmethod
    def replay(self, trajectory: Any, *, checkpoint: Any, change: Any) -> Any:
        """Re-run from ``checkpoint`` with ``change`` applied (None: a control replay).

        Args:
            trajectory: the recorded :class:`~oloproof.records.AgentTrajectory` of the case.
            checkpoint: the :class:`~oloproof.records.AgentCheckpoint` to start from (its
                step index, a copy of its state, its id).
            change: the substituted tool result (``step_index``, ``tool_name``, ``result``,
                ``fault``), or None.

        Returns:
            The replay's output, as a run returns it; its trajectory is recorded through
            ``current_case()``.
        """

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is Replayable:
            return callable(getattr(other, "replay", None))
        return NotImplemented


class Resumable(abc.ABC):
    """A system that can take up a frozen prefix case (SPEC §14a): ``resume(snapshot)``
    receives a :class:`~oloproof.records.PrefixSnapshot` (goal, instructions, the frozen steps,
    the state at the boundary, metadata) and acts as in a run — its first action (a tool call,
    a message, a final answer) is recorded, not executed, and ends the case. ``resume`` may
    be ``async def``. A system without it is re-run from the start with every call before the
    boundary answered from the frozen tape.
    """

    @abc.abstractmethod
    def resume(self, snapshot: Any) -> Any:
        """Act from a frozen prefix's :class:`~oloproof.records.PrefixSnapshot`; the first
        action past the boundary is recorded, not executed, and ends the case (SPEC §14)."""

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is Resumable:
            return callable(getattr(other, "resume", None))
        return NotImplemented


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))  # noqa: B004 - reads the __call__ method itself, not a callability test


def _resume_only(case: Any) -> Any:
    raise RecordError(f"case {case.id!r}: the system only resumes prefix cases (it has resume(snapshot) and no "
                      "run(case)); give it a run(case) method to run end-to-end cases")


class SystemSlot:
    """One system object and its sandbox, owned by one concurrent slot (a thread, a task
    slot, a worker process). Cases of one slot run one at a time around its sandbox."""

    __slots__ = ("factory", "target", "call", "instance", "replayable", "resumable", "is_async", "dead")

    def __init__(self, factory: SystemFactory, target: Any):
        self.factory = factory
        self.target = target
        if callable(target):
            call = target
        elif callable(getattr(target, "run", None)):
            call = target.run
        elif callable(getattr(target, "resume", None)):
            call = _resume_only  # a Resumable system without run(case): prefix cases only
        elif factory.factory is not None:
            raise ConfigError(f"system.factory {factory.factory_label!r} returned {type(target).__name__}, which is "
                              "neither callable nor has a run(case) method")
        else:
            raise ConfigError(f"system.callable {factory.label!r} is neither callable nor has a run(case) method")
        self.call: Callable[[Any], Any] = call
        self.instance = target if isinstance(target, Stateful) else None
        self.replayable = isinstance(target, Replayable)
        self.resumable = isinstance(target, Resumable)
        self.is_async = _is_async(call) or (self.replayable and _is_async(target.replay)) or \
            (self.resumable and _is_async(target.resume))
        #: set when a case timed out: its sandbox may still be in use, so the slot is replaced
        self.dead = False

    @property
    def name(self) -> str:
        """The system's declared name (its factory's)."""
        return self.factory.name

    @property
    def version(self) -> str:
        """The system's declared version (its factory's)."""
        return self.factory.version

    def discard(self) -> None:
        """Give up this slot's system object (a case timed out inside it)."""
        self.dead = True


@dataclass(frozen=True)
class SystemFactory:
    """How to make a system object for one slot. Travels to worker processes and Dask
    workers with cloudpickle (``target`` and ``factory`` are pickled by reference when they
    live in an importable module; ``root`` is put on the workers' ``sys.path`` first).

    The per-slot rule: a function is shared (it has no sandbox); a class is instantiated once
    per slot; a single object is used as is when it is the only slot of its process, and
    otherwise needs ``factory`` (``system.factory: module:attribute`` in ``oloproof.yaml``, a
    zero-argument callable returning a fresh object) — a Stateful object shared by concurrent
    cases would let one case see another's state.
    """

    name: str
    version: str
    records: tuple[str, ...]
    target: Any
    label: str
    factory: Callable[[], Any] | None = None
    factory_label: str | None = None
    root: str | None = None
    #: opaque bytes the jobs of a run share on every worker (the run's stored configuration):
    #: sent once with the factory, not with every job
    context: bytes = b""
    #: what the agent sees of its world (tool schemas, instructions, external data version;
    #: see ``RunStarted.surface``): a frozen prefix case whose surface differs is stale
    surface: Any = None

    @property
    def one_object(self) -> bool:
        """The system is one object (not a class, not built by a factory)."""
        return self.factory is None and not isinstance(self.target, type) and not inspect.isroutine(self.target)

    def check_slots(self, per_process: int) -> None:
        """Refuse to share one Stateful object between concurrent slots of one process."""
        if per_process > 1 and self.one_object and isinstance(self.target, Stateful):
            raise ConfigError(
                f"system.callable {self.label!r} is one Stateful object, which owns one sandbox; "
                f"{per_process} concurrent cases would share it and see each other's state. "
                "Name its class instead (instantiated once per slot), or add "
                "'factory: module:function' under system: in oloproof.yaml (a function that "
                "returns a fresh object)")

    def pickled(self) -> bytes:
        """The factory as cloudpickle bytes, for worker processes; a system that cannot travel
        (it holds a lock, a socket, an open client) is a configuration error that says what
        to do instead."""
        import dataclasses

        import cloudpickle

        # with a factory, the workers make their objects with it: the driver's one stays here
        travelling = dataclasses.replace(self, target=None) if self.factory is not None else self
        try:
            return cloudpickle.dumps(travelling)
        except Exception as e:
            raise ConfigError(
                f"system.callable {self.label!r} cannot be sent to worker processes: "
                f"{type(e).__name__}: {e}. Name a class (each worker makes its own object) or a "
                "module-level function, or add 'factory: module:function' under system: — and "
                "create clients and locks inside the object, not at import") from e

    def make_slot(self) -> SystemSlot:
        """A new slot under the per-slot rule: ``factory()`` when given, a fresh instance of a
        class, else the target itself (a function, or the one object).

        Raises:
            ConfigError: the factory or the class's constructor raised.
        """
        if self.factory is not None:
            try:
                obj = self.factory()
            except Exception as e:
                raise ConfigError(f"system.factory {self.factory_label!r} raised {type(e).__name__}: {e}") from e
        elif isinstance(self.target, type):
            try:
                obj = self.target()
            except Exception as e:
                raise ConfigError(f"cannot instantiate {self.label}: {type(e).__name__}: {e}") from e
        else:
            obj = self.target
        return SystemSlot(self, obj)

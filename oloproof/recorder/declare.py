"""``@system``, ``@tool`` and the ``Stateful`` / ``Replayable`` contracts (SPEC §2)."""

from __future__ import annotations

import abc
import functools
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

from oloproof.errors import RecordError
from oloproof.records import KNOWN_RECORDS
from oloproof.recorder.case import _CURRENT

SYSTEM_ATTR = "__oloproof_system__"


@dataclass(frozen=True)
class SystemInfo:
    name: str
    version: str
    records: tuple[str, ...]


def system(*, name: str, version: str, records: tuple[str, ...] | list[str] = ()) -> Callable:
    """Declare a system under test: a function, an object or a class.

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
    info = getattr(obj, SYSTEM_ATTR, None)
    return info if isinstance(info, SystemInfo) else None


def tool(fn: Callable | None = None, *, name: str | None = None, kind: str = "tool") -> Any:
    """Record every call of a tool function (or method) inside a case.

    Each call appends a ``tool_call`` step with its arguments and a ``tool_result`` step with
    its result; an exception is recorded as the error result ``{"error": {"type", "message"}}``
    and re-raised unchanged. Outside a case the decorated function behaves exactly like the
    bare function. ``kind="model"`` marks a model call: one ``decision`` step with its arguments
    and result, on the same replay tape as the tools (and not counted as a tool call).
    """
    if kind not in ("tool", "model"):
        raise RecordError(f"@tool(kind=...) must be 'tool' or 'model', got {kind!r}")

    def decorate(func: Callable) -> Callable:
        tool_name = name or func.__name__
        params = list(inspect.signature(func).parameters.values())
        skip = 1 if params and params[0].name in ("self", "cls") else 0
        names = tuple(p.name for p in params[skip:]
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        n_names = len(names)
        get = _CURRENT.get

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            rec = get()
            if rec is None:
                return func(*args, **kwargs)
            positional = args[skip:]
            if positional:
                arguments = dict(zip(names, positional))
                if len(positional) > n_names:
                    arguments["*args"] = list(positional[n_names:])
                if kwargs:
                    arguments.update(kwargs)
            else:
                arguments = kwargs
            return rec.call_tool(tool_name, func, args, kwargs, arguments, kind)

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
    and returns its output exactly as a run does.
    """

    @abc.abstractmethod
    def replay(self, trajectory: Any, *, checkpoint: Any, change: Any) -> Any: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> Any:
        if cls is Replayable:
            return callable(getattr(other, "replay", None))
        return NotImplemented

"""What executors run: jobs of a known kind, each on one slot's system object.

A :class:`JobKind` names a unit of work that runs against a :class:`~oloproof.system.SystemSlot`
— recording a case (:data:`oloproof.recorder.record.CASE_JOB`), replaying one
(:data:`oloproof.replay.engine.REPLAY_JOB`). Its argument and its result are msgspec structs,
so they cross process and machine boundaries as JSON bytes (never pickles; JSON, not msgpack,
because a case may hold any JSON number, integers past 64 bits included); the kind itself
travels by name (``ref``, ``module:attribute``), which a worker imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec


@dataclass(frozen=True)
class JobKind:
    """A kind of job. ``run(slot, arg, timeout)`` / ``arun`` (for ``async def`` systems) do the
    work; ``failed(arg, message, error_kind)`` is the result that stands for a job that could
    not finish where it ran (its worker died, it overran its timeout past all recovery)."""

    ref: str
    arg: type
    result: type
    run: Callable[[Any, Any, float | None], Any]
    arun: Callable[[Any, Any, float | None], Awaitable[Any]]
    failed: Callable[[Any, str, str], Any]

    def encode_arg(self, arg: Any) -> bytes:
        """The job's argument as JSON bytes, to send to a worker process or Dask task."""
        return _ENCODE(arg)

    def decode_arg(self, data: bytes) -> Any:
        """The argument a worker received, decoded and validated as this kind's ``arg`` type."""
        return msgspec.json.decode(data, type=self.arg)

    def encode_result(self, result: Any) -> bytes:
        """A worker's result as JSON bytes, to send back to the driver."""
        return _ENCODE(result)

    def decode_result(self, data: bytes) -> Any:
        """A result the driver received, decoded and validated as this kind's ``result`` type."""
        return msgspec.json.decode(data, type=self.result)


_ENCODE = msgspec.json.Encoder().encode


_KINDS: dict[str, JobKind] = {}


def job_kind(ref: str) -> JobKind:
    """The job kind named ``module:attribute`` (imported on first use, e.g. in a worker)."""
    kind = _KINDS.get(ref)
    if kind is None:
        module, _, attr = ref.partition(":")
        kind = getattr(importlib.import_module(module), attr)
        if not isinstance(kind, JobKind):
            raise TypeError(f"{ref} is not a JobKind")
        _KINDS[ref] = kind
    return kind


@dataclass(eq=False)
class Job:
    """One unit of work submitted to an executor. ``tag`` is the driver's own bookkeeping."""

    id: int
    kind: JobKind
    arg: Any
    timeout: float | None = None
    tag: Any = field(default=None, repr=False)
    #: how many recordings the job may make, each bounded by ``timeout`` (a replay job: a
    #: control and a fault replay per fault)
    units: int = 1

    def limit(self, grace: float) -> float | None:
        """Past this many seconds the job is given up for lost."""
        return None if self.timeout is None else self.timeout * self.units + grace


@dataclass(eq=False)
class Done:
    """A finished job: its ``result`` (of ``job.kind.result``), or the ``error`` the job's
    own machinery raised (an Oloproof bug, never the system's: that is in the result)."""

    job: Job
    result: Any = None
    error: BaseException | None = None

"""The executor registry: every kind of :class:`~oloproof.recorder.executors.Executor` by name,
with the command-line flags it takes, how it checks them and how it is built.

A kind is one :func:`register_executor` call. It names the flags it takes (``concurrency``,
``workers``, ``scheduler``: ``--concurrency N``, ``--workers N``, ``--scheduler ADDR``); a flag
it does not take is refused with a :class:`~oloproof.errors.UsageError` that names the flag
(``refuse`` gives the message for one flag, else a generic one), then its own ``check`` runs
over the flags it takes, and only then is it built. ``build`` is called only for the kind a
run uses, so a kind imports what it needs there: ``import oloproof`` and ``oloproof --help``
never import Dask.

======================= =================== ==================================================
kind                    takes               chosen by
======================= =================== ==================================================
``serial``              —                   default; ``--executor serial``
``concurrent``          ``concurrency``     ``--concurrency N`` (N > 1)
``processes``           ``workers``         ``--workers N``
``dask``                ``workers``,        ``--executor dask``, ``--scheduler ADDR``
                        ``scheduler``
======================= =================== ==================================================

Only kinds registered with ``by_name=True`` (``serial``, ``dask`` and, by default, any
third-party kind) are ``--executor`` choices; how the other flags pick a kind is
:func:`oloproof.app.run.make_executor`'s rule. ``--concurrency 1`` is the no-op value: every
kind accepts it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from oloproof.errors import UsageError
from oloproof.recorder.executors import ConcurrentExecutor, Executor, SerialExecutor

MAX_CONCURRENCY = 10_000  # slots in one process
MAX_WORKERS = 1024  # worker processes (or LocalCluster workers)

#: the flags an executor kind may take, as ``--flag`` on the command line
FLAGS = ("concurrency", "workers", "scheduler")

_NAME = re.compile(r"[a-z][a-z0-9_-]*")
_ADDRESS = re.compile(r"(tcp|tls)://(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d{1,5}")


@dataclass(frozen=True)
class ExecutorFlags:
    """The executor flags of one command (``None``: not given). Out-of-range counts are refused
    here, whatever executor they are meant for."""

    concurrency: int | None = None
    workers: int | None = None
    scheduler: str | None = None

    def __post_init__(self) -> None:
        if self.concurrency is not None and not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise UsageError(f"--concurrency {self.concurrency}: must be between 1 and {MAX_CONCURRENCY}")
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"--workers {self.workers}: must be between 1 and {MAX_WORKERS}")

    def given(self) -> dict[str, int | str]:
        """The flags given a value other than their no-op one (``--concurrency 1`` is none), in
        the order of :data:`FLAGS`."""
        values = {"concurrency": None if self.concurrency == 1 else self.concurrency,
                  "workers": self.workers, "scheduler": self.scheduler}
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True, eq=False)
class ExecutorKind:
    """One registered kind of executor (see the module docstring)."""

    name: str
    #: makes the executor from flags already validated; runs only for the kind a run uses
    build: Callable[[ExecutorFlags], Executor]
    #: the flags of :data:`FLAGS` it takes; any other one given is refused
    takes: frozenset[str] = frozenset()
    #: flag -> the message that refuses it (default: ``--FLAG VALUE: the NAME executor does not take it``)
    refuse: Mapping[str, str] = field(default_factory=dict)
    #: further rules over the flags it takes; raises :class:`~oloproof.errors.UsageError`
    check: Callable[[ExecutorFlags], None] | None = None
    #: may be chosen with ``--executor NAME``
    by_name: bool = True
    #: one line for the docs and error messages
    summary: str = ""

    def validate(self, flags: ExecutorFlags) -> None:
        """Refuse a flag this kind does not take (the message names it), then run ``check``."""
        for flag, value in flags.given().items():
            if flag not in self.takes:
                shown = repr(value) if isinstance(value, str) else value
                default = f"--{flag} {shown}: the {self.name} executor does not take it"
                raise UsageError(self.refuse.get(flag) or default)
        if self.check is not None:
            self.check(flags)

    def make(self, flags: ExecutorFlags) -> Executor:
        """Validate ``flags``, then build the executor."""
        self.validate(flags)
        return self.build(flags)


REGISTRY: dict[str, ExecutorKind] = {}


def register_executor(name: str, build: Callable[[ExecutorFlags], Executor], *, takes: Iterable[str] = (),
                      refuse: Mapping[str, str] | None = None, check: Callable[[ExecutorFlags], None] | None = None,
                      by_name: bool = True, summary: str = "") -> ExecutorKind:
    """Register a kind of executor under ``name`` (lower case, ``[a-z][a-z0-9_-]*``).

    ``build(flags)`` returns a fresh :class:`~oloproof.recorder.executors.Executor`; it is
    called only when this kind is chosen, after ``flags`` were validated: import heavy
    dependencies inside it. ``takes`` names the flags of :data:`FLAGS` it uses, ``refuse`` the
    message for a flag it does not, ``check`` further rules. With ``by_name`` (the default) it
    is an ``--executor`` choice. A name already registered is a ``ValueError``.
    """
    takes = frozenset(takes)
    unknown = sorted((takes | set(refuse or {})) - set(FLAGS))
    if not _NAME.fullmatch(name) or unknown:
        raise ValueError(f"executor {name!r}: " + (f"unknown flag(s) {', '.join(unknown)} (one of {', '.join(FLAGS)})"
                                                   if unknown else "a name is lower case: [a-z][a-z0-9_-]*"))
    if name in REGISTRY:
        raise ValueError(f"an executor named {name!r} is already registered")
    kind = ExecutorKind(name, build, takes, dict(refuse or {}), check, by_name, summary)
    REGISTRY[name] = kind
    return kind


def executor_names() -> list[str]:
    """The names ``--executor`` accepts, in registration order."""
    return [k.name for k in REGISTRY.values() if k.by_name]


def executor_kind(name: str) -> ExecutorKind:
    """The kind ``--executor NAME`` chooses; a name that is not a choice is a usage error."""
    kind = REGISTRY.get(name)
    if kind is None or not kind.by_name:
        names = executor_names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"--executor {name!r}: one of {', '.join(names)}{hint}")
    return kind


# ---- the built-in kinds -------------------------------------------------------------------

def _processes(flags: ExecutorFlags) -> Executor:
    from oloproof.recorder.processes import ProcessExecutor

    return ProcessExecutor(flags.workers or 1)


def _dask(flags: ExecutorFlags) -> Executor:
    from oloproof.recorder.dask import DaskExecutor  # Dask itself is imported when it starts

    return DaskExecutor(workers=flags.workers, scheduler=flags.scheduler)


def _check_dask(flags: ExecutorFlags) -> None:
    if flags.scheduler is not None and flags.workers is not None:
        raise UsageError("--workers sizes the LocalCluster that --executor dask starts; an existing "
                         "cluster (--scheduler) has its own workers")
    if flags.scheduler is not None and not _ADDRESS.fullmatch(flags.scheduler):
        raise UsageError(f"--scheduler {flags.scheduler!r}: expected an address like tcp://HOST:PORT")


_SERIAL_ONLY = "--executor serial runs one case at a time; drop --concurrency/--workers"
_ONE_OF = "choose one of --concurrency N (in this process) and --workers N (processes)"

register_executor("serial", lambda flags: SerialExecutor(),
                  refuse={"concurrency": _SERIAL_ONLY, "workers": _SERIAL_ONLY,
                          "scheduler": "--executor serial runs one case at a time; drop --scheduler"},
                  summary="one case at a time, in the driver's thread")
register_executor("concurrent", lambda flags: ConcurrentExecutor(flags.concurrency or 1), takes={"concurrency"},
                  refuse={"workers": _ONE_OF}, by_name=False,
                  summary="N slots in this process (async tasks, or a pool of N threads)")
register_executor("processes", _processes, takes={"workers"}, refuse={"concurrency": _ONE_OF}, by_name=False,
                  summary="N worker processes, one slot each")
register_executor("dask", _dask, takes={"workers", "scheduler"}, check=_check_dask,
                  refuse={"concurrency": "--concurrency runs cases in this process; with Dask, size the cluster "
                                         "with --workers (LocalCluster) or run one at the scheduler"},
                  summary="Dask distributed: a LocalCluster of --workers workers, or the cluster at --scheduler")

__all__ = ["FLAGS", "MAX_CONCURRENCY", "MAX_WORKERS", "REGISTRY", "ExecutorFlags", "ExecutorKind",
           "executor_kind", "executor_names", "register_executor"]

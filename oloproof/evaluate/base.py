"""Verdicts, the evaluator base class and the registry keyed by the YAML ``type``.

A verdict is ``(verdict, reason)``: ``pass``/``fail`` (reason optional), ``missing`` (not
observed: stays in the denominator) or ``excluded`` (does not apply: leaves it), the last two
always with a reason code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.views import CaseView

Verdict = tuple[str, "str | None"]

PASS: Verdict = ("pass", None)
FAIL: Verdict = ("fail", None)
VERDICTS = ("pass", "fail", "missing", "excluded")

_cache: dict[tuple[str, str], Verdict] = {}


def _verdict(kind: str, reason: str) -> Verdict:
    """Shared (interned) verdict tuples, so 50,000 cases do not hold 50,000 copies."""
    v = _cache.get((kind, reason))
    if v is None:
        v = _cache[(kind, reason)] = (kind, reason)
    return v


def missing(reason: str) -> Verdict:
    """A ``missing`` verdict with its reason code: not observed, so the case stays in the
    denominator (it is never counted as passed)."""
    return _verdict("missing", reason)


def excluded(reason: str) -> Verdict:
    """An ``excluded`` verdict with its reason code: the criterion does not apply to the case,
    which leaves the denominator."""
    return _verdict("excluded", reason)


def fail(reason: str) -> Verdict:
    """A ``fail`` verdict that carries a reason (plain :data:`FAIL` has none)."""
    return _verdict("fail", reason)


class EvaluatorConfig(BaseModel):
    """Base of every evaluator's config model: unknown keys are errors."""

    # built when first used: a project pays only for the evaluator families it uses
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: str
    criterion: str | None = None


class Evaluator:
    """One evaluator family. Subclasses set ``config_model`` and implement ``judge``.

    ``evaluate`` applies the rules every evaluator shares (a case whose system raised is
    ``missing``; a trajectory evaluator on a case that recorded no trajectory is ``missing``)
    and then calls ``judge``.
    """

    config_model: ClassVar[type[EvaluatorConfig]] = EvaluatorConfig
    #: the YAML ``type`` the family is registered under (set by :func:`evaluator`)
    type_name: ClassVar[str]
    #: the records a case must hold to be judged (a family may set it per instance, from its config)
    requires: tuple[str, ...] = ()
    #: evaluators that report compared paths implement ``evaluate_paths(case)``
    has_paths: ClassVar[bool] = False
    #: (tool, fault) when the evaluator judges fault replays: the runner runs them first
    replay_spec: tuple[str, str] | None = None
    #: the metamorphic transform whose pairs the evaluator judges, if any
    transform: str | None = None
    #: with a ``transform``: its pairs' validity labels (case id -> valid), set by the suite
    labels: dict[str, bool]

    def __init__(self, config: EvaluatorConfig):
        self.config = config
        self.criterion = config.criterion or self.default_criterion()

    def default_criterion(self) -> str:
        """The criterion name used when the config sets no ``criterion`` (each family derives
        it from its config, e.g. ``agent_tool_refund_called``)."""
        raise NotImplementedError

    def named_tools(self) -> list[tuple[tuple, str]]:
        """The tools the configuration names, each as (its path inside the evaluator's config,
        the name): the system must declare them (SPEC §18.1), checked once it is loaded,
        before any case runs. A family whose config names tools lists them here."""
        return []

    def evaluate(self, case: CaseView) -> Verdict:
        """Judge one case, applying the shared rules first.

        A case whose system raised is ``missing`` (its error kind, else ``system_error``); an
        evaluator that requires ``agent_trajectory/v1`` on a case that recorded none is
        ``missing`` (``no_trajectory_recorded``). Only then is :meth:`judge` called.
        """
        if case.error is not None:
            return missing(case.error_kind or "system_error")
        if AGENT_TRAJECTORY_V1 in self.requires and case.trajectory is None:
            return missing("no_trajectory_recorded")
        return self.judge(case)

    def judge(self, case: CaseView) -> Verdict:
        """The family's own rule over a case that ran (and recorded what ``requires`` names);
        returns a verdict (see the module docstring)."""
        raise NotImplementedError


REGISTRY: dict[str, type[Evaluator]] = {}


def evaluator(type_name: str, *, config: Any = None) -> Callable[[type[Evaluator]], type[Evaluator]]:
    """Register an evaluator family under its YAML ``type`` (``config``: its pydantic config
    model, instead of the class's ``config_model``)."""

    def register(cls: type[Evaluator]) -> type[Evaluator]:
        if config is not None:
            cls.config_model = config
        REGISTRY[type_name] = cls
        cls.type_name = type_name
        return cls

    return register


def load_entry_points() -> None:
    """Register third-party evaluators from the ``oloproof.evaluators`` entry-point group.

    Called only when a configuration names a type no built-in family has, so a plugin costs
    nothing to a project that does not use one. Loading the entry point's object is expected
    to register it with :func:`evaluator`."""
    import warnings
    from importlib.metadata import entry_points

    for ep in entry_points(group="oloproof.evaluators"):
        if ep.name in REGISTRY:
            continue
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plugin is its author's: never a crash of ours
            warnings.warn(f"evaluator plugin {ep.name!r} ({ep.value}) could not be loaded and is left out: "
                          f"{type(e).__name__}: {e}", PluginWarning, stacklevel=2)


class PluginWarning(UserWarning):
    """A third-party plugin (an ``oloproof.evaluators`` entry point) that failed to load."""


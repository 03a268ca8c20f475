"""Verdicts, the evaluator base class and the registry keyed by the YAML ``type``.

A verdict is ``(verdict, reason)``: ``pass``/``fail`` (reason optional), ``missing`` (not
observed: stays in the denominator) or ``excluded`` (does not apply: leaves it), the last two
always with a reason code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

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


NOT_SELECTED_REASON = "not_selected"
_SELECTORS = ("ids", "tags", "metadata.KEY")


class When(BaseModel):
    """``when:`` on any evaluator (SPEC §18.5): which cases it judges. Every selector given must
    hold: ``ids`` (the case's id, or its source's for a derived case, is listed), ``tags`` (the
    case carries at least one of them) and ``metadata.KEY: VALUE`` (the case's metadata at KEY —
    a dotted path for nested keys — equals VALUE). A case it does not select is ``excluded``
    with reason ``not_selected``: the question does not apply to it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    ids: list[str] | None = Field(default=None, min_length=1)
    tags: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _known_selectors(self) -> When:
        extra = self.model_extra or {}
        for key in extra:
            path = key.split(".")
            if path[0] != "metadata" or len(path) < 2 or not all(path[1:]):
                from oloproof.config.locate import did_you_mean

                raise ValueError(f"unknown selector {key!r}{did_you_mean(key, ('ids', 'tags'))} "
                                 f"(one of {', '.join(_SELECTORS)})")
        if self.ids is None and self.tags is None and not extra:
            raise ValueError(f"selects nothing: give at least one of {', '.join(_SELECTORS)}")
        return self

    def selects(self, case_id: str, source: str, tags: tuple[str, ...], metadata: Any) -> bool:
        """Whether the case (its id, its source's id, its tags, its metadata) is selected."""
        if self.ids is not None and case_id not in self.ids and source not in self.ids:
            return False
        if self.tags is not None and not any(t in tags for t in self.tags):
            return False
        for key, want in (self.model_extra or {}).items():
            value: Any = metadata
            for part in key.split(".")[1:]:
                if not isinstance(value, dict) or part not in value:
                    return False
                value = value[part]
            if type(value) is bool or type(want) is bool:  # True is no 1
                if value is not want:
                    return False
            elif value != want:
                return False
        return True


class EvaluatorConfig(BaseModel):
    """Base of every evaluator's config model: unknown keys are errors; ``when`` scopes the
    evaluator to some cases (:class:`When`)."""

    # built when first used: a project pays only for the evaluator families it uses
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    type: str
    criterion: str | None = None
    when: When | None = None


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
        #: the cases the evaluator judges (``when:``); None: every case
        self.when: When | None = getattr(config, "when", None)

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


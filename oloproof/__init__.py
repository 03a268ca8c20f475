"""Oloproof: check the world, not the transcript.

An event-sourced recording and replay engine for evaluating AI agents. The public API is
what ``__all__`` lists; everything else is private and may change.
"""

from oloproof.errors import OloproofError
from oloproof.records import (
    AgentCheckpoint,
    AgentConstraintCheck,
    AgentStep,
    AgentTrajectory,
    Case,
    CaseView,
    PrefixSnapshot,
    Verdict,
)
from oloproof.system import Replayable, Resumable, Stateful, current_case, system, tool

__version__ = "0.1.0"


def open_store(url: str, **options: object) -> object:
    """Open the event log ``url`` names: ``sqlite:///path`` or a path, or ``memory:``
    (:func:`oloproof.store.open_store`). Imported on use: ``import oloproof`` stays light."""
    from oloproof.store import open_store as open_

    return open_(url, **options)


def evaluator(type_name: str, *, config: object = None) -> object:
    """Register an evaluator family under its YAML ``type`` — a class deriving from
    ``oloproof.evaluate.base.Evaluator`` — with ``config`` its pydantic model (an
    ``EvaluatorConfig``). Third-party packages register through the ``oloproof.evaluators``
    entry-point group (docs/configuration.md, "Evaluator plugins")."""
    from oloproof.evaluate.base import evaluator as register

    return register(type_name, config=config)

__all__ = [
    "AgentCheckpoint",
    "AgentConstraintCheck",
    "AgentStep",
    "AgentTrajectory",
    "Case",
    "CaseView",
    "OloproofError",
    "PrefixSnapshot",
    "Replayable",
    "Resumable",
    "Stateful",
    "Verdict",
    "current_case",
    "evaluator",
    "open_store",
    "system",
    "tool",
]

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
    PrefixSnapshot,
)
from oloproof.system import Replayable, Resumable, Stateful, current_case, system, tool

__version__ = "0.1.0"

__all__ = [
    "AgentCheckpoint",
    "AgentConstraintCheck",
    "AgentStep",
    "AgentTrajectory",
    "Case",
    "OloproofError",
    "PrefixSnapshot",
    "Replayable",
    "Resumable",
    "Stateful",
    "current_case",
    "system",
    "tool",
]

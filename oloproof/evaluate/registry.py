"""The evaluator registry, with every built-in family registered: importing a family
registers it (``@evaluator("state_matches")``), so this module imports them all — the one
place that does, so that no family imports the registry that imports it (no import cycle).
Third-party families come from the ``oloproof.evaluators`` entry-point group
(:func:`~oloproof.evaluate.base.load_entry_points`)."""

from __future__ import annotations

from oloproof.evaluate import (  # noqa: F401  (each registers itself on import)
    claims,
    fault,
    judge,
    metamorphic,
    multiagent,
    output,
    prefix,
    python,
    release,
    state,
    tool_calls,
    trajectory,
)
from oloproof.evaluate.base import REGISTRY, Evaluator


def registry() -> dict[str, type[Evaluator]]:
    """YAML ``type`` -> evaluator family, the built-in ones and every plugin loaded so far."""
    return REGISTRY

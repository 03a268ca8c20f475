"""Small builders shared by tests."""

from __future__ import annotations

from typing import Any

from oloproof.events import ConstraintRecorded, StepRecorded
from oloproof.views import CaseView, TrajectoryView


def calls(*spec: Any, truncated: bool = False, constraints: tuple = (), status: str = "success"):
    """A TrajectoryView from (tool, args) pairs; each becomes a call and a result step."""
    steps = []
    for item in spec:
        name, args = item if isinstance(item, tuple) else (item, {})
        steps.append(StepRecorded(len(steps) + 1, "tool_call", name, args))
        steps.append(StepRecorded(len(steps) + 1, "tool_result", name, None, {"ok": True}))
    cons = [ConstraintRecorded(n, p, i) for n, p, i in constraints]
    return TrajectoryView(steps, status, truncated, 12 if truncated else None, cons, [])


def view(trajectory=None, *, expected=None, output=None, metadata=None, error=None,
         case_id="c1") -> CaseView:
    return CaseView(case_id=case_id, position=0, fingerprint="f", input={}, initial_state=None,
                    expected=expected if expected is not None else {}, metadata=metadata or {},
                    output=output if output is not None else {}, error=error,
                    error_kind="system_error" if error else None, finished=True,
                    trajectory=trajectory)

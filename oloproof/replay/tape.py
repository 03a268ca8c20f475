"""The built-in replay for ``@tool`` systems: a recorder that plays the recorded tape.

The agent is run again from the start. Calls before the checkpoint are answered from the
recorded tape without executing (a call that raised raises :class:`ReplayedToolError` again);
the changed call gets the substituted result; later calls run live. A call that does not match
the tape — another tool, other arguments — marks the replay as diverged: it can never yield a
verdict, whatever the agent does with the exception it gets.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from oloproof.events import StepRecorded, canonical_json
from oloproof.recorder.case import CaseRecorder, _frozen
from oloproof.records import Case


class ReplayDivergence(Exception):
    """The replayed agent left the recorded tape (non-determinism)."""


class ReplayedToolError(Exception):
    """A tool that raised in the recording raises this when the tape replays it."""


class TapeRecorder(CaseRecorder):
    __slots__ = ("_tape", "_resume_at", "_change", "diverged", "injected")

    def __init__(self, case: Case, tape: list[StepRecorded], resume_at: int,
                 change: dict[str, Any] | None, snapshot: Callable[[], Any] | None = None):
        super().__init__(case, snapshot=snapshot, auto_checkpoints=False)
        self._tape = {s.index: s for s in tape}
        self._resume_at = resume_at
        self._change = change
        self.diverged: str | None = None
        self.injected = change is None

    def _diverge(self, message: str) -> ReplayDivergence:
        if self.diverged is None:
            self.diverged = message
        return ReplayDivergence(message)

    def _match(self, index: int, kind: str, name: str, arguments: Any) -> StepRecorded:
        recorded = self._tape.get(index)
        if recorded is None or recorded.kind != kind or recorded.tool_name != name or \
                canonical_json(recorded.arguments) != canonical_json(arguments):
            what = "nothing" if recorded is None else \
                f"{recorded.kind} {recorded.tool_name}({canonical_json(recorded.arguments).decode()})"
            raise self._diverge(f"step {index}: the replay made {kind} {name}"
                                f"({canonical_json(arguments).decode()}) where the recording has {what}")
        return recorded

    def call_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                  kind: str = "tool") -> Any:
        if self._hand_built:
            self._guard()
        self._touched = True
        steps = self._steps
        index = len(steps) + 1
        step_kind = "decision" if kind == "model" else "tool_call"
        if index < self._resume_at:  # before the checkpoint: from the tape, not executed
            recorded = self._match(index, step_kind, name, arguments)
            steps.append(recorded)
            if step_kind == "decision":
                return copy.deepcopy(recorded.result)
            answer = self._tape.get(index + 1)
            if answer is None or answer.kind != "tool_result":
                raise self._diverge(f"step {index + 1}: the recording has no result for {name}")
            steps.append(answer)
            if answer.raised:
                err = answer.result.get("error", {}) if isinstance(answer.result, dict) else {}
                raise ReplayedToolError(f"{err.get('type', 'Error')}: {err.get('message', '')}")
            return copy.deepcopy(answer.result)
        change = self._change
        if change is not None and index == change["step_index"]:
            self._match(index, step_kind, name, arguments)
            steps.append(StepRecorded(index, "tool_call", name, _frozen(arguments)))
            steps.append(StepRecorded(index + 1, "tool_result", name, None, _frozen(change["result"])))
            self.injected = True
            return copy.deepcopy(change["result"])
        return super().call_tool(name, fn, args, kwargs, arguments, kind)

"""The built-in replay for ``@tool`` systems: a recorder that plays the recorded tape.

The agent is run again from the start. Calls before the checkpoint are answered from the
recorded tape without executing (a call that raised raises :class:`ReplayedToolError` again;
what the tool itself called is replayed with it); the changed call gets the substituted
result; later calls run live. A call that does not match the tape — another tool, other
arguments — marks the replay as diverged: it can never yield a verdict, whatever the agent
does with the exception it gets.

Calls of concurrent tasks (see :mod:`oloproof.recorder.case`) are matched by their place in
the case's task tree, not by timing: each finds the call recorded at the same place.

**Faults.** A change of kind ``timeout_after_effect`` runs the changed call live (its effect
lands in the replayed sandbox), then hands the caller the change's result (the timeout
shape); every other change answers the call without running it. A case recorded with a
declared fault (``CaseStarted.fault``) is replayed in the same world: the fault applies again
to the same call of its tool, counting the calls the tape answers before the checkpoint — so
the control replay reproduces the faulted recording (the faulted result before the
checkpoint comes from the tape; at or after it, the fault is applied again, live).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from oloproof.events import FaultKind, StepRecorded, canonical_json
from oloproof.recorder.case import Branch, CaseRecorder, _frozen
from oloproof.records import Case
from oloproof.replay.faults import RUNS_THE_TOOL
from oloproof.system import ToolCodec


class ReplayDivergence(Exception):
    """The replayed agent left the recorded tape (non-determinism)."""


class ReplayedToolError(Exception):
    """A tool that raised in the recording raises this when the tape replays it."""


def calls_before(steps: Sequence[StepRecorded], index: int, fault: dict[str, Any] | None) -> int:
    """The calls of the declared fault's tool recorded before step ``index`` (the calls a
    replay from there does not make itself)."""
    if fault is None:
        return 0
    return sum(1 for s in steps if s.index < index and s.kind == "tool_call" and s.tool_name == fault["tool"])


def _describe(step: StepRecorded | None) -> str:
    if step is None:
        return "nothing"
    return f"{step.kind} {step.tool_name}({canonical_json(step.arguments).decode()})"


class TapeRecorder(CaseRecorder):
    """The recorder of a built-in replay (SPEC §2.4): calls before ``resume_at`` are answered
    from ``tape`` without running, the call at the change's step gets its result, later calls
    run live. ``diverged`` names the first call that did not match the tape (the replay then
    yields no verdict); ``injected`` says whether the changed call was made at all."""

    __slots__ = ("_tape", "_by_index", "_by_entry", "_resume_at", "_resume_entry", "_change",
                 "_switched_at", "_pending", "diverged", "injected")

    def __init__(self, case: Case, tape: Sequence[StepRecorded], resume_at: int,
                 change: dict[str, Any] | None, snapshot: Callable[[], Any] | None = None,
                 fault: dict[str, Any] | None = None, trial: int | None = None):
        super().__init__(case, snapshot=snapshot, auto_checkpoints=False, fault=fault,
                         fault_calls=calls_before(tape, resume_at, fault), trial=trial)
        #: a timeout_after_effect change whose call runs live now: what its caller gets instead
        self._pending: dict[str, Any] | None = None
        self._tape = list(tape)
        self._by_index = {s.index: s for s in tape}
        self._by_entry: dict[tuple, list[StepRecorded]] = {}
        for s in self._tape:
            if s.branch is not None:
                self._by_entry.setdefault(tuple(s.branch), []).append(s)
        self._resume_at = resume_at
        at = self._by_index.get(resume_at)
        self._resume_entry = tuple(at.branch) if at is not None and at.branch is not None else None
        self._change = change
        self._switched_at = 0
        self.diverged: str | None = None
        self.injected = change is None

    def _diverge(self, message: str) -> ReplayDivergence:
        if self.diverged is None:
            self.diverged = message
        return ReplayDivergence(message)

    def _check(self, recorded: StepRecorded | None, where: str, kind: str, name: str,
               arguments: Any) -> StepRecorded:
        if recorded is None or recorded.kind != kind or recorded.tool_name != name or \
                canonical_json(recorded.arguments) != canonical_json(arguments):
            raise self._diverge(f"{where}: the replay made {kind} {name}"
                                f"({canonical_json(arguments).decode()}) where the recording has "
                                f"{_describe(recorded)}")
        return recorded

    @staticmethod
    def _answer(steps: Sequence[StepRecorded], codec: ToolCodec | None = None) -> Any:
        last = steps[-1]
        if last.raised and last.kind != "decision":
            err = last.result.get("error", {}) if isinstance(last.result, dict) else {}
            raise ReplayedToolError(f"{err.get('type', 'Error')}: {err.get('message', '')}")
        result = copy.deepcopy(last.result)
        return result if codec is None or last.fault is not None else codec.rebuilt(last.tool_name or "", result)

    def _fault_for(self, name: str, kind: str) -> tuple[str, Any, FaultKind | None] | None:
        declared = super()._fault_for(name, kind)  # the call counts for the declared fault
        change, self._pending = self._pending, None
        if change is not None:  # the change wins over the declared fault at its call
            return change["fault"], copy.deepcopy(change["result"]), None
        return declared

    def _changed(self, name: str, kind: str) -> bool:
        """The changed call is made: True when it runs live (``timeout_after_effect``)."""
        self.injected = True
        change = self._change
        assert change is not None
        if change.get("fault") in RUNS_THE_TOOL:
            self._pending = change
            return True
        super()._fault_for(name, kind)  # answered without running: it still counts
        if change.get("fault") == "denied":
            self._harness_denial(name, change["result"])
        return False

    def fork(self) -> Branch | None:
        if self._keys is None and not self._hand_built and not self._depth:
            self._switched_at = len(self._steps) + 1
        return super().fork()

    # ---- linear: the call at the next index --------------------------------------------

    def _from_tape(self, index: int, kind: str, name: str, arguments: Any) -> list[StepRecorded]:
        """The recorded steps of the call at ``index``: the call, what the tool called, its
        result (a model call: its one decision step)."""
        first = self._check(self._by_index.get(index), f"step {index}", kind, name, arguments)
        if kind == "decision":
            return [first]
        depth, i, out = 0, index, []
        while True:
            step = self._by_index.get(i)
            if step is None:
                raise self._diverge(f"step {index + 1}: the recording has no result for {name}")
            out.append(step)
            if step.kind == "tool_call":
                depth += 1
            elif step.kind == "tool_result":
                depth -= 1
                if depth == 0:
                    return out
            i += 1

    def call_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                  kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        answered = self._replay_call(name, arguments, kind, codec)
        if answered is not None:
            return answered[0]
        return super().call_tool(name, fn, args, kwargs, arguments, kind, codec)

    async def acall_tool(self, name: str, fn: Callable, args: tuple, kwargs: dict, arguments: dict,
                         kind: str = "tool", codec: ToolCodec | None = None) -> Any:
        answered = self._replay_call(name, arguments, kind, codec)
        if answered is not None:
            return answered[0]
        return await super().acall_tool(name, fn, args, kwargs, arguments, kind, codec)

    def _replay_call(self, name: str, arguments: dict, kind: str,
                     codec: ToolCodec | None = None) -> tuple[Any] | None:
        """``(result,)`` when the tape answers the call (or it is the changed one), ``None``
        when it runs live."""
        if self._hand_built:
            self._guard()
        self._touched = True
        step_kind = "decision" if kind == "model" else "tool_call"
        if self._keys is not None:
            return self._replay_keyed(name, arguments, step_kind, codec)
        index = len(self._steps) + 1
        change = self._change
        if index < self._resume_at:  # before the checkpoint: from the tape, not executed
            recorded = self._from_tape(index, step_kind, name, arguments)
            self._steps.extend(recorded)
            return (self._answer(recorded, codec),)
        if change is not None and index == change["step_index"]:
            self._check(self._by_index.get(index), f"step {index}", step_kind, name, arguments)
            if self._changed(name, kind):
                return None  # runs live; its caller gets the change's result (_fault_for)
            agent = self._agent()
            self._steps.append(StepRecorded(index, "tool_call", name, _frozen(arguments), agent=agent))
            self._steps.append(StepRecorded(index + 1, "tool_result", name, None, _frozen(change["result"]), agent))
            self.injected = True
            return (copy.deepcopy(change["result"]),)
        return None

    # ---- keyed: the call at the same place of the task tree ----------------------------

    def _replay_keyed(self, name: str, arguments: dict, step_kind: str,
                      codec: ToolCodec | None = None) -> tuple[Any] | None:
        branch = self._branch()
        entry = branch.path + (branch.n,)
        recorded = self._by_entry.get(entry)
        change = self._change
        if not self._by_entry:  # the recording ran no tasks: only calls past the checkpoint
            if self._switched_at >= self._resume_at:
                return None
            raise self._diverge(f"the replay started concurrent tasks before the checkpoint "
                                f"(step {self._resume_at}); the recording has none")
        where = f"task {list(branch.path)}, call {branch.n}"
        if recorded is not None and recorded[0].index < self._resume_at:
            branch.tick()
            self._check(recorded[0], where, step_kind, name, arguments)
            subtree = [s for s in self._tape if s.branch is not None and tuple(s.branch[:len(entry)]) == entry]
            for i, s in enumerate(subtree):
                self._add(entry + (0, i), tuple(s.branch or ()), s)  # (every s has a branch)
            return (self._answer([s for s in subtree if tuple(s.branch or ()) == entry], codec),)
        if change is not None and recorded is not None and recorded[0].index == change["step_index"]:
            self._check(recorded[0], where, step_kind, name, arguments)
            if self._changed(name, "model" if step_kind == "decision" else "tool"):
                return None  # runs live (the call ticks its own entry); see _fault_for
            branch.tick()
            agent = self._agent()
            self._add(entry + (0,), entry, StepRecorded(0, "tool_call", name, _frozen(arguments), agent=agent))
            self._add(entry + (2,), entry, StepRecorded(0, "tool_result", name, None, _frozen(change["result"]),
                                                        agent))
            self.injected = True
            return (copy.deepcopy(change["result"]),)
        if recorded is None and (self._resume_entry is None or entry < self._resume_entry):
            raise self._diverge(f"{where}: the replay made {step_kind} {name}"
                                f"({canonical_json(arguments).decode()}) where the recording has nothing")
        return None

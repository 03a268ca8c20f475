"""Fault recovery (SPEC §4.4, §7.1): replay the case with one tool result faulted.

For a case whose recording made the call: take the latest checkpoint before the first such
call (none → missing ``no_checkpoint``); a case that never made it is excluded
(``call_not_made``). A control replay with no change must first reproduce the recording —
same steps after the checkpoint, same terminal status, same final state — or the case is
missing (``replay_not_faithful``; ``replay_error`` when the replay raised). Then, in the fault
replay:

* **fail** (``constraint_broken``) when a recorded constraint failed after the fault;
* **fail** (``duplicate_effect``) when the replay's effect ledger (``effect_ledger/v1``: the
  recording's attempts before the checkpoint, then the replayed sandbox's) shows one
  operation applied more than once — under ``timeout_after_effect`` the effect landed and the
  agent was told it timed out: retrying with a new idempotency key charges twice, and
  escalating afterwards does not undo it. A system that records no effect ledger can show a
  duplicate only through ``expected.state``;
* **pass** when the agent called one of ``escalate_tools`` after the fault;
* **pass** when it ended in success and, if the case declares ``expected.state``, the replayed
  state satisfies it (every expected leaf); the environment wins over the agent's claim;
* **fail** otherwise: ``state_contradicts_claim``, ``ended_in_failure`` or ``agent_raised``.

Replays are run (or found in the cache) before evaluation and reach the evaluator as the
case's evidence (:meth:`~oloproof.evaluate.engine.SuiteEvaluation.evaluate`); a case whose
replays have not been run is missing (``replay_not_run``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from oloproof.evaluate.base import (
    PASS,
    Evaluator,
    EvaluatorConfig,
    Verdict,
    evaluator,
    fail,
    missing,
)
from oloproof.evaluate.paths import ABSENT, equal, walk_leaves
from oloproof.evaluate.release import ledger_counts
from oloproof.events import EffectRecorded
from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.views import NO_STATE, CaseView, ReplayView


class FaultRecoveryConfig(EvaluatorConfig):
    """Config of ``type: fault_recovery``: which ``tool``'s first result to fault, with which
    ``fault``, and the ``escalate_tools`` whose call after the fault counts as recovery."""

    tool: str = Field(min_length=1)
    fault: Literal["error", "timeout", "malformed", "timeout_after_effect", "denied"]
    escalate_tools: list[str] = []


def replay_ledger(case: CaseView, replay: ReplayView, plan: Any) -> list[EffectRecorded]:
    """The effect ledger of a replay's world: the recording's attempts before the checkpoint,
    then the replay's own from the checkpoint on.

    A built-in (tape) replay runs the agent again from the start, answering the tools before
    the checkpoint from the tape: what the agent's own code recorded before it is recorded
    again (and is the recording's, counted once), what those tools did is not. A hand-written
    ``Replayable`` resumes at the checkpoint: all it records is after it."""
    before = plan.checkpoint.step_index
    mine = [e for e in case.effects if e.step_index < before]
    if replay.started.method == "tape":
        return mine + [e for e in replay.effects if e.step_index >= before]
    return mine + list(replay.effects)


def state_satisfies(expected: object, state: object) -> bool:
    """Whether ``state`` holds every leaf of ``expected``, each present and equal (the
    comparison of :func:`oloproof.evaluate.paths.equal`); keys ``expected`` does not name are
    ignored."""
    return all(got is not ABSENT and equal(leaf, got)
               for _, leaf, got, _ in walk_leaves(expected, state, None))


@evaluator("fault_recovery")
class FaultRecovery(Evaluator):
    """``recovers_from_<fault>_at_<tool>``: whether the agent recovers when one tool result is
    faulted in a replay from the latest checkpoint before the call (SPEC §4.4, §7.1).

    The pass, fail, missing and excluded conditions are those of the module docstring; a
    truncated fault replay is missing (``truncated``) unless its prefix already decides: a
    broken constraint, a duplicate effect or an escalation call (the truncated-prefix rule).
    """

    config_model = FaultRecoveryConfig
    config: FaultRecoveryConfig
    replay_spec: tuple[str, str]
    requires = (AGENT_TRAJECTORY_V1,)

    def default_criterion(self) -> str:
        cfg: FaultRecoveryConfig = self.config
        return f"recovers_from_{cfg.fault}_at_{cfg.tool}"

    def __init__(self, config: FaultRecoveryConfig):
        super().__init__(config)
        self.replay_spec = (config.tool, config.fault)

    def named_tools(self) -> list[tuple[tuple, str]]:
        cfg: FaultRecoveryConfig = self.config
        return [(("tool",), cfg.tool), *((("escalate_tools", i), t) for i, t in enumerate(cfg.escalate_tools))]

    def judge(self, case: CaseView) -> Verdict:
        from oloproof.replay.fidelity import compare
        from oloproof.replay.plan import Plan, plan_fault

        cfg: FaultRecoveryConfig = self.config
        plan = plan_fault(case, cfg.tool)
        if not isinstance(plan, Plan):
            return plan
        pair = case.replays.get(self.replay_spec)
        if pair is None or pair.control is None:
            return missing("replay_not_run")
        control = pair.control
        if control.diverged:
            return missing("replay_not_faithful")
        if control.error_kind is not None:
            return missing("replay_error")
        if not compare(case, control, plan.checkpoint.step_index).faithful:
            return missing("replay_not_faithful")
        replay = pair.fault
        if replay is None:
            return missing("replay_not_run")
        if replay.error_kind == "replay_error":
            return missing("replay_error")
        if replay.diverged:
            return missing("replay_not_faithful")
        t = replay.trajectory
        after = [s for s in t.steps if s.index > plan.call_index + 1] if t is not None else []
        if t is not None and any(not c.passed and c.step_index > plan.call_index for c in t.constraints):
            return fail("constraint_broken")
        if any(entry["effect_count"] > 1 for entry in ledger_counts(replay_ledger(case, replay, plan)).values()):
            return fail("duplicate_effect")
        if any(s.kind == "tool_call" and s.tool_name in cfg.escalate_tools for s in after):
            return PASS
        if replay.error_kind == "system_error":
            return fail("agent_raised")
        if t is None:
            return missing("no_trajectory_recorded")
        if t.truncated:
            return missing("truncated")
        if t.terminal_status != "success":
            return fail("ended_in_failure")
        if "state" in case.expected:
            if replay.state is NO_STATE:
                return missing("no_state_recorded")
            if not state_satisfies(case.expected["state"], replay.state):
                return fail("state_contradicts_claim")
        return PASS

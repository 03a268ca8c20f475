"""Trajectory evaluators (SPEC §4.2). Each needs ``records: [agent_trajectory/v1]``.

The truncated-prefix rule: a trace with ``truncated: true`` is a prefix of what the agent
would have done. An evaluator gives a verdict on it only when every possible continuation
would give the same verdict; otherwise the case is ``missing`` with reason ``truncated``.
Each evaluator's docstring states how that rule applies to it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import Field

from oloproof.evaluate.base import (
    FAIL,
    PASS,
    Evaluator,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    missing,
)
from oloproof.events import canonical_json
from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.views import CaseView, TrajectoryView

TRUNCATED = missing("truncated")
NO_DECLARED_TOOLS = excluded("no_declared_tools")


class TrajectoryEvaluator(Evaluator):
    """Base of the families that judge the recorded trajectory: they require
    ``agent_trajectory/v1`` (a case without one is missing before they are asked) and obey
    the truncated-prefix rule (module docstring)."""

    requires = (AGENT_TRAJECTORY_V1,)

    def judge(self, case: CaseView) -> Verdict:
        """Hand the case's trajectory to :meth:`judge_trajectory`."""
        if case.trajectory is None:  # evaluate() already makes such a case missing
            return missing("no_trajectory_recorded")
        return self.judge_trajectory(case.trajectory, case)

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        """The family's rule over trajectory ``t`` of ``case``; the pass, fail, missing and
        excluded conditions, truncated traces included, are in each family's docstring."""
        raise NotImplementedError


def call_key(step: Any) -> bytes:
    """Identity of a call: the tool and its canonical arguments."""
    return canonical_json([step.tool_name, step.arguments])


def longest_identical_run(t: TrajectoryView) -> int:
    """Length of the longest run of identical consecutive tool calls."""
    best = run = 0
    previous = None
    for step in t.calls:
        key = call_key(step)
        run = run + 1 if key == previous else 1
        previous = key
        best = max(best, run)
    return best


def repeated_call(t: TrajectoryView) -> bool:
    """True when some identical call (same tool and arguments) was made more than once."""
    seen = set()
    for step in t.calls:
        key = call_key(step)
        if key in seen:
            return True
        seen.add(key)
    return False


class ToolCalledConfig(EvaluatorConfig):
    """Config of ``type: agent_tool_called``: the tool and how many calls it needs."""

    tool_name: str = Field(min_length=1)
    min_calls: int = Field(default=1, ge=1)


@evaluator("agent_tool_called")
class ToolCalled(TrajectoryEvaluator):
    """The tool was called at least ``min_calls`` times.

    Truncated: passes once the prefix holds ``min_calls`` calls; otherwise missing (the calls
    may be in the part that was not recorded).
    """

    config_model = ToolCalledConfig
    config: ToolCalledConfig

    def default_criterion(self) -> str:
        return f"agent_tool_{self.config.tool_name}_called"

    def named_tools(self) -> list[tuple[tuple, str]]:
        return [(("tool_name",), self.config.tool_name)]

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        cfg: ToolCalledConfig = self.config
        n = sum(1 for s in t.steps if s.kind == "tool_call" and s.tool_name == cfg.tool_name)
        if n >= cfg.min_calls:
            return PASS
        return TRUNCATED if t.truncated else FAIL


class NoToolLoopConfig(EvaluatorConfig):
    """Config of ``type: agent_no_tool_loop``: how many identical calls in a row are allowed."""

    max_repeats: int = Field(default=2, ge=1)


@evaluator("agent_no_tool_loop")
class NoToolLoop(TrajectoryEvaluator):
    """No identical call (same tool and arguments) repeats more than ``max_repeats`` times
    in a row.

    Truncated: fails if the prefix already holds such a loop; otherwise missing (a repetition
    that reaches the end of the trace may go on beyond it, and any continuation may loop).
    """

    config_model = NoToolLoopConfig
    config: NoToolLoopConfig

    def default_criterion(self) -> str:
        return "agent_no_tool_loop"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        if longest_identical_run(t) > self.config.max_repeats:
            return FAIL
        return TRUNCATED if t.truncated else PASS


def declared_tools(case: CaseView) -> list[str] | None:
    """The case's ``expected.tools`` list, or None when it declares none (the sequence and
    undeclared-tool families then exclude the case: ``no_declared_tools``)."""
    tools = case.expected.get("tools") if isinstance(case.expected, dict) else None
    return tools if isinstance(tools, list) else None


class ToolSequenceConfig(EvaluatorConfig):
    """Config of ``type: agent_tool_sequence``: ``ordered: false`` compares as a multiset."""

    ordered: bool = True


@evaluator("agent_tool_sequence")
class ToolSequence(TrajectoryEvaluator):
    """The tools called equal ``expected.tools`` (in order, or as a multiset with
    ``ordered: false``). No ``expected.tools`` → excluded (``no_declared_tools``);
    ``expected.tools: []`` expects no call at all.

    Truncated: fails when no continuation can match any more (ordered: the prefix is not a
    prefix of ``expected.tools``; unordered: some tool was already called more often than
    expected); otherwise missing.
    """

    config_model = ToolSequenceConfig
    config: ToolSequenceConfig

    def default_criterion(self) -> str:
        return "agent_tool_sequence"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        expected = declared_tools(case)
        if expected is None:
            return NO_DECLARED_TOOLS
        called = t.tool_names
        if self.config.ordered:
            if not t.truncated:
                return PASS if called == expected else FAIL
            return TRUNCATED if called == expected[: len(called)] else FAIL
        got, want = Counter(called), Counter(expected)
        if not t.truncated:
            return PASS if got == want else FAIL
        return FAIL if any(got[k] > want[k] for k in got) else TRUNCATED


@evaluator("agent_no_undeclared_tool")
class NoUndeclaredTool(TrajectoryEvaluator):
    """No tool outside ``expected.tools`` was called. No ``expected.tools`` → excluded.

    Truncated: fails if the prefix already called an undeclared tool; otherwise missing.
    """

    def default_criterion(self) -> str:
        return "agent_no_undeclared_tool"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        expected = declared_tools(case)
        if expected is None:
            return NO_DECLARED_TOOLS
        allowed = set(expected)
        if any(name not in allowed for name in t.tool_names):
            return FAIL
        return TRUNCATED if t.truncated else PASS


class ConstraintsConfig(EvaluatorConfig):
    """Config of ``type: agent_constraints_satisfied``: the constraint names (at least one)."""

    constraints: list[str] = Field(min_length=1)


@evaluator("agent_constraints_satisfied")
class ConstraintsSatisfied(TrajectoryEvaluator):
    """Every named constraint the environment recorded passed.

    A recorded failure of a named constraint fails the case (on a truncated trace too: the
    prefix already broke it). A named constraint that was never recorded makes the case
    missing (``constraint_not_recorded``): an unchecked rule is not a passed one. A truncated
    trace whose recorded checks all passed is missing: the rest of the trace could break one.
    """

    config_model = ConstraintsConfig
    config: ConstraintsConfig

    def default_criterion(self) -> str:
        return "agent_constraints_satisfied"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        names = set(self.config.constraints)
        seen = set()
        for check in t.constraints:
            if check.name in names:
                if not check.passed:
                    return FAIL
                seen.add(check.name)
        if seen != names:
            return missing("constraint_not_recorded")
        return TRUNCATED if t.truncated else PASS


class MaxStepsConfig(EvaluatorConfig):
    """Config of ``type: agent_max_steps``: the most steps a trace may have."""

    max_steps: int = Field(ge=0)


@evaluator("agent_max_steps")
class MaxSteps(TrajectoryEvaluator):
    """The trace had at most ``max_steps`` steps.

    Truncated: fails once the prefix has more than ``max_steps`` steps (they already prove
    the limit was exceeded); otherwise missing.
    """

    config_model = MaxStepsConfig
    config: MaxStepsConfig

    def default_criterion(self) -> str:
        return f"agent_steps_le_{self.config.max_steps}"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        if len(t.steps) > self.config.max_steps:
            return FAIL
        return TRUNCATED if t.truncated else PASS

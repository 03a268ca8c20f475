"""Multi-agent evaluators (SPEC §6). Each step names the agent that took it; a ``handoff``
step passes control to ``to_agent`` (a receiver that takes no step, such as a person, is on
the route only through the handoff); control also changes hands when the next step is taken
by another agent. A trajectory that names no agent is missing (``no_agents_recorded``) for
every multi-agent criterion; one that names only some is rejected when recorded.

Truncated traces follow the prefix rule: a verdict only when the prefix decides it.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from oloproof.evaluate.base import (
    FAIL,
    PASS,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    missing,
)
from oloproof.evaluate.trajectory import TRUNCATED, TrajectoryEvaluator
from oloproof.views import CaseView, TrajectoryView

NO_AGENTS = missing("no_agents_recorded")


def route(t: TrajectoryView) -> list[str] | None:
    """The agents that held control, consecutive repeats collapsed, handoff receivers
    included; ``None`` when the trajectory names no agent."""
    out: list[str] = []
    for s in t.steps:
        if s.agent is None:
            return None
        if not out or out[-1] != s.agent:
            out.append(s.agent)
        if s.kind == "handoff" and s.to_agent and out[-1] != s.to_agent:
            out.append(s.to_agent)
    return out if t.steps else None


def handoffs(t: TrajectoryView) -> int | None:
    """How many times control changed hands (the route's length less one); ``None`` when
    the trajectory names no agent."""
    r = route(t)
    return None if r is None else max(0, len(r) - 1)


class MultiAgentEvaluator(TrajectoryEvaluator):
    """Base of the multi-agent families (SPEC §6): computes the route, then calls
    :meth:`judge_route`."""

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        """Missing (``no_agents_recorded``) when the trajectory names no agent (or has no
        steps); otherwise :meth:`judge_route` on its route."""
        r = route(t)
        if r is None:
            return NO_AGENTS
        return self.judge_route(r, t, case)

    def judge_route(self, r: list[str], t: TrajectoryView, case: CaseView) -> Verdict:
        """The family's rule over route ``r`` (see :func:`route`) of trajectory ``t``; the
        conditions, truncated traces included, are in each family's docstring."""
        raise NotImplementedError


@evaluator("agent_route")
class AgentRoute(MultiAgentEvaluator):
    """The route equals ``expected.route``; no ``expected.route`` → excluded
    (``no_expected_route``). Truncated: fails once the route is no prefix of the expected one
    (a route only grows), else missing."""

    def default_criterion(self) -> str:
        return "agent_route"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        """Excluded (``no_expected_route``) before anything else when the case declares no
        ``expected.route`` list; otherwise the shared multi-agent rule."""
        if not isinstance(case.expected.get("route"), list):
            return excluded("no_expected_route")
        return super().judge_trajectory(t, case)

    def judge_route(self, r: list[str], t: TrajectoryView, case: CaseView) -> Verdict:
        expected = case.expected["route"]
        if not t.truncated:
            return PASS if r == expected else FAIL
        return TRUNCATED if r == expected[: len(r)] else FAIL


class PermissionsConfig(EvaluatorConfig):
    """Config of ``type: agent_tool_permissions``: agent name -> the tools it may call."""

    permissions: dict[str, list[str]]

    @field_validator("permissions")
    @classmethod
    def _names(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for agent, tools in v.items():
            if not agent or any(not isinstance(x, str) or not x for x in tools):
                raise ValueError(f"permissions of {agent!r} must be a list of tool names")
        return v


@evaluator("agent_tool_permissions")
class ToolPermissions(MultiAgentEvaluator):
    """Every tool call was made by an agent the map allows to call that tool. The map is
    closed: an agent it does not name may call nothing. Truncated: a violation in the prefix
    fails, else missing."""

    config_model = PermissionsConfig
    config: PermissionsConfig

    def default_criterion(self) -> str:
        return "agent_tool_permissions"

    def named_tools(self) -> list[tuple[tuple, str]]:
        permissions = self.config.permissions
        return [(("permissions", agent, i), t) for agent, tools in permissions.items() for i, t in enumerate(tools)]

    def judge_route(self, r: list[str], t: TrajectoryView, case: CaseView) -> Verdict:
        allowed = self.config.permissions
        for s in t.calls:
            if s.agent is None or s.tool_name not in allowed.get(s.agent, ()):
                return FAIL
        return TRUNCATED if t.truncated else PASS


class MaxHandoffsConfig(EvaluatorConfig):
    """Config of ``type: agent_max_handoffs``: the most times control may change hands."""

    max_handoffs: int = Field(ge=0)


@evaluator("agent_max_handoffs")
class MaxHandoffs(MultiAgentEvaluator):
    """Control changed hands at most ``max_handoffs`` times. Truncated: fails once the prefix
    exceeds it, else missing."""

    config_model = MaxHandoffsConfig
    config: MaxHandoffsConfig

    def default_criterion(self) -> str:
        return f"agent_handoffs_le_{self.config.max_handoffs}"

    def judge_route(self, r: list[str], t: TrajectoryView, case: CaseView) -> Verdict:
        if len(r) - 1 > self.config.max_handoffs:
            return FAIL
        return TRUNCATED if t.truncated else PASS

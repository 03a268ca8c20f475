"""Metamorphic relations (SPEC §4.5, §7.2): the same request, modified, should leave the
world the same. One verdict per pair, given on the derived case ``<source>~<transform>``;
every other case is excluded (``not_a_pair``).

* ``same_output`` — the outputs are equal;
* ``same_actions`` — the same sequence of tool calls with the same arguments (a truncated
  trace fails once the prefixes differ, else is missing);
* ``same_state`` — the final environment states are equal.

A pair labelled invalid by a person is excluded (``invalid_transform``). Whether the labels
cover the pairs and enough of them are valid is the gate's question
(``transform_not_checked``), not this evaluator's.
"""

from __future__ import annotations

from typing import Literal

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
from oloproof.records import AGENT_TRAJECTORY_V1, ENVIRONMENT_STATE_V1
from oloproof.views import NO_STATE, CaseView


class RelationConfig(EvaluatorConfig):
    """Config of ``type: metamorphic_relation``: which ``relation`` must hold between a source
    case and its derived case under ``transform`` (a name from ``metamorphic.transforms``)."""

    relation: Literal["same_output", "same_actions", "same_state"]
    transform: str = Field(min_length=1)


def actions(case: CaseView) -> list[bytes]:
    """The case's tool calls in order, each as the canonical JSON of ``[tool, arguments]``
    (what ``same_actions`` compares); the case must have a trajectory."""
    if case.trajectory is None:
        raise ValueError(f"case {case.case_id!r} recorded no trajectory")
    return [canonical_json([s.tool_name, s.arguments]) for s in case.trajectory.calls]


@evaluator("metamorphic_relation")
class MetamorphicRelation(Evaluator):
    """``<relation>_under_<transform>``: one verdict per pair, on its derived case (module
    docstring). ``requires`` follows the relation: a trajectory for ``same_actions``, the
    environment state for ``same_state``, nothing for ``same_output``."""

    config_model = RelationConfig
    config: RelationConfig

    def __init__(self, config: RelationConfig):
        super().__init__(config)
        relation = config.relation
        self.requires = ((AGENT_TRAJECTORY_V1,) if relation == "same_actions" else
                         (ENVIRONMENT_STATE_V1,) if relation == "same_state" else ())
        self.transform = config.transform
        self.suffix = "~" + self.transform
        self.labels: dict[str, bool] = {}

    def default_criterion(self) -> str:
        return f"{self.config.relation}_under_{self.config.transform}"

    def evaluate(self, case: CaseView) -> Verdict:
        """Judge the pair whose derived case is ``case``.

        Excluded when ``case`` is not ``<source>~<transform>`` (``not_a_pair``) or a person
        labelled the pair invalid (``invalid_transform``); missing when its source case was
        not recorded (``pair_not_recorded``) or either side raised; otherwise :meth:`compare`
        on (source, derived).
        """
        if not case.case_id.endswith(self.suffix):
            return excluded("not_a_pair")
        if self.labels.get(case.case_id) is False:
            return excluded("invalid_transform")
        source = case.pair_source
        if source is None:
            return missing("pair_not_recorded")
        for side in (source, case):
            if side.error is not None:
                return missing(side.error_kind or "system_error")
        return self.compare(source, case)

    def compare(self, a: CaseView, b: CaseView) -> Verdict:
        """Whether the relation holds between ``a`` and ``b`` (canonical JSON equality).

        ``same_state``: missing when either side recorded no state. ``same_actions``: missing
        when either recorded no trajectory; with a truncated side, FAIL once the common
        prefix of calls differs or the side with fewer calls is complete (the other went
        on past its end), else missing (``truncated``) — a truncated trace cannot decide what came after.
        """
        relation = self.config.relation
        if relation == "same_output":
            return PASS if canonical_json(a.output) == canonical_json(b.output) else FAIL
        if relation == "same_state":
            if a.state is NO_STATE or b.state is NO_STATE:
                return missing("no_state_recorded")
            return PASS if canonical_json(a.state) == canonical_json(b.state) else FAIL
        if a.trajectory is None or b.trajectory is None:
            return missing("no_trajectory_recorded")
        x, y = actions(a), actions(b)
        if a.trajectory.truncated or b.trajectory.truncated:
            n = min(len(x), len(y))
            if x[:n] != y[:n]:
                return FAIL
            longer_done = (len(x) > n and not b.trajectory.truncated) or (len(y) > n and not a.trajectory.truncated)
            return FAIL if longer_done else missing("truncated")
        return PASS if x == y else FAIL

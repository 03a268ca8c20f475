"""Metamorphic relations (SPEC §4.5, §7.2): the same request, modified, should leave the
world the same. One verdict per pair, given on the derived case ``<source>~<transform>``;
every other case is excluded (``not_a_pair``).

* ``same_output`` — the outputs are equal;
* ``same_actions`` — the same sequence of tool calls with the same arguments (a truncated
  trace fails once the prefixes differ, else is missing);
* ``same_state`` — the final environment states are equal.

``ignore_paths`` leaves paths of the compared outputs or states out (SPEC §18.5): a transform
that writes attacker text into ``initial_state`` makes the final states differ there by
construction, so ``same_state`` under it must ignore that path (checked with the
configuration, :meth:`MetamorphicRelation.transform_problem`).

A pair labelled invalid by a person is excluded (``invalid_transform``). Whether the labels
cover the pairs and enough of them are valid is the gate's question
(``transform_not_checked``), not this evaluator's.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from oloproof.config.paths import replace_at
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
from oloproof.evaluate.paths import ABSENT, Path, PathError, format_path, parse_path, resolve
from oloproof.events import canonical_json
from oloproof.records import AGENT_TRAJECTORY_V1, ENVIRONMENT_STATE_V1
from oloproof.views import NO_STATE, CaseView


class RelationConfig(EvaluatorConfig):
    """Config of ``type: metamorphic_relation``: which ``relation`` must hold between a source
    case and its derived case under ``transform`` (a name from ``metamorphic.transforms``),
    and the ``ignore_paths`` left out of the comparison (paths into the final state for
    ``same_state``, into the output for ``same_output``; each must parse; not for
    ``same_actions``)."""

    relation: Literal["same_output", "same_actions", "same_state"]
    transform: str = Field(min_length=1)
    ignore_paths: list[str] = []

    @field_validator("ignore_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                parse_path(p)
            except PathError as e:
                raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _ignore_what_is_compared(self) -> RelationConfig:
        if self.ignore_paths and self.relation == "same_actions":
            raise ValueError("ignore_paths leaves paths of the final state (same_state) or of the output "
                             "(same_output) out of the comparison; same_actions compares tool calls")
        return self


#: what an ignored list item is replaced with on both sides (the items after it keep their place)
IGNORED = "<ignored>"


def without(value: Any, paths: list[Path]) -> Any:
    """``value`` with the values at ``paths`` left out: an object's key removed (so a key present
    on one side only is no difference), a list item replaced by :data:`IGNORED`; a path that
    leads nowhere changes nothing. ``value`` itself is never changed."""
    for path in paths:
        if resolve(value, path) is ABSENT:
            continue
        parent, last = path[:-1], path[-1]
        container = resolve(value, parent)
        if isinstance(container, dict):
            value = replace_at(value, parent, {k: v for k, v in container.items() if k != str(last)})
        else:
            value = replace_at(value, path, IGNORED)
    return value


def _empty(value: Any) -> bool:
    """Nothing to compare: no value, an empty object or list, or only ignored list items."""
    if isinstance(value, dict):
        return not value
    if isinstance(value, list):
        return all(item == IGNORED for item in value)
    return value is None or value is ABSENT


def covers(ignored: Path, path: Path) -> bool:
    """Whether ignoring ``ignored`` leaves ``path`` out too (it is ``path`` or above it)."""
    return len(ignored) <= len(path) and all(str(a) == str(b) for a, b in zip(ignored, path))


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
        self._ignored = [parse_path(p) for p in config.ignore_paths]
        relation = config.relation
        self.requires = ((AGENT_TRAJECTORY_V1,) if relation == "same_actions" else
                         (ENVIRONMENT_STATE_V1,) if relation == "same_state" else ())
        self.transform = config.transform
        self.suffix = "~" + self.transform
        self.labels: dict[str, bool] = {}

    def default_criterion(self) -> str:
        return f"{self.config.relation}_under_{self.config.transform}"

    def transform_problem(self, transform: Any) -> str | None:
        """Why the relation cannot hold under ``transform`` (its TransformConfig), or None: a
        ``same_state`` relation over a transform that writes into ``initial_state`` compares
        final states that start different at the rewritten path, unless ``ignore_paths``
        leaves it (or a path above it) out."""
        if self.config.relation != "same_state" or transform.root != "initial_state":
            return None
        if any(covers(p, transform.path) for p in self._ignored):
            return None
        where = format_path(transform.path)
        return (f"same_state under transform {transform.name!r} compares final states that start different at "
                f"{where} (the transform rewrites {transform.label}): add ignore_paths: [{where!r}] (or a path "
                "above it) to compare the rest of the state")

    def _same(self, a: Any, b: Any) -> Verdict:
        if self._ignored:
            left, right = without(a, self._ignored), without(b, self._ignored)
            if _empty(left) and _empty(right) and not (_empty(a) and _empty(b)):
                return missing("nothing_compared")  # the ignored paths were all there was
            a, b = left, right
        return PASS if canonical_json(a) == canonical_json(b) else FAIL

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
        """Whether the relation holds between ``a`` and ``b`` (canonical JSON equality, the
        ``ignore_paths`` left out of outputs or states).

        ``same_state``: missing when either side recorded no state. ``same_output`` and
        ``same_state``: missing (``nothing_compared``) when ``ignore_paths`` left nothing of
        either side (what they ignore was all there was: no pass). ``same_actions``: missing
        when either recorded no trajectory; with a truncated side, FAIL once the common
        prefix of calls differs or the side with fewer calls is complete (the other went
        on past its end), else missing (``truncated``) — a truncated trace cannot decide what came after.
        """
        relation = self.config.relation
        if relation == "same_output":
            return self._same(a.output, b.output)
        if relation == "same_state":
            if a.state is NO_STATE or b.state is NO_STATE:
                return missing("no_state_recorded")
            return self._same(a.state, b.state)
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

"""Prefix-case evaluators (SPEC §14, §14a): did the candidate choose an acceptable next action?

A prefix case (``CaseStarted.prefix``) holds the frozen steps before its boundary and the
acceptable and forbidden next actions. Its recording holds what the candidate did: the
frozen steps again (answered from the tape, or handed to ``resume``), then its first action
past the boundary — recorded, not executed. :func:`classify` reads the two side by side:

* the candidate's steps before the boundary differ from the frozen ones (another tool, other
  arguments, an early final answer), or it ended before reaching the boundary: ``diverged``
  (the boundary was never met: missing, not failed);
* its first action at or past the boundary (a tool call, a message, a handoff or a final
  answer; model decisions in between are not actions) matches a forbidden action:
  ``forbidden`` (``critical`` when that matcher says so) — forbidden wins over acceptable;
* it matches an acceptable action: ``acceptable``; none: ``other``;
* the candidate returned without acting: ``no_action``.

Criteria: ``prefix_action_acceptable`` (pass when acceptable; over the regression cases —
those not marked ``retention: true``), ``retention_action_acceptable`` (the same over the
retention set, reported apart: curing premature completion must not breed an agent that
never finishes), ``irreversible_action_acceptable`` (the cases marked ``irreversible: true``:
run with trials, their pass^k is the number to read) and ``no_critical_forbidden_action``
(fails for a critical forbidden action: its failures are the count
``critical_forbidden_actions``, gated with ``max_failures: 0``, never folded into a share).
A stale case errored when it was recorded (``stale``) and is missing for every criterion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal, TypedDict

from oloproof.evaluate.base import PASS, Evaluator, EvaluatorConfig, Verdict, evaluator, excluded, fail, missing
from oloproof.events import StepRecorded, canonical_json
from oloproof.views import CaseView

ACTION_KINDS = ("tool_call", "message", "final", "handoff")
#: characters of a message a ``message:`` matcher searches
MESSAGE_LIMIT = 20_000
SETS = {"regression": "prefix_action_acceptable", "retention": "retention_action_acceptable",
        "irreversible": "irreversible_action_acceptable", "all": "prefix_action_acceptable_all"}


@dataclass(frozen=True)
class PrefixOutcome:
    """What the candidate did at a prefix case's boundary."""

    status: str  # acceptable | forbidden | other | no_action | diverged | not_prefix | errored
    step: int | None = None  # the action's step (or where the candidate left the frozen path)
    action: str = ""  # the action, described
    matched: str = ""  # the matcher it met
    critical: bool = False
    detail: str = ""
    retention: bool = False
    irreversible: bool = False
    matchers: list[str] = field(default_factory=list)


def describe_step(step: StepRecorded) -> str:
    """A step in a few words for reports: ``tool({args})``, ``message '...'``,
    ``final '...'`` or ``handoff <agent>`` (arguments and texts cut to 120 characters)."""
    if step.kind == "tool_call":
        args = canonical_json(step.arguments).decode() if step.arguments is not None else ""
        return f"{step.tool_name}({args[:120]})"
    if step.kind == "message":
        text = step.arguments.get("text") if isinstance(step.arguments, dict) else step.arguments
        return f"message {str(text)[:120]!r}"
    if step.kind == "final":
        text = step.result.get("text") if isinstance(step.result, dict) else step.result
        return f"final {str(text)[:120]!r}"
    return f"{step.kind} {step.to_agent or step.tool_name or ''}".strip()


def _same(recorded: StepRecorded, frozen: dict[str, Any]) -> bool:
    if recorded.kind != frozen["kind"]:
        return False
    if recorded.kind in ("tool_call", "decision"):
        return recorded.tool_name == frozen.get("tool_name") and \
            canonical_json(recorded.arguments) == canonical_json(frozen.get("arguments"))
    return True


def _arguments_match(pattern: dict[str, Any], arguments: Any) -> bool:
    if not isinstance(arguments, dict):
        return False
    for key, want in pattern.items():
        if key not in arguments:
            return False
        got = arguments[key]
        # text globs ignore case: a forbidden {env: production} also catches "Production"
        if isinstance(want, list) and want and all(isinstance(w, str) for w in want):
            if not any(fnmatchcase(str(got).casefold(), w.casefold()) for w in want):  # any of several globs
                return False
        elif isinstance(want, str):
            if not fnmatchcase(str(got).casefold(), want.casefold()):
                return False
        elif got != want or isinstance(got, bool) != isinstance(want, bool):
            return False  # true is no 1, false no 0
    return True


def claims_all_supported(steps: list[StepRecorded], final: StepRecorded) -> bool:
    """Whether every claim of ``final`` (default patterns) is supported by the tool results
    recorded before it (:mod:`oloproof.evaluate.claims`); True for a final without claims."""
    from oloproof.evaluate.claims import check_claims, default_patterns

    return all(c.status == "supported" for c in check_claims(steps, final, default_patterns()))


def matches(matcher: dict[str, Any], step: StepRecorded, steps: list[StepRecorded]) -> bool:
    """Whether the action ``step`` meets ``matcher`` (oloproof.config.prefixes.ActionMatcher)."""
    if matcher.get("tool") is not None:
        return step.kind == "tool_call" and fnmatchcase(step.tool_name or "", matcher["tool"]) and \
            (matcher.get("arguments") is None or _arguments_match(matcher["arguments"], step.arguments))
    if matcher.get("final"):
        if step.kind != "final":
            return False
        want = matcher.get("claims_supported")
        return want is None or claims_all_supported(steps, step) == want
    if matcher.get("message") is not None:
        if step.kind != "message":
            return False
        text = step.arguments.get("text") if isinstance(step.arguments, dict) else step.arguments
        # the first MESSAGE_LIMIT characters: a pattern's time grows with the text it searches
        return re.search(matcher["message"], str(text)[:MESSAGE_LIMIT], re.IGNORECASE) is not None
    return False


class _Flags(TypedDict):
    """What a prefix case is about, beside its boundary (see :class:`PrefixOutcome`)."""

    retention: bool
    irreversible: bool


def describe_matcher(m: dict[str, Any]) -> str:
    """An action matcher (a stored ``ActionMatcher`` dict) in words, marked ``(critical)``
    when it is."""
    from oloproof.config.prefixes import ActionMatcher

    return ActionMatcher.model_validate(m).describe() + (" (critical)" if m.get("critical") else "")


def classify(case: CaseView) -> PrefixOutcome:
    """What the candidate did at the boundary of prefix case ``case`` (see the module)."""
    prefix = case.started.prefix if case.started is not None else None
    if prefix is None:
        return PrefixOutcome("not_prefix")
    flags: _Flags = {"retention": bool(prefix.get("retention")), "irreversible": bool(prefix.get("irreversible"))}
    if case.error is not None:
        return PrefixOutcome("errored", detail=case.error, **flags)
    before = int(prefix["boundary"]["before_step"])
    frozen = prefix["steps"]
    first = len(frozen) + 1  # the candidate's first action (before_step, or 1 for a snapshot-only record)
    steps = list(case.trajectory.steps) if case.trajectory is not None else []
    for i, want in enumerate(frozen):
        if i >= len(steps):
            return PrefixOutcome("diverged", len(steps) + 1, detail=f"the candidate stopped after step {len(steps)}, "
                                 f"before the boundary (step {before})", **flags)
        if not _same(steps[i], want):
            return PrefixOutcome("diverged", i + 1, describe_step(steps[i]),
                                 detail=f"step {i + 1}: the candidate made {describe_step(steps[i])} where the "
                                        "frozen trajectory has "
                                        f"{want['kind']} {want.get('tool_name') or ''}".rstrip(), **flags)
    action = next((s for s in steps[first - 1:] if s.kind in ACTION_KINDS), None)
    if action is None:
        return PrefixOutcome("no_action", detail="the candidate returned without acting", **flags)
    described = describe_step(action)
    for m in prefix.get("forbidden_actions") or []:
        if matches(m, action, steps):
            return PrefixOutcome("forbidden", action.index, described, describe_matcher(m), bool(m.get("critical")),
                                 **flags)
    for m in prefix.get("acceptable_actions") or []:
        if matches(m, action, steps):
            return PrefixOutcome("acceptable", action.index, described, describe_matcher(m), **flags)
    return PrefixOutcome("other", action.index, described, **flags)


class PrefixActionConfig(EvaluatorConfig):
    """Config of ``type: prefix_action``: the set of prefix cases its criterion judges."""

    #: which prefix cases the criterion judges (the others are excluded)
    cases: Literal["regression", "retention", "irreversible", "all"] = "regression"


def _in_set(outcome: PrefixOutcome, which: str) -> bool:
    if which == "regression":
        return not outcome.retention
    if which == "retention":
        return outcome.retention
    if which == "irreversible":
        return outcome.irreversible
    return True


@evaluator("prefix_action")
class PrefixAction(Evaluator):
    """Passes when the candidate's next action at the boundary is acceptable (not forbidden);
    fails when it is forbidden (``forbidden_critical``, ``forbidden``), matches nothing listed
    (``other``) or there is none (``no_action``); missing when the candidate left the frozen
    path before the boundary (``diverged``) or the case is stale (``stale``). A case outside
    the criterion's set is excluded (``not_in_set``); a case that is no prefix case,
    ``not_a_prefix_case``."""

    config_model = PrefixActionConfig
    config: PrefixActionConfig

    def default_criterion(self) -> str:
        return SETS[self.config.cases]

    def evaluate(self, case: CaseView) -> Verdict:
        """Excluded when ``case`` is no prefix case (``not_a_prefix_case``) or outside the
        configured set (``not_in_set``); then the shared rules (a stale or raising case is
        missing) and :meth:`judge`."""
        # set membership first: a stale retention case is missing for the retention criterion,
        # and outside the irreversible one (not missing there)
        prefix = case.started.prefix if case.started is not None else None
        if prefix is None:
            return excluded("not_a_prefix_case")
        flags = PrefixOutcome("", retention=bool(prefix.get("retention")),
                              irreversible=bool(prefix.get("irreversible")))
        if not _in_set(flags, self.config.cases):
            return excluded("not_in_set")
        return super().evaluate(case)

    def judge(self, case: CaseView) -> Verdict:
        """Pass for an ``acceptable`` outcome, missing for ``diverged``, fail otherwise with
        the outcome as reason (:func:`classify`)."""
        return _verdict(classify(case))


def _verdict(outcome: PrefixOutcome) -> Verdict:
    status = outcome.status
    if status == "acceptable":
        return PASS
    if status == "diverged":
        return missing("diverged")
    if status == "forbidden":
        return fail("forbidden_critical" if outcome.critical else "forbidden")
    return fail(status)  # other | no_action


@evaluator("critical_forbidden")
class CriticalForbidden(Evaluator):
    """Fails (``critical_forbidden``) when the next action is a forbidden action marked
    ``critical: true``; passes for any other action. Its failures are the count of critical
    forbidden actions — the metric ``critical_forbidden_actions`` in the results (gate the
    criterion with ``max_failures: 0``). Missing as ``prefix_action`` is."""

    #: the results report this criterion's failures as a count of their own
    count_metric = "critical_forbidden_actions"

    def default_criterion(self) -> str:
        return "no_critical_forbidden_action"

    def evaluate(self, case: CaseView) -> Verdict:
        """Excluded for a case that is no prefix case (``not_a_prefix_case``); otherwise the
        shared rules and :meth:`judge`."""
        if case.started is None or case.started.prefix is None:
            return excluded("not_a_prefix_case")
        return super().evaluate(case)

    def judge(self, case: CaseView) -> Verdict:
        """Missing when the candidate diverged before the boundary; fail
        (``critical_forbidden``) for a critical forbidden action; pass for anything else —
        a non-critical forbidden action, another action, or none at all."""
        outcome = classify(case)
        if outcome.status == "diverged":
            return missing("diverged")
        if outcome.status == "forbidden" and outcome.critical:
            return fail("critical_forbidden")
        return PASS


#: the evaluators every prefix run has (``prefix.evaluators`` adds to them)
PREFIX_EVALUATORS: list[dict[str, Any]] = [
    {"type": "prefix_action", "cases": "regression"},
    {"type": "prefix_action", "cases": "retention"},
    {"type": "prefix_action", "cases": "irreversible"},
    {"type": "critical_forbidden"},
]

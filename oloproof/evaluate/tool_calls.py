"""``agent_tool_calls``: the tool calls, with their arguments, against ``expected.tool_calls``
(SPEC §18.5). Needs ``records: [agent_trajectory/v1]``.

A case's ``expected.tool_calls`` is a list of ``{"tool": NAME, "arguments": {…}}``; each
argument value is a literal or a matcher (:mod:`oloproof.evaluate.matchers`). A recorded call
(a ``tool_call`` step) matches an expected one when the tool is the same and every named
argument matches; arguments the expectation does not name are ignored unless
``exact_arguments`` is true (then the recorded call has exactly the named keys, at every
depth). An expected call without ``arguments`` accepts any arguments.

``order``:

* ``strict`` — exactly these calls, in this order, and no other;
* ``in_order`` — these calls appear in this order; with ``extra_calls: allow`` other calls may
  come before, between and after them (the expected calls are a subsequence), with
  ``forbid`` it is ``strict``;
* ``any_order`` — the calls matched as a multiset (each expected call to a distinct recorded
  call); with ``forbid`` no recorded call is left over.

The alignment: in order, each expected call takes the first later recorded call that matches
it (earliest first is optimal: if any alignment exists, this one does); in any order, a
maximum matching (augmenting paths). Expected calls left unaligned are *missing*, recorded
calls left over are *extra*. A complete trace passes when no expected call is missing and
(under ``forbid``) no call is extra.

The truncated-prefix rule: on a truncated trace a continuation can only add calls. Under
``forbid`` an extra call is already fatal (no continuation removes it): fail; so is, in order
(``strict``, ``in_order``), an expected call missing before one already made (no continuation
puts a call before it). Under ``allow`` a trace whose expected calls are all aligned stays so:
pass. Anything else may still go either way: missing (``truncated``).

``expected.tool_calls: []`` expects no call; a case without ``expected.tool_calls`` is
excluded (``no_expected_calls``).

Every comparison is reported for the case panel as a
:class:`~oloproof.evaluate.state.PathCheck`: a row ``tool_calls[i]`` per expected call
(expected: its tool; recorded: the tool of the call it was aligned with, or — when none
matched — of the nearest candidate; the note names the step), a row
``tool_calls[i].arguments.KEY`` per named argument (and per unexpected key under
``exact_arguments``) with the reason of a mismatch, and a row ``step N`` per extra call under
``forbid``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import model_validator

from oloproof.evaluate.base import (
    FAIL,
    PASS,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    missing,
)
from oloproof.evaluate.matchers import Mismatch, mismatch
from oloproof.evaluate.paths import ABSENT
from oloproof.evaluate.state import PathCheck, max_matching
from oloproof.evaluate.trajectory import TRUNCATED, TrajectoryEvaluator
from oloproof.events import StepRecorded
from oloproof.views import CaseView, TrajectoryView

NO_EXPECTED_CALLS = excluded("no_expected_calls")


class ToolCallsConfig(EvaluatorConfig):
    """Config of ``type: agent_tool_calls``: ``order`` (``strict``, ``in_order`` or
    ``any_order``), ``extra_calls`` (``allow`` or ``forbid``; ``strict`` forbids them) and
    ``exact_arguments``."""

    order: Literal["strict", "in_order", "any_order"] = "strict"
    #: None: ``forbid`` (strict allows no other call, and says so if asked to)
    extra_calls: Literal["allow", "forbid"] | None = None
    exact_arguments: bool = False

    @model_validator(mode="after")
    def _strict_has_no_extras(self) -> ToolCallsConfig:
        if self.order == "strict" and self.extra_calls == "allow":
            raise ValueError("order 'strict' allows no other call; for the expected calls in order with "
                             "others between them, use order: in_order with extra_calls: allow")
        return self

    @property
    def allow_extra(self) -> bool:
        """Whether calls beyond the expected ones are allowed."""
        return self.extra_calls == "allow"


@dataclass(frozen=True)
class Alignment:
    """Expected calls aligned with recorded ones: ``pairs[i]`` is the index (into the
    recorded calls) of the call expected call ``i`` matched, or None; ``extra`` the recorded
    calls no expected call took, in order."""

    pairs: tuple[int | None, ...]
    extra: tuple[int, ...]

    @property
    def missing(self) -> int:
        """How many expected calls no recorded call matched."""
        return sum(1 for p in self.pairs if p is None)


def expected_calls(case: CaseView) -> list[dict[str, Any]] | None:
    """The case's ``expected.tool_calls``, or None when it has none (or a shape the case-file
    check refuses: a stored run from before that check)."""
    calls = case.expected.get("tool_calls") if isinstance(case.expected, Mapping) else None
    if not isinstance(calls, list):
        return None
    if not all(isinstance(c, dict) and isinstance(c.get("tool"), str)
               and isinstance(c.get("arguments", {}), dict) for c in calls):
        return None
    return calls


def _arguments(step: StepRecorded) -> Any:
    return {} if step.arguments is None else step.arguments


def call_mismatch(want: Mapping[str, Any], step: StepRecorded, exact: bool) -> Mismatch | None:
    """Why recorded call ``step`` does not match expected call ``want``, or None when it does."""
    if step.tool_name != want["tool"]:
        return Mismatch("tool", f"called {step.tool_name!r}, not {want['tool']!r}")
    if "arguments" not in want:
        return None
    return mismatch(want["arguments"], _arguments(step), exact=exact, path="arguments")


def align(expected: Sequence[Mapping[str, Any]], calls: Sequence[StepRecorded], order: str,
          exact: bool) -> Alignment:
    """Align the expected calls with the recorded ``calls`` (module docstring): in order
    (``strict``, ``in_order``) or as a maximum matching (``any_order``)."""
    ok = [[call_mismatch(want, step, exact) is None for step in calls] for want in expected]
    pairs: list[int | None]
    if order == "any_order":
        pairs = _max_matching(ok, len(calls))
    else:
        pairs, at = [], 0
        for row in ok:
            j = next((j for j in range(at, len(calls)) if row[j]), None)
            pairs.append(j)
            if j is not None:
                at = j + 1
    taken = {j for j in pairs if j is not None}
    return Alignment(tuple(pairs), tuple(j for j in range(len(calls)) if j not in taken))


def _max_matching(ok: list[list[bool]], n: int) -> list[int | None]:
    """A maximum matching of expected calls (rows) to recorded calls
    (:func:`~oloproof.evaluate.state.max_matching`: rows and columns tried in order, so a
    matching that keeps the order is preferred when there is one)."""
    return max_matching([[j for j in range(n) if row[j]] for row in ok], n)


def skipped(a: Alignment) -> frozenset[int]:
    """The expected calls left unaligned before an aligned one (in order): a continuation of
    the trace cannot put a call before one already made."""
    last = max((i for i, j in enumerate(a.pairs) if j is not None), default=-1)
    return frozenset(i for i in range(last) if a.pairs[i] is None)


def verdict_of(a: Alignment, allow_extra: bool, truncated: bool, ordered: bool = False) -> Verdict:
    """The verdict of an alignment (module docstring, the truncated-prefix rule included);
    ``ordered``: the calls were aligned in order (``strict``, ``in_order``)."""
    if a.extra and not allow_extra:
        return FAIL
    if not a.missing:
        return PASS if allow_extra or not truncated else TRUNCATED
    if truncated and ordered and not allow_extra and skipped(a):
        return FAIL  # exactly these calls in this order: one is missing before a call already made
    return TRUNCATED if truncated else FAIL


@evaluator("agent_tool_calls")
class ToolCalls(TrajectoryEvaluator):
    """The calls made match ``expected.tool_calls``, arguments included (module docstring:
    ``order``, ``extra_calls``, ``exact_arguments``, the truncated-prefix rule). No
    ``expected.tool_calls`` → excluded (``no_expected_calls``); ``[]`` expects no call. Every
    expected call, argument and extra call is reported for the case panel."""

    config_model = ToolCallsConfig
    config: ToolCallsConfig
    has_paths = True

    def default_criterion(self) -> str:
        return "agent_tool_calls"

    def judge_trajectory(self, t: TrajectoryView, case: CaseView) -> Verdict:
        return self._judge(t, case)[0]

    def evaluate_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        """The verdict and the compared calls (module docstring); a case that raised or
        recorded no trajectory is missing with nothing compared."""
        if case.error is not None:
            return missing(case.error_kind or "system_error"), []
        if case.trajectory is None:
            return missing("no_trajectory_recorded"), []
        return self._judge(case.trajectory, case)

    def _judge(self, t: TrajectoryView, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        expected = expected_calls(case)
        if expected is None:
            if "tool_calls" in case.expected:
                return missing("invalid_expected_calls"), []
            return NO_EXPECTED_CALLS, []
        cfg = self.config
        calls = t.calls
        a = align(expected, calls, cfg.order, cfg.exact_arguments)
        ordered = cfg.order != "any_order"
        verdict = verdict_of(a, cfg.allow_extra, t.truncated, ordered)
        decided = skipped(a) if ordered and not cfg.allow_extra else frozenset()
        return verdict, self._checks(expected, calls, a, t.truncated, decided)

    # ---- what the panel shows ---------------------------------------------------------------

    def _checks(self, expected: list[dict[str, Any]], calls: list[StepRecorded], a: Alignment,
                truncated: bool, decided: frozenset[int] = frozenset()) -> list[PathCheck]:
        crit, exact, allow = self.criterion, self.config.exact_arguments, self.config.allow_extra
        free = set(a.extra)  # shown once: as the nearest candidate of an expected call, or as extra
        out: list[PathCheck] = []
        for i, want in enumerate(expected):
            j = a.pairs[i]
            path = f"tool_calls[{i}]"
            if j is not None:
                step = calls[j]
                out.append(PathCheck(crit, path, "pass", expected=want["tool"], recorded=step.tool_name,
                                     note=f"step {step.index}"))
                out.extend(self._arguments(path, want, step, exact))
                continue
            near = _nearest(want, calls, free, exact)
            if near is None:
                pending = truncated and i not in decided  # a missing call before a made one is decided
                out.append(PathCheck(crit, path, "missing" if pending else "fail", expected=want["tool"],
                                     note="not called" + (" in the recorded prefix (truncated)" if pending else
                                                          " before the calls that came after it" if truncated
                                                          else "")))
                continue
            free.discard(near)
            step = calls[near]
            # the candidate is an extra call: under forbid that fails even a truncated trace
            unmatched = "missing" if truncated and allow else "fail"
            why = call_mismatch(want, step, exact)
            if why is None:  # it matches, but the order took it elsewhere (or it came too early)
                note = f"step {step.index} matches, but out of the expected order"
            else:
                note = f"nearest: step {step.index}; {why}"
            out.append(PathCheck(crit, path, unmatched, expected=want["tool"], recorded=step.tool_name, note=note))
            if step.tool_name == want["tool"]:
                out.extend(self._arguments(path, want, step, exact))
        if not allow:
            for j in sorted(free):
                step = calls[j]
                out.append(PathCheck(crit, f"step {step.index}", "fail",
                                     recorded={"tool": step.tool_name, "arguments": step.arguments},
                                     note="extra call (extra_calls: forbid)"))
        return out

    def _arguments(self, path: str, want: Mapping[str, Any], step: StepRecorded, exact: bool) -> list[PathCheck]:
        if "arguments" not in want:
            return []
        crit = self.criterion
        got = _arguments(step)
        if not isinstance(got, Mapping):
            return [PathCheck(crit, f"{path}.arguments", "fail", expected=want["arguments"], recorded=got,
                              note="the recorded arguments are not an object")]
        rows = []
        for key, pattern in want["arguments"].items():
            where = f"{path}.arguments.{key}"
            if key not in got:
                rows.append(PathCheck(crit, where, "fail", expected=pattern, recorded=ABSENT,
                                      note="not in the recorded arguments"))
                continue
            why = mismatch(pattern, got[key], exact=exact)
            rows.append(PathCheck(crit, where, "pass" if why is None else "fail", expected=pattern,
                                  recorded=got[key], note=None if why is None else str(why)))
        if exact:
            for key in got:
                if key not in want["arguments"]:
                    rows.append(PathCheck(crit, f"{path}.arguments.{key}", "fail", recorded=got[key],
                                          note="not an expected argument (exact_arguments)"))
        return rows


def _nearest(want: Mapping[str, Any], calls: Sequence[StepRecorded], free: set[int], exact: bool) -> int | None:
    """For an expected call no recorded call was aligned with: the free recorded call that
    comes closest (the same tool, then the most named arguments matching), to show why it
    did not match; None when no free call has the tool."""
    best: tuple[int, int] | None = None
    named = want.get("arguments")
    for j in sorted(free):
        step = calls[j]
        if step.tool_name != want["tool"]:
            continue
        got = _arguments(step)
        score = 0
        if isinstance(named, Mapping) and isinstance(got, Mapping):
            score = sum(1 for k, v in named.items() if k in got and mismatch(v, got[k], exact=exact) is None)
        if best is None or score > best[0]:
            best = (score, j)
    return None if best is None else best[1]


def call_criteria(evaluators: Sequence[Any]) -> frozenset[str]:
    """The criteria of the ``agent_tool_calls`` evaluators among ``evaluators``: the case panel
    shows their checks as expected calls beside recorded ones, apart from state paths."""
    return frozenset(e.criterion for e in evaluators if isinstance(e, ToolCalls))

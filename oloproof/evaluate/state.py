"""Environment-state evaluators (SPEC §4.3, §18.5). Each needs ``records: [environment_state/v1]``.

They compare the state the sandbox was left in (the ``environment_state/v1`` snapshot) with
``expected.state``, with ``initial_state``, or with the changes ``expected.state_delta``
declares relative to ``initial_state``, and report every path they compared: initial,
expected and recorded value and the verdict, which the case panel shows. A case whose system
recorded no state is ``missing`` (``no_state_recorded``), never ``pass``. The state is the
environment's, not the agent's, so a truncated trace changes nothing here.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from pydantic import Field, field_validator

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
from oloproof.evaluate.matchers import is_matcher, matches, mismatch
from oloproof.evaluate.paths import (
    ABSENT,
    Path,
    PathError,
    equal,
    format_path,
    leaves,
    parse_path,
    resolve,
    walk_leaves,
)
from oloproof.records import ENVIRONMENT_STATE_V1
from oloproof.views import NO_STATE, CaseView


class PathCheck(msgspec.Struct, frozen=True, omit_defaults=True):
    """One compared path, as the case panel and the JSON results show it."""

    criterion: str
    path: str
    verdict: str
    initial: Any = msgspec.UNSET
    expected: Any = msgspec.UNSET
    recorded: Any = msgspec.UNSET
    note: str | None = None
    #: the ``state_delta`` op the path was checked with (``appended`` …); None for the other
    #: state evaluators, whose ``expected`` is the value itself
    op: str | None = None


def _paths(v: list[str]) -> list[str]:
    for p in v:
        try:
            parse_path(p)
        except PathError as e:
            raise ValueError(str(e)) from None
    return v


class StateMatchesConfig(EvaluatorConfig):
    """Config of ``type: state_matches``: ``mode`` (``whole`` or ``subset``), the ``paths``
    to compare (None: the whole state; each must parse) and the numeric ``tolerance``."""

    mode: Literal["whole", "subset"] = "whole"
    paths: list[str] | None = None
    tolerance: float = Field(default=0.0, ge=0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, v: list[str] | None) -> list[str] | None:
        return v if v is None else _paths(v)


class StateUnchangedConfig(EvaluatorConfig):
    """Config of ``type: state_unchanged``: the paths that must keep their initial value (at
    least one; each must parse) and the numeric ``tolerance``."""

    paths: list[str] = Field(min_length=1)
    tolerance: float = Field(default=0.0, ge=0)

    @field_validator("paths")
    @classmethod
    def _check_paths(cls, v: list[str]) -> list[str]:
        return _paths(v)


class StateEvaluator(Evaluator):
    """Base of the environment-state families: they require ``environment_state/v1`` and
    report every path they compared (``has_paths``) beside the verdict."""

    requires = (ENVIRONMENT_STATE_V1,)
    has_paths = True

    def judge(self, case: CaseView) -> Verdict:
        """The verdict of :meth:`judge_paths`, without its path checks."""
        return self.judge_paths(case)[0]

    def evaluate_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        """The verdict and the compared paths: missing with no paths when the system raised,
        otherwise :meth:`judge_paths`."""
        if case.error is not None:
            return missing(case.error_kind or "system_error"), []
        return self.judge_paths(case)

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        """The family's rule over the recorded state: the verdict and every path compared.
        A case that recorded no state is missing (``no_state_recorded``), never a pass; the
        other conditions are in each family's docstring."""
        raise NotImplementedError

    def check(self, path: Path, initial: Any, expected: Any, recorded: Any, ok: bool,
              note: str | None = None) -> PathCheck:
        """A :class:`PathCheck` of this criterion for ``path``, ``pass`` when ``ok``; a
        recorded value that is absent gets the note "not in the recorded state" unless
        another note is given."""
        if recorded is ABSENT and note is None:
            note = "not in the recorded state"
        return PathCheck(self.criterion, format_path(path), "pass" if ok else "fail",
                         initial, expected, recorded, note)


@evaluator("state_matches")
class StateMatches(StateEvaluator):
    """The recorded state equals ``expected.state``.

    ``mode: whole`` — equal; ``mode: subset`` — every leaf of the expected state equals the
    recorded leaf. With ``paths``, only those paths are compared (a path the case's expected
    state does not mention is skipped). Numeric leaves match within ``tolerance``. No
    ``expected.state`` (or nothing left to compare) → excluded (``no_expected_state``).
    """

    config_model = StateMatchesConfig
    config: StateMatchesConfig

    def __init__(self, config: StateMatchesConfig):
        super().__init__(config)
        paths = config.paths
        self._roots: list[Path] = [()] if paths is None else [parse_path(p) for p in paths]

    def default_criterion(self) -> str:
        return "state_matches"

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        cfg: StateMatchesConfig = self.config
        if "state" not in case.expected:
            return excluded("no_expected_state"), []
        if case.state is NO_STATE:
            return missing("no_state_recorded"), []
        expected_state, recorded, initial = case.expected["state"], case.state, case.initial_state
        roots = self._roots
        checks: list[PathCheck] = []
        tol = cfg.tolerance
        for root in roots:
            exp = resolve(expected_state, root)
            if exp is ABSENT:
                continue
            rec = resolve(recorded, root)
            if cfg.mode == "subset":
                crit = self.criterion
                for path, leaf, got, before in walk_leaves(exp, rec, resolve(initial, root), format_path(root)):
                    ok = got is not ABSENT and equal(leaf, got, tol)
                    checks.append(PathCheck(crit, path, "pass" if ok else "fail", before, leaf, got,
                                            None if got is not ABSENT else "not in the recorded state"))
            else:
                checks.extend(self._whole(root, exp, rec, initial, tol))
        if not checks:
            return excluded("no_expected_state"), []
        return (PASS if all(c.verdict == "pass" for c in checks) else FAIL), checks

    def _whole(self, root: Path, exp: Any, rec: Any, initial: Any, tol: float) -> list[PathCheck]:
        if rec is ABSENT:
            return [self.check(root, resolve(initial, root), exp, ABSENT, False)]
        if equal(exp, rec, tol):
            return [self.check(root, resolve(initial, root), exp, rec, True)]
        checks = []
        seen = set()
        for sub, leaf in leaves(exp):
            got = resolve(rec, sub)
            seen.add(sub)
            path = root + sub
            checks.append(self.check(path, resolve(initial, path), leaf, got,
                                     got is not ABSENT and equal(leaf, got, tol)))
        for sub, leaf in leaves(rec):
            if sub not in seen and resolve(exp, sub) is ABSENT:
                path = root + sub
                checks.append(self.check(path, resolve(initial, path), ABSENT, leaf, False,
                                         "not in the expected state"))
        if all(c.verdict == "pass" for c in checks):  # e.g. a container leaf vs nested values
            checks.append(self.check(root, resolve(initial, root), exp, rec, False))
        return checks


@evaluator("state_unchanged")
class StateUnchanged(StateEvaluator):
    """Every listed path still holds its ``initial_state`` value.

    A path absent from the case's ``initial_state`` is listed but not compared; when no path
    can be compared the case is excluded (``path_not_in_initial_state``).
    """

    config_model = StateUnchangedConfig
    config: StateUnchangedConfig

    def __init__(self, config: StateUnchangedConfig):
        super().__init__(config)
        self._paths = [(parse_path(p), format_path(parse_path(p))) for p in config.paths]

    def default_criterion(self) -> str:
        return "state_unchanged"

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        cfg: StateUnchangedConfig = self.config
        if case.state is NO_STATE:
            return missing("no_state_recorded"), []
        checks = []
        compared = 0
        crit, tol = self.criterion, cfg.tolerance
        for path, text in self._paths:
            before = resolve(case.initial_state, path)
            after = resolve(case.state, path)
            if before is ABSENT:
                checks.append(PathCheck(crit, text, "excluded", recorded=after, note="not in initial_state"))
                continue
            compared += 1
            ok = after is not ABSENT and equal(before, after, tol)
            checks.append(PathCheck(crit, text, "pass" if ok else "fail", before, before, after,
                                    None if after is not ABSENT else "not in the recorded state"))
        if not compared:
            return excluded("path_not_in_initial_state"), checks
        return (PASS if all(c.verdict != "fail" for c in checks) else FAIL), checks


#: floats in ``state_delta`` are equal when they differ by at most this share of the largest
#: magnitude involved (this much, below 1): the rounding of float arithmetic (~1e-16 an
#: operation), far below a cent on a balance of a billion. Two integers compare exactly.
DELTA_REL_TOL = 1e-12


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _close(a: float, b: float, *scale: float) -> bool:
    if type(a) is int and type(b) is int:
        return a == b
    try:
        return a == b or abs(a - b) <= DELTA_REL_TOL * max(1.0, abs(a), abs(b), *(abs(x) for x in scale))
    except OverflowError:  # an integer beyond any float beside a float: compared as exact fractions
        from fractions import Fraction

        fa, fb = Fraction(a), Fraction(b)
        return abs(fa - fb) <= Fraction(DELTA_REL_TOL) * max(Fraction(1), abs(fa), abs(fb),
                                                             *(abs(Fraction(x)) for x in scale))


def same(a: Any, b: Any) -> bool:
    """Deep equality as ``state_delta`` judges it: floats within :data:`DELTA_REL_TOL`
    (relative), integers exactly, ``True`` is not ``1``, objects with the same keys, lists item by item."""
    if _is_number(a) and _is_number(b):
        return _close(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def item_matches(pattern: Any, item: Any, exact: bool = False) -> bool:
    """Whether ``item`` matches ``pattern`` as ``state_delta`` reads it: a matcher
    (``{"$regex": …}``, ``{"$approx": …}``…, :mod:`oloproof.evaluate.matchers`) by its meaning;
    an object matches an object holding its keys (``exact``: exactly its keys), each value
    matching in turn; a list matches a list of the same length item by item; anything else
    is :func:`same`. ``appended``/``removed`` items match as subsets, ``set`` exactly."""
    if is_matcher(pattern):
        return matches(pattern, item, exact=exact)
    if isinstance(pattern, dict):
        return isinstance(item, dict) and (not exact or pattern.keys() == item.keys()) and \
            all(k in item and item_matches(v, item[k], exact) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(item, list) and len(pattern) == len(item) and \
            all(item_matches(p, x, exact) for p, x in zip(pattern, item))
    return same(pattern, item)


def _why(pattern: Any, item: Any) -> str:
    """Where and why ``item`` does not match ``pattern``, for a note."""
    found = mismatch(pattern, item)
    return str(found) if found is not None else "it differs"


def _leftovers(old: list[Any], new: list[Any]) -> tuple[list[int], list[int]]:
    """(indexes of ``old`` items with no equal item in ``new``, indexes of ``new`` items
    left over), pairing equal items one to one (the same position first, so a list that only
    grew is paired in one pass)."""
    used = [False] * len(new)
    gone = []
    for i, item in enumerate(old):
        if i < len(new) and not used[i] and same(item, new[i]):
            used[i] = True
            continue
        for j, candidate in enumerate(new):
            if not used[j] and same(item, candidate):
                used[j] = True
                break
        else:
            gone.append(i)
    return gone, [j for j, u in enumerate(used) if not u]


def _assign(patterns: list[Any], items: list[Any]) -> list[int | None]:
    """For each pattern, the index of the item it is paired with in a maximum one-to-one
    pairing of patterns with items they match (augmenting paths: a greedy pairing could
    give an item to a pattern that another needed more), or None."""
    return max_matching([[j for j, it in enumerate(items) if item_matches(p, it)] for p in patterns],
                        len(items))


def max_matching(fits: list[list[int]], n: int) -> list[int | None]:
    """A maximum one-to-one pairing of rows with the items ``fits[row]`` lists (of ``n``):
    for each row, its item or None. Kuhn's augmenting paths, rows and items tried in order (so
    a pairing that keeps the order is preferred when there is one), searched with a stack of
    its own: an augmenting path as long as the rows (thousands of expected calls or appended
    items) cannot exhaust Python's."""
    owner: list[int | None] = [None] * n  # item -> row
    free = [True] * n
    first: list[int | None] = []
    for adj in fits:  # each row takes its first free item: most rows need no search at all
        j = next((j for j in adj if free[j]), None)
        if j is not None:
            free[j] = False
        first.append(j)
    for row, item in enumerate(first):
        if item is not None:
            owner[item] = row
    for root, taken in enumerate(first):
        if taken is not None:
            continue
        seen: set[int] = set()
        stack = [[root, 0]]  # [row, next position in fits[row]]
        path: list[int] = []  # path[i]: the item leading from stack[i] to stack[i + 1]
        while stack:
            top = stack[-1]
            row, k = top
            adj = fits[row]
            while k < len(adj) and adj[k] in seen:
                k += 1
            if k == len(adj):
                stack.pop()
                if path:
                    path.pop()
                continue
            j = adj[k]
            top[1] = k + 1
            seen.add(j)
            held = owner[j]
            if held is None:  # augment: each row on the stack takes the item after it
                for (r, _), item in zip(stack, [*path, j]):
                    owner[item] = r
                break
            path.append(j)
            stack.append([held, 0])
    out: list[int | None] = [None] * len(fits)
    for item, held_by in enumerate(owner):
        if held_by is not None:
            out[held_by] = item
    return out


def _nowhere(path: Path, initial: Any, state: Any) -> str:
    """Why ``path`` leads nowhere in either state, for a note: in neither, or — a path into a
    string (``name[0]``), a number — where it stops, and what is there."""
    for side, value in (("initial_state", initial), ("the recorded state", state)):
        for i in range(len(path), 0, -1):
            stop = resolve(value, path[:i])
            if stop is ABSENT:
                continue
            if i < len(path) and not isinstance(stop, (dict, list)):
                kind = "null" if stop is None else "text" if isinstance(stop, str) else type(stop).__name__
                return (f"{format_path(path[:i])} is {kind} ({_short(stop, 40)}) in {side}: "
                        f"the path cannot go into it")
            break
    return "in neither initial_state nor the recorded state"


def _num(x: float, sign: bool = False) -> str:
    if isinstance(x, float):
        x = round(x, 9)
        if x.is_integer():
            x = int(x)
    text = repr(x)
    return f"+{text}" if sign and x > 0 else text


def _items(n: int) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _short(value: Any, limit: int = 80) -> str:
    from oloproof.events import canonical_json

    text = canonical_json(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


@evaluator("state_delta")
class StateDelta(StateEvaluator):
    """The state changed from ``initial_state`` as ``expected.state_delta`` declares (SPEC §18.5).

    Each delta ``{path, op, value}`` is checked and reported on its own (a :class:`PathCheck`
    with its ``op``: initial, expected and recorded value, verdict and what was wrong):

    * ``set`` — the value at ``path`` is now ``value``;
    * ``unchanged`` — it still holds its initial value;
    * ``appended`` — the list at ``path`` (absent initially: empty) kept every initial item,
      grew by exactly ``len(value)`` items, and each item of ``value`` matches a distinct new
      item as a subset (:func:`item_matches`), in any position;
    * ``removed`` — each item of ``value`` matches (as a subset) a distinct item of the initial
      list that is gone, and nothing else is gone (an item changed in place is gone);
    * ``length_delta`` — the length (a list's items, an object's keys; absent initially: 0)
      now minus initially is ``value``;
    * ``increased_by`` / ``decreased_by`` — the number at ``path`` changed by exactly
      ``value`` (floats within :data:`DELTA_REL_TOL` of the largest magnitude: rounding; the
      change between two integers is exact, so their size widens nothing).

    Floats compare within :data:`DELTA_REL_TOL` throughout, integers exactly. No ``expected.state_delta`` →
    excluded (``no_expected_state_delta``); no recorded state → missing
    (``no_state_recorded``). A delta whose path is in neither state cannot be judged (a typo
    cannot pass): its check is ``missing``, and the case is missing (``path_not_found``) unless
    another delta failed. The state is the environment's, so a truncated trace changes
    nothing here.
    """

    def default_criterion(self) -> str:
        return "state_delta"

    def judge_paths(self, case: CaseView) -> tuple[Verdict, list[PathCheck]]:
        if "state_delta" not in case.expected:
            return excluded("no_expected_state_delta"), []
        if case.state is NO_STATE:
            return missing("no_state_recorded"), []
        from oloproof.config.cases import state_delta_problem

        deltas = case.expected["state_delta"]
        problem = state_delta_problem(deltas)  # a log written before cases were checked for it
        if problem is not None:
            return missing("invalid_state_delta"), [PathCheck(self.criterion, problem[0], "missing",
                                                              note=problem[1])]
        checks = [self._delta(d, case.initial_state, case.state) for d in deltas]
        if any(c.verdict == "fail" for c in checks):
            return FAIL, checks
        if any(c.verdict == "missing" for c in checks):
            return missing("path_not_found"), checks
        return PASS, checks

    def _delta(self, delta: dict[str, Any], initial: Any, state: Any) -> PathCheck:
        path = parse_path(delta["path"])
        op, value = delta["op"], delta.get("value", ABSENT)
        before, after = resolve(initial, path), resolve(state, path)
        expected = before if op == "unchanged" else value
        note: str | None
        if before is ABSENT and after is ABSENT:
            verdict, note = "missing", _nowhere(path, initial, state)
        else:
            problems = getattr(self, "_" + op)(before, after, value)
            verdict, note = ("fail", "; ".join(problems)) if problems else ("pass", None)
        return PathCheck(self.criterion, format_path(path), verdict, before, expected, after, note, op)

    # each op: the problems found (empty: the delta holds); both sides are never both absent

    def _set(self, before: Any, after: Any, value: Any) -> list[str]:
        if after is ABSENT:
            return ["not in the recorded state"]
        if item_matches(value, after, exact=True):
            return []
        if before is not ABSENT and same(before, after):
            return ["not changed"]
        return ["a different value" if not is_matcher(value) else _why(value, after)]

    def _unchanged(self, before: Any, after: Any, value: Any) -> list[str]:
        if before is ABSENT:
            return ["not in initial_state, now set"]
        if after is ABSENT:
            return ["not in the recorded state (removed)"]
        return [] if same(before, after) else ["changed"]

    @staticmethod
    def _lists(before: Any, after: Any, before_absent_is_empty: bool) -> tuple[Any, Any, list[str]]:
        if before is ABSENT and before_absent_is_empty:
            before = []
        if before is ABSENT:
            return before, after, ["not in initial_state"]
        if after is ABSENT:
            return before, after, ["not in the recorded state"]
        for side, v in (("initial", before), ("recorded", after)):
            if not isinstance(v, list):
                return before, after, [f"the {side} value is not a list"]
        return before, after, []

    def _appended(self, before: Any, after: Any, value: list[Any]) -> list[str]:
        before, after, problems = self._lists(before, after, True)
        if problems:
            return problems
        gone, fresh = _leftovers(before, after)
        if gone:
            problems.append(f"{_items(len(gone))} of the initial list gone (initial [{gone[0]}]: "
                            f"{_short(before[gone[0]], 60)})")
        if len(fresh) != len(value):
            problems.append(f"{_items(len(fresh))} appended, expected {len(value)}")
        new_items = [after[j] for j in fresh]
        for k, j in enumerate(_assign(value, new_items)):
            if j is None:
                problems.append(f"item {k} of value not found among the new items"
                                + (f" {_short(new_items)}" if new_items else "")
                                + (f" ({_why(value[k], new_items[0])})" if len(new_items) == 1 else ""))
        return problems

    def _removed(self, before: Any, after: Any, value: list[Any]) -> list[str]:
        before, after, problems = self._lists(before, after, False)
        if problems:
            return problems
        gone, _ = _leftovers(before, after)
        if len(gone) != len(value):
            problems.append(f"{_items(len(gone))} gone, expected {len(value)}")
        gone_items = [before[i] for i in gone]
        for k, j in enumerate(_assign(value, gone_items)):
            if j is None:
                if not any(item_matches(value[k], it) for it in before):
                    problems.append(f"item {k} of value matches no item of the initial list")
                else:
                    problems.append(f"item {k} of value is still there")
        return problems

    def _length_delta(self, before: Any, after: Any, value: int) -> list[str]:
        if before is ABSENT:
            before = []
        if after is ABSENT:
            return ["not in the recorded state"]
        for side, v in (("initial", before), ("recorded", after)):
            if not isinstance(v, (list, dict)):
                return [f"the {side} value is not a list or an object"]
        change = len(after) - len(before)
        if change == value:
            return []
        return [f"length changed by {_num(change, True)} ({len(before)} → {len(after)}), expected {_num(value, True)}"]

    def _increased_by(self, before: Any, after: Any, value: float) -> list[str]:
        return self._by(before, after, value)

    def _decreased_by(self, before: Any, after: Any, value: float) -> list[str]:
        return self._by(before, after, -value)

    def _by(self, before: Any, after: Any, want: float) -> list[str]:
        if before is ABSENT:
            return ["not in initial_state"]
        if after is ABSENT:
            return ["not in the recorded state"]
        for side, v in (("initial", before), ("recorded", after)):
            if not _is_number(v):
                return [f"the {side} value is not a number"]
        try:
            change = after - before
        except OverflowError:  # a float beside an integer beyond any float
            from fractions import Fraction

            exact = Fraction(after) - Fraction(before)
            change = int(exact) if exact.denominator == 1 or abs(exact) >= 2 ** 1023 else float(exact)
        # only float operands round: two integers' difference is exact, whatever their size
        if _close(change, want, *(x for x in (before, after) if isinstance(x, float))):
            return []
        return [f"changed by {_num(change, True)} ({_num(before)} → {_num(after)}), expected {_num(want, True)}"]

"""The grammar of value matchers in case files (SPEC §18.5): what an expected value may say,
checked when the case file is read so that a bad matcher is a located case-file error (exit 2)
before anything runs. What a matcher *means* — matching a recorded value — is
:mod:`oloproof.evaluate.matchers`, which uses this module's checks and compiled regexes.

An expected value is a literal or a matcher. A matcher is a JSON object whose keys begin with
``$`` (an object with any such key is a matcher, and every key must then be one of these):

* ``{"$regex": "…"}`` — a string the pattern matches as a whole (``re.fullmatch``);
* ``{"$approx": X, "$tol": T}`` — a number within ``T`` of ``X`` (absolute; ``$tol`` defaults
  to :data:`DEFAULT_TOLERANCE`);
* ``{"$in": [A, B, …]}`` — a value matching one of the alternatives;
* ``{"$any": true}`` — any value (the key must still be there);
* ``{"$contains": X}`` — a string holding the substring ``X``, or a list with an element
  matching ``X``.

Matchers nest inside objects and lists, and ``$in`` alternatives and a ``$contains`` element
may themselves be matchers. A ``$regex`` pattern is at most :data:`MAX_REGEX_LENGTH`
characters, must compile, and may not repeat — without bound, or more than once
(``{2,}``, ``{10}``) — a part that itself repeats without bound (``(a+)+``, ``(.*,)*``,
``(.*,){10}``): on a text that almost matches, such a pattern backtracks exponentially (or
as a high power of the text's length). An atomic group ``(?>…)`` or a possessive quantifier
(``a++``) does not backtrack, so ``(?>\\d+,)*`` and ``(\\d++\\.){3}`` are accepted. The check
is cheap and incomplete by design: it does not see overlapping alternatives (``(a|a)*``,
``(a|a?)+``), and it refuses some patterns that would not backtrack (``(\\d+\\.){3}``: write
``\\d++``). Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator
from typing import Any

from oloproof.config.locate import did_you_mean

#: every matcher key; ``$tol`` only beside ``$approx``
MATCHER_KEYS = ("$regex", "$approx", "$tol", "$in", "$any", "$contains")
#: the keys that say what a matcher does (exactly one per matcher)
OPERATORS = ("$regex", "$approx", "$in", "$any", "$contains")
#: ``$tol`` when a ``$approx`` matcher gives none (absolute)
DEFAULT_TOLERANCE = 1e-6
MAX_REGEX_LENGTH = 500


class MatcherError(ValueError):
    """A matcher that does not parse; ``field`` is where it sits (``expected.tool_calls[0]
    .arguments.amount``), the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def is_matcher(value: Any) -> bool:
    """Whether ``value`` is a matcher: an object with a key beginning with ``$``."""
    return isinstance(value, dict) and any(isinstance(k, str) and k.startswith("$") for k in value)


def is_number(value: Any) -> bool:
    """An int or a finite float, never a bool (``True`` is not ``1``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _quote(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_pattern(value: Any, field: str) -> None:
    """Check an expected value (a literal, or matchers nested in objects and lists) against
    the grammar of the module docstring; raise :class:`MatcherError` naming the first bad
    place (``field`` is the value's own place, e.g. ``expected.tool_calls[0].arguments.x``)."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        v, where = stack.pop()
        if is_matcher(v):
            stack.extend(reversed(list(_check_matcher(v, where))))
        elif isinstance(v, dict):
            stack.extend(reversed([(x, f"{where}.{k}") for k, x in v.items()]))
        elif isinstance(v, list):
            stack.extend(reversed([(x, f"{where}[{i}]") for i, x in enumerate(v)]))


def _check_matcher(m: dict[str, Any], where: str) -> Iterator[tuple[Any, str]]:
    """Check one matcher object; yield the values inside it that are patterns in turn."""
    for key in m:
        if key not in MATCHER_KEYS:
            raise MatcherError(where, f"unknown matcher {_quote(key)}{did_you_mean(key, MATCHER_KEYS)} "
                                      f"(matchers: {', '.join(MATCHER_KEYS)}; an object with a key "
                                      "beginning with '$' is a matcher)")
    ops = [k for k in m if k in OPERATORS]
    if len(ops) != 1:
        shown = "none" if not ops else ", ".join(ops)
        raise MatcherError(where, f"a matcher has exactly one of {', '.join(OPERATORS)}, this one has {shown}")
    op = ops[0]
    if "$tol" in m and op != "$approx":
        raise MatcherError(where, "'$tol' goes only with '$approx'")
    arg = m[op]
    if op == "$regex":
        if not isinstance(arg, str):
            raise MatcherError(where, f"'$regex' takes a pattern (a string), got {_quote(arg)}")
        try:
            compile_regex(arg)
        except ValueError as e:
            raise MatcherError(where, f"'$regex' {e}") from None
    elif op == "$approx":
        if not is_number(arg):
            raise MatcherError(where, f"'$approx' takes a number, got {_quote(arg)}")
        tol = m.get("$tol", DEFAULT_TOLERANCE)
        if not is_number(tol) or tol < 0:
            raise MatcherError(where, f"'$tol' takes a number >= 0 (an absolute tolerance), got {_quote(tol)}")
    elif op == "$in":
        if not isinstance(arg, list) or not arg:
            raise MatcherError(where, f"'$in' takes a non-empty list of alternatives, got {_quote(arg)}")
        yield from ((x, f"{where}.$in[{i}]") for i, x in enumerate(arg))
    elif op == "$any":
        if arg is not True:
            raise MatcherError(where, f"'$any' takes true (any value, as long as it is there), got {_quote(arg)}")
    else:  # $contains
        yield arg, f"{where}.$contains"


# ---- regexes --------------------------------------------------------------------------------

def compile_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled (cached), or :class:`ValueError` saying why not: longer than
    :data:`MAX_REGEX_LENGTH`, not a valid regular expression, or an unbounded repetition of
    a part that repeats without bound (module docstring)."""
    if len(pattern) > MAX_REGEX_LENGTH:
        raise ValueError(f"pattern is {len(pattern)} characters; at most {MAX_REGEX_LENGTH} are allowed")
    return _compile(pattern)


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as e:
        raise ValueError(f"is not a valid regular expression: {e}") from None
    if _nested_repeat(pattern):
        raise ValueError("repeats without bound a part that repeats without bound, as (a+)+ does (or "
                         "repeats it more than once, as (.*,){10} does): on a text that almost matches "
                         "it backtracks exponentially; make the inner part "
                         "atomic, (?>…), or possessive, e.g. \\d++")
    return compiled


def _nested_repeat(pattern: str) -> bool:
    """Whether ``pattern`` repeats (without bound, or more than once) a part that may
    backtrack through a repetition without bound of its own (``(a+)+``, ``(.*a){12}``)."""
    try:
        from re import _constants as c  # type: ignore[attr-defined]
        from re import _parser as p
    except ImportError:  # another Python's internals: the guard is a convenience, not a promise
        return False
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT)

    def children(av: Any) -> Iterator[Any]:
        items = av if isinstance(av, (tuple, list)) else (av,)
        for x in items:
            if isinstance(x, p.SubPattern):
                yield x
            elif isinstance(x, (tuple, list)):
                yield from children(x)

    def backtracks(sub: Any) -> bool:  # holds a repetition without bound that may backtrack
        for op, av in sub:
            if op == c.ATOMIC_GROUP or op == c.POSSESSIVE_REPEAT:
                continue
            if op in repeats and av[1] == c.MAXREPEAT:
                return True
            if any(backtracks(s) for s in children(av)):
                return True
        return False

    def find(sub: Any) -> bool:
        for op, av in sub:
            # bounded or not: (.*,){10} on a line of commas backtracks as its 10th power
            if op in repeats and (av[1] == c.MAXREPEAT or av[1] > 1) and backtracks(av[2]):
                return True
            if any(find(s) for s in children(av)):
                return True
        return False

    try:
        return find(p.parse(pattern))
    except Exception:  # noqa: BLE001 - it compiled: an internal parse we cannot read is no error
        return False


# ---- the expected keys that hold patterns ---------------------------------------------------

#: the keys of one expected call
CALL_FIELDS = ("tool", "arguments")
#: ``expected.<field>: {"$any_of": [...]}`` (``output_matches``): any alternative may match
ANY_OF = "$any_of"
#: the keys of ``expected`` with a grammar of their own, never read as ``$any_of``
_OWN_GRAMMAR = ("tool_calls", "state", "state_delta", "tools", "route")


def tool_calls_problem(calls: Any) -> tuple[str, str] | None:
    """The first problem of an ``expected.tool_calls`` as (field, message), or None: a list
    (``[]`` expects no call) of ``{"tool": NAME, "arguments": {…}}`` objects, ``tool`` a
    non-empty string, ``arguments`` (optional) an object whose values are patterns
    (:func:`check_pattern`)."""
    if not isinstance(calls, list):
        return "expected.tool_calls", (f'must be a list of {{"tool", "arguments"}} objects ([] expects no call), '
                                       f"got {_quote(calls)}")
    for i, call in enumerate(calls):
        field = f"expected.tool_calls[{i}]"
        if not isinstance(call, dict):
            return field, f'must be an object {{"tool": NAME, "arguments": {{...}}}}, got {_quote(call)}'
        for key in call:
            if key not in CALL_FIELDS:
                return (f"{field}.{key}", f"unknown field{did_you_mean(key, CALL_FIELDS)} "
                        f"(an expected call has {', '.join(CALL_FIELDS)})")
        tool = call.get("tool")
        if not isinstance(tool, str) or not tool:
            shown = "it is missing" if "tool" not in call else f"got {_quote(tool)}"
            return f"{field}.tool", f"must name the tool called (a non-empty string), {shown}"
        if "arguments" in call:
            arguments = call["arguments"]
            if not isinstance(arguments, dict):
                return (f"{field}.arguments", "must be an object of argument name -> expected value or matcher, "
                        f"got {_quote(arguments)}")
            if is_matcher(arguments):
                return (f"{field}.arguments", "must be an object of argument names; a matcher goes on an "
                        "argument's value, not on the arguments as a whole")
            try:
                check_pattern(arguments, f"{field}.arguments")
            except MatcherError as e:
                return e.field, e.message
    return None


def any_of_problem(expected: Any) -> tuple[str, str] | None:
    """The first malformed ``{"$any_of": [...]}`` among the values of ``expected`` as (field,
    message), or None: ``$any_of`` must be the object's only key and hold a non-empty list;
    a lone ``$`` key close to it (``$anyof``) is taken for a misspelling."""
    if not isinstance(expected, dict):
        return None
    for key, value in expected.items():
        if key in _OWN_GRAMMAR or not isinstance(value, dict):
            continue
        field = f"expected.{key}"
        if ANY_OF in value:
            if len(value) != 1:
                others = ", ".join(repr(k) for k in value if k != ANY_OF)
                return field, f"'$any_of' must be the object's only key (it also has {others})"
            alternatives = value[ANY_OF]
            if not isinstance(alternatives, list) or not alternatives:
                return f"{field}.$any_of", f"must be a non-empty list of alternatives, got {_quote(alternatives)}"
        elif len(value) == 1:
            (only,) = value
            if isinstance(only, str) and only.startswith("$") and did_you_mean(only, (ANY_OF,)):
                return f"{field}.{only}", f"unknown key{did_you_mean(only, (ANY_OF,))} (alternatives are " \
                                          '{"$any_of": [...]})'
    return None

"""Right actions, wrong report: the final message's claims checked against what tools returned.

An agent can call the right tools and then report something they did not say ("refunded
45.00 EUR" after a refund of 40.00). The claims of the trajectory's last ``final`` step are
matched one by one against the ``tool_result`` steps recorded *before* it; the first claim
no observation supports is the error boundary.

Claims come from two places, structured first:

* **structured**: a final result ``{"text": str, "claims": {name: value, ...}}`` states its
  claims itself, in the mapping's key order;
* **pattern**: regexes with exactly one capture group find claims in the final text (a plain
  string result, or the dict's ``text``), all patterns together, in order of appearance. A
  pattern claim equal (same name and value) to an earlier claim is dropped: it would be
  checked the same way twice.

Default patterns (used when none are configured):

* ``amount``: a number next to a currency — ``45.00 EUR``, ``€45``, ``$ 1,234.50``,
  ``USD12``, ``12.5$``, ``£1 050``. The number may group its thousands with commas or spaces
  (a space, a no-break, narrow no-break or thin space: ``1,234.50`` and ``1 234.50`` are
  1234.5); a decimal comma (``45,00``) is not read as a number, so it is no claim rather than
  a wrong one. A number inside a longer one (``1.2.3``, ``1,2345``) is never matched.
* ``id``: an identifier such as an order id — two to five capital letters, a hyphen, digits
  (``ORD-123``, ``INV-2024``).

Both are linear: every repetition is bounded by a character class its neighbour cannot
match, and a match may begin only at the start of a digit run, so a megabyte of hostile
text costs one pass.

Values compare the same way everywhere: numbers (and strings that read as one number as
``normalize: [numbers]`` reads it, :mod:`oloproof.evaluate.numbers`: ``"£1,050.00"``,
``"1 050"``) with an absolute tolerance of 1e-9 (integers exactly, so long ids keep their precision); other
strings exactly after stripping surrounding whitespace; anything else with ``==`` (a
boolean is never equal to a number).

Which tool results count as observations: ``tool_result`` steps before the final step that
did not raise, carry no injected ``fault`` and are not an error dict (``{"error": ...}``). A
failed or faked call observed nothing about the world, and a result recorded after the
report cannot have informed it.

A claim's status:

* structured ``name: value`` — the most recent observation holding the key ``name`` (at any
  depth) decides: ``supported`` when one of its values there equals the claim,
  ``contradicted`` otherwise; ``unsupported`` when no observation has the key.
* pattern — ``supported`` when any leaf of any observation equals the value, a string leaf
  shows the number (``"balance: £1,050.00"`` shows 1050), or a string leaf contains the
  matched text (as a whole token: ``40`` is not found in ``1400``);
  otherwise, when the pattern's name is a key of the observations (``amount``), the claim is
  ``contradicted`` by that key's latest value; otherwise ``unsupported``. Free text does not
  say which field a number refers to, so a value shown anywhere supports it; only a value
  shown nowhere can contradict.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from oloproof.evaluate.base import (
    PASS,
    Evaluator,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    fail,
    missing,
)
from oloproof.evaluate.numbers import as_plain, numbers_in, read_number
from oloproof.events import StepRecorded
from oloproof.records import AGENT_TRAJECTORY_V1
from oloproof.views import CaseView

MAX_PATTERN_LENGTH = 500
#: absolute tolerance of numeric comparisons
TOLERANCE = 1e-9

_GROUPS = "[ \u00a0\u202f\u2009]"  # a space, no-break, narrow no-break or thin space between groups of three
_NUM = (rf"\d{{1,3}}(?:,\d{{3}})+(?:\.\d+)?|\d{{1,3}}(?:{_GROUPS}\d{{3}})+(?:\.\d+)?|\d+(?:\.\d+)?")
# the number does not go on: "1.2.3" and "1,2345" are not amounts
_END = r"(?!\d|[.,]\d)"
_CURRENCY = r"(?:EUR|USD|GBP)(?![A-Za-z])|[€$£]"
# fixed-width lookbehinds, one per width: Python allows no variable-width lookbehind
_AFTER_CURRENCY = (r"(?:(?<=[€$£])|(?<=[€$£]\s)|(?<=\b(?:EUR|USD|GBP))"
                   r"|(?<=\b(?:EUR|USD|GBP)\s))")
#: a number next to a currency; the leading (?=\d) lets the engine skip non-digits fast
# a match begins only at the start of a digit run, and never on a later group of "1 050 000"
# (a run of space-grouped digits is scanned once: linear)
AMOUNT_PATTERN = (rf"(?=\d)(?<![\d.,])(?!(?<=\d{_GROUPS})\d{{3}}(?!\d))"
                  rf"(?:{_AFTER_CURRENCY}|(?=(?:{_NUM}){_END}\s?(?:{_CURRENCY})))"
                  rf"({_NUM}){_END}")
#: an identifier such as ORD-123
ID_PATTERN = r"\b([A-Z]{2,5}-\d+)\b"



class ClaimPattern(BaseModel):
    """A named regex that finds claims in a final text; its one capture group is the value.

    Validated when the configuration loads: the pattern must compile, have exactly one
    capture group (the value; more would leave it ambiguous) and be at most 500 characters.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    name: str = Field(min_length=1)
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, value: str) -> str:
        if len(value) > MAX_PATTERN_LENGTH:
            raise ValueError(f"a claim pattern may be at most {MAX_PATTERN_LENGTH} characters "
                             f"(this one has {len(value)})")
        try:
            groups = _compile(value).groups
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from e
        if groups != 1:
            raise ValueError(f"a claim pattern needs exactly one capture group (the claimed "
                             f"value), this one has {groups}: make the others non-capturing "
                             f"with (?:...)")
        return value

    @property
    def compiled(self) -> re.Pattern[str]:
        """The compiled regex (compiled once per distinct pattern, then cached)."""
        return _compile(self.pattern)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@functools.lru_cache(maxsize=1)
def default_patterns() -> tuple[ClaimPattern, ...]:
    """The patterns used when none are configured: ``amount`` and ``id`` (module docstring)."""
    return (ClaimPattern(name="amount", pattern=AMOUNT_PATTERN),
            ClaimPattern(name="id", pattern=ID_PATTERN))


@dataclass(frozen=True)
class Claim:
    """One factual claim of a final report.

    ``value`` is a number when the matched text reads as one (``"45.00"`` → 45.0,
    ``"1,234.50"`` → 1234.5); ``text`` is the matched text, or the key of a structured claim.
    """

    name: str
    value: Any
    text: str
    source: Literal["structured", "pattern"]


@dataclass(frozen=True)
class ClaimCheck:
    """A claim and what the observations say about it.

    ``observed_step`` is the ``tool_result`` step that supports or contradicts the claim and
    ``observed`` the value seen there (both None for an unsupported claim).
    """

    claim: Claim
    status: Literal["supported", "contradicted", "unsupported"]
    observed_step: int | None = None
    observed: Any = None


# ---- values ---------------------------------------------------------------------------------

def parse_number(text: str) -> int | float | None:
    """The number a text reads as, else None: one number and nothing else but a currency
    and white space, read as ``normalize: [numbers]`` reads it
    (:func:`oloproof.evaluate.numbers.read_number`: "£1,050.00", "1 050", "1050"); an int
    when written without a fraction, else a float."""
    number = read_number(text)
    if number is None:
        return None
    return as_plain(number, "." in text)


def _as_number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return parse_number(value)
    return None


def _numbers_equal(a: float, b: float) -> bool:  # ints too: they compare exactly
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    try:
        return abs(a - b) <= TOLERANCE
    except OverflowError:  # an integer beyond any float is no float's equal
        return False


def same_value(a: Any, b: Any) -> bool:
    """The equality claims use (module docstring): numeric, stripped-string or ``==``."""
    na, nb = _as_number(a), _as_number(b)
    if na is not None and nb is not None:
        return _numbers_equal(na, nb)
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if na is not None or nb is not None:
        return False
    return a == b


# ---- extraction -----------------------------------------------------------------------------

def final_text(final_result: Any) -> str | None:
    """The text of a final result: the string itself, or a dict's ``text``."""
    if isinstance(final_result, str):
        return final_result
    if isinstance(final_result, Mapping) and isinstance(final_result.get("text"), str):
        return final_result["text"]
    return None


def _claim_key(name: str, value: Any) -> tuple[str, Any]:
    number = _as_number(value)
    if number is not None:
        return (name, ("n", number))  # 45 and 45.0 hash alike: one claim
    if isinstance(value, str):
        return (name, ("s", value.strip()))
    try:
        hash(value)
    except TypeError:
        return (name, ("r", repr(value)))
    return (name, ("v", type(value).__name__, value))


def extract_claims(final_result: Any,
                   patterns: Sequence[ClaimPattern] | None = None) -> list[Claim]:
    """The claims of a final result: structured claims (in key order), then pattern claims
    found in its text (in order of appearance; all patterns together), without duplicates.
    ``patterns`` None means :func:`default_patterns`."""
    return list(iter_claims(final_result, patterns))


def iter_claims(final_result: Any,
                patterns: Sequence[ClaimPattern] | None = None) -> Iterator[Claim]:
    """:func:`extract_claims`, lazily: a caller that stops at the first failing claim does
    not pay for the rest of a hostile text's claims."""
    seen: set[tuple[str, Any]] = set()
    if isinstance(final_result, Mapping) and isinstance(final_result.get("claims"), Mapping):
        for name, value in final_result["claims"].items():
            seen.add(_claim_key(str(name), value))
            yield Claim(str(name), value, str(name), "structured")
    text = final_text(final_result)
    if text:
        for claim in _pattern_claims(text, default_patterns() if patterns is None else patterns):
            key = _claim_key(claim.name, claim.value)
            if key not in seen:
                seen.add(key)
                yield claim


def _pattern_claims(text: str, patterns: Sequence[ClaimPattern]) -> Iterable[Claim]:
    found: list[tuple[int, int, str, str]] = []
    repeated: set[tuple[str, str]] = set()
    for order, p in enumerate(patterns):
        for m in p.compiled.finditer(text):
            value = m.group(1)
            # a text repeated verbatim is the same claim: skip it before building anything
            if value is not None and (p.name, value) not in repeated:
                repeated.add((p.name, value))
                found.append((m.start(1), order, p.name, value))
    found.sort(key=lambda f: (f[0], f[1]))
    for _, _, name, matched in found:
        number = parse_number(matched)
        yield Claim(name, matched if number is None else number, matched, "pattern")


# ---- observations ---------------------------------------------------------------------------

def is_error_result(step: StepRecorded) -> bool:
    """A tool result that reports a failure: it raised, an injected fault made it, or it is
    an error dict (``{"error": ...}``)."""
    return (step.raised or step.fault is not None
            or (isinstance(step.result, Mapping) and "error" in step.result))


class Observations:
    """What the successful tool results before a step showed, indexed for claim look-ups.

    Built in one pass over the results, each walked iteratively (a deeply nested result
    cannot exhaust the stack).
    """

    def __init__(self, results: Iterable[StepRecorded]):
        #: key -> (step of the latest observation holding it, its values there in walk order)
        self.keys: dict[str, tuple[int, list[Any]]] = {}
        self.numbers: dict[int | float, int] = {}
        self.strings: dict[str, int] = {}
        #: (step, the observation's string leaves joined), newest first
        self.texts: list[tuple[int, str]] = []
        for step in results:
            self._add(step)
        self.texts.reverse()
        self.sorted_numbers = sorted(self.numbers)

    def _add(self, step: StepRecorded) -> None:
        local: dict[str, list[Any]] = {}
        strings: list[str] = []
        stack: list[Any] = [step.result]
        while stack:
            value = stack.pop()
            if isinstance(value, Mapping):
                for k, v in value.items():
                    if isinstance(k, str):
                        local.setdefault(k, []).append(v)
                stack.extend(reversed(list(value.values())))
            elif isinstance(value, (list, tuple)):
                stack.extend(reversed(value))
            else:
                self._leaf(value, step.index, strings)
        for k, values in local.items():
            self.keys[k] = (step.index, values)
        if strings:
            self.texts.append((step.index, "\n".join(strings)))

    def _leaf(self, value: Any, index: int, strings: list[str]) -> None:
        number = _as_number(value)
        if number is not None:
            self.numbers[number] = index
        if isinstance(value, str):
            self.strings[value.strip()] = index
            strings.append(value)
            if number is None:  # the numbers a text shows ("balance: £1,050.00") are shown too
                for n in numbers_in(value):
                    plain = as_plain(n, n != n.to_integral_value())
                    if plain is not None:
                        self.numbers[plain] = index

    def find_number(self, number: float) -> tuple[int, Any] | None:
        """The latest step showing a leaf equal to ``number``, and that leaf's value."""
        if number in self.numbers:
            return self.numbers[number], number
        i = bisect.bisect_left(self.sorted_numbers, number)
        for j in (i - 1, i):
            if 0 <= j < len(self.sorted_numbers):
                near = self.sorted_numbers[j]
                if _numbers_equal(near, number):
                    return self.numbers[near], near
        return None

    def find_text(self, text: str) -> int | None:
        """The latest step whose string leaves contain ``text`` as a whole token."""
        if not text:
            return None
        for index, hay in self.texts:
            if _contains_token(hay, text):
                return index
        return None


def _glued(hay: str, i: int, step: int) -> bool:
    """Whether the character at ``i`` continues the token (a word character, or a decimal
    point or separator followed by a digit)."""
    if not 0 <= i < len(hay):
        return False
    c = hay[i]
    if c.isalnum() or c == "_":
        return True
    j = i + step
    return c in ".," and 0 <= j < len(hay) and hay[j].isdigit()


def _contains_token(hay: str, needle: str) -> bool:
    start = hay.find(needle)
    while start != -1:
        end = start + len(needle)
        if not _glued(hay, start - 1, -1) and not _glued(hay, end, 1):
            return True
        start = hay.find(needle, start + 1)
    return False


def observations_before(steps: Sequence[StepRecorded], index: int) -> Observations:
    """The observations (module docstring) among ``steps`` recorded before step ``index``."""
    return Observations(s for s in steps
                        if s.kind == "tool_result" and s.index < index and not is_error_result(s))


# ---- checking -------------------------------------------------------------------------------

def _by_key(claim: Claim, obs: Observations) -> ClaimCheck | None:
    held = obs.keys.get(claim.name)
    if held is None:
        return None
    step, values = held
    for v in values:
        if same_value(claim.value, v):
            return ClaimCheck(claim, "supported", step, v)
    return ClaimCheck(claim, "contradicted", step, values[0])


def _by_leaf(claim: Claim, obs: Observations) -> ClaimCheck | None:
    number = _as_number(claim.value)
    if number is not None:
        hit = obs.find_number(number)
        if hit is not None:
            return ClaimCheck(claim, "supported", hit[0], hit[1])
    elif isinstance(claim.value, str) and claim.value.strip() in obs.strings:
        return ClaimCheck(claim, "supported", obs.strings[claim.value.strip()], claim.value.strip())
    step = obs.find_text(claim.text)
    if step is not None:
        return ClaimCheck(claim, "supported", step, claim.text)
    return None


def check_claim(claim: Claim, obs: Observations) -> ClaimCheck:
    """One claim's status against the observations (module docstring)."""
    if claim.source == "structured":
        return _by_key(claim, obs) or ClaimCheck(claim, "unsupported")
    by_key = _by_key(claim, obs)
    if by_key is not None and by_key.status == "supported":
        return by_key
    return _by_leaf(claim, obs) or by_key or ClaimCheck(claim, "unsupported")


def check_claims(steps: Sequence[StepRecorded], final_step: StepRecorded,
                 patterns: Sequence[ClaimPattern] | None = None) -> list[ClaimCheck]:
    """Every claim of ``final_step`` (in claim order) checked against the observations
    recorded before it. ``patterns`` None means :func:`default_patterns`."""
    return list(iter_checks(steps, final_step, patterns))


def iter_checks(steps: Sequence[StepRecorded], final_step: StepRecorded,
                patterns: Sequence[ClaimPattern] | None = None) -> Iterator[ClaimCheck]:
    """:func:`check_claims`, lazily (the observations are indexed only if there is a claim)."""
    claims = iter_claims(final_step.result, patterns)
    first = next(claims, None)
    if first is None:
        return
    obs = observations_before(steps, final_step.index)
    yield check_claim(first, obs)
    for claim in claims:
        yield check_claim(claim, obs)


def last_final(steps: Sequence[StepRecorded]) -> StepRecorded | None:
    """The last ``final`` step: the report the agent ended on."""
    for step in reversed(steps):
        if step.kind == "final":
            return step
    return None


def first_unsupported(case: CaseView, patterns: Sequence[ClaimPattern] | None = None
                      ) -> tuple[int, ClaimCheck] | None:
    """The error boundary: the last final step's index and its first claim that is not
    supported; None when every claim is supported (or there is no final step to judge)."""
    if case.trajectory is None:
        return None
    final = last_final(case.trajectory.steps)
    if final is None:
        return None
    for check in iter_checks(case.trajectory.steps, final, patterns):
        if check.status != "supported":
            return final.index, check
    return None


# ---- the evaluator --------------------------------------------------------------------------

class ClaimsSupportedConfig(EvaluatorConfig):
    """Config of ``type: claims_supported``: the claim patterns to read the final text with."""

    #: None: the default ``amount`` and ``id`` patterns
    patterns: list[ClaimPattern] | None = None


@evaluator("claims_supported")
class ClaimsSupported(Evaluator):
    """Every claim of the final report is supported by a tool result recorded before it.

    No final step → excluded (``no_final_report``); a final without claims → excluded
    (``no_claims``); a contradicted or unsupported first failing claim fails with
    ``contradicted_claim`` / ``unsupported_claim``.

    Truncated: a truncated trace without a final step is missing (``truncated``): its report
    lies in the part that was not recorded. A truncated trace that holds a final step is
    judged on its last one: the observations before a report are all recorded, and results
    after it cannot support it.
    """

    config_model = ClaimsSupportedConfig
    config: ClaimsSupportedConfig
    requires = (AGENT_TRAJECTORY_V1,)

    def default_criterion(self) -> str:
        return "claims_supported"

    def judge(self, case: CaseView) -> Verdict:
        t = case.trajectory
        if t is None:  # Evaluator.evaluate already makes this missing; kept for direct calls
            return missing("no_trajectory_recorded")
        final = last_final(t.steps)
        if final is None:
            return missing("truncated") if t.truncated else excluded("no_final_report")
        any_claim = False
        for check in iter_checks(t.steps, final, self.config.patterns):
            if check.status != "supported":
                return fail(f"{check.status}_claim")
            any_claim = True
        return PASS if any_claim else excluded("no_claims")

"""Output evaluators (SPEC §4.1): ``contains``, and ``output_matches`` (SPEC §18.5) with its
normalisations and alternatives."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, model_validator

from oloproof.config.matchers import compile_regex, is_matcher
from oloproof.evaluate.base import (
    FAIL,
    PASS,
    Evaluator,
    EvaluatorConfig,
    Verdict,
    evaluator,
    excluded,
    fail,
    missing,
)
from oloproof.evaluate.numbers import normalize_numbers, numbers_in, read_number
from oloproof.evaluate.paths import equal
from oloproof.events import canonical_json
from oloproof.views import CaseView


class ContainsConfig(EvaluatorConfig):
    """Config of ``type: contains``: the criterion name (required: there is no default), the
    output ``field`` to search and the ``expected_field`` holding what it must contain."""

    criterion: str = Field(min_length=1)
    field: str = Field(min_length=1)
    expected_field: str = Field(min_length=1)


def contains(haystack: Any, needle: Any) -> bool:
    """A string contains a substring; a list an element; a dict a key; anything else equals."""
    if isinstance(haystack, str) and isinstance(needle, str):
        return needle in haystack
    if isinstance(haystack, list):
        return needle in haystack
    if isinstance(haystack, dict) and isinstance(needle, str):
        return needle in haystack
    return haystack == needle


@evaluator("contains")
class Contains(Evaluator):
    """Passes when ``output[field]`` contains ``expected[expected_field]``.

    No ``expected[expected_field]`` → excluded (``no_expected_value``). An output without the
    field fails: the system answered, and the answer lacks it. A system that raised is missing.
    """

    config_model = ContainsConfig
    config: ContainsConfig

    def judge(self, case: CaseView) -> Verdict:
        cfg: ContainsConfig = self.config
        if cfg.expected_field not in case.expected:
            return excluded("no_expected_value")
        output = case.output
        if not isinstance(output, dict) or cfg.field not in output:
            return FAIL
        return PASS if contains(output[cfg.field], case.expected[cfg.expected_field]) else FAIL


# ---- output_matches ---------------------------------------------------------------------------

#: the normalisations ``output_matches`` applies, in this order whatever the order given
NORMALIZATIONS = ("numbers", "whitespace", "case")
ANY_OF = "$any_of"


class OutputMatchesConfig(EvaluatorConfig):
    """Config of ``type: output_matches``: the criterion (required), the output ``field`` and
    the ``expected_field`` (default: the same name), how to ``match`` (``exact``,
    ``contains``, ``regex``, ``number``), the ``normalize`` steps (``case``, ``whitespace``,
    ``numbers``) and, for ``match: number``, the absolute ``tolerance``."""

    criterion: str = Field(min_length=1)
    field: str = Field(min_length=1)
    expected_field: str | None = Field(default=None, min_length=1)
    match: Literal["exact", "contains", "regex", "number"] = "exact"
    normalize: list[Literal["case", "whitespace", "numbers"]] = []
    tolerance: float = Field(default=0.0, ge=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _options_that_apply(self) -> OutputMatchesConfig:
        if self.match == "number" and self.normalize:
            raise ValueError("match 'number' reads numbers as normalize: [numbers] does; "
                             "normalize has nothing to do there (leave it out)")
        if self.tolerance and self.match != "number":
            raise ValueError("tolerance applies to match: number only")
        return self


def normalize_text(text: str, steps: Iterable[str]) -> str:
    """``text`` normalised: ``numbers`` (every number and the currency beside it written
    canonically, :func:`~oloproof.evaluate.numbers.normalize_numbers`), then ``whitespace``
    (runs of white space, no-break spaces included, become one space; none at the ends),
    then ``case`` (case-folded: ``"Straße"`` equals ``"STRASSE"``)."""
    steps = set(steps)
    if "numbers" in steps:
        text = normalize_numbers(text)
    if "whitespace" in steps:
        text = " ".join(text.split())
    if "case" in steps:
        text = text.casefold()
    return text


def _text(value: Any) -> str | None:
    """A value as text: a string, or a number's JSON text (``1050``, ``1050.5``); None for
    anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return canonical_json(value).decode()
    return None


def _whole_number_at(hay: str, needle: str) -> bool:
    """Whether ``needle`` occurs in ``hay`` with no digit (or decimal point and digit) glued
    to either end where the needle itself ends in a digit, nor a sign or hyphen glued before
    it: ``1050`` is not found in ``10500``, ``1.1050``, ``-1050`` (its negative) or
    ``ORD-1050``."""
    start = hay.find(needle)
    while start != -1:
        end = start + len(needle)
        before_ok = not needle[:1].isdigit() or start == 0 or not (
            hay[start - 1].isdigit() or hay[start - 1] in "-+\u2212"
            or (hay[start - 1] in ".," and start > 1 and hay[start - 2].isdigit()))
        after_ok = not needle[-1:].isdigit() or end == len(hay) or not (
            hay[end].isdigit() or (hay[end] in ".," and end + 1 < len(hay) and hay[end + 1].isdigit()))
        if before_ok and after_ok:
            return True
        start = hay.find(needle, start + 1)
    return False


@evaluator("output_matches")
class OutputMatches(Evaluator):
    """``output[field]`` matches ``expected[expected_field]`` (SPEC §18.5).

    ``match``: ``exact`` — equal (after ``normalize``; two values that are not text are
    compared as JSON, ``1`` equal to ``1.0``); ``contains`` — the output's text holds the
    expected text (with ``numbers``, a number only as a whole number: 1050 is not found in
    10500 nor in -1050; a list output holds an element, a dict a key, as ``contains`` has it); ``regex`` —
    the expected value is a pattern found anywhere in the output's text (``re.search``;
    ``case`` makes it ignore case, the other steps normalise the output); ``number`` — the
    output is one number (a number, or a text holding exactly one number, read as
    ``numbers`` reads it) within ``tolerance`` of the expected number.

    ``expected[expected_field]`` may be ``{"$any_of": [A, B, …]}``: passes when any
    alternative matches. No expected value → excluded (``no_expected_value``); an output
    without the field fails. ``number`` fails with ``no_number`` or ``several_numbers`` when
    the output is not one number. An expected value that cannot be used — a regex that does
    not compile or repeats a repetition (``invalid_regex``), a ``number`` that is no number
    (``expected_not_a_number``), a matcher object such as ``{"$regex": …}``, which only
    ``agent_tool_calls`` and ``state_delta`` read (``unsupported_matcher``) — leaves the case
    missing, never passed.
    """

    config_model = OutputMatchesConfig
    config: OutputMatchesConfig

    def judge(self, case: CaseView) -> Verdict:
        cfg: OutputMatchesConfig = self.config
        key = cfg.expected_field or cfg.field
        if not isinstance(case.expected, Mapping) or key not in case.expected:
            return excluded("no_expected_value")
        want = case.expected[key]
        alternatives = want[ANY_OF] if isinstance(want, dict) and ANY_OF in want else [want]
        output = case.output
        if not isinstance(output, Mapping) or cfg.field not in output:
            return FAIL
        got = output[cfg.field]
        first: Verdict | None = None
        for alternative in alternatives if isinstance(alternatives, list) else [alternatives]:
            verdict = self._one(got, alternative)
            if verdict[0] == "pass":
                return PASS
            if first is None or (first[0] == "fail" and verdict[0] == "missing"):
                first = verdict  # an alternative that could not be judged might have matched
        return first or FAIL

    def _one(self, got: Any, want: Any) -> Verdict:
        cfg = self.config
        if is_matcher(want):  # {"$regex": …} is agent_tool_calls' and state_delta's: here it would only fail
            return missing("unsupported_matcher")
        if cfg.match == "number":
            return self._number(got, want)
        steps = cfg.normalize
        if cfg.match == "regex":
            if not isinstance(want, str):
                return missing("invalid_regex")
            try:
                pattern = compile_regex(want)
            except ValueError:
                return missing("invalid_regex")
            text = _text(got)
            if text is None:
                return FAIL
            if "case" in steps:
                pattern = re.compile(pattern.pattern, re.IGNORECASE)
            return PASS if pattern.search(normalize_text(text, [s for s in steps if s != "case"])) else FAIL
        got_text, want_text = _text(got), _text(want)
        if got_text is None or want_text is None:
            if cfg.match == "exact":
                return PASS if got_text is None and want_text is None and equal(got, want) else FAIL
            return PASS if contains(got, want) else FAIL
        got_text, want_text = normalize_text(got_text, steps), normalize_text(want_text, steps)
        if cfg.match == "exact":
            return PASS if got_text == want_text else FAIL
        if "numbers" in steps:
            return PASS if _whole_number_at(got_text, want_text) else FAIL
        return PASS if want_text in got_text else FAIL

    def _number(self, got: Any, want: Any) -> Verdict:
        target = read_number(want)
        if target is None:
            return missing("expected_not_a_number")
        if isinstance(got, str):
            found = set(numbers_in(got))
            if not found:
                return fail("no_number")
            if len(found) > 1:
                return fail("several_numbers")
            (number,) = found
        else:
            read = read_number(got)
            if read is None:
                return fail("no_number")
            number = read
        return PASS if abs(number - target) <= Decimal(repr(self.config.tolerance)) else FAIL

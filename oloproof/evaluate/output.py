"""Output evaluators (SPEC §4.1)."""

from __future__ import annotations

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
)
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

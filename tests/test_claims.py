"""claims_supported: the final report's claims against the tool results recorded before it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from oloproof.evaluate.claims import (
    AMOUNT_PATTERN,
    ID_PATTERN,
    Claim,
    ClaimPattern,
    ClaimsSupported,
    check_claims,
    extract_claims,
    first_unsupported,
    parse_number,
    same_value,
)
from oloproof.evaluate.registry import registry
from oloproof.events import CaseFinished, CaseStarted, StepRecorded, TrajectoryRecorded
from oloproof.views import CaseView, fold_case

# ---- builders -------------------------------------------------------------------------------

def call(tool: str, args: Any = None) -> tuple:
    return ("tool_call", tool, args or {}, None, {})


def result(tool: str, value: Any, **extra: Any) -> tuple:
    return ("tool_result", tool, None, value, extra)


def say(text: str) -> tuple:
    return ("message", None, {"text": text}, None, {})


def final(answer: Any) -> tuple:
    return ("final", None, None, answer, {})


def case(*spec: tuple, truncated: bool = False, error: str | None = None,
         error_kind: str | None = None, trajectory: bool = True) -> CaseView:
    """A CaseView folded from events: one step per spec item, 1-based indexes."""
    events: list[Any] = [CaseStarted("r1", "c1", 0, "f", {})]
    for i, (kind, tool, args, res, extra) in enumerate(spec, start=1):
        events.append(StepRecorded(i, kind, tool, args, res, **extra))
    if trajectory:
        events.append(TrajectoryRecorded("success", truncated, 50 if truncated else None,
                                         len(spec)))
    events.append(CaseFinished({}, error, error_kind))
    return fold_case(events)


def make(**cfg: Any) -> ClaimsSupported:
    cls = registry()["claims_supported"]
    return cls(cls.config_model.model_validate({"type": "claims_supported", **cfg}))  # type: ignore[return-value]


REFUND = (call("get_order", {"id": "ORD-123"}),
          result("get_order", {"order": {"id": "ORD-123", "amount": 40.0, "status": "paid"}}),
          call("refund", {"id": "ORD-123", "amount": 40.0}),
          result("refund", {"refunded": True, "amount": 40.0}))


# ---- the evaluator --------------------------------------------------------------------------

def test_registered_with_default_criterion():
    ev = make()
    assert isinstance(ev, ClaimsSupported)
    assert ev.criterion == "claims_supported"
    assert make(criterion="report_true").criterion == "report_true"


def test_pass_when_every_claim_is_supported():
    c = case(*REFUND, final("Refunded 40.00 EUR for ORD-123."))
    assert make().evaluate(c) == ("pass", None)
    assert first_unsupported(c) is None


def test_contradicted_amount_fails_at_the_final_step():
    c = case(*REFUND, final("Refunded 45.00 EUR for ORD-123."))
    assert make().evaluate(c) == ("fail", "contradicted_claim")
    boundary = first_unsupported(c)
    assert boundary is not None
    step, check = boundary
    assert step == 5
    assert check.status == "contradicted"
    assert check.claim == Claim("amount", 45.0, "45.00", "pattern")
    assert check.observed_step == 4 and check.observed == 40.0


LOOKUP = (call("lookup", {"q": "ORD-123"}), result("lookup", {"ref": "ORD-123", "total": 40.0}))


def test_unsupported_claim_fails():
    # no observation shows 45, and none has an "amount" key that could contradict it
    c = case(*LOOKUP, final("Refunded 45.00 EUR for ORD-123."))
    assert make().evaluate(c) == ("fail", "unsupported_claim")
    step, check = first_unsupported(c)  # type: ignore[misc]
    assert (step, check.claim.value, check.status) == (3, 45.0, "unsupported")
    assert check.observed_step is None and check.observed is None


def test_a_pattern_claim_named_like_an_observed_key_can_be_contradicted():
    # the id pattern meets the result's "id" key: ORD-999 is contradicted by ORD-123
    c = case(*REFUND, final("Refunded 40.00 EUR for ORD-999."))
    assert make().evaluate(c) == ("fail", "contradicted_claim")
    _, check = first_unsupported(c)  # type: ignore[misc]
    assert (check.claim.name, check.observed_step, check.observed) == ("id", 2, "ORD-123")


def test_a_value_shown_anywhere_supports_a_pattern_claim():
    # the latest "amount" is the refund (40), but the order's total 45 was observed too:
    # free text does not say which field it means, so it is not contradicted
    steps = (call("get_order"), result("get_order", {"amount": 45.0}),
             call("refund"), result("refund", {"amount": 40.0}))
    c = case(*steps, final("Of the 45.00 EUR order we refunded 40.00 EUR."))
    assert make().evaluate(c) == ("pass", None)


def test_first_failing_claim_decides_the_reason():
    steps = (call("refund"), result("refund", {"ref": "ORD-123", "amount": 40.0}))
    # ORD-999 (unsupported: no "id" key) comes before 45.00 (contradicted) in the text
    c = case(*steps, final("For ORD-999 we refunded 45.00 EUR."))
    assert make().evaluate(c) == ("fail", "unsupported_claim")
    c = case(*steps, final("We refunded 45.00 EUR for ORD-999."))
    assert make().evaluate(c) == ("fail", "contradicted_claim")


def test_structured_claims():
    ok = case(*REFUND, final({"text": "Your refund is on its way.",
                              "claims": {"amount": "40.00", "refunded": True, "status": "paid "}}))
    assert make().evaluate(ok) == ("pass", None)
    wrong = case(*REFUND, final({"text": "Refund done.", "claims": {"amount": 45}}))
    assert make().evaluate(wrong) == ("fail", "contradicted_claim")
    _, check = first_unsupported(wrong)  # type: ignore[misc]
    assert check.claim.source == "structured" and check.observed_step == 4
    nowhere = case(*REFUND, final({"text": "", "claims": {"tracking": "TR-1"}}))
    assert make().evaluate(nowhere) == ("fail", "unsupported_claim")


def test_structured_claim_latest_observation_wins():
    steps = (call("get_order"), result("get_order", {"status": "paid"}),
             call("cancel"), result("cancel", {"status": "cancelled"}))
    assert make().evaluate(case(*steps, final({"claims": {"status": "cancelled"}}))) == ("pass", None)
    c = case(*steps, final({"claims": {"status": "paid"}}))
    assert make().evaluate(c) == ("fail", "contradicted_claim")
    _, check = first_unsupported(c)  # type: ignore[misc]
    assert (check.observed_step, check.observed) == (4, "cancelled")


def test_structured_claims_come_first_and_text_adds_pattern_claims():
    claims = extract_claims({"text": "Refunded 40.00 EUR on ORD-1", "claims": {"amount": 40}})
    # the text's 40.00 repeats the structured claim and is dropped
    assert [(c.name, c.value, c.source) for c in claims] == [
        ("amount", 40, "structured"), ("id", "ORD-1", "pattern")]


def test_thousands_separators():
    steps = (call("get_invoice"), result("get_invoice", {"total": 1234.5, "number": "INV-7"}))
    c = case(*steps, final("Invoice INV-7 totals $1,234.50 (USD 1,234.5)."))
    assert make().evaluate(c) == ("pass", None)
    assert [c.value for c in extract_claims("Invoice INV-7 totals $1,234.50")] == ["INV-7", 1234.5]
    assert make().evaluate(case(*steps, final("It totals 1,243.50 EUR."))) == ("fail", "unsupported_claim")


def test_pattern_claim_supported_by_text_containment():
    steps = (call("refund"), result("refund", {"message": "Refund of 40.00 EUR sent for ORD-12"}))
    assert make().evaluate(case(*steps, final("Sent 40.00 EUR for ORD-12"))) == ("pass", None)
    # a number inside a longer token is no support
    steps = (call("lookup"), result("lookup", {"note": "ticket ORD-1400"}))
    assert make().evaluate(case(*steps, final("Charged 40 EUR"))) == ("fail", "unsupported_claim")


def test_observations_after_the_final_are_no_support():
    c = case(call("refund"), final("Refunded 40.00 EUR."), result("refund", {"amount": 40.0}))
    assert make().evaluate(c) == ("fail", "unsupported_claim")


def test_only_the_last_final_is_judged():
    c = case(final("Refunded 99 EUR"), *REFUND, final("Refunded 40 EUR"))
    assert make().evaluate(c) == ("pass", None)


@pytest.mark.parametrize("bad", [
    result("refund", {"amount": 40.0}, raised=True),
    result("refund", {"amount": 40.0}, fault="timeout"),
    result("refund", {"error": {"type": "Timeout", "message": "40.00 EUR"}, "amount": 40.0}),
])
def test_errored_or_faulted_results_are_no_support(bad):
    c = case(call("refund"), bad, final("Refunded 40.00 EUR."))
    assert make().evaluate(c) == ("fail", "unsupported_claim")


def test_excluded_without_final_or_claims():
    assert make().evaluate(case(*REFUND)) == ("excluded", "no_final_report")
    assert make().evaluate(case(*REFUND, final("All sorted, have a nice day."))) == ("excluded", "no_claims")
    assert make().evaluate(case(*REFUND, final(None))) == ("excluded", "no_claims")
    assert make().evaluate(case(*REFUND, final({"text": "ok", "claims": {}}))) == ("excluded", "no_claims")


def test_truncated_prefix_rule():
    # no final in the recorded prefix: the report lies in the part that was not recorded
    assert make().evaluate(case(*REFUND, truncated=True)) == ("missing", "truncated")
    # a recorded final is judged: the observations before it are all recorded
    assert make().evaluate(case(*REFUND, final("Refunded 45 EUR"), truncated=True)) == (
        "fail", "contradicted_claim")


def test_missing_when_the_case_errored_or_recorded_no_trajectory():
    errored = case(*REFUND, final("Refunded 40 EUR"), error="boom", error_kind="system_error")
    assert make().evaluate(errored) == ("missing", "system_error")
    timed_out = case(*REFUND, error="late", error_kind="case_timeout")
    assert make().evaluate(timed_out) == ("missing", "case_timeout")
    assert make().evaluate(case(trajectory=False)) == ("missing", "no_trajectory_recorded")


# ---- configuration --------------------------------------------------------------------------

@pytest.mark.parametrize("pattern,message", [
    (r"(\d+) (EUR|USD)", "exactly one capture group"),
    (r"\d+ EUR", "exactly one capture group"),
    (r"(\d+", "not a valid regular expression"),
    ("(a)" + "b" * 500, "at most 500 characters"),
])
def test_bad_patterns_are_refused(pattern, message):
    with pytest.raises(ValidationError, match=message):
        ClaimPattern(name="amount", pattern=pattern)
    with pytest.raises(ValidationError):
        make(patterns=[{"name": "amount", "pattern": pattern}])


def test_configured_patterns_replace_the_defaults():
    ev = make(patterns=[{"name": "tracking", "pattern": r"\b(TRK\d{4})\b"}])
    steps = (call("ship"), result("ship", {"tracking": "TRK0001"}))
    # 99 EUR is no claim under these patterns; TRK0002 contradicts the observed key
    assert ev.evaluate(case(*steps, final("Shipped TRK0001 for 99 EUR"))) == ("pass", None)
    assert ev.evaluate(case(*steps, final("Shipped TRK0002"))) == ("fail", "contradicted_claim")
    with pytest.raises(ValidationError):
        make(patterns=[{"name": "", "pattern": "(x)"}])
    with pytest.raises(ValidationError):
        make(patterns=[{"name": "x", "pattern": "(x)", "flags": "i"}])


@pytest.mark.parametrize("text,values", [
    ("Refunded 45.00 EUR", [45.0]),
    ("€45 and $ 12.50 and USD12 and 7 GBP and 12.25$", [45, 12.5, 12, 7, 12.25]),
    ("a 45,00 EUR decimal comma is not read", []),
    ("version 1.2.3 EUR, 1,2345 USD", []),
    ("3 EURO and 40 items and EURX 5", []),
    ("ids ORD-123, ab-1, ABCDEF-9 and INV-2024", ["ORD-123", "INV-2024"]),
])
def test_default_patterns(text, values):
    assert [c.value for c in extract_claims(text)] == values


def test_default_patterns_have_one_group():
    assert ClaimPattern(name="amount", pattern=AMOUNT_PATTERN).compiled.groups == 1
    assert ClaimPattern(name="id", pattern=ID_PATTERN).compiled.groups == 1


def test_values():
    assert parse_number("45.00") == 45.0 and parse_number("1,234.50") == 1234.5
    assert parse_number("1234") == 1234 and parse_number("12,34") is None
    assert parse_number("ORD-1") is None
    assert same_value(40, "40.00") and same_value(" a ", "a")
    assert same_value(0.1 + 0.2, 0.3)
    assert not same_value(True, 1) and not same_value(1, "one")
    assert not same_value(2**70, 2**70 + 1)  # integers compare exactly
    assert not same_value(10**400, 1.5)  # no overflow


# ---- hostile input --------------------------------------------------------------------------

def test_a_megabyte_of_numbers_is_linear():
    text = ("Refunded 40.00 EUR. " + "1 " * 200_000 + "12.5 EUR " * 60_000 + "x" + "9" * 100_000
            + " 7 EUR")
    assert len(text) > 1_000_000
    claims = extract_claims(text)
    # duplicates collapse: 40.00, 12.5 and 7 are the only amounts
    assert [c.value for c in claims] == [40.0, 12.5, 7]
    c = case(*REFUND, final(text))
    step, check = first_unsupported(c)  # type: ignore[misc]
    assert (step, check.claim.value, check.status) == (5, 12.5, "contradicted")


def test_deeply_nested_result_is_walked_without_recursion():
    deep: Any = {"amount": 40.0}
    for _ in range(5_000):
        deep = {"next": [deep]}
    steps = (call("get"), result("get", deep), final({"claims": {"amount": 40}}))
    assert make().evaluate(case(*steps)) == ("pass", None)


def test_check_claims_on_bare_steps():
    steps = [StepRecorded(1, "tool_call", "get", {}), StepRecorded(2, "tool_result", "get", None, {"n": 3}),
             StepRecorded(3, "final", result={"claims": {"n": 3, "m": 1}})]
    checks = check_claims(steps, steps[-1])
    assert [c.status for c in checks] == ["supported", "unsupported"]
    assert checks[0].observed_step == 2

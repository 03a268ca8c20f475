"""output_matches (issue 26, SPEC §18.5): answers that may be phrased — exact, contains, regex
and number matching after `normalize: [case, whitespace, numbers]`, `{"$any_of": [...]}`
alternatives — and the same number reading in claims_supported ("£1,050" is supported by a
tool result 1050)."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest
from pydantic import ValidationError

from oloproof.evaluate.claims import extract_claims, parse_number
from oloproof.evaluate.numbers import canonical, normalize_numbers, numbers_in, read_number
from oloproof.evaluate.output import normalize_text
from oloproof.evaluate.registry import registry
from tests.conftest import write
from tests.helpers import calls, view
from tests.test_claims import call, case, final, result
from tests.test_claims import make as claims_evaluator

MISSING = object()


def make(**cfg):
    cls = registry()["output_matches"]
    return cls(cls.config_model.model_validate({"type": "output_matches", "criterion": "answer_ok",
                                                "field": "answer", **cfg}))


def judge(ev, output=MISSING, expected=MISSING, **kw):
    return ev.evaluate(view(kw.pop("trajectory", None), output={} if output is MISSING else {"answer": output},
                            expected={} if expected is MISSING else {"answer": expected}, **kw))


PASS, FAIL = ("pass", None), ("fail", None)


# ---- numbers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["£1,050.00", "1050", "1 050", "1,050", "1050.0", "1\u00a0050", "1\u202f050",
                                  "1\u2009050 €", "USD 1,050", "1050 GBP", "$1050", " 1,050.000 "])
def test_one_number_however_it_is_written(text):
    assert read_number(text) == 1050
    assert [canonical(n) for n in numbers_in(text)] == ["1050"]
    assert normalize_numbers(text).strip() == "1050"


@pytest.mark.parametrize("text, numbers", [
    ("1.050", ["1.05"]),  # the point is always the decimal point
    ("1.050,00", []), ("45,00", []), ("1,2345", []), ("1.2.3", []),  # European or ambiguous: no number
    ("ORD-123", []), ("5kg", []), ("A1", []), ("2024-01-05", []), ("10:30", []), ("1/2", []), ("GBP1050", []),
    ("-1,050.50 and +3", ["-1050.5", "3"]), ("x-5", []), ("(-5)", ["-5"]), ("\u22122", ["-2"]),
    ("paid £1,050 on 3 May", ["1050", "3"]), ("0.50", ["0.5"]), ("000", ["0"]), ("-0.0", ["0"]),
    ("1,050,000.25", ["1050000.25"]), ("2 050", ["2050"]), ("9" * 61, []),
    ("12345678901234567890123456789012345", ["12345678901234567890123456789012345"]),  # exact, not rounded
])
def test_what_reads_as_a_number(text, numbers):
    assert [canonical(n) for n in numbers_in(text)] == numbers


def test_read_number_takes_numbers_and_one_number_texts_only():
    assert read_number(1050) == 1050 and read_number(1050.0) == Decimal("1050.0") and read_number(0.1) == Decimal("0.1")
    assert read_number(True) is None and read_number(float("nan")) is None and read_number(None) is None
    assert read_number("1050 and 3") is None and read_number("about 1050") is None and read_number("") is None
    assert read_number("1" * 1000) is None


def test_normalisation_order_and_steps():
    assert normalize_text("  Total:\u00a0 £1,050.00\n DUE ", ["case", "whitespace", "numbers"]) == "total: 1050 due"
    assert normalize_text("Straße", ["case"]) == normalize_text("STRASSE", ["case"])
    assert normalize_text("a  b", []) == "a  b"


def test_number_reading_is_linear():
    text = "1 " * 200_000 + "999 " * 200_000 + "1,0" * 100_000
    start = time.perf_counter()
    normalize_numbers(text)
    list(numbers_in(text))
    assert time.perf_counter() - start < 5


# ---- output_matches ---------------------------------------------------------------------------

@pytest.mark.parametrize("output", ["£1,050.00", "1050", "1 050", "1,050", "1050.0", 1050, 1050.0])
def test_exact_with_numbers_reads_every_spelling_as_one_answer(output):
    assert judge(make(normalize=["numbers"]), output, "1050") == PASS
    assert judge(make(normalize=["numbers"]), output, 1050) == PASS
    assert judge(make(normalize=["numbers"]), output, "£1,050") == PASS


def test_exact_without_normalisation_is_exact():
    ev = make()
    assert judge(ev, "1050", "1050") == PASS and judge(ev, 1050, "1050") == PASS
    assert judge(ev, "£1,050", "1050") == FAIL and judge(ev, "Yes", "yes") == FAIL
    assert judge(ev, "1.050", "1050") == FAIL
    assert judge(ev, ["a", 1], ["a", 1.0]) == PASS and judge(ev, True, 1) == FAIL and judge(ev, {"a": 1}, "a") == FAIL
    assert judge(make(normalize=["case", "whitespace"]), "  YES\u00a0 sir ", "yes sir") == PASS
    assert judge(make(normalize=["numbers"]), "1.050", "1050") == FAIL  # one point zero five


def test_contains():
    ev = make(match="contains", normalize=["case", "whitespace", "numbers"])
    assert judge(ev, "Your  BALANCE is £1,050.00 today.", "balance is 1050") == PASS
    assert judge(ev, "Your balance is 10,500.", "1050") == FAIL  # a whole number only
    assert judge(ev, "Ref 1.1050", "1050") == FAIL
    assert judge(ev, "You have 1050.", "1050") == PASS
    assert judge(make(match="contains"), "Your balance is 10500", "1050") == PASS  # plain substring
    assert judge(make(match="contains"), ["a", "b"], "b") == PASS
    assert judge(make(match="contains"), {"k": 1}, "k") == PASS


def test_regex():
    ev = make(match="regex", normalize=["case", "numbers"])
    assert judge(ev, "Sent £1,050.00 to Ana", r"sent 1050 to \w+") == PASS  # found anywhere, case ignored
    assert judge(ev, "Sent 10 to Ana", r"^sent 1050") == FAIL
    assert judge(make(match="regex"), "abc", "^b") == FAIL and judge(make(match="regex"), "abc", "b") == PASS
    assert judge(make(match="regex"), 1050, "^10") == PASS
    assert judge(make(match="regex"), {"a": 1}, "a") == FAIL
    # a pattern that cannot be used leaves the case missing, never passed
    assert judge(make(match="regex"), "aaa", "(a+)+$") == ("missing", "invalid_regex")
    assert judge(make(match="regex"), "aaa", "(") == ("missing", "invalid_regex")
    assert judge(make(match="regex"), "aaa", 3) == ("missing", "invalid_regex")


def test_number():
    ev = make(match="number")
    assert judge(ev, "Your balance is £1,050.00.", 1050) == PASS
    assert judge(ev, "1050 (that is 1,050.00)", "£1,050") == PASS  # the same number twice is one
    assert judge(ev, 1050.0, 1050) == PASS and judge(ev, "1,049.99", 1050) == FAIL
    assert judge(ev, "On 3 May you had £1,050", 1050) == ("fail", "several_numbers")
    assert judge(ev, "none", 1050) == ("fail", "no_number") and judge(ev, True, 1) == ("fail", "no_number")
    assert judge(ev, "1050", "a lot") == ("missing", "expected_not_a_number")
    close = make(match="number", tolerance=0.01)
    assert judge(close, "1,049.99", 1050) == PASS and judge(close, "1,049.98", 1050) == FAIL


def test_any_of():
    ev = make(normalize=["case", "numbers"])
    alternatives = {"$any_of": ["one thousand and fifty", "1050"]}
    assert judge(ev, "£1,050", alternatives) == PASS
    assert judge(ev, "One Thousand and Fifty", alternatives) == PASS
    assert judge(ev, "1051", alternatives) == FAIL
    number = make(match="number")
    assert judge(number, "12", {"$any_of": [1050, 12]}) == PASS
    assert judge(number, "3 and 4", {"$any_of": [1050, 12]}) == ("fail", "several_numbers")
    regex = make(match="regex")
    # an alternative that cannot be judged might have matched: missing, not fail
    assert judge(regex, "abc", {"$any_of": ["x", "("]}) == ("missing", "invalid_regex")
    assert judge(regex, "abc", {"$any_of": ["(", "b"]}) == PASS


def test_excluded_fail_and_missing():
    ev = make()
    assert judge(ev, "1050") == ("excluded", "no_expected_value")
    assert judge(ev, expected="1050") == FAIL  # the output lacks the field
    assert ev.evaluate(view(None, output="1050", expected={"answer": "1050"})) == FAIL  # not a dict
    assert judge(ev, "1050", "1050", error="boom") == ("missing", "system_error")
    # another expected field, and the default: the output field's own name
    other = make(expected_field="total")
    assert other.evaluate(view(None, output={"answer": "9"}, expected={"total": "9"})) == PASS
    assert other.evaluate(view(None, output={"answer": "9"}, expected={"answer": "9"})) == \
        ("excluded", "no_expected_value")


def test_the_output_is_judged_whatever_the_trace():
    """No trajectory rule applies: the answer is the system's output, recorded whether or not
    its trace was cut short (a truncated trace changes nothing here, as for `contains`)."""
    ev = make(normalize=["numbers"])
    assert judge(ev, "£1,050", "1050", trajectory=calls("get_balance", truncated=True)) == PASS
    assert judge(ev, "£1,051", "1050", trajectory=calls("get_balance", truncated=True)) == FAIL


def test_config():
    with pytest.raises(ValidationError):
        registry()["output_matches"].config_model.model_validate({"type": "output_matches", "field": "a"})
    with pytest.raises(ValidationError, match="tolerance applies to match: number only"):
        make(tolerance=0.1)
    with pytest.raises(ValidationError, match="normalize has nothing to do"):
        make(match="number", normalize=["numbers"])
    with pytest.raises(ValidationError):
        make(match="fuzzy")
    with pytest.raises(ValidationError):
        make(normalize=["digits"])
    with pytest.raises(ValidationError):
        make(tolerance=-1)
    assert make(match="number", tolerance=0.5).config.tolerance == 0.5


# ---- claims_supported reads numbers the same way ----------------------------------------------

@pytest.mark.parametrize("observed, report", [
    ({"balance": 1050}, "Your balance is £1,050."),
    ({"balance": 1050}, "Your balance is £1 050.00"),
    ({"balance": 1050}, "Your balance is 1\u202f050 GBP"),
    ({"balance": 1050}, {"text": "done", "claims": {"balance": "£1,050"}}),
    ({"balance": "£1,050.00"}, {"text": "done", "claims": {"balance": 1050}}),
    ({"balance": "1 050"}, "Your balance is £1050."),
    ({"message": "balance: £1,050.00 (as of 2024-05-01)"}, "Your balance is £1050."),
])
def test_claims_supported_reads_a_phrased_number(observed, report):
    c = case(call("get_balance"), result("get_balance", observed), final(report))
    assert claims_evaluator().evaluate(c) == PASS


@pytest.mark.parametrize("observed, report, reason", [
    ({"balance": 1050}, {"text": "done", "claims": {"balance": "£1,051"}}, "contradicted_claim"),
    ({"message": "balance: £1,050.00"}, "Your balance is £1051.", "unsupported_claim"),
    ({"message": "paid on 2024-05-01"}, "You paid 1 EUR.", "unsupported_claim"),  # a date shows no amount
    ({"balance": 1050}, "Your balance is 1.050 EUR", "unsupported_claim"),  # 1.05
])
def test_claims_supported_still_fails_a_wrong_number(observed, report, reason):
    c = case(call("get_balance"), result("get_balance", observed), final(report))
    assert claims_evaluator().evaluate(c) == ("fail", reason)


def test_claim_numbers_keep_their_rules():
    assert parse_number("£1,050") == 1050 and parse_number("1 050") == 1050 and parse_number("45.00") == 45.0
    assert isinstance(parse_number("1050"), int) and isinstance(parse_number("1050.0"), float)
    assert parse_number("12,34") is None and parse_number("ORD-1") is None
    assert [c.value for c in extract_claims("Paid £1 050 and 2\u202f100 EUR; 12 40 EUR")] == [1050, 2100, 40]
    start = time.perf_counter()  # a long run of space-grouped digits is scanned once
    assert extract_claims("999 " * 300_000) == []
    assert time.perf_counter() - start < 5


# ---- end to end -------------------------------------------------------------------------------

APP = '''\
from oloproof import current_case, system, tool


@tool
def get_balance(account):
    return {"balance": 1050}


@system(name="teller", version="1", records=("agent_trajectory/v1",))
def run(case):
    get_balance("main")
    current_case().final(case.input["say"])
    current_case().finish("success")
    return {"answer": case.input["say"]}
'''

CONFIG = """system:
  name: teller
  version: "1"
  callable: app:run
  records: [agent_trajectory/v1]
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: contains_plain, field: answer, expected_field: answer}
  - {type: output_matches, criterion: answer_matches, field: answer, match: contains, normalize: [case, numbers]}
  - {type: output_matches, criterion: balance_number, field: answer, expected_field: balance, match: number}
  - {type: claims_supported}
"""

CASES = [
    {"id": "pounds", "input": {"say": "Your balance is £1,050.00."}, "expected": {"answer": "balance is 1050",
                                                                               "balance": 1050}},
    {"id": "spaced", "input": {"say": "BALANCE IS 1 050 GBP"}, "expected": {"answer": {"$any_of": ["balance is 1050",
                                                                                                 "1050 pounds"]},
                                                                          "balance": "1050"}},
    {"id": "wrong", "input": {"say": "Your balance is £1,500."}, "expected": {"answer": "balance is 1050",
                                                                            "balance": 1050}},
    {"id": "no-answer", "input": {"say": "Ask me later"}, "expected": {}},
]


@pytest.fixture
def teller(tmp_path: Path) -> Path:
    p = tmp_path / "teller"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in CASES))
    return p


def test_phrased_answers_end_to_end(cli, teller):
    r = cli("run", "--json", "r.json", cwd=teller)
    assert r.exit_code == 0, r.output
    data = json.loads((teller / "r.json").read_text())
    got = {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                          for k, v in c["verdicts"].items()} for c in data["cases"]}
    assert got == {
        # `contains` rejects the correct "£1,050.00"; output_matches and claims_supported accept it
        "pounds": {"contains_plain": "fail", "answer_matches": "pass", "balance_number": "pass",
                   "claims_supported": "pass"},
        "spaced": {"contains_plain": "fail", "answer_matches": "pass", "balance_number": "pass",
                   "claims_supported": "pass"},
        "wrong": {"contains_plain": "fail", "answer_matches": "fail", "balance_number": "fail",
                  "claims_supported": "fail/unsupported_claim"},
        "no-answer": {"contains_plain": "excluded/no_expected_value", "answer_matches": "excluded/no_expected_value",
                      "balance_number": "excluded/no_expected_value", "claims_supported": "excluded/no_claims"},
    }


@pytest.mark.parametrize("answer, field, needle", [
    ({"$anyof": ["a"]}, "expected.answer.$anyof", "did you mean '$any_of'?"),
    ({"$any_of": []}, "expected.answer.$any_of", "non-empty list"),
    ({"$any_of": "a"}, "expected.answer.$any_of", "non-empty list"),
    ({"$any_of": ["a"], "also": 1}, "expected.answer", "only key"),
])
def test_bad_alternatives_are_exit_2_naming_file_line_case_and_field(cli, teller, answer, field, needle):
    cases = [dict(c) for c in CASES]
    cases[1] = {**cases[1], "expected": {"answer": answer}}
    (teller / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    r = cli("run", cwd=teller)
    assert r.exit_code == 2, r.output
    assert f"cases.jsonl:2: case 'spaced': field '{field}'" in r.output and needle in r.output, r.output
    assert "Traceback" not in r.output and not (teller / ".oloproof" / "log.db").exists()


@pytest.mark.parametrize("line, needle", [
    ("{type: output_matches, criterion: x, field: answer, match: fuzzy}", "match"),
    ("{type: output_matches, criterion: x, field: answer, normalize: [digits]}", "normalize"),
    ("{type: output_matches, field: answer}", "criterion"),
    ("{type: output_matches, criterion: x, field: answer, tolerance: 1}", "tolerance applies to match: number only"),
])
def test_a_bad_option_is_exit_2_naming_the_line(cli, teller, line, needle):
    text = (teller / "oloproof.yaml").read_text()
    (teller / "oloproof.yaml").write_text(text + f"  - {line}\n")
    r = cli("run", cwd=teller)
    assert r.exit_code == 2, r.output
    assert "oloproof.yaml:12: evaluators[4]" in r.output and needle in r.output, r.output
    assert "Traceback" not in r.output
    assert not (teller / ".oloproof" / "log.db").exists()


def test_decimal_results_encode():  # the numbers module's Decimals never reach a verdict or the log
    assert msgspec.json.encode(judge(make(match="number"), "£1,050", 1050)) == b'["pass",null]'

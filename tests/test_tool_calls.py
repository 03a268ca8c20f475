"""agent_tool_calls and its argument matchers (issue 26, SPEC §18.5): expected calls with their
arguments, in strict, in_order or any_order alignment, extra calls allowed or forbidden, the
truncated-prefix rule (checked against every short continuation), the case-file checks, the
case panel (terminal and HTML, recorded markup kept as text) and a run end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from oloproof.config.matchers import (
    MatcherError,
    any_of_problem,
    check_pattern,
    compile_regex,
    tool_calls_problem,
)
from oloproof.evaluate.matchers import matches, mismatch
from oloproof.evaluate.paths import ABSENT
from oloproof.evaluate.registry import registry
from oloproof.evaluate.tool_calls import align, call_criteria
from tests.conftest import write
from tests.helpers import calls, view
from tests.test_tool_names import events
from tests.test_view import driver, served, wait  # noqa: F401  (the browser fixtures and helper)


def make(**cfg):
    cls = registry()["agent_tool_calls"]
    return cls(cls.config_model.model_validate({"type": "agent_tool_calls", **cfg}))


def judged(ev, trajectory, expected_calls):
    return ev.evaluate_paths(view(trajectory, expected={"tool_calls": expected_calls}))


SEND = {"tool": "send_money", "arguments": {"recipient": {"$regex": "GB29[A-Z0-9]+"},
                                            "amount": {"$approx": 100, "$tol": 0.01}}}
BALANCE = {"tool": "get_balance"}
GOOD_SEND = ("send_money", {"recipient": "GB29NWBK6016", "amount": 100.0, "subject": "rent"})


# ---- matchers -------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, value, ok", [
    (1, 1.0, True), (1, True, False), (True, 1, False), ("1", 1, False), (None, None, True),
    (0.1, 0.1, True), ("a", "a", True), ("a", "A", False),
    ({"a": 1}, {"a": 1, "b": 2}, True), ({"a": {"b": 1}}, {"a": {"b": 1, "c": 0}}, True),
    ({"a": 1}, {"b": 1}, False), ({"a": 1}, [1], False),
    ([1, 2], [1, 2], True), ([1, 2], [2, 1], False), ([1], [1, 1], False),
    ({"$regex": "GB\\d+"}, "GB12", True), ({"$regex": "GB\\d+"}, "xGB12", False),  # the whole string
    ({"$regex": ".*rent.*"}, "for rent!", True), ({"$regex": "\\d+"}, 12, False),
    ({"$approx": 100, "$tol": 0.01}, 100.005, True), ({"$approx": 100, "$tol": 0.01}, 100.02, False),
    ({"$approx": 0.3}, 0.1 + 0.2, True), ({"$approx": 100}, 100.01, False),  # default tol 1e-6
    ({"$approx": 100}, "100", False), ({"$approx": 1}, True, False), ({"$approx": 1.5}, 10**400, False),
    ({"$in": ["a", "b"]}, "b", True), ({"$in": ["a", "b"]}, "c", False),
    ({"$in": [{"$regex": "x+"}, 3]}, "xxx", True), ({"$in": [1]}, 1.0, True),
    ({"$any": True}, None, True), ({"$any": True}, {"deep": [1]}, True),
    ({"$contains": "rent"}, "May rent", True), ({"$contains": "rent"}, "May", False),
    ({"$contains": 3}, [1, 3], True), ({"$contains": {"id": 2}}, [{"id": 1}, {"id": 2, "x": 0}], True),
    ({"$contains": "a"}, {"a": 1}, False), ({"$contains": 1}, "1", False),
    ({"to": [{"$regex": "a.*"}, {"$any": True}]}, {"to": ["ab", 5]}, True),
    ({"to": [{"$regex": "a.*"}, {"$any": True}]}, {"to": ["ba", 5]}, False),
])
def test_matchers(pattern, value, ok):
    check_pattern(pattern, "x")  # every pattern here is valid
    assert matches(pattern, value) is ok
    assert (mismatch(pattern, value) is None) is ok


def test_exact_applies_at_every_depth_and_mismatches_say_where_and_why():
    assert not matches({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, exact=True)
    assert matches({"a": {"b": {"$any": True}}}, {"a": {"b": 0}}, exact=True)
    assert str(mismatch({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, exact=True)) == \
        "at .a.c: not expected (exact: only the named keys)"
    assert str(mismatch({"to": [{"$regex": "a+"}]}, {"to": ["b"]})) == "at .to[0]: does not match the pattern 'a+'"
    assert str(mismatch({"$approx": 100, "$tol": 0.01}, 101)) == "not within 0.01 of 100"
    assert str(mismatch({"a": 1}, {})) == "at .a: not in the recorded value"
    assert str(mismatch(100, 1000)) == "not equal to 100"
    assert str(mismatch({"$in": ["a", "b"]}, "c")) == 'not one of ["a","b"]'
    # a stored pattern that no longer compiles is a mismatch, never a match
    assert mismatch({"$regex": "(a+)+"}, "aaa") is not None


@pytest.mark.parametrize("pattern, field, message", [
    ({"$regx": "a"}, "x", "unknown matcher '$regx'; did you mean '$regex'?"),
    ({"a": [{"$aprox": 1}]}, "x.a[0]", "did you mean '$approx'?"),
    ({"$regex": "("}, "x", "'$regex' is not a valid regular expression"),
    ({"$regex": "(a+)+$"}, "x", "repeats without bound a part that repeats without bound"),
    ({"$regex": "(.*,)*"}, "x", "atomic"),
    ({"$regex": "a" * 501}, "x", "at most 500"),
    ({"$regex": 3}, "x", "takes a pattern"),
    ({"$approx": "1"}, "x", "'$approx' takes a number"),
    ({"$approx": True}, "x", "'$approx' takes a number"),
    ({"$approx": 1, "$tol": -1}, "x", "'$tol' takes a number >= 0"),
    ({"$tol": 1}, "x", "this one has none"),
    ({"$in": [1], "$tol": 1}, "x", "'$tol' goes only with '$approx'"),
    ({"$regex": "a", "$in": ["a"]}, "x", "this one has $regex, $in"),
    ({"$in": []}, "x", "non-empty list"),
    ({"$any": False}, "x", "'$any' takes true"),
    ({"$in": [{"$contains": {"$regex": ")"}}]}, "x.$in[0].$contains", "not a valid regular expression"),
])
def test_bad_patterns_are_refused_naming_the_place(pattern, field, message):
    with pytest.raises(MatcherError) as e:
        check_pattern(pattern, "x")
    assert e.value.field == field and message in e.value.message


def test_safe_repetitions_compile():
    for ok in [r"(?>\d+,)*", r"(?:\d++,)*", r"GB\d{2}[A-Z]{4}\d{14}", r"(a|b)*c", r"(ab)+", r"(a{1,3})+"]:
        assert compile_regex(ok).pattern == ok


@pytest.mark.parametrize("value, field, message", [
    ("send", "expected.tool_calls", "must be a list"),
    (["send"], "expected.tool_calls[0]", "must be an object"),
    ([{"tool": ""}], "expected.tool_calls[0].tool", "non-empty string"),
    ([{"arguments": {}}], "expected.tool_calls[0].tool", "it is missing"),
    ([{"tool": "t", "argument": {}}], "expected.tool_calls[0].argument", "did you mean 'arguments'?"),
    ([{"tool": "t", "arguments": [1]}], "expected.tool_calls[0].arguments", "must be an object"),
    ([{"tool": "t", "arguments": {"$any": True}}], "expected.tool_calls[0].arguments", "a matcher goes on"),
    ([{"tool": "t", "arguments": {"n": {"$aprox": 1}}}], "expected.tool_calls[0].arguments.n", "'$approx'"),
])
def test_expected_tool_calls_shape(value, field, message):
    problem = tool_calls_problem(value)
    assert problem is not None and problem[0] == field and message in problem[1], problem


def test_good_expected_tool_calls_and_any_of_pass_the_check():
    assert tool_calls_problem([]) is None and tool_calls_problem([SEND, BALANCE]) is None
    assert any_of_problem({"answer": {"$any_of": ["a", "b"]}, "state": {"$x": 1}}) is None
    assert any_of_problem({"answer": {"$any_of": []}})[0] == "expected.answer.$any_of"
    assert "only key" in any_of_problem({"answer": {"$any_of": ["a"], "x": 1}})[1]
    assert "did you mean '$any_of'" in any_of_problem({"answer": {"$anyof": ["a"]}})[1]


# ---- the evaluator ----------------------------------------------------------------------------

def test_strict_passes_on_exactly_the_expected_calls_with_matching_arguments():
    ev = make()
    assert ev.criterion == "agent_tool_calls"
    verdict, checks = judged(ev, calls("get_balance", GOOD_SEND), [BALANCE, SEND])
    assert verdict == ("pass", None)
    assert [(c.path, c.verdict, c.expected, c.recorded, c.note) for c in checks] == [
        ("tool_calls[0]", "pass", "get_balance", "get_balance", "step 1"),
        ("tool_calls[1]", "pass", "send_money", "send_money", "step 3"),
        ("tool_calls[1].arguments.recipient", "pass", {"$regex": "GB29[A-Z0-9]+"}, "GB29NWBK6016", None),
        ("tool_calls[1].arguments.amount", "pass", {"$approx": 100, "$tol": 0.01}, 100.0, None),
    ]


def test_a_wrong_argument_fails_and_the_panel_says_which_and_why():
    ev = make()
    verdict, checks = judged(ev, calls("get_balance", ("send_money", {"recipient": "GB29X", "amount": 1000})),
                             [BALANCE, SEND])
    assert verdict == ("fail", None)
    rows = {c.path: c for c in checks}
    assert rows["tool_calls[1]"].verdict == "fail"
    assert rows["tool_calls[1]"].note == "nearest: step 3; at arguments.amount: not within 0.01 of 100"
    assert rows["tool_calls[1].arguments.recipient"].verdict == "pass"
    amount = rows["tool_calls[1].arguments.amount"]
    assert (amount.verdict, amount.recorded, amount.note) == ("fail", 1000, "not within 0.01 of 100")
    # the nearest candidate is shown once: not again as an extra call
    assert not any(c.path.startswith("step ") for c in checks)


def test_a_missing_argument_and_a_wrong_recipient_fail():
    ev = make()
    verdict, checks = judged(ev, calls(("send_money", {"amount": 100})), [SEND])
    assert verdict == ("fail", None)
    recipient = next(c for c in checks if c.path.endswith("recipient"))
    assert recipient.recorded is ABSENT and recipient.note == "not in the recorded arguments"
    verdict, _ = judged(ev, calls(("send_money", {"recipient": "FR76", "amount": 100})), [SEND])
    assert verdict == ("fail", None)


def test_unnamed_arguments_are_ignored_unless_exact_arguments():
    expected = [{"tool": "send_money", "arguments": {"amount": 100}}]
    t = calls(("send_money", {"amount": 100, "subject": "rent"}))
    assert judged(make(), t, expected)[0] == ("pass", None)
    verdict, checks = judged(make(exact_arguments=True), t, expected)
    assert verdict == ("fail", None)
    extra = next(c for c in checks if c.path == "tool_calls[0].arguments.subject")
    assert (extra.verdict, extra.expected, extra.recorded) == ("fail", ABSENT, "rent")
    assert "exact_arguments" in extra.note
    # no `arguments`: any arguments, even with exact_arguments; {} with it: none
    assert judged(make(exact_arguments=True), t, [{"tool": "send_money"}])[0] == ("pass", None)
    assert judged(make(exact_arguments=True), t, [{"tool": "send_money", "arguments": {}}])[0] == ("fail", None)
    assert judged(make(exact_arguments=True), calls("send_money"), [{"tool": "send_money", "arguments": {}}])[0] \
        == ("pass", None)


def test_strict_fails_on_an_extra_call_a_missing_call_or_another_order():
    ev = make()
    verdict, checks = judged(ev, calls("get_balance", "delete_account", GOOD_SEND), [BALANCE, SEND])
    assert verdict == ("fail", None)
    extra = [c for c in checks if c.path.startswith("step ")]
    assert [(c.path, c.verdict, c.recorded, c.note) for c in extra] == [
        ("step 3", "fail", {"tool": "delete_account", "arguments": {}}, "extra call (extra_calls: forbid)")]
    verdict, checks = judged(ev, calls("get_balance"), [BALANCE, SEND])
    assert verdict == ("fail", None)
    assert [(c.path, c.verdict, c.note) for c in checks][-1] == ("tool_calls[1]", "fail", "not called")
    verdict, checks = judged(ev, calls(GOOD_SEND, "get_balance"), [BALANCE, SEND])
    assert verdict == ("fail", None)
    assert "out of the expected order" in next(c.note for c in checks if c.verdict == "fail")


def test_in_order_with_extra_calls_allowed_is_a_subsequence():
    ev = make(order="in_order", extra_calls="allow")
    assert judged(ev, calls("login", "get_balance", "look", GOOD_SEND, "logout"), [BALANCE, SEND])[0] == \
        ("pass", None)
    assert judged(ev, calls(GOOD_SEND, "get_balance"), [BALANCE, SEND])[0] == ("fail", None)
    # in_order with forbid is strict
    forbid = make(order="in_order")
    assert judged(forbid, calls("login", "get_balance", GOOD_SEND), [BALANCE, SEND])[0] == ("fail", None)
    assert judged(forbid, calls("get_balance", GOOD_SEND), [BALANCE, SEND])[0] == ("pass", None)


def test_any_order_is_a_multiset_matched_one_to_one():
    ev = make(order="any_order")
    assert judged(ev, calls(GOOD_SEND, "get_balance"), [BALANCE, SEND])[0] == ("pass", None)
    assert judged(ev, calls(GOOD_SEND), [SEND, SEND])[0] == ("fail", None)  # two expected, one made
    assert judged(ev, calls(GOOD_SEND, GOOD_SEND), [SEND])[0] == ("fail", None)  # one left over
    assert judged(make(order="any_order", extra_calls="allow"), calls(GOOD_SEND, GOOD_SEND), [SEND])[0] == \
        ("pass", None)
    # a greedy pairing would give the 100 to the `$any` call and leave the second without one
    loose = {"tool": "send_money", "arguments": {"amount": {"$any": True}}}
    exact_100 = {"tool": "send_money", "arguments": {"amount": 100}}
    t = calls(("send_money", {"amount": 100}), ("send_money", {"amount": 5}))
    assert judged(ev, t, [loose, exact_100])[0] == ("pass", None)
    assert align([loose, exact_100], t.calls, "any_order", False).pairs == (1, 0)


def test_no_expected_calls_is_excluded_and_an_empty_list_expects_none():
    ev = make()
    assert ev.evaluate(view(calls("get_balance"), expected={})) == ("excluded", "no_expected_calls")
    assert ev.evaluate(view(calls(), expected={"tool_calls": []})) == ("pass", None)
    assert ev.evaluate(view(calls("get_balance"), expected={"tool_calls": []})) == ("fail", None)
    allow = make(order="in_order", extra_calls="allow")
    assert allow.evaluate(view(calls("get_balance"), expected={"tool_calls": []})) == ("pass", None)


def test_missing_when_the_system_raised_or_recorded_no_trajectory():
    ev = make()
    assert ev.evaluate_paths(view(None, expected={"tool_calls": [SEND]})) == (("missing", "no_trajectory_recorded"), [])
    errored = view(calls(GOOD_SEND), expected={"tool_calls": [SEND]}, error="boom")
    assert ev.evaluate_paths(errored) == (("missing", "system_error"), [])
    assert ev.evaluate(errored) == ("missing", "system_error")
    # a stored case whose expected.tool_calls predates the case-file check: never a pass
    assert ev.evaluate(view(calls(), expected={"tool_calls": "send_money"})) == ("missing", "invalid_expected_calls")


def test_truncated_prefix_rule():
    strict, allow = make(), make(order="in_order", extra_calls="allow")
    anyo = make(order="any_order")
    prefix = calls("get_balance", truncated=True)
    # the rest may still come: missing
    for ev in (strict, allow, anyo):
        assert judged(ev, prefix, [BALANCE, SEND])[0] == ("missing", "truncated")
    # everything expected is there: allow passes (calls can only be added); forbid may yet see an extra one
    done = calls("get_balance", GOOD_SEND, truncated=True)
    assert judged(allow, done, [BALANCE, SEND])[0] == ("pass", None)
    assert judged(strict, done, [BALANCE, SEND])[0] == ("missing", "truncated")
    # an extra call is already fatal under forbid: no continuation removes it
    verdict, checks = judged(strict, calls("delete_account", truncated=True), [BALANCE, SEND])
    assert verdict == ("fail", None) and any(c.verdict == "fail" for c in checks)
    assert judged(anyo, calls("delete_account", truncated=True), [BALANCE, SEND])[0] == ("fail", None)
    # a wrong send under forbid: fail, shown on the expected call beside its nearest candidate
    verdict, checks = judged(strict, calls("get_balance", ("send_money", {"recipient": "GB29X", "amount": 5}),
                                           truncated=True), [BALANCE, SEND])
    assert verdict == ("fail", None)
    assert [c.verdict for c in checks if c.path == "tool_calls[1]"] == ["fail"]
    # under allow the same wrong send may be followed by the right one: missing, and so is its row
    verdict, checks = judged(allow, calls("get_balance", ("send_money", {"recipient": "GB29X", "amount": 5}),
                                          truncated=True), [BALANCE, SEND])
    assert verdict == ("missing", "truncated")
    assert [c.verdict for c in checks if c.path == "tool_calls[1]"] == ["missing"]


ALPHABET = [("a", {"n": 1}), ("a", {"n": 2}), ("b", {})]
EXPECTATIONS = [
    [],
    [{"tool": "a", "arguments": {"n": 1}}],
    [{"tool": "a", "arguments": {"n": {"$in": [1, 2]}}}, {"tool": "b"}],
    [{"tool": "a"}, {"tool": "a", "arguments": {"n": 2}}],
]
MODES = [{}, {"order": "in_order", "extra_calls": "allow"}, {"order": "any_order"},
         {"order": "any_order", "extra_calls": "allow"}]


@pytest.mark.parametrize("mode", MODES)
def test_a_verdict_on_a_prefix_is_the_verdict_of_every_continuation(mode):
    """The prefix rule, checked by brute force: whenever a truncated trace gets pass or fail,
    every completion of it (up to two more calls) gets the same verdict; and the rows agree with
    the verdict (a fail shows a failing row, a pass shows none)."""
    ev = make(**mode)
    decided = 0
    for expected in EXPECTATIONS:
        for n in range(4):
            for prefix in itertools.product(ALPHABET, repeat=n):
                verdict, checks = judged(ev, calls(*prefix, truncated=True), expected)
                row_verdicts = {c.verdict for c in checks}
                if verdict[0] == "fail":
                    assert "fail" in row_verdicts, (mode, expected, prefix)
                if verdict[0] == "pass":
                    assert row_verdicts <= {"pass"}, (mode, expected, prefix)
                if verdict[0] == "missing":
                    assert verdict == ("missing", "truncated")
                    continue
                decided += 1
                for k in range(3):
                    for rest in itertools.product(ALPHABET, repeat=k):
                        assert judged(ev, calls(*prefix, *rest), expected)[0] == verdict, (mode, expected, prefix, rest)
    assert decided > 10  # the rule decided something: the check could fail


@pytest.mark.parametrize("mode", MODES)
def test_complete_traces_verdicts_and_rows_agree(mode):
    ev = make(**mode)
    for expected in EXPECTATIONS:
        for n in range(4):
            for trace in itertools.product(ALPHABET, repeat=n):
                verdict, checks = judged(ev, calls(*trace), expected)
                assert verdict[0] in ("pass", "fail")
                bad = [c for c in checks if c.verdict != "pass"]
                assert (verdict[0] == "fail") == bool(bad), (mode, expected, trace, checks)


def test_config():
    assert make(order="in_order", extra_calls="allow").config.allow_extra
    assert not make(order="any_order").config.allow_extra
    with pytest.raises(ValidationError, match="strict' allows no other call"):
        make(order="strict", extra_calls="allow")
    with pytest.raises(ValidationError):
        make(order="sorted")
    with pytest.raises(ValidationError):
        make(extra_calls="some")
    with pytest.raises(ValidationError):
        make(exact_argument=True)
    assert make(criterion="pays_right").criterion == "pays_right"
    assert call_criteria([make(), make(criterion="x"), registry()["agent_max_steps"](
        registry()["agent_max_steps"].config_model.model_validate({"type": "agent_max_steps", "max_steps": 3}))]) \
        == frozenset({"agent_tool_calls", "x"})


# ---- end to end ---------------------------------------------------------------------------------

APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="bank", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Bank(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def get_balance(self, account):
        return {"balance": self.state["balance"]}

    @tool
    def send_money(self, recipient, amount, subject=""):
        self.state["balance"] -= amount
        return {"ok": True}

    def __call__(self, case):
        self.get_balance("main")
        for t in case.input.get("transfers", []):
            self.send_money(**t)
        if case.input.get("cut"):
            current_case().finish("unknown", truncated=True, step_limit=2)
        else:
            current_case().finish("success")
        return {"answer": "done"}
'''

CONFIG = """system:
  name: bank
  version: "1"
  callable: app:Bank
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: agent_tool_calls}
  - {type: agent_tool_calls, criterion: sends_in_order, order: in_order, extra_calls: allow}
"""

EXPECT = [{"tool": "get_balance", "arguments": {"account": "main"}},
          {"tool": "send_money", "arguments": {"recipient": {"$regex": "GB29[A-Z0-9]+"},
                                               "amount": {"$approx": 100, "$tol": 0.01}}}]
MARKUP = "<script>window.PWNED = 1</script><b>rent</b>"
# the expected value looks like markup too: both are text in every panel
EXPECT_SUBJECT = [EXPECT[0], {"tool": "send_money", "arguments": {**EXPECT[1]["arguments"],
                                                                  "subject": {"$contains": "<b>rent</b>"}}}]
CASES = [
    {"id": "right", "input": {"transfers": [{"recipient": "GB29NWBK", "amount": 100, "subject": MARKUP}]},
     "initial_state": {"balance": 1000}, "expected": {"tool_calls": EXPECT_SUBJECT}},
    {"id": "wrong-amount", "input": {"transfers": [{"recipient": "GB29NWBK", "amount": 1000}]},
     "initial_state": {"balance": 1000}, "expected": {"tool_calls": EXPECT}},
    {"id": "extra-transfer", "input": {"transfers": [{"recipient": "GB29NWBK", "amount": 100},
                                                     {"recipient": "GB00ATTACK", "amount": 500}]},
     "initial_state": {"balance": 1000}, "expected": {"tool_calls": EXPECT}},
    {"id": "cut", "input": {"cut": True}, "initial_state": {"balance": 1000}, "expected": {"tool_calls": EXPECT}},
    {"id": "no-expectation", "input": {}, "initial_state": {"balance": 1000}},
]


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    p = tmp_path / "bank"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in CASES))
    return p


def test_a_run_judges_arguments_end_to_end(cli, bank):
    r = cli("run", "--json", "r.json", cwd=bank)
    assert r.exit_code == 0, r.output
    data = json.loads((bank / "r.json").read_text())
    got = {c["case_id"]: {k: v["verdict"] + ("/" + v["reason"] if v.get("reason") else "")
                          for k, v in c["verdicts"].items()} for c in data["cases"]}
    assert got == {
        "right": {"agent_tool_calls": "pass", "sends_in_order": "pass"},
        "wrong-amount": {"agent_tool_calls": "fail", "sends_in_order": "fail"},
        # the extra transfer: caught where extra calls are forbidden
        "extra-transfer": {"agent_tool_calls": "fail", "sends_in_order": "pass"},
        "cut": {"agent_tool_calls": "missing/truncated", "sends_in_order": "missing/truncated"},
        "no-expectation": {"agent_tool_calls": "excluded/no_expected_calls",
                           "sends_in_order": "excluded/no_expected_calls"},
    }
    wrong = next(c for c in data["cases"] if c["case_id"] == "wrong-amount")
    amount = next(p for p in wrong["paths"] if p["path"] == "tool_calls[1].arguments.amount"
                  and p["criterion"] == "agent_tool_calls")
    assert amount == {"criterion": "agent_tool_calls", "path": "tool_calls[1].arguments.amount", "verdict": "fail",
                      "expected": {"$approx": 100, "$tol": 0.01}, "recorded": 1000, "note": "not within 0.01 of 100"}
    # the stored run is judged the same again
    r = cli("eval", "latest", "--json", "-", cwd=bank)
    assert r.exit_code == 0, r.output
    assert {c["case_id"]: c["verdicts"]["agent_tool_calls"]["verdict"] for c in json.loads(r.stdout)["cases"]} == \
        {k: v["agent_tool_calls"].split("/")[0] for k, v in got.items()}


def test_show_puts_each_expected_call_beside_the_recorded_one(cli, bank):
    assert cli("run", cwd=bank).exit_code == 0
    r = cli("show", "latest", "wrong-amount", cwd=bank)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "expected tool calls beside the recorded ones" in out
    assert "compared state paths" not in out  # tool calls are not state paths
    lines = [line for line in out.splitlines() if "tool_calls[1].arguments.amount" in line]
    assert lines and "1000" in lines[0] and "fail" in lines[0], out
    assert any("tool_calls[1].arguments.recipient" in line and "pass" in line for line in out.splitlines())
    r = cli("show", "latest", "extra-transfer", "--json", "-", cwd=bank)
    assert r.exit_code == 0, r.output
    detail = json.loads(r.stdout)
    extra = [p for p in detail["tool_calls"] if p["path"].startswith("step ")]
    assert extra == [{"criterion": "agent_tool_calls", "path": "step 5", "verdict": "fail",
                      "recorded": {"tool": "send_money", "arguments": {"recipient": "GB00ATTACK", "amount": 500}},
                      "note": "extra call (extra_calls: forbid)"}]
    assert detail["paths"] == []


@pytest.mark.parametrize("expected, field, needle", [
    ({"tool_calls": [{"tool": "send_money", "arguments": {"amount": {"$aprox": 100}}}]},
     "expected.tool_calls[0].arguments.amount", "unknown matcher '$aprox'; did you mean '$approx'?"),
    ({"tool_calls": [{"tool": "send_money", "arguments": {"recipient": {"$regex": "GB(29"}}}]},
     "expected.tool_calls[0].arguments.recipient", "not a valid regular expression"),
    ({"tool_calls": [{"tool": "send_money", "argument": {}}]},
     "expected.tool_calls[0].argument", "did you mean 'arguments'?"),
    ({"tool_calls": {"tool": "send_money"}}, "expected.tool_calls", "must be a list"),
])
def test_a_bad_expected_call_is_exit_2_naming_file_line_case_and_field(cli, bank, expected, field, needle):
    cases = [dict(c) for c in CASES]
    cases[2]["expected"] = expected
    (bank / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    r = cli("run", cwd=bank)
    assert r.exit_code == 2, r.output
    assert f"cases.jsonl:3: case 'extra-transfer': field '{field}'" in r.output and needle in r.output, r.output
    assert "Traceback" not in r.output
    assert not (bank / ".oloproof" / "log.db").exists()


def test_an_unknown_tool_in_expected_calls_is_exit_2_with_a_did_you_mean(cli, bank):
    cases = [dict(c) for c in CASES]
    cases[0]["expected"] = {"tool_calls": [{"tool": "send_mony"}]}
    (bank / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    r = cli("run", cwd=bank)
    assert r.exit_code == 2, r.output
    assert "send_mony" in r.output and "did you mean 'send_money'?" in r.output
    assert events(bank / ".oloproof" / "log.db") == 0  # no run started


def test_the_html_panel_shows_the_calls_and_keeps_recorded_markup_as_text(cli, bank, tmp_path, served, driver):
    from selenium.webdriver.common.by import By

    assert cli("run", cwd=bank).exit_code == 0
    r = cli("view", "latest", "--out", str(tmp_path / "report"), cwd=bank)
    assert r.exit_code == 0, r.output
    url = served(tmp_path / "report")
    driver.get(url + "#case=wrong-amount")
    wait(driver, "#panel table")
    panel = driver.find_element(By.ID, "panel")
    rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in panel.find_elements(By.XPATH, ".//h3[text()='Expected tool calls beside the recorded ones']"
                                                    "/following-sibling::table[1]//tbody/tr")]
    assert ["agent_tool_calls", "tool_calls[1].arguments.amount", '{"$approx":100,"$tol":0.01}', "1000",
            "fail (not within 0.01 of 100)"] in rows, rows
    assert ["agent_tool_calls", "tool_calls[0]", "get_balance", "get_balance", "pass (step 1)"] in rows
    driver.get(url + "#case=right")
    wait(driver, "#panel table")
    panel = driver.find_element(By.ID, "panel")
    rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in panel.find_elements(By.XPATH, ".//h3[text()='Expected tool calls beside the recorded ones']"
                                                    "/following-sibling::table[1]//tbody/tr")]
    assert ["agent_tool_calls", "tool_calls[1].arguments.subject", '{"$contains":"<b>rent</b>"}', MARKUP,
            "pass"] in rows, rows
    assert driver.execute_script("return window.PWNED === undefined")
    assert driver.find_elements(By.CSS_SELECTOR, "#panel b") == []


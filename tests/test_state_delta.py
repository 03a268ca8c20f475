"""state_delta (issue 26, SPEC §18.5): changes relative to initial_state, each op path by path —
pass, fail (with what was wrong), missing, excluded, the truncated-trace rule, case validation,
and end to end through `oloproof run --json`, `show` and the HTML case panel."""

from __future__ import annotations

import json

import msgspec
import pytest
from pydantic import ValidationError

from oloproof.config.cases import CaseFile, state_delta_problem
from oloproof.errors import CaseFileError
from oloproof.evaluate.paths import ABSENT
from oloproof.evaluate.registry import registry
from oloproof.views import NO_STATE
from tests.conftest import write
from tests.helpers import calls, view


def make(**cfg):
    cls = registry()["state_delta"]
    return cls(cls.config_model.model_validate({"type": "state_delta", **cfg}))


def case(initial, state, *deltas, trajectory=None, error=None, expected=None):
    exp = {"state_delta": list(deltas)} if expected is None else expected
    return msgspec.structs.replace(view(trajectory, expected=exp, error=error), state=state, initial_state=initial)


def judge(initial, state, *deltas, **kw):
    verdict, checks = make().evaluate_paths(case(initial, state, *deltas, **kw))
    return verdict, checks


BANK = {"balance": 1000, "password": "s3cret",
        "transactions": [{"id": 1, "recipient": "GB01", "amount": 50.0, "subject": "rent"},
                         {"id": 2, "recipient": "GB02", "amount": 12.5, "subject": "pizza"}]}


def after(**changes):
    state = json.loads(json.dumps(BANK))
    for key, value in changes.items():
        state[key] = value
    return state


def tx(id_, recipient, amount, subject="x"):
    return {"id": id_, "recipient": recipient, "amount": amount, "subject": subject}


# ---- the ops -------------------------------------------------------------------------------

def test_set():
    d = {"path": "password", "op": "set", "value": "n3w"}
    verdict, checks = judge(BANK, after(password="n3w"), d)
    assert verdict == ("pass", None)
    c = checks[0]
    assert (c.criterion, c.path, c.op, c.initial, c.expected, c.recorded, c.verdict, c.note) == \
        ("state_delta", "password", "set", "s3cret", "n3w", "n3w", "pass", None)
    verdict, checks = judge(BANK, BANK, d)
    assert verdict == ("fail", None) and checks[0].note == "not changed"
    assert judge(BANK, after(password="other"), d)[1][0].note == "a different value"
    gone = after()
    del gone["password"]
    assert judge(BANK, gone, d)[1][0].note == "not in the recorded state"
    # created: absent initially is fine for set
    assert judge({}, {"password": "n3w"}, d)[0] == ("pass", None)
    # True is not 1; float rounding is not a difference
    assert judge({"f": 0}, {"f": True}, {"path": "f", "op": "set", "value": 1})[0][0] == "fail"
    assert judge({"f": 0}, {"f": 0.1 + 0.2}, {"path": "f", "op": "set", "value": 0.3})[0][0] == "pass"
    assert judge({"f": 0}, {"f": 0.31}, {"path": "f", "op": "set", "value": 0.3})[0][0] == "fail"


def test_unchanged():
    d = {"path": "password", "op": "unchanged"}
    verdict, checks = judge(BANK, after(balance=900), d)
    assert verdict == ("pass", None)
    assert (checks[0].op, checks[0].initial, checks[0].expected, checks[0].recorded) == \
        ("unchanged", "s3cret", "s3cret", "s3cret")
    verdict, checks = judge(BANK, after(password="n3w"), d)
    assert verdict[0] == "fail" and checks[0].note == "changed"
    gone = after()
    del gone["password"]
    assert judge(BANK, gone, d)[1][0].note == "not in the recorded state (removed)"
    assert judge({}, {"password": "x"}, d)[1][0].note == "not in initial_state, now set"


def test_appended_exactly_these_items_in_any_position_as_subsets():
    d = {"path": "transactions", "op": "appended", "value": [{"recipient": "GB99", "amount": 100}]}
    new = tx(3, "GB99", 100.0, "gift")
    verdict, checks = judge(BANK, after(transactions=BANK["transactions"] + [new]), d)
    assert verdict == ("pass", None)
    c = checks[0]
    assert (c.op, c.expected, c.recorded[-1], c.initial) == \
        ("appended", [{"recipient": "GB99", "amount": 100}], new, BANK["transactions"])
    # prepended (a newest-first list) is appended too: any position
    assert judge(BANK, after(transactions=[new] + BANK["transactions"]), d)[0] == ("pass", None)
    # a list created by the change: absent initially counts as empty
    assert judge({}, {"transactions": [new]}, d)[0] == ("pass", None)


@pytest.mark.parametrize("recorded, note", [
    # the wrong amount
    (BANK["transactions"] + [tx(3, "GB99", 150.0)],
     'item 0 of value not found among the new items [{"amount":150.0,"id":3,"recipient":"GB99","subject":"x"}] '
     '(at .amount: not equal to 100)'),
    # one extra transfer
    (BANK["transactions"] + [tx(3, "GB99", 100.0), tx(4, "GB66", 5.0)], "2 items appended, expected 1"),
    # nothing appended
    (BANK["transactions"], "0 items appended, expected 1; item 0 of value not found among the new items"),
    # an old item rewritten on the way
    ([BANK["transactions"][0], tx(2, "GB02", 99.0, "pizza"), tx(3, "GB99", 100.0)],
     '1 item of the initial list gone (initial [1]: {"amount":12.5,"id":2,"recipient":"GB02","subject":"pizza"}); '
     '2 items appended, expected 1'),
])
def test_appended_fails_saying_what_was_wrong(recorded, note):
    d = {"path": "transactions", "op": "appended", "value": [{"recipient": "GB99", "amount": 100}]}
    verdict, checks = judge(BANK, after(transactions=recorded), d)
    assert verdict == ("fail", None)
    assert checks[0].verdict == "fail" and checks[0].note == note


def test_appended_pairs_items_one_to_one_not_greedily():
    # value[0] matches both new items, value[1] only the first: a greedy pairing would give the
    # first to value[0] and fail; a one-to-one pairing exists, so it passes
    d = {"path": "log", "op": "appended", "value": [{"kind": "mail"}, {"kind": "mail", "to": "bob"}]}
    state = {"log": [{"kind": "mail", "to": "bob"}, {"kind": "mail", "to": "eve"}]}
    assert judge({"log": []}, state, d)[0] == ("pass", None)
    # two identical expectations need two matching items
    d2 = {"path": "log", "op": "appended", "value": [{"to": "bob"}, {"to": "bob"}]}
    verdict, checks = judge({"log": []}, state, d2)
    assert verdict[0] == "fail" and checks[0].note.startswith("item 1 of value not found among the new items")


def test_appended_item_matching_is_a_subset_of_objects_nested_and_exact_for_the_rest():
    d = {"path": "l", "op": "appended", "value": [{"meta": {"by": "bot"}, "tags": ["a", "b"]}]}
    ok = {"meta": {"by": "bot", "at": 3}, "tags": ["a", "b"], "x": 1}
    assert judge({"l": []}, {"l": [ok]}, d)[0][0] == "pass"
    assert judge({"l": []}, {"l": [{**ok, "tags": ["a", "b", "c"]}]}, d)[0][0] == "fail"
    assert judge({"l": []}, {"l": [{**ok, "meta": "bot"}]}, d)[0][0] == "fail"
    scalars = {"path": "l", "op": "appended", "value": ["x", 2]}
    assert judge({"l": ["a"]}, {"l": ["a", 2.0, "x"]}, scalars)[0][0] == "pass"
    assert judge({"l": ["a"]}, {"l": ["a", True, "x"]}, scalars)[0][0] == "fail"


def test_items_and_set_values_may_hold_matchers():
    d = {"path": "transactions", "op": "appended",
         "value": [{"recipient": {"$regex": "GB9\\d"}, "amount": {"$approx": 100, "$tol": 0.5},
                    "subject": {"$contains": "rent"}, "id": {"$any": True}}]}
    ok = tx(3, "GB99", 100.25, "March rent")
    assert judge(BANK, after(transactions=BANK["transactions"] + [ok]), d)[0] == ("pass", None)
    verdict, checks = judge(BANK, after(transactions=BANK["transactions"] + [{**ok, "amount": 101}]), d)
    assert verdict[0] == "fail" and checks[0].note.endswith("(at .amount: not within 0.5 of 100)")
    assert judge(BANK, after(transactions=BANK["transactions"] + [{**ok, "recipient": "FR1"}]), d)[0][0] == "fail"
    one_of = {"path": "transactions", "op": "removed", "value": [{"recipient": {"$in": ["GB01", "GB77"]}}]}
    assert judge(BANK, after(transactions=BANK["transactions"][1:]), one_of)[0] == ("pass", None)
    # set: a matcher by its meaning; a plain object exactly (no extra keys)
    assert judge(BANK, after(password="Tr0ub4dor&3"), {"path": "password", "op": "set",
                                                          "value": {"$regex": "[A-Za-z0-9&]{8,}"}})[0][0] == "pass"
    verdict, checks = judge(BANK, after(password="short"), {"path": "password", "op": "set",
                                                             "value": {"$regex": "[A-Za-z0-9&]{8,}"}})
    assert verdict[0] == "fail" and checks[0].note == "does not match the pattern '[A-Za-z0-9&]{8,}'"
    obj = {"path": "o", "op": "set", "value": {"a": 1, "at": {"$any": True}}}
    assert judge({}, {"o": {"a": 1, "at": 5}}, obj)[0][0] == "pass"
    assert judge({}, {"o": {"a": 1, "at": 5, "b": 2}}, obj)[0][0] == "fail"
    assert judge({}, {"o": {"a": 1}}, obj)[0][0] == "fail"


def test_removed():
    d = {"path": "transactions", "op": "removed", "value": [{"id": 1}]}
    verdict, checks = judge(BANK, after(transactions=BANK["transactions"][1:]), d)
    assert verdict == ("pass", None) and checks[0].op == "removed"
    # added items are not this op's business
    assert judge(BANK, after(transactions=BANK["transactions"][1:] + [tx(9, "Z", 1)]), d)[0][0] == "pass"
    notes = {
        "all gone": judge(BANK, after(transactions=[]), d)[1][0].note,
        "still there": judge(BANK, BANK, d)[1][0].note,
        "never there": judge(BANK, BANK, {**d, "value": [{"id": 7}]})[1][0].note,
        "not a list": judge(BANK, after(transactions={}), d)[1][0].note,
        "absent initially": judge({"x": 1}, {"transactions": []}, d)[1][0].note,
    }
    assert notes == {
        "all gone": "2 items gone, expected 1",
        "still there": "0 items gone, expected 1; item 0 of value is still there",
        "never there": "0 items gone, expected 1; item 0 of value matches no item of the initial list",
        "not a list": "the recorded value is not a list",
        "absent initially": "not in initial_state",
    }


def test_length_delta():
    d = {"path": "transactions", "op": "length_delta", "value": 1}
    assert judge(BANK, after(transactions=BANK["transactions"] + [{}]), d)[0] == ("pass", None)
    verdict, checks = judge(BANK, after(transactions=[]), d)
    assert verdict[0] == "fail" and checks[0].note == "length changed by -2 (2 → 0), expected +1"
    assert judge(BANK, after(transactions=[]), {**d, "value": -2})[0] == ("pass", None)
    # an object's keys count; absent initially is 0
    grew = {"path": "o", "op": "length_delta", "value": 1}
    assert judge({"o": {"a": 1}}, {"o": {"a": 1, "b": 2}}, grew)[0][0] == "pass"
    assert judge({}, {"o": [1, 2]}, {"path": "o", "op": "length_delta", "value": 2})[0][0] == "pass"
    assert judge({"o": 3}, {"o": [1]}, d | {"path": "o"})[1][0].note == "the initial value is not a list or an object"


def test_increased_and_decreased_by_with_float_care():
    inc = {"path": "balance", "op": "increased_by", "value": 50.2}
    assert judge({"balance": 100.1}, {"balance": 100.1 + 50.2}, inc)[0] == ("pass", None)  # 150.29999999999998
    assert judge({"balance": 1e9 + 0.1}, {"balance": 1e9 + 0.1 + 50.2}, inc)[0] == ("pass", None)
    verdict, checks = judge({"balance": 100.1}, {"balance": 150.31}, inc)
    assert verdict[0] == "fail" and checks[0].note == "changed by +50.21 (100.1 → 150.31), expected +50.2"
    # a cent on a billion is a difference, not rounding
    assert judge({"balance": 1e9}, {"balance": 1e9 + 50.21}, inc)[0][0] == "fail"
    dec = {"path": "balance", "op": "decreased_by", "value": 100}
    assert judge(BANK, after(balance=900), dec)[0] == ("pass", None)
    verdict, checks = judge(BANK, after(balance=850), dec)
    assert checks[0].note == "changed by -150 (1000 → 850), expected -100"
    assert (checks[0].op, checks[0].expected) == ("decreased_by", 100)
    assert judge(BANK, after(balance=1100), dec)[0][0] == "fail"  # the sign matters
    assert judge(BANK, after(balance="1000"), dec)[1][0].note == "the recorded value is not a number"
    assert judge(BANK, after(balance=True), dec)[1][0].note == "the recorded value is not a number"
    assert judge({}, {"balance": 5}, dec)[1][0].note == "not in initial_state"


def test_every_delta_is_reported_and_one_failure_fails_the_case():
    deltas = [{"path": "balance", "op": "decreased_by", "value": 100},
              {"path": "transactions", "op": "appended", "value": [{"recipient": "GB99", "amount": 100}]},
              {"path": "password", "op": "unchanged"}]
    good = after(balance=900, transactions=BANK["transactions"] + [tx(3, "GB99", 100)])
    verdict, checks = judge(BANK, good, *deltas)
    assert verdict == ("pass", None)
    assert [(c.path, c.op, c.verdict) for c in checks] == [
        ("balance", "decreased_by", "pass"), ("transactions", "appended", "pass"), ("password", "unchanged", "pass")]
    verdict, checks = judge(BANK, {**good, "password": "pwned"}, *deltas)
    assert verdict == ("fail", None) and [c.verdict for c in checks] == ["pass", "pass", "fail"]


def test_paths_with_indexes():
    d = {"path": "transactions[1].amount", "op": "increased_by", "value": 1}
    state = after(transactions=[BANK["transactions"][0], {**BANK["transactions"][1], "amount": 13.5}])
    verdict, checks = judge(BANK, state, d)
    assert verdict == ("pass", None) and checks[0].path == "transactions[1].amount"


# ---- missing, excluded, truncated ----------------------------------------------------------

def test_missing_and_excluded():
    d = {"path": "balance", "op": "decreased_by", "value": 100}
    assert judge(BANK, NO_STATE, d) == (("missing", "no_state_recorded"), [])
    assert make().evaluate(case(BANK, NO_STATE, d)) == ("missing", "no_state_recorded")
    assert judge(BANK, after(balance=900), d, error="boom") == (("missing", "system_error"), [])
    assert make().evaluate(case(BANK, after(balance=900), d, error="boom")) == ("missing", "system_error")
    assert judge(BANK, after(balance=900), expected={"state": {"balance": 900}}) == \
        (("excluded", "no_expected_state_delta"), [])


def test_a_path_in_neither_state_is_never_a_pass():
    typo = {"path": "balanse", "op": "unchanged"}
    verdict, checks = judge(BANK, BANK, typo)
    assert verdict == ("missing", "path_not_found")
    c = checks[0]
    assert (c.verdict, c.note, c.initial, c.recorded) == \
        ("missing", "in neither initial_state nor the recorded state", ABSENT, ABSENT)
    for op, value in [("length_delta", 0), ("set", 1), ("appended", [1]), ("increased_by", 0)]:
        assert judge(BANK, BANK, {"path": "nope", "op": op, "value": value})[0] == ("missing", "path_not_found")
    # another delta that failed decides: the case fails
    wrong = {"path": "balance", "op": "decreased_by", "value": 100}
    assert judge(BANK, BANK, typo, wrong)[0] == ("fail", None)
    # and one that passed does not make it pass
    right = {"path": "balance", "op": "decreased_by", "value": 0}
    assert judge(BANK, BANK, typo, right)[0] == ("missing", "path_not_found")


def test_a_malformed_delta_read_from_an_older_log_is_missing_not_a_crash():
    verdict, checks = judge(BANK, BANK, {"path": "balance", "op": "grew"})
    assert verdict == ("missing", "invalid_state_delta")
    assert checks[0].path == "expected.state_delta[0].op" and "unknown op 'grew'" in checks[0].note
    assert judge(BANK, BANK, expected={"state_delta": "balance"})[0] == ("missing", "invalid_state_delta")


def test_a_truncated_trace_changes_nothing_the_state_is_the_environments():
    d = {"path": "balance", "op": "decreased_by", "value": 100}
    for trajectory in (calls("send", truncated=True), calls("send"), None):
        assert judge(BANK, after(balance=900), d, trajectory=trajectory)[0] == ("pass", None)
        assert judge(BANK, after(balance=800), d, trajectory=trajectory)[0] == ("fail", None)


def test_config():
    ev = make()
    assert ev.criterion == "state_delta" and ev.requires == ("environment_state/v1",)
    assert make(criterion="transfer_made").criterion == "transfer_made"
    with pytest.raises(ValidationError):
        make(paths=["a"])


# ---- case validation -----------------------------------------------------------------------

@pytest.mark.parametrize("delta, field, needle", [
    ([], "expected.state_delta", "must be a non-empty list"),
    ({"path": "a", "op": "set", "value": 1}, "expected.state_delta", "must be a non-empty list"),
    (["a"], "expected.state_delta[0]", "must be an object {path, op, value}"),
    ([{"op": "unchanged"}], "expected.state_delta[0].path", "missing"),
    ([{"path": "a..b", "op": "unchanged"}], "expected.state_delta[0].path", "empty segment"),
    ([{"path": "a[x]", "op": "unchanged"}], "expected.state_delta[0].path", "bad index"),
    ([{"path": "a", "op": "apended", "value": [1]}], "expected.state_delta[0].op",
     "unknown op 'apended'; did you mean 'appended'? (one of set, unchanged, appended, removed, length_delta, "
     "increased_by, decreased_by)"),
    ([{"path": "a"}], "expected.state_delta[0].op", "missing (one of set"),
    ([{"path": "a", "op": "unchanged"}, {"path": "a", "op": "set"}], "expected.state_delta[1].value",
     "missing: op 'set' needs a value"),
    ([{"path": "a", "op": "unchanged", "value": 1}], "expected.state_delta[0].value", "takes no value"),
    ([{"path": "a", "op": "appended", "value": {"x": 1}}], "expected.state_delta[0].value", "non-empty list"),
    ([{"path": "a", "op": "removed", "value": []}], "expected.state_delta[0].value", "non-empty list"),
    ([{"path": "a", "op": "length_delta", "value": 1.5}], "expected.state_delta[0].value", "whole number"),
    ([{"path": "a", "op": "length_delta", "value": True}], "expected.state_delta[0].value", "whole number"),
    ([{"path": "a", "op": "increased_by", "value": "10"}], "expected.state_delta[0].value", "finite number >= 0"),
    ([{"path": "a", "op": "decreased_by", "value": -10}], "expected.state_delta[0].value", "finite number >= 0"),
    ([{"path": "a", "op": "set", "value": 1, "vaule": 2}], "expected.state_delta[0].vaule",
     "unknown field; did you mean 'value'?"),
    ([{"path": "a", "op": "appended", "value": [{"x": {"$regx": "a"}}]}], "expected.state_delta[0].value[0].x",
     "unknown matcher '$regx'; did you mean '$regex'?"),
    ([{"path": "a", "op": "set", "value": {"$approx": "1"}}], "expected.state_delta[0].value",
     "'$approx' takes a number"),
    ([{"path": "a", "op": "removed", "value": [{"$regex": "(a+)+"}]}], "expected.state_delta[0].value[0]",
     "repeats without bound"),
])
def test_a_bad_state_delta_is_a_located_case_error(tmp_path, delta, field, needle):
    line = {"id": "t1", "input": {}, "expected": {"state_delta": delta}}
    path = write(tmp_path / "cases.jsonl", '{"id": "t0", "input": {}}\n' + json.dumps(line) + "\n")
    with pytest.raises(CaseFileError) as e:
        CaseFile(path).validate()
    assert f"cases.jsonl:2: case 't1': field '{field}': " in str(e.value) and needle in str(e.value), str(e.value)


def test_good_deltas_validate():
    assert state_delta_problem([
        {"path": "a", "op": "set", "value": None}, {"path": "a.b[0]", "op": "unchanged"},
        {"path": "l", "op": "appended", "value": [{"x": 1}]}, {"path": "l", "op": "removed", "value": [1]},
        {"path": "l", "op": "length_delta", "value": -3}, {"path": "n", "op": "increased_by", "value": 0.5},
        {"path": "n", "op": "decreased_by", "value": 0}]) is None


# ---- end to end ----------------------------------------------------------------------------

APP = '''\
from oloproof import Stateful, current_case, tool


class Bank(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def send_money(self, recipient, amount):
        self.state["balance"] -= amount
        self.state["transactions"].append({"id": len(self.state["transactions"]) + 1,
                                           "recipient": recipient, "amount": amount})
        return {"ok": True}

    def __call__(self, case):
        for t in case.input["transfers"]:
            self.send_money(t["to"], t["amount"])
        current_case().finish("success")
        return {"answer": "done"}
'''

CONFIG = '''\
system: {name: bank, version: "1", callable: app:Bank, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_delta, criterion: transfer_made}
'''

DELTA = [{"path": "transactions", "op": "appended", "value": [{"recipient": "GB99", "amount": 100}]},
         {"path": "balance", "op": "decreased_by", "value": 100},
         {"path": "password", "op": "unchanged"}]
START = {"balance": 1000, "password": "s3cret", "transactions": [{"id": 1, "recipient": "GB01", "amount": 50}]}
CASES = [
    {"id": "right", "input": {"transfers": [{"to": "GB99", "amount": 100}]}},
    {"id": "wrong_amount", "input": {"transfers": [{"to": "GB99", "amount": 150}]}},
    {"id": "extra_transfer", "input": {"transfers": [{"to": "GB99", "amount": 100}, {"to": "GB66", "amount": 1}]}},
    {"id": "no_delta", "input": {"transfers": []}, "expected": {"answer": "done"}},
    {"id": "typo", "input": {"transfers": []},
     "expected": {"state_delta": [{"path": "pasword", "op": "unchanged"}]}},
]


def bank(tmp_path, cases=CASES, config=CONFIG):
    rows = [{"initial_state": START, "expected": {"state_delta": DELTA}, **c} for c in cases]
    write(tmp_path / "cases.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(tmp_path / "app.py", APP)
    write(tmp_path / "oloproof.yaml", config)
    return tmp_path


def test_end_to_end_run_json_and_show(cli, tmp_path):
    p = bank(tmp_path)
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    by_case = {c["case_id"]: c for c in data["cases"]}
    assert {k: c["verdicts"]["transfer_made"] for k, c in by_case.items()} == {
        "right": {"verdict": "pass"}, "wrong_amount": {"verdict": "fail"}, "extra_transfer": {"verdict": "fail"},
        "no_delta": {"verdict": "excluded", "reason": "no_expected_state_delta"},
        "typo": {"verdict": "missing", "reason": "path_not_found"}}
    crit = {c["criterion"]: c for c in data["criteria"]}["transfer_made"]
    assert (crit["passed"], crit["observed"], crit["missing"], crit["excluded"]) == (1, 3, 1, 1)
    wrong = {p_["path"]: p_ for p_ in by_case["wrong_amount"]["paths"]}
    assert wrong["balance"] == {"criterion": "transfer_made", "path": "balance", "verdict": "fail",
                                "op": "decreased_by", "initial": 1000, "expected": 100, "recorded": 850,
                                "note": "changed by -150 (1000 → 850), expected -100"}
    assert wrong["transactions"]["note"] == ('item 0 of value not found among the new items '
                                             '[{"amount":150,"id":2,"recipient":"GB99"}] '
                                             '(at .amount: not equal to 100)')
    assert wrong["password"] == {"criterion": "transfer_made", "path": "password", "verdict": "pass",
                                 "op": "unchanged", "initial": "s3cret", "expected": "s3cret", "recorded": "s3cret"}
    extra = {p_["path"]: p_ for p_ in by_case["extra_transfer"]["paths"]}
    assert extra["transactions"]["note"] == "2 items appended, expected 1"
    assert by_case["typo"]["paths"] == [{"criterion": "transfer_made", "path": "pasword", "verdict": "missing",
                                         "op": "unchanged", "note": "in neither initial_state nor the recorded state"}]
    shown = cli("show", "latest", "extra_transfer", cwd=p)
    assert shown.exit_code == 0, shown.output
    assert "compared state paths" in shown.output
    row = next(line for line in shown.output.splitlines() if "│ balance " in line)
    assert "│ 1000 " in row and "│ decreased_by 100 " in row and "│ 899 " in row and "fail (changed by -101" in row
    assert "fail (2 items appended, expected 1)" in shown.output
    assert "unchanged s3cret" in shown.output
    # a stored run is re-judged from its log
    again = cli("eval", "latest", "--json", "-", cwd=p)
    assert again.exit_code == 0, again.output
    assert {c["case_id"]: c["verdicts"] for c in json.loads(again.stdout)["cases"]} == \
        {k: c["verdicts"] for k, c in by_case.items()}


def test_a_bad_delta_in_the_case_file_is_exit_2_and_nothing_is_written(cli, tmp_path):
    bad = dict(CASES[0], expected={"state_delta": [{"path": "balance", "op": "decreased", "value": 100}]})
    p = bank(tmp_path, cases=[CASES[1], bad])
    r = cli("run", cwd=p)
    assert r.exit_code == 2, r.output
    assert ("cases.jsonl:2: case 'right': field 'expected.state_delta[0].op': unknown op 'decreased'; "
            "did you mean 'decreased_by'?") in r.output
    assert "Traceback" not in r.output and not (p / ".oloproof" / "log.db").exists()


def test_state_delta_needs_the_recorded_state(cli, tmp_path):
    p = bank(tmp_path, config=CONFIG.replace(", environment_state/v1", ""))
    r = cli("run", cwd=p)
    assert r.exit_code == 2, r.output
    assert "evaluators[0] (state_delta) needs the system to record environment_state/v1" in r.output
    assert not (p / ".oloproof" / "log.db").exists()


def test_the_html_case_panel_shows_each_delta(cli, tmp_path):
    from tests.test_view import browser

    p = bank(tmp_path)
    assert cli("run", cwd=p).exit_code == 0
    r = cli("view", "latest", "--out", str(tmp_path / "report"), cwd=p)
    assert r.exit_code == 0, r.output
    driver = browser()
    import functools
    import http.server
    import threading

    from selenium.webdriver.common.by import By

    from tests.test_view import wait

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "report"))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/index.html#case=wrong_amount")
        wait(driver, "#panel table")
        panel = driver.find_element(By.ID, "panel")
        rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in panel.find_elements(By.XPATH, ".//h3[text()='Compared state paths']"
                                                        "/following-sibling::table[1]//tbody/tr")]
    finally:
        driver.quit()
        server.shutdown()
    assert ["transfer_made", "balance", "1000", "decreased_by 100", "850",
            "fail (changed by -150 (1000 → 850), expected -100)"] in rows
    assert ["transfer_made", "password", "s3cret", "unchanged s3cret", "s3cret", "pass"] in rows
    tx_row = next(r for r in rows if r[1] == "transactions")
    assert tx_row[3] == 'appended [{"amount":100,"recipient":"GB99"}]'
    assert tx_row[5].startswith("fail (item 0 of value not found among the new items")

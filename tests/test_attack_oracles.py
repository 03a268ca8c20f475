"""Attacks on the oracles of issue 26 (agent_tool_calls, output_matches and the number reading
it shares with claims_supported, state_delta, python checks, metamorphic ignore_paths): each
test is an attack that worked — a wrong verdict, a traceback, a hang, output that is not what
it says — kept so that it stays fixed."""

from __future__ import annotations

import contextlib
import json
import sys
from decimal import Decimal

import msgspec
import pytest

from oloproof import Verdict
from oloproof.config.matchers import MatcherError, check_pattern
from oloproof.evaluate.numbers import numbers_in, read_number
from oloproof.evaluate.registry import registry
from tests.conftest import write
from tests.helpers import calls, view


def make(type_: str, **cfg):
    cls = registry()[type_]
    return cls(cls.config_model.model_validate({"type": type_, **cfg}))


def answer(ev, output, expected):
    return ev.evaluate(view(None, output={"answer": output}, expected={"answer": expected}))


# ---- numbers: a sign before the currency is the number's ----------------------------------------

@pytest.mark.parametrize("text, number", [("-£1,050", -1050), ("\u2212$5.50", Decimal("-5.5")),
                                           ("-EUR 20", -20), ("+£3", 3), ("£-7", -7), ("-1 050 €", -1050)])
def test_a_minus_before_the_currency_makes_the_number_negative(text, number):
    assert read_number(text) == number
    assert list(numbers_in(f"balance: {text}.")) == [number]


def test_a_negative_amount_is_not_the_positive_answer():
    ev = make("output_matches", criterion="a", field="answer", match="number")
    assert answer(ev, "Your balance is -£1,050", "1050") == ("fail", None)
    assert answer(ev, "Your balance is -£1,050", "-1050") == ("pass", None)
    assert answer(ev, "Your balance is £1,050", "1050") == ("pass", None)


def test_contains_with_numbers_does_not_find_a_number_in_its_negative():
    ev = make("output_matches", criterion="a", field="answer", match="contains", normalize=["numbers"])
    assert answer(ev, "you owe -£1,050 now", "£1,050") == ("fail", None)
    assert answer(ev, "balance -1050", "1050") == ("fail", None)
    assert answer(ev, "you owe -£1,050 now", "-1050") == ("pass", None)
    assert answer(ev, "refund of £1,050 (was 1 100)", "1050") == ("pass", None)
    assert answer(ev, "items 3 - 1050", "1050") == ("pass", None)  # a spaced dash is no sign


def test_a_matcher_of_another_oracle_in_output_matches_is_missing_not_a_fail():
    for match in ("exact", "contains", "regex", "number"):
        ev = make("output_matches", criterion="a", field="answer", match=match)
        assert answer(ev, "1050", {"$regex": "10.*"}) == ("missing", "unsupported_matcher"), match
        assert answer(ev, "1050", {"$any_of": [{"$approx": 1050}, "1050"]}) == ("pass", None), match


# ---- agent_tool_calls --------------------------------------------------------------------------

def tool_calls(expected, trajectory, **cfg):
    return make("agent_tool_calls", **cfg).evaluate(view(trajectory, expected={"tool_calls": expected}))


@pytest.mark.parametrize("cfg", [{}, {"order": "in_order", "extra_calls": "forbid"}])
def test_a_truncated_prefix_out_of_the_strict_order_already_fails(cfg):
    # no continuation of [B] is [A, B]: the prefix decides (agent_tool_sequence says so too)
    expected = [{"tool": "A"}, {"tool": "B"}]
    assert tool_calls(expected, calls("B", truncated=True), **cfg) == ("fail", None)
    assert tool_calls(expected, calls("A", truncated=True), **cfg) == ("missing", "truncated")
    assert tool_calls(expected, calls(truncated=True), **cfg) == ("missing", "truncated")
    assert tool_calls(expected, calls("A", "B", truncated=True), **cfg) == ("missing", "truncated")
    seq = make("agent_tool_sequence").evaluate(view(calls("B", truncated=True), expected={"tools": ["A", "B"]}))
    assert seq == ("fail", None)


def test_the_truncated_rule_holds_against_every_short_continuation():
    """The verdict on a truncated trace is a verdict only when every continuation (up to two
    more calls) gives it; and when they all give one, it is given."""
    import itertools

    tools = ["A", "B"]
    expected = [{"tool": "A"}, {"tool": "B"}]
    for cfg in ({}, {"order": "in_order", "extra_calls": "forbid"}, {"order": "any_order", "extra_calls": "forbid"}):
        for n in range(3):
            for prefix in itertools.product(tools, repeat=n):
                got = tool_calls(expected, calls(*prefix, truncated=True), **cfg)
                finals = {tool_calls(expected, calls(*prefix, *more), **cfg)[0]
                          for k in range(3) for more in itertools.product(tools, repeat=k)}
                if got[0] != "missing":
                    assert finals == {got[0]}, (cfg, prefix, got, finals)
                else:
                    assert len(finals) > 1, (cfg, prefix, finals)


@contextlib.contextmanager
def little_stack(room: int = 80):
    """Python's recursion limit a little above where the test stands: a search that recurses
    once per expected call fails here with a few hundred calls, rather than with thousands."""
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + room)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def chain(n: int) -> tuple[list, list]:
    """Patterns where pattern i fits items i and i + 1, and a last one only item 0: pairing the
    last moves every other along (an augmenting path as long as the patterns)."""
    return [{"i": {"$in": [i, i + 1]}} for i in range(n)] + [{"i": 0}], [{"i": i} for i in range(n + 1)]


def test_a_long_augmenting_path_of_expected_calls_does_not_exhaust_the_stack():
    patterns, items = chain(150)
    expected = [{"tool": "A", "arguments": p} for p in patterns]
    t = calls(*[("A", item) for item in items])
    with little_stack():
        assert tool_calls(expected, t, order="any_order") == ("pass", None)
        assert tool_calls(expected[:-1], t, order="any_order", extra_calls="forbid") == ("fail", None)


def test_a_long_augmenting_path_of_appended_items_does_not_exhaust_the_stack():
    patterns, items = chain(150)
    with little_stack():
        verdict, _ = delta({"t": []}, {"t": items}, {"path": "t", "op": "appended", "value": patterns})
    assert verdict == ("pass", None)


def test_max_matching_is_maximum_and_keeps_the_order():
    from oloproof.evaluate.state import max_matching

    assert max_matching([[0, 1], [0, 1]], 2) == [0, 1]
    assert max_matching([[0, 1], [0]], 2) == [1, 0]
    assert max_matching([[0], [0]], 2) == [0, None]
    fits = [[i, i + 1] for i in range(20_000)] + [[0]]
    assert None not in max_matching(fits, 20_001)


# ---- $regex: patterns that backtrack without end are refused -----------------------------------

@pytest.mark.parametrize("pattern", [r"(.*a){12}", r"(.*,){10}x", r"(\w+\s?){20}$", r"(?:a+b?){2,40}c"])
def test_a_bounded_repeat_of_an_unbounded_part_is_refused(pattern):
    with pytest.raises(MatcherError, match="repeats"):
        check_pattern({"$regex": pattern}, "expected.tool_calls[0].arguments.x")


@pytest.mark.parametrize("pattern", [r"(ab){3}", r"\d{1,3}(,\d{3})*", r"(?:\d++,){3}", r"(a|b)?c+", r"(x+)?y"])
def test_ordinary_patterns_are_still_accepted(pattern):
    check_pattern({"$regex": pattern}, "x")


# ---- state_delta -------------------------------------------------------------------------------

def delta(initial, state, *deltas):
    case = msgspec.structs.replace(view(None, expected={"state_delta": list(deltas)}), state=state,
                                   initial_state=initial)
    return make("state_delta").evaluate_paths(case)


def test_increase_of_an_integer_beyond_any_float_is_judged_not_a_crash():
    big = 10 ** 400
    verdict, checks = delta({"x": big}, {"x": big + 5}, {"path": "x", "op": "increased_by", "value": 6.0})
    assert verdict == ("fail", None) and "expected +6" in checks[0].note
    assert delta({"x": big}, {"x": big + 5}, {"path": "x", "op": "increased_by", "value": 5.0})[0] == ("pass", None)
    assert delta({"x": big}, {"x": 1.5}, {"path": "x", "op": "decreased_by", "value": 1.0})[0] == ("fail", None)
    assert delta({"x": big}, {"x": 1.5}, {"path": "x", "op": "unchanged"})[0] == ("fail", None)
    assert delta({"x": [big]}, {"x": [big, 2.5]}, {"path": "x", "op": "appended", "value": [2.5]})[0] == ("pass", None)


def test_a_path_into_a_string_says_where_it_stops():
    verdict, checks = delta({"name": "bob"}, {"name": "bob"}, {"path": "name[0]", "op": "set", "value": "b"})
    assert verdict == ("missing", "path_not_found")
    assert checks[0].note == 'name is text ("bob") in initial_state: the path cannot go into it'
    verdict, checks = delta({}, {"a": {"b": 5}}, {"path": "a.b.c", "op": "unchanged"})
    assert checks[0].note == "a.b is int (5) in the recorded state: the path cannot go into it"
    assert delta({}, {}, {"path": "x.y", "op": "unchanged"})[1][0].note == \
        "in neither initial_state nor the recorded state"


def test_the_change_between_two_integers_is_exact_however_large_they_are():
    # 10**20 cents increased by 5 is not an increase by 6: integers do not round
    verdict, checks = delta({"x": 10 ** 20}, {"x": 10 ** 20 + 5}, {"path": "x", "op": "increased_by", "value": 6.0})
    assert verdict == ("fail", None), checks
    assert delta({"x": 10 ** 20}, {"x": 10 ** 20 + 5}, {"path": "x", "op": "increased_by", "value": 5.0})[0] == \
        ("pass", None)
    # floats still round: 100.1 + 50.2
    assert delta({"x": 100.1}, {"x": 100.1 + 50.2}, {"path": "x", "op": "increased_by", "value": 50.2})[0] == \
        ("pass", None)


# ---- metamorphic ignore_paths: nothing left to compare is no pass ------------------------------

def relation(relation, a, b, **cfg):
    ev = make("metamorphic_relation", relation=relation, transform="t", **cfg)
    source = msgspec.structs.replace(view(calls(), output=a if relation == "same_output" else {}), state=a)
    derived = msgspec.structs.replace(view(calls(), case_id="c1~t", output=b if relation == "same_output" else {}),
                                      state=b, pair_source=source)
    return ev.evaluate(derived)


def test_ignore_paths_that_leave_nothing_to_compare_are_missing_not_pass():
    a, b = {"inbox": ["hi"]}, {"inbox": []}
    assert relation("same_state", a, b) == ("fail", None)
    assert relation("same_state", a, b, ignore_paths=["inbox"]) == ("missing", "nothing_compared")
    assert relation("same_output", {"answer": "x"}, {"answer": "y"}, ignore_paths=["answer"]) == \
        ("missing", "nothing_compared")
    # something left: judged
    assert relation("same_state", {**a, "n": 1}, {**b, "n": 1}, ignore_paths=["inbox"]) == ("pass", None)
    assert relation("same_state", {**a, "n": 1}, {**b, "n": 2}, ignore_paths=["inbox"]) == ("fail", None)
    # two empty states compared as they are: equal
    assert relation("same_state", {}, {}) == ("pass", None)
    assert relation("same_state", {}, {}, ignore_paths=["inbox"]) == ("pass", None)


# ---- python checks -----------------------------------------------------------------------------

class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text")


def _raises_unprintable(case):
    raise _Unprintable()


def test_a_check_raising_an_exception_that_cannot_be_printed_is_missing_not_a_crash():
    ev = make("python", criterion="c", function="checks:fn")
    ev.bind(_raises_unprintable, "digest")
    verdict, paths = ev.evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error")
    assert paths[0].note.startswith("evaluator_error: _Unprintable")


def _returns_a_generator(case):
    yield Verdict.pass_()


def test_what_a_check_returned_instead_of_a_verdict_is_named_the_same_in_every_run():
    ev = make("python", criterion="c", function="checks:fn")
    ev.bind(_returns_a_generator, "digest")
    verdict, paths = ev.evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error")
    assert "returned generator <generator object _returns_a_generator>" in paths[0].note
    assert "0x" not in paths[0].note


PRINTING_CHECKS = '''\
from oloproof import Verdict
print("imported: a line on stdout")


def noisy(case):
    print("judging", case.id)
    return Verdict.pass_()
'''


@pytest.fixture(scope="module")
def noisy_project(tmp_path_factory):
    from tests.conftest import run_in

    p = tmp_path_factory.mktemp("noisy") / "p"
    write(p / "app.py", "from oloproof import system\n\n@system(name='n', version='1')\ndef run(case):\n"
                        "    return {'a': 'b'}\n")
    write(p / "checks.py", PRINTING_CHECKS)
    write(p / "oloproof.yaml", "system:\n  name: n\n  version: '1'\n  callable: app:run\ncases: cases.jsonl\n"
                               "evaluators:\n  - {type: python, criterion: noisy, function: checks:noisy}\n")
    write(p / "cases.jsonl", '{"id": "c1", "input": {}}\n{"id": "c2", "input": {}}\n')
    for _ in range(2):
        r = run_in(p, "run")
        assert r.exit_code == 0, r.output
    return p


@pytest.mark.parametrize("args", [("eval", "latest"), ("gate", "latest"), ("show", "latest"),
                                  ("show", "latest", "c1"), ("history",), ("flaky",), ("diff", "FIRST", "latest"),
                                  ("export", "latest", "--format", "otlp-json", "--out", "-")])
def test_machine_output_on_stdout_is_alone_whatever_a_check_prints(cli, noisy_project, args):
    import subprocess
    import sys

    if "FIRST" in args:
        first = json.loads(cli("runs", "--json", "-", cwd=noisy_project).stdout)[0]["run_id"]
        args = tuple(first if a == "FIRST" else a for a in args)
    command = [sys.executable, "-m", "oloproof", *args] + ([] if "--out" in args else ["--json"])
    r = subprocess.run(command, cwd=noisy_project, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines() if "--out" in args else [r.stdout]:
        json.loads(line)  # the JSON alone
    assert "judging" in r.stderr  # what the check printed is not lost


def test_the_gate_comment_is_the_comment_alone_whatever_a_check_prints(noisy_project):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "oloproof", "gate", "latest", "--format", "markdown"],
                       cwd=noisy_project, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "judging" not in r.stdout and "imported:" not in r.stdout and r.stdout.lstrip().startswith("#")


# ---- when: a selector that names nothing the suite has -----------------------------------------

WHEN_CASES = "".join(json.dumps(c) + "\n" for c in [
    {"id": "transfer-1", "input": {"a": "yes"}, "expected": {"a": "yes"}, "tags": ["payment"]},
    {"id": "transfer-2", "input": {"a": "no"}, "expected": {"a": "yes"}, "tags": ["payment", "scheduling"]},
])


@pytest.mark.parametrize("when, needle", [
    ("{ids: [transfer-1, trnasfer-2]}", "evaluators[0].when.ids[1]: no case 'trnasfer-2' in cases.jsonl; "
                                        "did you mean 'transfer-2'?"),
    ("{tags: [payment, scheduing]}", "evaluators[0].when.tags[1]: no case carries the tag 'scheduing' in "
                                     "cases.jsonl; did you mean 'scheduling'?"),
])
def test_a_misspelt_selector_is_exit_2_not_a_criterion_judged_on_the_rest(cli, tmp_path, when, needle):
    # transfer-2 fails: a typo that dropped it would leave the criterion passing on transfer-1 alone
    from tests.conftest import one_function_project

    p = one_function_project(tmp_path / "p", "    return {'a': case.input['a']}\n", WHEN_CASES)
    (p / "oloproof.yaml").write_text((p / "oloproof.yaml").read_text().replace(
        "criterion: ok, field: a, expected_field: a}", f"criterion: ok, field: a, expected_field: a, when: {when}}}"))
    r = cli("run", cwd=p)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "oloproof.yaml:" in r.output
    assert not (p / ".oloproof" / "log.db").exists()
    for fine in ("{ids: [transfer-1, transfer-2]}", "{tags: [scheduling]}"):
        (p / "oloproof.yaml").write_text((p / "oloproof.yaml").read_text().replace(when, fine))
        when = fine
        r = cli("run", "--json", "r.json", cwd=p)
        assert r.exit_code == 0, (fine, r.output)
        cases = {c["case_id"]: c["verdicts"]["ok"]["verdict"] for c in json.loads((p / "r.json").read_text())["cases"]}
        assert cases["transfer-2"] == "fail", cases  # judged, and caught
    # a trial's id selects nothing (its case's id selects every trial): refused too
    (p / "oloproof.yaml").write_text((p / "oloproof.yaml").read_text().replace(when, "{ids: [transfer-2/2]}")
                                     .replace("evaluators:", "trials: 2\nevaluators:"))
    assert "no case 'transfer-2/2' in cases.jsonl; did you mean 'transfer-2'?" in cli("run", cwd=p).output

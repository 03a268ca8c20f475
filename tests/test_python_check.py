"""`{type: python}` (issue 26 item 5, SPEC §18.5): a check written in Python over a public,
frozen `oloproof.CaseView`, returning an `oloproof.Verdict`. An error in the check is missing
(`evaluator_error`) with its traceback, never a pass; the check's code is part of the run's
configuration, so a changed check is re-judged and said; a stored run imports its checks only
from the project folder. The snippets of docs/writing-a-check.md run here as a project."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import msgspec
import pytest

from oloproof import AgentStep, CaseView, Verdict
from oloproof.evaluate.registry import registry
from oloproof.events import CheckpointRecorded, ReplayStarted, StepRecorded
from oloproof.views import NO_STATE, FaultReplays, ReplayView, TrajectoryView
from tests.conftest import edit, write
from tests.helpers import calls, view

DOC = (Path(__file__).resolve().parents[1] / "docs" / "writing-a-check.md").read_text()
CHECKS = re.search(r"<!-- check: checks.py -->\n```python\n(.*?)```", DOC, re.S)[1]
DOC_TEST = re.search(r"<!-- check-test -->\n```python\n(.*?)```", DOC, re.S)[1]


# ---- the public API: Verdict and CaseView ------------------------------------------------

def test_verdicts_are_built_with_checked_reason_codes():
    assert Verdict.pass_() == Verdict("pass") and Verdict.pass_().reason is None
    assert Verdict.fail() == Verdict("fail") and Verdict.fail("wrong_amount").reason == "wrong_amount"
    assert Verdict.missing("no_answer") == Verdict("missing", "no_answer")
    assert Verdict.excluded("FAIL_TOOL_ACCESS").verdict == "excluded"  # codes like the built-in ones
    for bad in ("the amount is wrong", "", "1st", "a-b", "x" * 65):
        with pytest.raises(ValueError, match="is not a reason code"):
            Verdict.fail(bad)
    with pytest.raises(ValueError, match="needs a reason code"):
        Verdict.missing(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a reason code"):
        Verdict("excluded")
    with pytest.raises(ValueError, match="not one of pass, fail, missing, excluded"):
        Verdict("maybe")
    with pytest.raises(ValueError, match="reason code is text"):
        Verdict.fail(3)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        Verdict.pass_().verdict = "fail"  # type: ignore[misc]  # frozen


def test_a_case_view_can_be_built_by_hand_and_is_frozen():
    case = CaseView(id="c1")
    assert (case.input, case.expected, case.output, case.steps, case.state, case.state_recorded,
            case.tags, case.terminal_status, case.truncated, case.error, case.replays) == \
        (None, {}, None, (), None, False, (), None, False, None, {})
    with pytest.raises(AttributeError):
        case.output = {}  # type: ignore[misc]


def test_the_doc_unit_test_passes():
    namespace: dict = {}
    exec(compile(CHECKS, "checks.py", "exec"), namespace)
    import sys
    import types

    module = types.ModuleType("checks")
    module.__dict__.update(namespace)
    sys.modules["checks"] = module
    try:
        test: dict = {}
        exec(compile(DOC_TEST, "test_checks.py", "exec"), test)
        test["test_a_wrong_amount_fails"]()
    finally:
        del sys.modules["checks"]


# ---- the evaluator on CaseViews ----------------------------------------------------------

def check(function, criterion="c", root="", **cfg):
    cls = registry()["python"]
    ev = cls(cls.config_model.model_validate({"type": "python", "criterion": criterion,
                                              "function": "checks:fn", **cfg}))
    ev.bind(function, "digest", root)
    return ev


def test_the_function_decides_pass_fail_missing_and_excluded():
    for returned, expected in [(Verdict.pass_(), ("pass", None)), (Verdict.fail(), ("fail", None)),
                               (Verdict.fail("wrong_amount"), ("fail", "wrong_amount")),
                               (Verdict.missing("no_answer"), ("missing", "no_answer")),
                               (Verdict.excluded("not_asked"), ("excluded", "not_asked"))]:
        ev = check(lambda case, v=returned: v)
        assert ev.evaluate_paths(view(calls("a"))) == (expected, [])
        assert ev.evaluate(view(calls("a"))) == expected


def test_a_case_whose_system_raised_is_missing_and_the_function_is_not_called():
    seen = []
    ev = check(lambda case: seen.append(case) or Verdict.pass_())
    assert ev.evaluate_paths(view(None, error="RuntimeError: boom")) == (("missing", "system_error"), [])
    assert seen == []


def test_an_exception_is_missing_with_the_users_traceback(tmp_path):
    source = tmp_path / "checks.py"
    source.write_text("def fn(case):\n    return helper(case)\n\n\n"
                      "def helper(case):\n    return case.output['answer'] / 0\n")
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    ev = check(namespace["fn"], root=str(tmp_path))
    verdict, paths = ev.evaluate_paths(view(calls("a"), output={"answer": 1}))
    assert verdict == ("missing", "evaluator_error")
    [error] = paths
    assert (error.criterion, error.path, error.verdict) == ("c", "checks:fn", "missing")
    assert error.note == "evaluator_error: ZeroDivisionError: division by zero"
    tb = error.recorded
    # the user's frames, named relative to the project folder; none of Oloproof's
    assert 'File "checks.py", line 2, in fn' in tb and 'File "checks.py", line 6, in helper' in tb
    assert tb.rstrip().endswith("ZeroDivisionError: division by zero")
    assert "oloproof" not in tb and str(tmp_path) not in tb
    # the same code gives the same text: a run and its re-judging agree
    assert ev.evaluate_paths(view(calls("a"), output={"answer": 1}))[1] == paths


@pytest.mark.parametrize("returned, needle", [
    (True, "returned bool True, not an oloproof.Verdict"),
    ({"verdict": "pass"}, "returned dict"),
    (None, "returned NoneType None"),
    (("pass", None), "returned tuple"),
])
def test_a_return_value_that_is_not_a_verdict_is_missing(returned, needle):
    verdict, [error] = check(lambda case: returned).evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error")
    assert needle in error.note and error.recorded is None


def test_a_coroutine_is_not_a_verdict_and_is_closed():
    import warnings

    async def fn(case):
        return Verdict.pass_()

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine was never awaited" would be an error here
        verdict, [error] = check(fn).evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error") and "returned coroutine" in error.note


def test_a_bad_reason_code_in_the_check_is_its_error_not_a_pass():
    verdict, [error] = check(lambda case: Verdict.fail("amount is wrong")).evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error")
    assert "ValueError: 'amount is wrong' is not a reason code" in error.note
    assert "Verdict.fail" in error.recorded  # the user's line that built it


def test_an_unbound_check_judges_every_case_missing_with_its_reason():
    cls = registry()["python"]
    ev = cls(cls.config_model.model_validate({"type": "python", "criterion": "c", "function": "checks:fn"}))
    verdict, [error] = ev.evaluate_paths(view(calls("a")))
    assert verdict == ("missing", "evaluator_error") and "not imported" in error.note
    ev.unbound("no module 'checks' in the project folder /p")
    assert ev.evaluate_paths(view(calls("a")))[1][0].note == \
        "evaluator_error: no module 'checks' in the project folder /p"


def test_truncated_traces_reach_the_function_which_applies_the_prefix_rule():
    namespace: dict = {}
    exec(CHECKS, namespace)
    ev = check(namespace["one_transfer_as_asked"])
    asked = {"transfer": {"iban": "GB01", "amount": 100}}
    one = [("send_money", {"iban": "GB01", "amount": 100})]
    # the prefix already decides: a second transfer fails whatever follows
    assert ev.evaluate(view(calls(*one * 2, truncated=True), expected=asked)) == ("fail", "more_than_one_transfer")
    # it does not: the right transfer so far, but another may follow
    assert ev.evaluate(view(calls(*one, truncated=True), expected=asked)) == ("missing", "truncated")
    assert ev.evaluate(view(calls(truncated=True), expected=asked)) == ("missing", "truncated")
    assert ev.evaluate(view(calls(*one), expected=asked)) == ("pass", None)
    assert ev.evaluate(view(calls(("send_money", {"iban": "GB01", "amount": 1000})), expected=asked)) == \
        ("fail", "wrong_amount")
    assert ev.evaluate(view(calls(*one), expected={})) == ("excluded", "no_transfer_asked")


def test_the_public_view_is_a_fresh_copy_of_the_case():
    from oloproof.evaluate.python import public_view

    internal = msgspec.structs.replace(
        view(calls(("pay", {"amount": 5}), status="success"), expected={"state": {"n": 1}}, output={"items": [1]},
             metadata={"lane": "chat"}),
        state={"n": 1}, initial_state={"n": 0})
    case = public_view(internal)
    assert case.id == "c1" and case.output == {"items": [1]} and case.expected == {"state": {"n": 1}}
    assert case.steps[0] == AgentStep(1, "tool_call", tool_name="pay", arguments={"amount": 5})
    assert all(type(s) is AgentStep for s in case.steps) and isinstance(case.steps, tuple)
    assert (case.state, case.state_recorded, case.initial_state) == ({"n": 1}, True, {"n": 0})
    assert (case.terminal_status, case.truncated, case.metadata, case.replays) == \
        ("success", False, {"lane": "chat"}, {})
    case.output["items"].append(2)  # a check that changes its copy…
    case.expected["state"]["n"] = 9
    case.steps[0].arguments["amount"] = 6
    assert internal.output == {"items": [1]} and internal.expected == {"state": {"n": 1}}  # …changes nothing else
    assert internal.trajectory.steps[0].arguments == {"amount": 5}
    assert public_view(internal).output == {"items": [1]}
    nothing = public_view(view(None))
    assert (nothing.steps, nothing.terminal_status, nothing.state, nothing.state_recorded) == ((), None, None, False)
    assert internal.state is not NO_STATE


def test_a_later_evaluator_sees_the_case_as_recorded_whatever_a_check_did(tmp_path):
    from oloproof.config.locate import Locator
    from oloproof.config.models import ProjectConfig
    from oloproof.evaluate.engine import build_suite

    def vandal(case):
        case.output["a"] = "changed"
        case.expected.clear()
        return Verdict.pass_()

    config = ProjectConfig.model_validate({
        "system": {"name": "x", "version": "1", "callable": "app:run"}, "cases": "cases.jsonl",
        "evaluators": [{"type": "python", "criterion": "vandal", "function": "checks:vandal"},
                       {"type": "contains", "criterion": "ok", "field": "a", "expected_field": "a"},
                       {"type": "python", "criterion": "scoped", "function": "checks:vandal",
                        "when": {"tags": ["money"]}}]})
    suite = build_suite(config, Locator("oloproof.yaml"))
    for ev in suite.evaluators:
        if ev.type_name == "python":
            ev.bind(vandal, "d")
    result = suite.evaluate(view(calls("a"), expected={"a": "yes"}, output={"a": "yes"}), replays={}, pair_source=None)
    assert result.verdicts == (("pass", None), ("pass", None), ("excluded", "not_selected"))


def test_the_view_carries_the_fault_replays_and_whether_the_control_was_faithful():
    from oloproof.evaluate.python import public_view
    from oloproof.replay.plan import Plan

    def traj(*steps, status="success"):
        return TrajectoryView(list(steps), status, False, None, [], [])

    call = StepRecorded(1, "tool_call", "refund", {"order": "o1"})
    done = StepRecorded(2, "tool_result", "refund", None, {"ok": True})
    faulted = StepRecorded(2, "tool_result", "refund", None, {"error": {"type": "ToolError"}}, fault="error")
    recording = msgspec.structs.replace(view(traj(call, done)), state={"refunded": True})
    plan = Plan(CheckpointRecorded(1, {"refunded": False}), 1)
    started = ReplayStarted("k", "control", "c1", "r/c1", "f", "s", "1", 1)
    control = ReplayView(started, trajectory=traj(call, done), state={"refunded": True}, output={"answer": "ok"})
    fault = ReplayView(msgspec.structs.replace(started, kind="fault"), trajectory=traj(call, faulted, status="failure"),
                       output={"answer": "sorry"})
    case = public_view(recording.with_evidence(replays={("refund", "error"): FaultReplays(plan, control, fault)},
                                               pair_source=None))
    r = case.replays["refund:error"]
    assert (r.tool, r.fault, r.faithful) == ("refund", "error", True)
    assert r.control.output == {"answer": "ok"} and r.control.state == {"refunded": True} and r.control.state_recorded
    assert r.faulted.terminal_status == "failure" and r.faulted.steps[1].result == {"error": {"type": "ToolError"}}
    assert (r.faulted.state, r.faulted.state_recorded) == (None, False)
    unfaithful = ReplayView(started, trajectory=traj(call, done), state={"refunded": False})
    case = public_view(recording.with_evidence(replays={("refund", "error"): FaultReplays(plan, unfaithful, None)},
                                               pair_source=None))
    assert case.replays["refund:error"].faithful is False and case.replays["refund:error"].faulted is None


def test_function_problems():
    from oloproof.evaluate.python import function_problem

    async def coro(case): ...

    class Callable_:
        def __call__(self, case): ...

    class Async:
        async def __call__(self, case): ...

    assert function_problem(lambda case: None) is None and function_problem(Callable_()) is None
    assert function_problem(lambda case, extra=1: None) is None
    assert "not callable" in function_problem(42)
    assert "async" in function_problem(coro) and "async" in function_problem(Async())
    assert "must take one argument" in function_problem(lambda: None)
    assert "must take one argument" in function_problem(lambda a, b: None)


# ---- a project, end to end ---------------------------------------------------------------

APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="bank", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Bank(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def send_money(self, iban, amount):
        self.state["sent"].append({"iban": iban, "amount": amount})
        return {"ok": True}

    def __call__(self, case):
        for t in case.input["transfers"]:
            self.send_money(t["iban"], t["amount"])
        if case.input.get("crash"):
            raise RuntimeError("the agent crashed")
        if case.input.get("truncated"):
            current_case().finish("unknown", truncated=True, step_limit=2)
        else:
            current_case().finish("success")
        return {"answer": "done"}
'''

MORE = '''\
from oloproof import Verdict


def sees_the_world(case):
    """What the view holds, as the case file and the recording gave it."""
    if not case.state_recorded:
        return Verdict.missing("no_state")
    sent = len(case.state["sent"]) - len(case.initial_state["sent"])
    ok = (sent == len(case.input["transfers"]) == sum(s.kind == "tool_call" for s in case.steps)
          and case.output == {"answer": "done"} and case.terminal_status in ("success", "unknown")
          and case.metadata.get("lane") == "chat" and "money" in case.tags and not case.replays)
    case.output["answer"] = "vandalised"  # its own copy
    return Verdict.pass_() if ok else Verdict.fail("view_differs")


def says_true(case):
    return True
'''

OK = {"iban": "GB01", "amount": 100}
CASES = [
    {"id": "right", "input": {"transfers": [OK]}, "expected": {"transfer": OK}},
    {"id": "wrong_amount", "input": {"transfers": [{"iban": "GB01", "amount": 1000}]}, "expected": {"transfer": OK}},
    {"id": "twice", "input": {"transfers": [OK, OK]}, "expected": {"transfer": OK}},
    {"id": "not_asked", "input": {"transfers": []}},
    {"id": "crashes", "input": {"transfers": [OK], "crash": True}, "expected": {"transfer": OK}},
    {"id": "no_iban", "input": {"transfers": [OK]}, "expected": {"transfer": {"amount": 100}}},
    {"id": "cut_twice", "input": {"transfers": [OK, OK], "truncated": True}, "expected": {"transfer": OK}},
    {"id": "cut_once", "input": {"transfers": [OK], "truncated": True}, "expected": {"transfer": OK}},
]

CONFIG = """\
system:
  name: bank
  version: "1"
  callable: app:Bank
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: python, criterion: one_transfer_as_asked, function: checks:one_transfer_as_asked}
  - {type: python, criterion: sees_the_world, function: more_checks:sees_the_world, when: {tags: [money]}}
  - {type: python, criterion: says_true, function: more_checks:says_true}
  - {type: contains, criterion: answered, field: answer, expected_field: answer}
"""

EXPECTED = {
    "right": {"one_transfer_as_asked": "pass"},
    "wrong_amount": {"one_transfer_as_asked": "fail/wrong_amount"},
    "twice": {"one_transfer_as_asked": "fail/more_than_one_transfer"},
    "not_asked": {"one_transfer_as_asked": "excluded/no_transfer_asked"},
    "crashes": {"one_transfer_as_asked": "missing/system_error"},
    "no_iban": {"one_transfer_as_asked": "missing/evaluator_error"},
    "cut_twice": {"one_transfer_as_asked": "fail/more_than_one_transfer"},
    "cut_once": {"one_transfer_as_asked": "missing/truncated"},
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "bank"
    write(p / "app.py", APP)
    write(p / "checks.py", CHECKS)
    write(p / "more_checks.py", MORE)
    write(p / "oloproof.yaml", CONFIG)
    lines = []
    for c in CASES:
        money = c["id"] in ("right", "wrong_amount", "twice", "not_asked")
        lines.append(json.dumps({**c, "initial_state": {"sent": [{"iban": "OLD", "amount": 1}]},
                                 "expected": {**c.get("expected", {}), "answer": "done"},
                                 "metadata": {"lane": "chat"}, **({"tags": ["money"]} if money else {})}))
    write(p / "cases.jsonl", "\n".join(lines) + "\n")
    return p


def verdicts(data: dict, criterion: str) -> dict[str, str]:
    return {c["case_id"]: c["verdicts"][criterion]["verdict"]
            + ("/" + c["verdicts"][criterion]["reason"] if c["verdicts"][criterion].get("reason") else "")
            for c in data["cases"]}


def run(cli, p: Path, *args: str) -> dict:
    r = cli("run", "--json", "r.json", *args, cwd=p)
    assert r.exit_code == 0, r.output
    return json.loads((p / "r.json").read_text())


def test_a_run_judges_every_case_through_the_check(cli, project):
    data = run(cli, project)
    assert verdicts(data, "one_transfer_as_asked") == {k: v["one_transfer_as_asked"] for k, v in EXPECTED.items()}
    # the view is what was recorded (and scoped by when:); the check's vandalism stays in its copy
    assert set(verdicts(data, "sees_the_world").values()) == {"pass", "excluded/not_selected"}
    assert verdicts(data, "sees_the_world")["twice"] == "pass"
    assert set(verdicts(data, "answered").values()) == {"pass", "missing/system_error"}
    # not a Verdict: missing, never a pass; a system that raised: missing with its kind
    assert verdicts(data, "says_true") == {c["id"]: "missing/system_error" if c["id"] == "crashes"
                                           else "missing/evaluator_error" for c in CASES}
    row = next(r for r in data["criteria"] if r["criterion"] == "one_transfer_as_asked")
    assert (row["passed"], row["observed"], row["missing"], row["excluded"]) == (1, 4, 3, 1)
    case = next(c for c in data["cases"] if c["case_id"] == "no_iban")
    [error] = [p for p in case["paths"] if p["criterion"] == "one_transfer_as_asked"]
    assert error["note"] == "evaluator_error: KeyError: 'iban'"
    assert 'File "checks.py", line 17, in one_transfer_as_asked' in error["recorded"]
    says = [p for p in case["paths"] if p["criterion"] == "says_true"][0]
    assert "more_checks:says_true returned bool True, not an oloproof.Verdict" in says["note"]


def test_show_prints_the_traceback_the_doc_shows_and_the_html_panel_holds_it(cli, project):
    run(cli, project)
    out = cli("show", "latest", "no_iban", cwd=project).output
    shown = re.search(r"```text\n(.*?)```", DOC, re.S)[1]
    block = "\n".join(line[2:] for line in shown.splitlines())  # the doc's block, out of its list item
    assert block.strip() in out, out
    assert "says_true (more_checks:says_true): more_checks:says_true returned bool True" in out
    assert re.search(r"│ one_transfer_as_asked +│ missing +│ evaluator_error", out)
    detail = cli("show", "latest", "no_iban", "--json", "case.json", cwd=project)
    assert detail.exit_code == 0
    paths = json.loads((project / "case.json").read_text())["paths"]
    assert any("KeyError: 'iban'" in (p.get("recorded") or "") for p in paths)
    assert cli("view", "latest", "--out", "report", cwd=project).exit_code == 0
    data = "".join(f.read_text() for f in (project / "report" / "data").glob("cases-*.js"))
    assert 'File \\"checks.py\\", line 17, in one_transfer_as_asked' in data


@pytest.mark.slow
def test_worker_processes_judge_the_same_and_audit_rebuild_derives_the_same_rows(cli, project):
    serial = run(cli, project)
    workers = run(cli, project, "--workers", "2")
    assert [c["verdicts"] for c in workers["cases"]] == [c["verdicts"] for c in serial["cases"]]
    assert [c.get("paths") for c in workers["cases"]] == [c.get("paths") for c in serial["cases"]]

    def rows():
        with sqlite3.connect(project / ".oloproof" / "log.db") as db:
            return db.execute("SELECT run_id, eval_key, case_id, result FROM evaluations ORDER BY 1, 3").fetchall()

    before = rows()
    assert len(before) == 2 * len(CASES) and any("KeyError" in r[3] for r in before)
    r = cli("audit", "rebuild", cwd=project)
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    assert rows() == before


def test_the_checks_code_is_stored_with_the_configuration(cli, project):
    from oloproof.app.project import check_digest, load_project
    from oloproof.app.runs import load_run
    from oloproof.store import open_store

    first = load_project(project)
    digests = first.stored_config["checks"]
    assert set(digests) == {"checks:one_transfer_as_asked", "more_checks:sees_the_world", "more_checks:says_true"}
    run(cli, project)
    store = open_store(str(project / ".oloproof" / "log.db"))
    try:
        started = load_run(store, json.loads((project / "r.json").read_text())["run_id"]).started
    finally:
        store.close()
    assert started.config["checks"] == digests and started.config_digest == first.config_digest
    edit(project / "checks.py", "> 0.005", "> 1000")  # the same check, more lenient
    second = load_project(project)
    assert second.stored_config["checks"]["checks:one_transfer_as_asked"] != digests["checks:one_transfer_as_asked"]
    assert second.stored_config["checks"]["more_checks:says_true"] == digests["more_checks:says_true"]
    assert second.config_digest != first.config_digest  # so its evaluations are keyed apart
    # the digest is of the code, not of where it lies
    moved = project.parent / "moved"
    moved.mkdir()
    (moved / "checks.py").write_text((project / "checks.py").read_text())
    import importlib.util

    spec = importlib.util.spec_from_file_location("checks", moved / "checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import sys

    sys.modules["checks"] = module
    try:
        assert check_digest(module.one_transfer_as_asked, "checks:one_transfer_as_asked") == \
            second.stored_config["checks"]["checks:one_transfer_as_asked"]
    finally:
        del sys.modules["checks"]


def test_a_changed_check_rejudges_a_stored_run_and_says_so(cli, project):
    first = run(cli, project)
    assert verdicts(first, "one_transfer_as_asked")["wrong_amount"] == "fail/wrong_amount"
    edit(project / "checks.py", "> 0.005", "> 1000")
    said = "python check 'one_transfer_as_asked' (checks:one_transfer_as_asked): its code changed since the run " \
           "was recorded; judged with the code as it is now"
    for command in (["show", "latest", "--json", "s.json"], ["gate", "latest"], ["eval", "latest", "--json", "e.json"],
                    ["show", "latest", "wrong_amount"]):
        r = cli(*command, cwd=project)
        assert r.exit_code == 0, r.output
        assert f"warning: run {first['run_id']}: {said}" in r.output, (command, r.output)
        assert r.output.count("warning:") == 1  # once, and only for the check that changed
    for name in ("s.json", "e.json"):
        again = json.loads((project / name).read_text())
        assert verdicts(again, "one_transfer_as_asked")["wrong_amount"] == "pass"  # the code as it is now
    assert re.search(r"│ one_transfer_as_asked +│ pass ", cli("show", "latest", "wrong_amount", cwd=project).output)
    # an unchanged check says nothing
    edit(project / "checks.py", "> 1000", "> 0.005")
    assert "warning" not in cli("show", "latest", cwd=project).output


def test_a_stored_run_whose_check_is_gone_is_missing_with_the_reason(cli, project, tmp_path):
    first = run(cli, project)
    (project / "more_checks.py").unlink()
    r = cli("show", "latest", "--json", "s.json", cwd=project)
    assert r.exit_code == 0, r.output
    reason = f"no module 'more_checks' in the project folder {project.resolve()}"
    assert f"warning: run {first['run_id']}: python check 'sees_the_world' (more_checks:sees_the_world): {reason}" \
        in r.output
    again = json.loads((project / "s.json").read_text())
    assert set(verdicts(again, "sees_the_world").values()) == {"missing/evaluator_error", "excluded/not_selected"}
    assert verdicts(again, "one_transfer_as_asked") == verdicts(first, "one_transfer_as_asked")
    panel = cli("show", "latest", "right", cwd=project).output
    assert f"sees_the_world (more_checks:sees_the_world): {reason}" in panel
    # eval takes the checks from oloproof.yaml: one that cannot be imported is exit 2, located
    r = cli("eval", "latest", cwd=project)
    assert r.exit_code == 2 and "oloproof.yaml:9: evaluators[1].function 'more_checks:sees_the_world': " \
        "cannot import module 'more_checks'" in r.output, r.output
    # outside any project folder: nothing to import the checks from
    r = cli("show", "--db", str(project / ".oloproof" / "log.db"), "latest", "right", cwd=tmp_path)
    assert r.exit_code == 0 and "no project folder to import it from" in r.output, r.output
    assert re.search(r"│ one_transfer_as_asked +│ missing +│ evaluator_error", r.output)


def test_a_log_cannot_make_oloproof_import_code_outside_the_project_folder(tmp_path):
    from oloproof.app.project import suite_from_stored

    write(tmp_path / "mine.py", "def check(case):\n    return __import__('oloproof').Verdict.pass_()\n")
    stored = {"oloproof": {"system": {"name": "x", "version": "1", "callable": "app:run"}, "cases": "c.jsonl",
                           "evaluators": [{"type": "python", "criterion": "a", "function": "json:dumps"},
                                          {"type": "python", "criterion": "b", "function": "os.path:join"},
                                          {"type": "python", "criterion": "c", "function": "mine:check"}]},
              "release": None}
    suite = suite_from_stored(stored, root=tmp_path)
    a, b, c = suite.evaluators
    assert a.function is None and "no module 'json' in the project folder" in a.problem
    assert b.function is None and "no module 'os.path' in the project folder" in b.problem
    assert c.function is not None and c.evaluate(view(calls("x"))) == ("pass", None)


@pytest.mark.parametrize("function, files, needle", [
    ("checks:one_transfer_as_aske", {}, "module 'checks' has no attribute 'one_transfer_as_aske'; did you mean "
                                        "'one_transfer_as_asked'?"),
    ("nowhere:check", {}, "cannot import module 'nowhere': ModuleNotFoundError"),
    ("broken:check", {"broken.py": "raise RuntimeError('no database')\n"},
     "cannot import module 'broken': RuntimeError: no database"),
    ("bad:LIMIT", {"bad.py": "LIMIT = 3\n"}, "'bad:LIMIT' is not callable (it is int 3)"),
    ("bad:check", {"bad.py": "async def check(case):\n    pass\n"}, "is an async function"),
    ("bad:check", {"bad.py": "def check(case, world):\n    pass\n"}, "must take one argument, the case"),
    ("bad:check", {"bad.py": "def check():\n    pass\n"}, "must take one argument, the case"),
    ("checks", {}, "expected module:function"),
    ("checks.one_transfer_as_asked", {}, "expected module:function"),
])
def test_a_check_that_cannot_be_imported_is_exit_2_before_anything_runs(cli, project, function, files, needle):
    for name, text in files.items():
        write(project / name, text)
    edit(project / "oloproof.yaml", "function: checks:one_transfer_as_asked", f"function: {function}")
    r = cli("run", cwd=project)
    assert r.exit_code == 2, r.output
    assert "oloproof.yaml:8: evaluators[0]" in r.output and needle in r.output, r.output
    assert "Traceback" not in r.output and not (project / ".oloproof" / "log.db").exists()


def test_the_criterion_is_required(cli, project):
    edit(project / "oloproof.yaml", "{type: python, criterion: one_transfer_as_asked, ", "{type: python, ")
    r = cli("run", cwd=project)
    assert r.exit_code == 2 and "oloproof.yaml:8" in r.output and "criterion" in r.output, r.output


def test_the_check_sees_the_fault_replays_of_the_suite(cli, project):
    write(project / "replay_checks.py", '''\
from oloproof import Verdict


def compares_replays(case):
    r = case.replays.get("send_money:error")
    if r is None:
        return Verdict.excluded("no_replay")
    if not r.faithful or r.faulted is None:
        return Verdict.missing("control_not_faithful")
    faulted = [s.result for s in r.faulted.steps if s.kind == "tool_result"]
    same = r.control.output == case.output and r.control.state == case.state
    return Verdict.pass_() if same and faulted and "error" in faulted[0] else Verdict.fail("replays_differ")
''')
    edit(project / "oloproof.yaml", "evaluators:\n", "evaluators:\n"
         "  - {type: fault_recovery, tool: send_money, fault: error}\n"
         "  - {type: python, criterion: compares_replays, function: replay_checks:compares_replays}\n")
    data = run(cli, project)
    got = verdicts(data, "compares_replays")
    assert got["right"] == got["wrong_amount"] == "pass", got  # a replay was run for them
    assert got["not_asked"] == "excluded/no_replay" and got["crashes"] == "missing/system_error"


def test_prefix_evaluators_take_python_checks_too(project):
    from oloproof.app.prefix import load_prefix_project
    from oloproof.errors import ConfigError

    with (project / "oloproof.yaml").open("a") as fh:
        fh.write("prefix:\n  evaluators:\n"
                 "    - {type: python, criterion: next_ok, function: checks:one_transfer_as_asked}\n")
    prefix = load_prefix_project(project)
    [ev] = [e for e in prefix.suite.evaluators if e.type_name == "python"]
    assert ev.criterion == "next_ok" and ev.function is not None
    assert set(prefix.stored_config["checks"]) == {"checks:one_transfer_as_asked"}
    edit(project / "oloproof.yaml", "next_ok, function: checks:one_transfer_as_asked", "next_ok, function: checks:nope")
    with pytest.raises(ConfigError, match=r"oloproof.yaml:14: prefix.evaluators\[0\].function 'checks:nope'"):
        load_prefix_project(project)


# ---- a check that never returns ---------------------------------------------------------

STUCK = '''\
from oloproof import Verdict


def stuck_on_twice(case):
    if case.id == "twice":
        while True:  # a check that never returns
            pass
    return Verdict.pass_()


def swallows_the_interruption(case):
    if case.id == "twice":
        try:
            while True:
                pass
        except BaseException:  # noqa: BLE001 - what a careless check does
            return Verdict.pass_()
    return Verdict.pass_()
'''


def test_a_check_that_never_returns_is_stopped_at_the_timeout_and_missing(cli, project):
    """A python check looping forever on one case does not hang ``run`` or ``eval``: past the
    configuration's ``timeout`` the case is missing (evaluator_error), the traceback shows where
    the check was; one that swallows the interruption and returns a pass is missing too."""
    write(project / "stuck.py", STUCK)
    config = CONFIG.replace("evaluators:\n", "timeout: 0.5\nevaluators:\n  - {type: python, criterion: stuck, "
                            "function: stuck:stuck_on_twice}\n  - {type: python, criterion: swallowed, "
                            "function: stuck:swallows_the_interruption}\n")
    write(project / "oloproof.yaml", config)
    data = run(cli, project)
    for criterion in ("stuck", "swallowed"):
        got = verdicts(data, criterion)
        assert got["twice"] == "missing/evaluator_error", (criterion, got)
        assert {k: v for k, v in got.items() if k != "twice"} == \
            {c["id"]: "missing/system_error" if c["id"] == "crashes" else "pass" for c in CASES if c["id"] != "twice"}
    case = next(c for c in data["cases"] if c["case_id"] == "twice")
    [error] = [p for p in case["paths"] if p["criterion"] == "stuck"]
    assert error["note"] == ("evaluator_error: TimeoutError: the check did not return within 0.5 s "
                             "(the timeout in oloproof.yaml)")
    assert 'File "stuck.py", line 6, in stuck_on_twice' in error["recorded"], error["recorded"]
    # a stored run is re-judged with the timeout it stored
    r = cli("eval", "latest", "--json", "e.json", cwd=project)
    assert r.exit_code == 0, r.output
    again = json.loads((project / "e.json").read_text())
    assert verdicts(again, "stuck") == verdicts(data, "stuck")


def test_without_a_timeout_a_check_is_stopped_at_the_default_limit(monkeypatch):
    from oloproof.app import project as project_module

    monkeypatch.setattr(project_module, "CHECK_TIMEOUT", 0.3)
    namespace: dict = {}
    exec(compile(STUCK, "stuck.py", "exec"), namespace)
    check = project_module._user_check(namespace["stuck_on_twice"], None)
    with pytest.raises(TimeoutError, match=r"within 0.3 s \(the limit when oloproof.yaml sets no timeout\)"):
        check(CaseView(id="twice"))
    assert check(CaseView(id="right")) == Verdict.pass_()
    # on a thread that is not the main one (a Dask worker's), the check is left behind at the limit
    import threading

    stop = threading.Event()

    def spins(case):
        while not stop.is_set():  # stopped below: a thread left spinning would slow every later test
            pass
        return Verdict.pass_()

    raised: list = []
    left = project_module._user_check(spins, None)
    t = threading.Thread(target=lambda: raised.append(pytest.raises(TimeoutError, left, CaseView(id="x"))))
    t.start()
    t.join(10)
    stop.set()
    assert not t.is_alive() and raised and "within 0.3 s" in str(raised[0].value)

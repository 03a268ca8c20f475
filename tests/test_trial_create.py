"""``oloproof trial create RUN CASE --fault TOOL:KIND [--redact PATH…]``: a stored incident
turned into a sanitised fault trial (seeds/fault-injection-release-gate) — the same input
shape, the fault on the call the incident shows, secrets and customer data redacted with the
prefix rules, the strongest outcome oracle the case has — that ``oloproof run`` then runs with
the fault applied."""

import json
import shutil

import pytest

from tests.conftest import copy_recorded, run_in, write

APP = '''\
from oloproof import Stateful, current_case, tool


class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup_order(self, order_id):
        return dict(self.state["orders"][order_id])

    @tool
    def issue_refund(self, order_id, card):
        if self.state.get("gateway_down", 0) > 0:  # the incident: the gateway fails once
            self.state["gateway_down"] -= 1
            raise ConnectionError("gateway unavailable")
        self.state["orders"][order_id]["status"] = "refunded"
        return {"refunded": order_id}

    @tool
    def escalate_to_human(self, order_id):
        self.state.setdefault("escalations", []).append(order_id)
        return {"escalated": order_id}

    def __call__(self, case):
        order_id = case.input["order_id"]
        self.lookup_order(order_id)
        for _ in range(2):
            try:
                result = self.issue_refund(order_id=order_id, card=case.input["card"])
            except ConnectionError:
                continue  # retried
            if "error" not in result:
                current_case().finish("success")
                return {"answer": "refunded"}
            break
        self.escalate_to_human(order_id=order_id)
        current_case().finish("failure")
        return {"answer": "escalated"}
'''

CONFIG = '''\
system: {name: desk, version: "1", callable: app:Desk, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: state_matches, mode: subset}
  - {type: agent_tool_sequence}
prefix:
  redact: [metadata.agent_notes, steps.*.result.card]
'''

CASES = [
    {"id": "ord-1", "input": {"order_id": "ord-1", "card": "4242424242424242",
                              "message": "Refund please, this is alice@example.com"},
     "initial_state": {"orders": {"ord-1": {"status": "delivered", "email": "alice@example.com"}},
                       "gateway_down": 1},
     "expected": {"answer": "refunded", "tools": ["lookup_order", "issue_refund", "issue_refund"],
                  "state": {"orders": {"ord-1": {"status": "refunded"}}}},
     "metadata": {"channel": "chat", "agent_notes": "VIP since 2019"}, "tags": ["payments"]},
    {"id": "ord-2", "input": {"order_id": "ord-2", "card": "5555444433331111", "message": "Refund"},
     "initial_state": {"orders": {"ord-2": {"status": "delivered", "email": "bob@example.com"}}},
     "expected": {"answer": "refunded", "tools": ["lookup_order", "issue_refund"]}},
]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trial") / "desk"
    write(folder / "app.py", APP)
    write(folder / "oloproof.yaml", CONFIG)
    write(folder / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in CASES))
    r = run_in(folder, "run")
    assert r.exit_code == 0, r.output
    return folder


@pytest.fixture
def desk(recorded, tmp_path):
    return copy_recorded(recorded, tmp_path / "desk")


def create(cli, desk, *args):
    return cli("trial", "create", "latest", *args, cwd=desk)


def test_an_incident_becomes_a_sanitised_trial(cli, desk):
    r = create(cli, desk, "ord-1", "--fault", "issue_refund:timeout", "--redact", "**.email",
               "--redact", "input.card")
    assert r.exit_code == 0, r.output
    trial = json.loads(r.stdout)  # standard output holds the line alone
    assert r.stdout.count("\n") == 1
    # the same input shape: the same keys, only the redacted values changed
    assert trial["input"] == {"order_id": "ord-1", "card": "[REDACTED]", "message": "Refund please, this is [REDACTED]"}
    assert trial["initial_state"] == {"orders": {"ord-1": {"status": "delivered", "email": "[REDACTED]"}},
                                      "gateway_down": 1}
    # the smallest causal condition: the call the incident shows failing (the first: it raised)
    assert trial["fault"] == {"tool": "issue_refund", "kind": "timeout", "call": 1}
    # the strongest outcome oracle: the environment's; the transcript's path and answer left out
    assert trial["expected"] == {"state": {"orders": {"ord-1": {"status": "refunded"}}}}
    assert "expected.answer, expected.tools left out" in r.stderr
    assert trial["id"] == "ord-1-issue_refund-timeout"
    assert trial["tags"] == ["payments"]
    meta = trial["metadata"]
    assert meta["channel"] == "chat" and meta["agent_notes"] == "[REDACTED]"  # prefix.redact applies too
    assert meta["incident"].endswith("/ord-1") and meta["condition"] == "timeout on issue_refund, call 1"
    assert meta["redacted"] == ["metadata.agent_notes", "**.email", "input.card"]
    for secret in ("4242424242424242", "alice@example.com", "VIP since 2019"):
        assert secret not in r.stdout


def test_the_trial_runs_with_its_fault_applied(cli, desk):
    r = create(cli, desk, "ord-1", "--fault", "issue_refund:timeout", "--redact", "input.card", "--out", "cases.jsonl")
    assert r.exit_code == 0, r.output
    assert "appended trial 'ord-1-issue_refund-timeout'" in r.output
    lines = (desk / "cases.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0]) == CASES[0]  # appended; the others untouched
    ran = cli("run", "--json", "r.json", cwd=desk)
    assert ran.exit_code == 0, ran.output
    data = json.loads((desk / "r.json").read_text())
    verdicts = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    trial = verdicts["ord-1-issue_refund-timeout"]
    # the fault fired: the agent was told the refund timed out, escalated, and the world says
    # the order was not refunded — the outcome oracle fails it
    assert trial["state_matches"]["verdict"] == "fail"
    assert trial["agent_tool_sequence"] == {"verdict": "excluded", "reason": "no_declared_tools"}
    shown = cli("show", "latest", "ord-1-issue_refund-timeout", cwd=desk)
    assert "fault: issue_refund timeout (call 1) · applied at step" in shown.output
    assert '"TimeoutError"' in shown.output and "escalate_to_human" in shown.output


def test_a_fault_on_another_call_and_a_denied_scope(cli, desk):
    r = create(cli, desk, "ord-1", "--fault", "issue_refund:error", "--call", "2", "--id", "second-call")
    assert r.exit_code == 0, r.output
    trial = json.loads(r.stdout)
    assert (trial["id"], trial["fault"]) == ("second-call", {"tool": "issue_refund", "kind": "error", "call": 2})
    r = create(cli, desk, "ord-2", "--fault", "issue_refund:denied")
    trial = json.loads(r.stdout)
    assert trial["fault"] == {"tool": "issue_refund", "kind": "denied", "call": 1}
    assert "no failed call of 'issue_refund'" in r.stderr  # said, not hidden
    # no environment oracle: the case's own answer is kept, and that is said too
    assert trial["expected"] == {"answer": "refunded"}
    assert "has no expected.state" in r.stderr


def test_a_trial_of_a_trial_takes_the_fault_the_case_declared(cli, desk):
    assert create(cli, desk, "ord-1", "--fault", "issue_refund:timeout", "--call", "2",
                  "--out", "cases.jsonl").exit_code == 0
    assert cli("run", cwd=desk).exit_code == 0
    r = create(cli, desk, "ord-1-issue_refund-timeout", "--fault", "issue_refund:error", "--id", "again")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fault"]["call"] == 2


@pytest.mark.parametrize("args, message", [
    (("ord-1", "--fault", "issue_refund"), "expected TOOL:KIND"),
    (("ord-1", "--fault", "issue_refund:timout"), "did you mean 'timeout'"),
    (("ord-1", "--fault", "isue_refund:error"), "did you mean 'issue_refund'"),
    (("ord-1", "--fault", "issue_refund:error", "--call", "3"), "give a call from 1 to 2"),
    (("ord-1", "--fault", "issue_refund:error", "--call", "0"), "count from 1"),
    (("ord-1", "--fault", "issue_refund:error", "--redact", "steps.*.result"), "a trial holds no steps"),
    (("ord-1", "--fault", "issue_refund:error", "--redact", "inptu.card"), "did you mean 'input'"),
    (("ord-1", "--fault", "issue_refund:error", "--redact", "card"), "a path of keys separated by dots"),
    (("ord-1", "--fault", "issue_refund:error", "--id", "a/b"), "--id 'a/b'"),
    (("ord-9", "--fault", "issue_refund:error"), "no committed case 'ord-9'"),
    (("ord-1", "--fault", "issue_refund:error", "--out", "."), "is a folder"),
    (("ord-1", "--fault", "issue_refund:error", "--out", "nowhere/cases.jsonl"), "does not exist"),
    (("ord-1", "--fault", "issue_refund:error", "--out", ".oloproof/log.db"), "event log"),
])
def test_bad_arguments_exit_2_and_write_nothing(cli, desk, args, message):
    before = (desk / "cases.jsonl").read_bytes()
    r = create(cli, desk, *args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert r.stdout == ""
    assert (desk / "cases.jsonl").read_bytes() == before


def test_an_unknown_run_and_a_broken_or_taken_case_file(cli, desk):
    r = cli("trial", "create", "20990101T000000-000000", "ord-1", "--fault", "issue_refund:error", cwd=desk)
    assert r.exit_code == 2 and "no run" in r.output
    assert create(cli, desk, "ord-1", "--fault", "issue_refund:error", "--out", "cases.jsonl").exit_code == 0
    again = create(cli, desk, "ord-1", "--fault", "issue_refund:error", "--out", "cases.jsonl")
    assert again.exit_code == 2 and "already holds a case 'ord-1-issue_refund-error'" in again.output
    write(desk / "broken.jsonl", '{"id": "x", "input": {}}\n{"id": \n')
    broken = create(cli, desk, "ord-1", "--fault", "issue_refund:error", "--out", "broken.jsonl")
    assert broken.exit_code == 2 and "broken.jsonl:2" in broken.output
    assert (desk / "broken.jsonl").read_text() == '{"id": "x", "input": {}}\n{"id": \n'
    # a file without a final newline gets one before the trial
    write(desk / "more.jsonl", json.dumps(CASES[1]))
    assert create(cli, desk, "ord-1", "--fault", "issue_refund:error", "--out", "more.jsonl").exit_code == 0
    assert [json.loads(x)["id"] for x in (desk / "more.jsonl").read_text().splitlines()] == [
        "ord-2", "ord-1-issue_refund-error"]


def test_a_model_call_is_never_faulted(cli, tmp_path):
    folder = tmp_path / "m"
    app = APP.replace("    @tool\n    def escalate_to_human", "    @tool(kind=\"model\")\n    def decide(self, text):\n"
                      "        return {\"refund\": True}\n\n    @tool\n    def escalate_to_human")
    app = app.replace("        self.lookup_order(order_id)\n", "        self.lookup_order(order_id)\n"
                      "        self.decide(text=case.input[\"message\"])\n")
    write(folder / "app.py", app)
    write(folder / "oloproof.yaml", CONFIG)
    write(folder / "cases.jsonl", json.dumps(CASES[1]) + "\n")
    assert run_in(folder, "run").exit_code == 0
    r = run_in(folder, "trial", "create", "latest", "ord-2", "--fault", "decide:error")
    assert r.exit_code == 2 and "model calls are never faulted" in r.output


def test_without_a_project_the_log_alone_is_enough(cli, desk, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(desk / ".oloproof" / "log.db", elsewhere / "log.db")
    r = cli("trial", "create", "latest", "ord-2", "--fault", "issue_refund:error", "--db", "log.db", cwd=elsewhere)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fault"]["tool"] == "issue_refund"

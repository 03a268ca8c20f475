"""The replay engine: checkpoints, the tape, control fidelity, faults, fault_recovery, caching."""

import json
import sqlite3

import pytest

from oloproof.replay.faults import FAULT_KINDS, MALFORMED, fault_result
from tests.conftest import copy_recorded, run_in, write

APP = '''\
import random
from pathlib import Path

from oloproof import Stateful, current_case, system, tool

LOG = Path(__file__).with_name("calls.log")


@system(name="desk", version="VERSION", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        with LOG.open("a") as fh:
            fh.write("lookup\\n")
        return dict(self.state["orders"][order_id])

    @tool
    def refund(self, order_id):
        self.state["orders"][order_id]["status"] = "refunded"
        return {"status": "refunded"}

    @tool
    def escalate(self, order_id):
        self.state.setdefault("tickets", []).append(order_id)
        return {"ticket": 1}

    @tool(kind="model")
    def think(self, prompt):
        with LOG.open("a") as fh:
            fh.write("model\\n")
        return "refund it"

    def __call__(self, case):
        with LOG.open("a") as fh:
            fh.write(f"run {case.id}\\n")
        b = case.input["behaviour"]
        oid = case.input["order_id"]
        self.think(prompt=f"order {oid}")
        self.lookup(oid)
        if b == "never_refunds":
            current_case().finish("success")
            return {"answer": "nothing to do"}
        result = self.refund(oid)
        if b == "random":  # after the checkpoint: a live call the replay may not repeat
            self.lookup(oid) if random.random() < 0.5 else self.escalate(oid)
        failed = not isinstance(result, dict) or "error" in result
        if b == "recovers" and failed:
            self.escalate(oid)
            current_case().finish("success")
            return {"answer": "escalated"}
        if b == "honest" and failed:
            current_case().finish("failure")
            return {"answer": "could not refund"}
        if b == "breaks_rule" and failed:
            self.refund(oid)
            current_case().constraint("single_refund_attempt", False)
            current_case().finish("success")
            return {"answer": "refunded"}
        if b == "crashes" and failed:
            raise RuntimeError("cannot handle " + repr(result))
        current_case().finish("success")
        return {"answer": "refunded"}
'''

CONFIG = '''\
system:
  name: desk
  version: "VERSION"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: fault_recovery, tool: refund, fault: error, escalate_tools: [escalate]}
'''

BEHAVIOURS = ["ignores", "recovers", "honest", "breaks_rule", "crashes", "never_refunds"]


def make(tmp_path, behaviours=BEHAVIOURS, version="1"):
    write(tmp_path / "app.py", APP.replace("VERSION", version))
    write(tmp_path / "oloproof.yaml", CONFIG.replace("VERSION", version))
    lines = []
    for i, b in enumerate(behaviours):
        oid = f"o{i}"
        lines.append(json.dumps({
            "id": b, "input": {"order_id": oid, "behaviour": b},
            "initial_state": {"orders": {oid: {"status": "delivered"}}},
            "expected": {"state": {"orders": {oid: {"status": "refunded"}}}}}))
    write(tmp_path / "cases.jsonl", "\n".join(lines) + "\n")
    return tmp_path


def verdicts(data, criterion="recovers_from_error_at_refund"):
    return {c["case_id"]: c["verdicts"][criterion] for c in data["cases"]}


def run(cli, p):
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    return json.loads((p / "r.json").read_text())


def test_fault_shapes_are_fixed():
    assert fault_result("error", "refund") == {"error": {"type": "ToolError", "message": "refund failed"}}
    assert fault_result("timeout", "refund") == {"error": {"type": "TimeoutError", "message": "refund timed out"}}
    assert fault_result("malformed", "refund") == MALFORMED == '{"status": "ok", "resu'
    assert FAULT_KINDS == ("error", "timeout", "malformed")
    with pytest.raises(ValueError):
        fault_result("slow", "refund")


def test_fault_recovery_verdicts(cli, tmp_path):
    data = run(cli, make(tmp_path))
    assert verdicts(data) == {
        "ignores": {"verdict": "fail", "reason": "state_contradicts_claim"},
        "recovers": {"verdict": "pass"},
        "honest": {"verdict": "fail", "reason": "ended_in_failure"},
        "breaks_rule": {"verdict": "fail", "reason": "constraint_broken"},
        "crashes": {"verdict": "fail", "reason": "agent_raised"},
        "never_refunds": {"verdict": "excluded", "reason": "call_not_made"},
    }


def test_the_tape_answers_calls_before_the_checkpoint_without_executing(cli, tmp_path):
    p = make(tmp_path, ["recovers"])
    run(cli, p)
    # recording: run, model, lookup; control and fault replays: run only (model and lookup
    # come from the tape, before the checkpoint at the refund call)
    assert (p / "calls.log").read_text().split("\n")[:-1] == [
        "run recovers", "model", "lookup", "run recovers", "run recovers"]
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    heads = [json.loads(r[0]) for r in conn.execute(
        "SELECT payload FROM events WHERE stream LIKE 'replay/%' AND seq = 0 ORDER BY pos")]
    assert [h["kind"] for h in heads] == ["control", "fault"]
    # think: 1 step, lookup: 2
    assert all(h["checkpoint_step"] == 4 and h.get("method", "tape") == "tape" for h in heads)
    assert heads[0].get("change") is None
    assert heads[1]["change"] == {"step_index": 4, "tool_name": "refund", "fault": "error",
                                  "result": {"error": {"type": "ToolError", "message": "refund failed"}}}
    # the faulted call did not execute: the fault replay's state is the checkpoint's
    fault_state = json.loads(conn.execute(
        "SELECT payload FROM events WHERE stream = ? AND type = 'environment_state.v1'",
        ("replay/" + heads[1]["cache_key"],)).fetchone()[0])["state"]
    assert fault_state == {"orders": {"o0": {"status": "delivered"}}, "tickets": ["o0"]}


def test_a_non_deterministic_agent_is_caught_by_the_control_replay(cli, tmp_path):
    p = make(tmp_path, ["random"] * 1)
    import random

    outcomes = []
    for seed in range(6):  # the agent draws again in every replay: some diverge
        random.seed(seed)
        data = run(cli, p)
        outcomes.append(verdicts(data)["random"])
        if outcomes[-1] == {"verdict": "missing", "reason": "replay_not_faithful"}:
            # and the case panel names the first differing step of the unfaithful control replay
            shown = cli("show", "latest", "random")
            assert "NOT faithful: step 6" in shown.output, shown.output
            break
    else:
        raise AssertionError(f"no unfaithful control replay in 6 seeds: {outcomes}")


def test_control_divergence_reports_the_first_differing_step(tmp_path):
    from oloproof.events import ReplayStarted, StepRecorded
    from oloproof.replay.fidelity import compare
    from oloproof.views import CaseView, ReplayView, TrajectoryView

    def traj(arg):
        return TrajectoryView([StepRecorded(1, "tool_call", "a", {"x": 1}),
                               StepRecorded(2, "tool_result", "a", None, 1),
                               StepRecorded(3, "tool_call", "b", {"x": arg})], "success", False, None, [], [])

    recording = CaseView("c", 0, "f", {}, None, {}, {}, {}, trajectory=traj(1))
    started = ReplayStarted("k", "control", "c", "r/c", "f", "s", "1", 1)
    same = ReplayView(started, trajectory=traj(1))
    other = ReplayView(started, trajectory=traj(2))
    assert compare(recording, same, 1).faithful
    f = compare(recording, other, 1)
    assert not f.faithful and f.first_difference["step"] == 3
    assert "b({\"x\":1})" in f.first_difference["recorded"] and "b({\"x\":2})" in f.first_difference["replayed"]


def test_replays_are_cached_by_system_version(cli, tmp_path):
    p = make(tmp_path, ["ignores", "recovers"])

    def replay_runs():
        return sum(1 for line in (p / "calls.log").read_text().splitlines() if line.startswith("run"))

    run(cli, p)
    assert replay_runs() == 2 + 4  # two cases, a control and a fault replay each
    first = run(cli, p)
    assert replay_runs() == 6 + 2  # a new run of the same version: the replays come from the cache
    ev = cli("eval", "latest", "--json", "e.json", cwd=p)
    assert ev.exit_code == 0, ev.output
    assert replay_runs() == 8 and json.loads((p / "e.json").read_text())["cases"] == first["cases"]
    make(tmp_path, ["ignores", "recovers"], version="2")
    run(cli, p)
    assert replay_runs() == 8 + 2 + 4  # a new version replays afresh


def test_no_checkpoint_and_truncated(cli, tmp_path):
    app = '''\
from oloproof import current_case, tool

@tool
def refund(order_id):
    return {"ok": True}

def run(case):
    if case.input.get("checkpoint"):
        current_case().checkpoint(state={"mark": 1})
    refund("o1")
    current_case().finish("success", truncated=case.input.get("truncated", False))
    return {}
'''
    write(tmp_path / "app.py", app)
    # this system has no escalate tool: the configuration may not name one (SPEC §18.1)
    write(tmp_path / "oloproof.yaml", CONFIG.replace("app:Desk", "app:run").replace(", environment_state/v1", "")
          .replace(", escalate_tools: [escalate]", ""))
    write(tmp_path / "cases.jsonl", '{"id": "plain", "input": {}}\n'
                                    '{"id": "marked", "input": {"checkpoint": true}}\n')
    data = run(cli, tmp_path)
    v = verdicts(data)
    assert v["plain"] == {"verdict": "missing", "reason": "no_checkpoint"}
    assert v["marked"] == {"verdict": "pass"}  # a stateless system: success is recovery


def test_a_hand_written_replay(cli, tmp_path):
    app = '''\
from oloproof import AgentCheckpoint, AgentStep, AgentTrajectory, Replayable, current_case

SEEN = []

class Agent(Replayable):
    def __call__(self, case):
        steps = (AgentStep(1, "tool_call", tool_name="refund", arguments={"id": 1}),
                 AgentStep(2, "tool_result", tool_name="refund", result={"ok": True}))
        current_case().agent_trajectory(AgentTrajectory(steps, "success",
                                        checkpoints=(AgentCheckpoint(1, None, id="before-refund"),)))
        return {"answer": "ok"}

    def replay(self, trajectory, *, checkpoint, change):
        SEEN.append((checkpoint.id, checkpoint.step_index, None if change is None else
                     (change.step_index, change.tool_name, change.result)))
        result = {"ok": True} if change is None else change.result
        steps = (AgentStep(1, "tool_call", tool_name="refund", arguments={"id": 1}),
                 AgentStep(2, "tool_result", tool_name="refund", result=result))
        ok = change is None
        extra = () if ok else (AgentStep(3, "tool_call", tool_name="escalate", arguments={}),
                               AgentStep(4, "tool_result", tool_name="escalate", result={}))
        current_case().agent_trajectory(AgentTrajectory(steps + extra, "success"))
        with open("seen.json", "w") as fh:
            import json
            json.dump(SEEN, fh)
        return {"answer": "ok"}
'''
    write(tmp_path / "app.py", app)
    write(tmp_path / "oloproof.yaml", CONFIG.replace("app:Desk", "app:Agent").replace(", environment_state/v1", ""))
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}}\n')
    data = run(cli, tmp_path)
    assert verdicts(data)["a"] == {"verdict": "pass"}
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == [["before-refund", 1, None],
                    ["before-refund", 1, [1, "refund", {"error": {"type": "ToolError", "message": "refund failed"}}]]]


def test_a_hand_built_trajectory_without_replay_cannot_be_faulted(cli, tmp_path):
    app = '''\
from oloproof import AgentCheckpoint, AgentStep, AgentTrajectory, current_case

def run(case):
    steps = (AgentStep(1, "tool_call", tool_name="refund", arguments={}),
             AgentStep(2, "tool_result", tool_name="refund", result={"ok": True}))
    current_case().agent_trajectory(AgentTrajectory(steps, "success", checkpoints=(AgentCheckpoint(1, None),)))
    return {}
'''
    write(tmp_path / "app.py", app)
    write(tmp_path / "oloproof.yaml", CONFIG.replace("app:Desk", "app:run").replace(", environment_state/v1", ""))
    write(tmp_path / "cases.jsonl", '{"id": "a", "input": {}}\n')
    data = run(cli, tmp_path)
    assert verdicts(data)["a"] == {"verdict": "missing", "reason": "replay_error"}


def test_a_tool_that_raised_raises_again_from_the_tape():
    from oloproof import Case, tool
    from oloproof.events import StepRecorded
    from oloproof.replay.tape import ReplayedToolError, TapeRecorder
    from oloproof.system import _CURRENT

    calls = []

    @tool
    def flaky(x):
        calls.append(x)
        return x

    tape = [StepRecorded(1, "tool_call", "flaky", {"x": 1}),
            StepRecorded(2, "tool_result", "flaky", None, {"error": {"type": "IOError", "message": "disk"}},
                         raised=True)]
    rec = TapeRecorder(Case("c", {}), tape, resume_at=3, change=None)
    token = _CURRENT.set(rec)
    try:
        with pytest.raises(ReplayedToolError, match="IOError: disk"):
            flaky(1)
        assert flaky(2) == 2  # after the checkpoint: live
    finally:
        _CURRENT.reset(token)
    assert calls == [2]
    assert rec.diverged is None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    p = make(tmp_path_factory.mktemp("replay-command"), ["ignores", "recovers", "never_refunds"])
    r = run_in(p, "run", "--json", "r.json")
    assert r.exit_code == 0, r.output
    return p


class TestReplayCommand:
    @pytest.fixture
    def ran(self, recorded, tmp_path):
        """The three cases recorded once for the class: each test replays a copy of the log."""
        return copy_recorded(recorded, tmp_path / "desk")

    def events(self, p):
        return sqlite3.connect(p / ".oloproof" / "log.db").execute("SELECT COUNT(*) FROM events").fetchone()[0]

    def test_replay_prints_and_writes_json(self, cli, ran):
        r = cli("replay", "--fault", "refund:timeout", "--json", "rep.json", cwd=ran)
        assert r.exit_code == 0, r.output
        data = json.loads((ran / "rep.json").read_text())
        assert data["executed"] == 2 and data["cached"] == 2  # controls cached, two new fault replays
        by = {c["case_id"]: c for c in data["cases"]}
        assert by["ignores"]["verdict"] == "fail" and by["ignores"]["control"]["faithful"] is True
        assert by["ignores"]["checkpoint"] == {"step_index": 4, "id": None}
        assert any("TimeoutError" in line for line in by["ignores"]["after_fault"])
        assert by["recovers"]["verdict"] == "pass"
        assert by["never_refunds"] == {"case_id": "never_refunds", "verdict": "excluded", "reason": "call_not_made"}
        assert data["summary"] == {"criterion": "recovers_from_timeout_at_refund", "passed": 1, "observed": 2,
                                   "missing": 0, "excluded": 1}
        again = cli("replay", "--fault", "refund:timeout", "--case", "ignores", "--json", "rep2.json", cwd=ran)
        assert json.loads((ran / "rep2.json").read_text())["executed"] == 0
        assert "faithful" in again.output

    @pytest.mark.parametrize("args,needle", [
        (["--fault", "refund:slow"], "unknown kind 'slow'"),
        (["--fault", "refund"], "expected TOOL:KIND"),
        (["--fault", "refnd:error"], "did you mean 'refund'"),
        (["--fault", "refund:error", "--run", "nope"], "no run 'nope'"),
        (["--fault", "refund:error", "--case", "nope"], "has no case 'nope'"),
        (["--fault", "refund:error", "--fault", "refund:timeout"], "one fault at a time"),
    ])
    def test_bad_input_exit_2_nothing_written(self, cli, ran, args, needle):
        before = self.events(ran)
        r = cli("replay", *args, cwd=ran)
        assert r.exit_code == 2 and needle in r.output, r.output
        assert self.events(ran) == before

    def test_version_change_needs_a_flag(self, cli, ran):
        make(ran, ["ignores", "recovers", "never_refunds"], version="2")
        before = self.events(ran)
        r = cli("replay", "--fault", "refund:error", cwd=ran)
        assert r.exit_code == 2 and "version '1'" in r.output and "--allow-version-change" in r.output
        assert self.events(ran) == before
        r = cli("replay", "--fault", "refund:error", "--allow-version-change", "--json", "v2.json", cwd=ran)
        assert r.exit_code == 0
        assert json.loads((ran / "v2.json").read_text())["executed"] == 4

    def test_show_lists_the_replays(self, cli, ran):
        r = cli("show", "latest", "ignores", cwd=ran)
        assert "replays" in r.output and "none (control)" in r.output and "refund at step 4: error" in r.output
        assert "faithful" in r.output


def test_stateful_example_fails_recovery(cli, tmp_path):
    from tests.conftest import copy_example

    target = tmp_path / "desk"
    copy_example("stateful_agent", target)
    r = cli("run", "--json", "r.json", cwd=target)
    data = json.loads((target / "r.json").read_text())
    crit = {c["criterion"]: c for c in data["criteria"]}
    rec = crit["recovers_from_error_at_issue_refund"]
    assert rec["missing"] == 0 and rec["passed"] / rec["observed"] < 0.5
    eligible = [c for c in data["cases"] if "~" not in c["case_id"] and
                c["verdicts"]["recovers_from_error_at_issue_refund"]["verdict"] != "excluded"]
    assert len(eligible) == 12  # the twelve refunds of the source cases, all failed
    assert all(c["verdicts"]["recovers_from_error_at_issue_refund"]["verdict"] == "fail" for c in eligible)
    rules = {r["name"]: r for r in data["gate"]["rules"]}
    assert rules["recovers"]["status"] == "FAIL"
    assert r.exit_code == 1
    c1 = next(c for c in data["cases"] if c["case_id"] == "ord-001")
    assert c1["verdicts"]["recovers_from_error_at_issue_refund"] == \
        {"verdict": "fail", "reason": "state_contradicts_claim"}

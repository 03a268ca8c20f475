"""Every tool the configuration or the cases name is one the system declares (SPEC §18.1):
checked once the system is loaded, before any case runs — exit 2 with a did-you-mean, nothing
written. A system that declares no tool cannot be checked: the run warns about each named
tool no case called."""

import json
import sqlite3

import pytest

from tests.conftest import write

# a shipping desk: two @tool methods, one renamed with @tool(name=...)
APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="ship", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def ship_order(self, order_id):
        self.state.setdefault("shipped", []).append(order_id)
        return {"shipped": order_id}

    @tool(name="notify_customer")
    def send(self, text):
        return {"sent": text}

    def __call__(self, case):
        got = self.ship_order(case.id)
        if "error" in got:
            self.send("shipping failed")
        current_case().finish("success")
        return {"got": got}
'''

# the same calls, recorded by hand: the system declares no tool
HAND_BUILT = '''\
from oloproof import AgentStep, AgentTrajectory, current_case, system


@system(name="ship", version="1", records=("agent_trajectory/v1",))
def run(case):
    steps = []
    for name in ("ship_order", "notify_customer"):
        steps.append(AgentStep(index=len(steps) + 1, kind="tool_call", tool_name=name, arguments={},
                               agent="desk"))
        steps.append(AgentStep(index=len(steps) + 1, kind="tool_result", tool_name=name, result={"ok": True},
                               agent="desk"))
    current_case().agent_trajectory(AgentTrajectory(steps=tuple(steps), terminal_status="success"))
    return {}
'''

HEAD = '''\
system:
  name: ship
  version: "1"
  callable: app:{callable}
  records: [{records}]
cases: cases.jsonl
evaluators:
'''

GOOD = [
    "{type: fault_recovery, tool: ship_order, fault: error, escalate_tools: [notify_customer]}",
    "{type: agent_tool_called, tool_name: notify_customer}",
    "{type: agent_tool_permissions, permissions: {desk: [ship_order, notify_customer]}}",
]


def config(evaluators, callable="Desk"):
    records = "agent_trajectory/v1, environment_state/v1" if callable == "Desk" else "agent_trajectory/v1"
    return HEAD.format(callable=callable, records=records) + "".join(f"  - {e}\n" for e in evaluators)


def case(cid, **expected):
    return {"id": cid, "input": {}, "initial_state": {}, "expected": expected}


CASES = [case("a", tools=["ship_order", "notify_customer"]), case("b")]


def project(tmp_path, evaluators=GOOD, cases=CASES, app=APP, callable="Desk"):
    p = tmp_path / "p"
    write(p / "app.py", app)
    write(p / "oloproof.yaml", config(evaluators, callable))
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return p


def events(db):
    """Events in the log (0 when the run never started: no file, no table or no row)."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(db)
    try:
        if not conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name='events'").fetchone()[0]:
            return 0
        return conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    finally:
        conn.close()


def flat(text):
    return " ".join(text.split())


# ---- a typo is exit 2 before anything runs --------------------------------------------

TYPOS = [
    # (evaluator, oloproof.yaml line, the message's location, field, did you mean)
    ("{type: fault_recovery, tool: ship_ordr, fault: error}", 9,
     "evaluators[1] (recovers_from_error_at_ship_ordr)", "'tool'", "ship_order"),
    ("{type: fault_recovery, tool: ship_order, fault: error, escalate_tools: [notify_customr]}", 9,
     "evaluators[1] (recovers_from_error_at_ship_order)", "'escalate_tools[0]'", "notify_customer"),
    ("{type: agent_tool_called, tool_name: notfy_customer}", 9,
     "evaluators[1] (agent_tool_notfy_customer_called)", "'tool_name'", "notify_customer"),
    ("{type: agent_tool_permissions, permissions: {desk: [ship_order, notify_custmer]}}", 9,
     "evaluators[1] (agent_tool_permissions)", "'permissions.desk[1]'", "notify_customer"),
]


@pytest.mark.parametrize("evaluator,line,label,field,meant", TYPOS)
def test_a_typo_in_the_configuration_is_a_located_error_before_any_case_runs(cli, tmp_path, evaluator, line,
                                                                             label, field, meant):
    p = project(tmp_path, evaluators=["{type: agent_tool_called, tool_name: ship_order}", evaluator])
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2, r.output
    text = flat(r.output)
    assert f"oloproof.yaml:{line}: {label}: field {field}: the system has no tool" in text, r.output
    assert f"did you mean '{meant}'?" in text and "(its tools: notify_customer, ship_order)" in text, r.output
    assert events(p / "log.db") == 0  # no run started


@pytest.mark.parametrize("expected,field,meant", [
    ({"tools": ["ship_order", "notify_custmer"]}, "'expected.tools[1]'", "notify_customer"),
    ({"tool_calls": [{"tool": "ship_ordr", "arguments": {}}]}, "'expected.tool_calls[0].tool'", "ship_order"),
])
def test_a_typo_in_a_cases_expected_is_a_located_error(cli, tmp_path, expected, field, meant):
    p = project(tmp_path, cases=[case("ok"), case("bad", **expected)])
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2, r.output
    text = flat(r.output)
    assert f"cases.jsonl:2: case 'bad': field {field}: the system has no tool" in text, r.output
    assert f"did you mean '{meant}'?" in text, r.output
    assert events(p / "log.db") == 0


def test_a_tools_function_name_is_not_its_name(cli, tmp_path):
    """``@tool(name="notify_customer") def send``: the tool is notify_customer, not send."""
    p = project(tmp_path, evaluators=["{type: agent_tool_called, tool_name: send}"])
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2 and "field 'tool_name': the system has no tool 'send'" in flat(r.output), r.output
    assert events(p / "log.db") == 0


def test_a_prefix_suites_evaluators_are_located_under_prefix(tmp_path):
    from oloproof.app.prefix import load_prefix_project
    from oloproof.app.project import check_tool_names, load_system
    from oloproof.errors import ConfigError

    p = project(tmp_path)
    with open(p / "oloproof.yaml", "a") as f:
        f.write("prefix:\n  evaluators:\n    - {type: agent_tool_called, tool_name: ship_ordr}\n")
    prefix = load_prefix_project(p)
    with pytest.raises(ConfigError) as e:
        check_tool_names(prefix, None, load_system(prefix))
    assert "oloproof.yaml:13: prefix.evaluators[0] (agent_tool_ship_ordr_called): field 'tool_name'" in str(e.value)
    assert "did you mean 'ship_order'?" in str(e.value)


def test_replay_checks_the_configurations_tools_too(cli, tmp_path):
    p = project(tmp_path)
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 0, r.output
    before = events(p / "log.db")
    write(p / "oloproof.yaml", config(["{type: fault_recovery, tool: ship_order, fault: error, "
                                       "escalate_tools: [notify_custome]}"]))
    r = cli("replay", "--fault", "ship_order:error", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2, r.output
    assert "field 'escalate_tools[0]': the system has no tool 'notify_custome'; did you mean " \
           "'notify_customer'?" in flat(r.output), r.output
    assert events(p / "log.db") == before  # no replay ran


# ---- the right names ------------------------------------------------------------------

def test_the_right_names_run(cli, tmp_path):
    cases = [*CASES, case("c", tool_calls=[{"tool": "ship_order", "arguments": {}}])]
    p = project(tmp_path, cases=cases)
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 0, r.output
    assert "warning:" not in r.output and "no tool" not in r.output, r.output
    assert events(p / "log.db") > 0
    assert "recovers_from_error_at_ship_order" in r.output and "agent_tool_notify_customer_called" in r.output


# ---- a system that declares no tool ---------------------------------------------------

@pytest.mark.parametrize("executor,first,short", [
    ((), "{type: fault_recovery, tool: ship_ordr, fault: error}", "fault_recovery.tool"),
    # no fault replays: each case is judged in the worker that ran it (its calls read from its events)
    (("--workers", "1"), "{type: agent_tool_called, tool_name: ship_ordr}", "agent_tool_called.tool_name"),
])
def test_a_system_that_declares_no_tool_runs_and_warns_of_names_never_called(cli, tmp_path, executor, first,
                                                                             short):
    evaluators = [first,
                  "{type: agent_tool_called, tool_name: notify_customer}",
                  "{type: agent_tool_permissions, permissions: {desk: [ship_order, notify_customer, refnd]}}"]
    cases = [case("a", tools=["ship_order", "notify_customer"]), case("b", tools=["ship_order", "escalte"])]
    p = project(tmp_path, evaluators=evaluators, cases=cases, app=HAND_BUILT, callable="run")
    r = cli("run", "--db", str(p / "log.db"), *executor, cwd=p)
    assert r.exit_code == 0, r.output
    assert events(p / "log.db") > 0
    text = flat(r.output)
    assert "warning: " in text and f"oloproof.yaml:8 names tool 'ship_ordr' ({short}), which no case " \
           "called and the system does not declare; a typo?" in text, r.output
    assert "names tool 'refnd' (agent_tool_permissions.permissions.desk)" in text, r.output
    assert "cases.jsonl:2 names tool 'escalte' (case 'b', expected.tools[1])" in text, r.output
    # the names some case called are not warned about
    assert "'notify_customer' (" not in text and "'ship_order' (" not in text, r.output
    assert text.count("a typo?") == 3, r.output

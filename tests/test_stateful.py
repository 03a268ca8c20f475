"""Stateful systems: reset before every case, snapshot after, no case sees another's state."""

import json

import pytest

from oloproof.app.project import load_project
from oloproof.errors import ConfigError
from tests.conftest import copy_example, write

CONFIG = """\
system:
  name: box
  version: "1"
  callable: app:Box
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: state_matches, mode: subset}
  - {type: state_unchanged, criterion: b_untouched, paths: [b]}
"""

APP = """\
from oloproof import Stateful, current_case, tool


class Box(Stateful):
    def reset(self, state):
        if state.get("explode_on_reset"):
            raise KeyError("explode_on_reset")
        self.state = state

    def snapshot(self):
        if self.state.get("bad_snapshot"):
            return {"when": object()}
        return self.state

    @tool
    def put(self, key, value):
        self.state[key] = value
        return {"ok": True}

    def __call__(self, case):
        seen = dict(self.state)          # what this case found when it started
        for key, value in case.input.get("writes", {}).items():
            self.put(key, value)
        if case.input.get("raise_midway"):
            raise RuntimeError("agent crashed after writing")
        current_case().finish("success")
        return {"seen": seen}
"""


def project(tmp_path, cases, app=APP, config=CONFIG):
    write(tmp_path / "oloproof.yaml", config)
    write(tmp_path / "app.py", app)
    write(tmp_path / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return tmp_path


def run_json(cli, path):
    r = cli("run", "--json", "r.json", cwd=path)
    assert r.exit_code in (0, 1), r.output
    return r, json.loads((path / "r.json").read_text())


def test_no_case_sees_another_cases_state_even_after_a_crash(cli, tmp_path):
    cases = [
        {"id": "a", "input": {"writes": {"x": 1}}, "initial_state": {"b": 0},
         "expected": {"state": {"x": 1}}},
        {"id": "b", "input": {"writes": {"y": 2}, "raise_midway": True}, "initial_state": {"b": 0}},
        {"id": "c", "input": {"writes": {"z": 3}}, "initial_state": {"b": 0},
         "expected": {"state": {"z": 3, "x": 1}}},
        {"id": "d", "input": {}, "initial_state": {"b": 5}},
    ]
    p = project(tmp_path, cases)
    _, data = run_json(cli, p)
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db")
    run_id = latest_run_id(store)
    views = {c: case_view(store, run_id, c) for c in "abcd"}
    store.close()
    # each case started from its own initial_state, whatever the previous case did
    assert views["a"].output == {"seen": {"b": 0}}
    assert views["c"].output == {"seen": {"b": 0}}
    assert views["d"].output == {"seen": {"b": 5}}
    # the crashed case is errored, and its state (what it changed before crashing) recorded
    assert views["b"].error == "RuntimeError: agent crashed after writing"
    assert views["b"].state == {"b": 0, "y": 2}
    assert views["c"].state == {"b": 0, "z": 3}
    verdicts = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    assert verdicts["a"]["state_matches"] == {"verdict": "pass"}
    assert verdicts["b"]["state_matches"] == {"verdict": "missing", "reason": "system_error"}
    assert verdicts["c"]["state_matches"] == {"verdict": "fail"}  # x=1 leaked? no: it is absent
    paths = {c["case_id"]: c.get("paths") for c in data["cases"]}
    assert {"criterion": "state_matches", "path": "x", "verdict": "fail", "expected": 1,
            "note": "not in the recorded state"} in paths["c"]
    assert {"criterion": "b_untouched", "path": "b", "verdict": "pass", "initial": 0, "expected": 0,
            "recorded": 0} in paths["a"]


def test_reset_and_snapshot_failures_are_errored_cases(cli, tmp_path):
    cases = [
        {"id": "ok1", "input": {"writes": {"x": 1}}, "initial_state": {"b": 0}, "expected": {"state": {"x": 1}}},
        {"id": "boom", "input": {}, "initial_state": {"explode_on_reset": True}},
        {"id": "weird", "input": {}, "initial_state": {"bad_snapshot": True, "b": 1}},
        {"id": "ok2", "input": {"writes": {"x": 2}}, "initial_state": {"b": 0}, "expected": {"state": {"x": 2}}},
    ]
    p = project(tmp_path, cases)
    r, data = run_json(cli, p)
    assert "case 'boom': reset() raised KeyError" in r.output
    assert "case 'weird': snapshot() returned something that is not JSON-serialisable" in r.output
    v = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    assert v["boom"]["state_matches"] == {"verdict": "missing", "reason": "reset_error"}
    assert v["boom"]["b_untouched"] == {"verdict": "missing", "reason": "reset_error"}
    assert v["weird"]["b_untouched"] == {"verdict": "missing", "reason": "snapshot_error"}
    assert v["ok1"]["state_matches"] == v["ok2"]["state_matches"] == {"verdict": "pass"}
    crit = {c["criterion"]: c for c in data["criteria"]}
    assert crit["b_untouched"]["missing"] == 2 and crit["b_untouched"]["passed"] == 2


def test_a_system_that_records_no_state_is_missing(cli, tmp_path):
    app = ("from oloproof import current_case\n\ndef run(case):\n    current_case().finish('success')\n"
           "    return {}\n")
    p = project(tmp_path, [{"id": "a", "input": {}, "initial_state": {"b": 0}, "expected": {"state": {"b": 0}}}],
                app=app, config=CONFIG.replace("app:Box", "app:run"))
    _, data = run_json(cli, p)
    assert data["cases"][0]["verdicts"]["state_matches"] == {"verdict": "missing", "reason": "no_state_recorded"}
    assert data["cases"][0]["verdicts"]["b_untouched"] == {"verdict": "missing", "reason": "no_state_recorded"}


def test_protocol_only_stateful_object(cli, tmp_path):
    app = """\
class Sandbox:
    def reset(self, state):
        self.state = state
    def snapshot(self):
        return self.state
    def run(self, case):
        self.state["done"] = True
        return {}

box = Sandbox()
"""
    p = project(tmp_path, [{"id": "a", "input": {}, "initial_state": {"b": 0},
                            "expected": {"state": {"done": True}}}],
                app=app, config=CONFIG.replace("app:Box", "app:box"))
    _, data = run_json(cli, p)
    assert data["cases"][0]["verdicts"]["state_matches"] == {"verdict": "pass"}


def test_state_evaluators_need_the_record(tmp_path):
    p = project(tmp_path, [{"id": "a", "input": {}}],
                config=CONFIG.replace(", environment_state/v1", ""))
    with pytest.raises(ConfigError, match="oloproof.yaml:8.*needs the system to record environment_state/v1"):
        load_project(p)


@pytest.mark.parametrize("edit,needle", [
    ("{type: state_matches, mode: subset}", "{type: state_matches, mode: subset, tolerance: -0.1}"),
    ("paths: [b]", "paths: [1]"),
    ("paths: [b]", "paths: ['b..c']"),
])
def test_bad_state_config_exit_2(cli, tmp_path, edit, needle):
    p = project(tmp_path, [{"id": "a", "input": {}}], config=CONFIG.replace(edit, needle))
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "oloproof.yaml:" in r.output
    assert not (p / ".oloproof").exists()


def test_fingerprint_is_stored_and_covers_initial_state(cli, tmp_path):
    cases = [{"id": "a", "input": {"writes": {"x": 1}}, "initial_state": {"b": 0}},
             {"id": "b", "input": {"writes": {"x": 1}}, "initial_state": {"b": 1}}]
    p = project(tmp_path, cases)
    run_json(cli, p)
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.events import case_fingerprint
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db")
    run_id = latest_run_id(store)
    a, b = case_view(store, run_id, "a"), case_view(store, run_id, "b")
    rows = {r["case_id"]: r["fingerprint"] for r in store.projection("cases")}
    store.close()
    assert a.fingerprint == case_fingerprint({"writes": {"x": 1}}, {"b": 0}, {}) == rows["a"]
    assert a.fingerprint != b.fingerprint
    assert a.state == {"b": 0, "x": 1}  # the state after is recorded, and is in no key


def test_stateful_example(cli, tmp_path):
    target = tmp_path / "desk"
    copy_example("stateful_agent", target)
    r, data = run_json(cli, target)
    rules = {rule["name"]: rule["status"] for rule in data["gate"]["rules"]}
    assert rules["world-matches"] == rules["no-collateral-change"] == "PASS"
    sources = [c for c in data["cases"] if "~" not in c["case_id"]]
    assert len(sources) >= 20
    assert all(c["verdicts"]["state_matches"] == {"verdict": "pass"} for c in sources)
    assert all(c["verdicts"]["other_order_untouched"] == {"verdict": "pass"} for c in sources)
    panel = cli("show", "latest", "ord-001")
    line = next(row for row in panel.output.splitlines() if "orders.ord-001.status" in row)
    assert [c.strip() for c in line.strip().strip("│").split("│")] == [
        "state_matches", "orders.ord-001.status", "delivered", "refunded", "refunded", "pass"]
    assert "orders.ord-999" in panel.output and "issue_refund" in panel.output

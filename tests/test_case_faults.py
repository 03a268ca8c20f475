"""Faults declared per case (SPEC §13a): ``"fault": {"tool", "kind", "call"}`` applied through
the adapter (``@tool``) during the live run, recorded, fingerprinted, replayed faithfully."""

import hashlib
import json
import sqlite3

import msgspec
import pytest

from oloproof.config.cases import CASE_FAULT_KINDS
from oloproof.events import case_fingerprint
from oloproof.replay.faults import ALL_FAULT_KINDS, FAULT_KINDS, fault_result
from oloproof.system import ALL_FAULT_KINDS as SYSTEM_KINDS
from tests.conftest import write
from tests.test_async import streams

# A payment desk: the sandbox holds a ledger, the fake payment adapter `charge` records every
# payment in it (the effect), `lookup` reads. The agent reports what each call handed back.
APP = '''\
from oloproof import Stateful, current_case, system, tool


@system(name="pay", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order_id):
        return {"order_id": order_id, "amount": 10}

    @tool
    def charge(self, key, amount):
        self.state.setdefault("ledger", []).append({"key": key, "amount": amount})
        return {"charged": amount, "key": key}

    @tool
    def escalate(self, reason):
        self.state.setdefault("tickets", []).append(reason)
        return {"ticket": len(self.state["tickets"])}

    def __call__(self, case):
        order = self.lookup(case.id)
        got = [self.charge(f"{case.id}-{i}", order["amount"]) for i in range(case.input.get("charges", 1))]
        failed = [g for g in got if not isinstance(g, dict) or "error" in g]
        if failed and case.input.get("escalates"):
            self.escalate("charge failed")
        current_case().finish("failure" if failed else "success")
        return {"got": got}
'''

# the same agent, every tool and the system `async def`
ASYNC_APP = (APP.replace("    def lookup", "    async def lookup").replace("    def charge", "    async def charge")
             .replace("    def escalate", "    async def escalate")
             .replace("    def __call__", "    async def __call__")
             .replace("order = self.lookup", "order = await self.lookup")
             .replace('got = [self.charge(f"{case.id}-{i}", order["amount"]) for i',
                      'got = [await self.charge(f"{case.id}-{i}", order["amount"]) for i')
             .replace('self.escalate("charge failed")', 'await self.escalate("charge failed")'))

CONFIG = '''\
system:
  name: pay
  version: "1"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1]
cases: cases.jsonl
evaluators:
  - {type: fault_recovery, tool: lookup, fault: error, escalate_tools: [escalate]}
'''

TIMEOUT = {"error": {"type": "TimeoutError", "message": "charge timed out"}}


def case(cid, fault=None, **input):
    line = {"id": cid, "input": input, "initial_state": {"ledger": []}}
    if fault is not None:
        line["fault"] = fault
    return line


CASES = [
    case("plain"),
    case("error", {"tool": "charge", "kind": "error"}),
    case("timeout", {"tool": "charge", "kind": "timeout"}),
    case("malformed", {"tool": "charge", "kind": "malformed"}),
    case("denied", {"tool": "charge", "kind": "denied", "scope": "payments:write"}),
    case("denied_default", {"tool": "charge", "kind": "denied"}),
    case("after_effect", {"tool": "charge", "kind": "timeout_after_effect", "call": 1}),
    case("second", {"tool": "charge", "kind": "error", "call": 2}, charges=3),
    case("never", {"tool": "charge", "kind": "timeout_after_effect", "call": 2}),
    case("escalates", {"tool": "charge", "kind": "timeout_after_effect"}, escalates=True),
]


def project(tmp_path, name="p", app=APP, cases=CASES, config=CONFIG):
    p = tmp_path / name
    write(p / "app.py", app)
    write(p / "oloproof.yaml", config)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return p


def run(cli, p, *args, db="log.db"):
    r = cli("run", "--db", str(p / db), *args, cwd=p)
    assert r.exit_code == 0, r.output
    return p / db


def case_views(db):
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(db)
    try:
        return {v.case_id: v for v in iter_case_views(store, latest_run_id(store))}
    finally:
        store.close()


def faulted_steps(view):
    return [s for s in view.trajectory.steps if s.fault is not None]


def plain(value):
    return msgspec.json.decode(msgspec.json.encode(value))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The suite run once (serially), its case views."""
    from click.testing import CliRunner

    from oloproof.cli.main import cli as group

    p = project(tmp_path_factory.mktemp("rec"))
    r = CliRunner().invoke(group, ["run", "--db", str(p / "log.db"), "--project", str(p)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return case_views(p / "log.db")


# ---- the kinds ---------------------------------------------------------------------------

def test_the_kinds_are_one_list_everywhere():
    assert SYSTEM_KINDS == ALL_FAULT_KINDS == CASE_FAULT_KINDS == \
        ("error", "timeout", "malformed", "timeout_after_effect", "denied")
    assert FAULT_KINDS == ("error", "timeout", "malformed")  # the fixed shapes of §7.1 stay
    assert fault_result("timeout_after_effect", "charge") == fault_result("timeout", "charge") == TIMEOUT
    assert fault_result("denied", "charge", "payments:write") == {"error": {
        "type": "PermissionDenied", "message": "charge: permission denied (requires scope payments:write)",
        "required_scope": "payments:write"}}
    assert fault_result("denied", "charge")["error"]["required_scope"] == "charge"


@pytest.mark.parametrize("cid,kind", [("error", "error"), ("timeout", "timeout"), ("malformed", "malformed"),
                                      ("denied", "denied"), ("denied_default", "denied")])
def test_faults_that_do_not_run_the_tool_leave_no_effect(recorded, cid, kind):
    v = recorded[cid]
    scope = "payments:write" if cid == "denied" else None
    expected = fault_result(kind, "charge", scope)
    assert v.error is None
    assert plain(v.state) == {"ledger": []}  # the payment never happened
    assert plain(v.output) == {"got": [expected]}  # the caller got the fault's shape ...
    [step] = faulted_steps(v)  # ... and the record shows exactly that, marked with the kind
    assert step.kind == "tool_result" and step.tool_name == "charge" and step.fault == kind
    assert plain(step.result) == expected and not step.raised
    assert v.started.fault == {"tool": "charge", "kind": kind, "call": 1, **({"scope": scope} if scope else {})}
    assert v.fault_fired is True
    assert v.trajectory.terminal_status == "failure"


def test_timeout_after_effect_lands_the_effect_and_the_caller_sees_a_timeout(recorded):
    v = recorded["after_effect"]
    assert plain(v.state) == {"ledger": [{"key": "after_effect-0", "amount": 10}]}  # the effect landed
    assert plain(v.output) == {"got": [TIMEOUT]}  # the caller never learnt it
    [step] = faulted_steps(v)
    assert step.fault == "timeout_after_effect" and plain(step.result) == TIMEOUT
    assert v.fault_fired is True


def test_call_2_faults_only_the_second_call(recorded):
    v = recorded["second"]
    assert plain(v.output)["got"] == [{"charged": 10, "key": "second-0"}, fault_result("error", "charge"),
                                      {"charged": 10, "key": "second-2"}]
    assert [e["key"] for e in plain(v.state)["ledger"]] == ["second-0", "second-2"]
    [step] = faulted_steps(v)
    results = [s for s in v.trajectory.steps if s.kind == "tool_result" and s.tool_name == "charge"]
    assert results[1] is step


def test_a_fault_whose_call_never_comes_is_recorded_as_not_fired(recorded):
    v = recorded["never"]
    assert v.error is None and v.trajectory.terminal_status == "success"
    assert v.fault_fired is False and not faulted_steps(v)
    assert v.started.fault["call"] == 2
    assert recorded["plain"].fault_fired is None and recorded["plain"].started.fault is None


def test_the_system_never_sees_the_fault(tmp_path, cli):
    app = APP.replace("        order = self.lookup(case.id)\n",
                      "        assert not hasattr(case, 'fault'), 'the fault leaked'\n"
                      "        assert 'fault' not in case.input and 'fault' not in (case.initial_state or {})\n"
                      "        order = self.lookup(case.id)\n")
    db = run(cli, project(tmp_path, app=app, cases=CASES[:3]))
    views = case_views(db)
    assert len(views) == 3 and all(v.error is None for v in views.values())


# ---- the same events whatever runs them --------------------------------------------------

def case_streams(db):
    return {s: evs for s, evs in streams(db, replays_by_content=True).items() if s != "RUN"}


def test_sync_and_async_tools_record_identically(cli, tmp_path):
    sync_db = run(cli, project(tmp_path, "sync"))
    async_db = run(cli, project(tmp_path, "async", app=ASYNC_APP))
    a, b = case_streams(sync_db), case_streams(async_db)
    assert any(s.startswith("replay:") for s in a)
    assert a == b


@pytest.mark.parametrize("args", [["--concurrency", "4"], ["--workers", "2"]])
def test_every_executor_records_identical_events(cli, tmp_path, args):
    p = project(tmp_path)
    serial = case_streams(run(cli, p, db="serial.db"))
    other = case_streams(run(cli, p, *args, db="other.db"))
    assert serial == other  # every case and replay event, byte for byte
    assert any('"fault":"timeout_after_effect"' in e for evs in serial.values() for e in evs)


@pytest.mark.slow
def test_dask_records_identical_events(cli, tmp_path):
    pytest.importorskip("distributed")
    p = project(tmp_path, cases=CASES[5:8])
    serial = case_streams(run(cli, p, db="serial.db"))
    dask = case_streams(run(cli, p, "--executor", "dask", "--workers", "2", db="dask.db"))
    assert serial == dask


# ---- the fingerprint ----------------------------------------------------------------------

def test_fingerprints_without_a_fault_are_unchanged_and_a_fault_changes_them(tmp_path):
    from oloproof.config.cases import CaseFile

    def old(inp, state, expected):  # the formula of SPEC §3, as it always was
        return hashlib.sha256(json.dumps({"expected": expected, "initial_state": state, "input": inp},
                                         sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    lines = [case("a", x=1), case("b", {"tool": "charge", "kind": "error"}, x=1),
             case("c", {"tool": "charge", "kind": "error", "call": 1}, x=1),
             case("d", {"tool": "charge", "kind": "error", "call": 2}, x=1)]
    path = write(tmp_path / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in lines))
    got = {c.id: c for c in CaseFile(path)}
    assert got["a"].fingerprint == old({"x": 1}, {"ledger": []}, {}) == \
        case_fingerprint({"x": 1}, {"ledger": []}, {}) == case_fingerprint({"x": 1}, {"ledger": []}, {}, None)
    assert got["a"].fault is None
    assert got["b"].fingerprint != got["a"].fingerprint
    assert got["b"].fingerprint == got["c"].fingerprint  # call defaults to 1: the same question
    assert got["b"].fault == got["c"].fault == {"tool": "charge", "kind": "error", "call": 1}
    assert got["d"].fingerprint not in (got["a"].fingerprint, got["b"].fingerprint)


# ---- located case-file errors ---------------------------------------------------------------

@pytest.mark.parametrize("fault,field,needle", [
    ([{"tool": "charge", "kind": "error"}, {"tool": "lookup", "kind": "timeout"}], "'fault'",
     "one primary fault per trial"),
    ("charge:error", "'fault'", "must be an object"),
    ({"tool": "charge", "kind": "timout"}, "'fault.kind'", "did you mean 'timeout'"),
    ({"tool": "charge"}, "'fault.kind'", "it is missing"),
    ({"tool": "charge", "kind": "error", "call": 0}, "'fault.call'", "whole number >= 1"),
    ({"tool": "charge", "kind": "error", "call": True}, "'fault.call'", "got true"),
    ({"tool": "charge", "kind": "error", "call": "2"}, "'fault.call'", "got '2'"),
    ({"tool": "charge", "kind": "error", "call": 1.5}, "'fault.call'", "got 1.5"),
    ({"tool": 3, "kind": "error"}, "'fault.tool'", "must name the tool"),
    ({"tool": "charge", "kind": "error", "calls": 2}, "'fault.calls'", "did you mean 'call'"),
    ({"tool": "charge", "kind": "error", "scope": "x"}, "'fault.scope'", "only a 'denied' fault"),
    ({"tool": "charge", "kind": "denied", "scope": ""}, "'fault.scope'", "non-empty string"),
    ({"tool": "chrage", "kind": "error"}, "'fault.tool'", "did you mean 'charge'"),
])
def test_bad_faults_are_located_errors_before_anything_runs(cli, tmp_path, fault, field, needle):
    cases = [case("ok"), case("bad", fault)]
    p = project(tmp_path, cases=cases)
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())
    assert "cases.jsonl:2: case 'bad': field " + field in text and needle in text, r.output
    assert not (p / "log.db").exists() or not sqlite3.connect(p / "log.db").execute(
        "SELECT COUNT(*) FROM sqlite_master WHERE name='events'").fetchone()[0] or \
        sqlite3.connect(p / "log.db").execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0


def test_a_second_fault_key_is_refused(cli, tmp_path):
    p = project(tmp_path, cases=[case("ok")])
    (p / "cases.jsonl").write_text('{"id": "x", "input": {}, "fault": {"tool": "charge", "kind": "error"}, '
                                   '"fault": {"tool": "lookup", "kind": "error"}}\n')
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2 and "cases.jsonl:1: case 'x': duplicate key 'fault'" in r.output, r.output
    (p / "cases.jsonl").write_text('{"id": "x", "input": {}, "faults": [{"tool": "charge", "kind": "error"}]}\n')
    r = cli("run", "--db", str(p / "log.db"), cwd=p)
    assert r.exit_code == 2 and "field 'faults': unknown field; did you mean 'fault'" in r.output, r.output


def test_a_tool_of_another_class_of_the_project_is_a_known_tool(cli, tmp_path):
    """Tools declared on an adapter class beside the agent count as declared."""
    app = APP + '''

class Adapter:
    @tool
    def refund(self, key):
        return {"refunded": key}
'''
    p = project(tmp_path, app=app, cases=[case("r", {"tool": "refund", "kind": "error"})])
    db = run(cli, p)
    assert case_views(db)["r"].fault_fired is False  # declared, never called


# ---- replays --------------------------------------------------------------------------------

def replay(cli, p, spec, db, *extra):
    r = cli("replay", "--fault", spec, "--db", str(db), "--json", "rep.json", *extra, cwd=p)
    assert r.exit_code in (0, 1), r.output
    return {c["case_id"]: c for c in json.loads((p / "rep.json").read_text())["cases"]}


def fault_replay_view(db, case_id, kind):
    from oloproof.events import decode_stream
    from oloproof.store import SQLiteStore
    from oloproof.views import fold_replay

    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT stream FROM events WHERE stream LIKE 'replay/%' GROUP BY stream").fetchall()
    conn.close()
    store = SQLiteStore(db)
    try:
        for (stream,) in rows:
            view = fold_replay(decode_stream(stream, [e.payload for e in store.read_stream(stream)]), stream)
            if view.started.case_id == case_id and view.kind == "fault" and \
                    (view.started.change or {}).get("fault") == kind:
                return view
    finally:
        store.close()
    raise AssertionError(f"no {kind} fault replay of {case_id}")


def test_replay_fault_timeout_after_effect_runs_the_tool_then_times_out(cli, tmp_path):
    p = project(tmp_path, cases=[case("plain"), case("escalates", escalates=True)])
    db = run(cli, p)
    by = replay(cli, p, "charge:timeout_after_effect", db, "--escalate", "escalate")
    assert by["plain"]["control"]["faithful"] is True
    assert any("TimeoutError" in line and "(injected)" in line for line in by["plain"]["after_fault"])
    assert by["plain"]["verdict"] == "fail" and by["escalates"]["verdict"] == "pass"
    v = fault_replay_view(db, "plain", "timeout_after_effect")
    assert plain(v.state) == {"ledger": [{"key": "plain-0", "amount": 10}]}  # the tool ran: the effect landed
    assert plain(v.output) == {"got": [TIMEOUT]}  # and the agent saw a timeout
    results = [s for s in v.trajectory.steps if s.kind == "tool_result" and s.tool_name == "charge"]
    assert plain(results[0].result) == TIMEOUT


def test_replay_fault_denied_does_not_run_the_tool(cli, tmp_path):
    p = project(tmp_path, cases=[case("plain")])
    db = run(cli, p)
    by = replay(cli, p, "charge:denied", db)
    assert by["plain"]["control"]["faithful"] is True and by["plain"]["verdict"] == "fail"
    assert any("PermissionDenied" in line for line in by["plain"]["after_fault"])
    v = fault_replay_view(db, "plain", "denied")
    assert plain(v.state) == {"ledger": []}
    assert plain(v.output) == {"got": [fault_result("denied", "charge")]}


@pytest.mark.slow
def test_replay_accepts_every_kind_and_refuses_others(cli, tmp_path):
    p = project(tmp_path, cases=[case("plain")])
    db = run(cli, p)
    for kind in ALL_FAULT_KINDS:
        assert replay(cli, p, f"charge:{kind}", db)["plain"]["control"]["faithful"] is True
    r = cli("replay", "--fault", "charge:denyed", "--db", str(db), cwd=p)
    assert r.exit_code == 2 and "did you mean 'denied'" in r.output


@pytest.mark.parametrize("cid", ["error", "denied", "after_effect", "second", "never"])
@pytest.mark.parametrize("spec", ["lookup:error", "charge:malformed"])
def test_the_control_replay_of_a_faulted_case_is_faithful(cli, tmp_path, cid, spec):
    """From a checkpoint before the faulted call (lookup) or at it (charge): the control replay
    meets the declared fault again and reproduces the faulted recording, state included."""
    p = project(tmp_path, cases=[c for c in CASES if c["id"] == cid])
    db = run(cli, p)
    by = replay(cli, p, spec, db)
    assert by[cid]["control"] == {"faithful": True, "first_difference": None}, by[cid]
    assert by[cid]["verdict"] in ("pass", "fail")


def test_a_fault_before_the_checkpoint_comes_from_the_tape(cli, tmp_path):
    """The faulted charge is before the checkpoint (escalate's): the tape answers it with the
    faulted result, and the fault is not applied a second time to a later call."""
    p = project(tmp_path, cases=[c for c in CASES if c["id"] == "escalates"])
    db = run(cli, p)
    by = replay(cli, p, "escalate:error", db)
    assert by["escalates"]["control"] == {"faithful": True, "first_difference": None}
    assert by["escalates"]["checkpoint"]["step_index"] == 5  # lookup, charge, then escalate
    v = fault_replay_view(db, "escalates", "error")
    assert plain(v.state)["ledger"] == [{"key": "escalates-0", "amount": 10}]
    charge = [s for s in v.trajectory.steps if s.kind == "tool_result" and s.tool_name == "charge"]
    assert [s.fault for s in charge] == ["timeout_after_effect"]


def test_the_run_judges_faulted_cases_with_faithful_replays(cli, tmp_path):
    """The run's own fault_recovery replays (lookup:error) of every faulted case are trusted."""
    p = project(tmp_path)
    r = cli("run", "--db", str(p / "log.db"), "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    verdicts = {c["case_id"]: c["verdicts"]["recovers_from_error_at_lookup"] for c in data["cases"]}
    assert len(verdicts) == len(CASES) and all(v["verdict"] in ("pass", "fail") for v in verdicts.values()), verdicts


def test_derived_cases_keep_the_fault(tmp_path):
    from oloproof.config.cases import CaseFile
    from oloproof.config.metamorphic import rewrite
    from oloproof.config.models import TransformConfig

    path = write(tmp_path / "cases.jsonl", json.dumps(case("a", {"tool": "charge", "kind": "denied"}, m="hi")) + "\n")
    [source] = list(CaseFile(path))
    derived = rewrite(source, TransformConfig(name="t", field="m", template="{value}!",
                                              validity_labels="l.jsonl", minimum_validity=0.5))
    assert derived.fault == source.fault
    assert derived.fingerprint == case_fingerprint({"m": "hi!"}, {"ledger": []}, {}, source.fault)


GATHER_APP = '''\
import asyncio

from oloproof import Stateful, current_case, system, tool


@system(name="pay", version="1", records=("agent_trajectory/v1", "environment_state/v1"))
class Desk(Stateful):
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    async def lookup(self, order_id):
        await asyncio.sleep(0.01)
        return {"order_id": order_id, "amount": 10}

    @tool
    async def charge(self, key, amount):
        self.state.setdefault("ledger", []).append({"key": key, "amount": amount})
        return {"charged": amount, "key": key}

    async def __call__(self, case):
        a, b = await asyncio.gather(self.lookup(case.id), self.charge(case.id, 10))
        current_case().finish("failure" if "error" in b else "success")
        return {"got": [a, b]}
'''


def test_faults_in_concurrent_tasks_record_and_replay(cli, tmp_path):
    """A case whose agent runs concurrent tasks: the fault applies in its task, the control
    replay re-applies it, and a timeout_after_effect replay runs the call in its task."""
    # this agent has no escalate tool: the configuration may not name one (SPEC §18.1)
    p = project(tmp_path, app=GATHER_APP, config=CONFIG.replace("tool: lookup", "tool: charge")
                .replace(", escalate_tools: [escalate]", ""),
                cases=[case("a"), case("b", {"tool": "charge", "kind": "timeout_after_effect"}),
                       case("c", {"tool": "charge", "kind": "denied"})])
    db = run(cli, p)
    views = case_views(db)
    assert plain(views["b"].state) == {"ledger": [{"key": "b", "amount": 10}]}
    assert plain(views["b"].output)["got"][1] == TIMEOUT and views["b"].fault_fired
    assert plain(views["c"].state) == {"ledger": []} and views["c"].fault_fired
    [step] = faulted_steps(views["c"])
    assert step.branch is not None and step.fault == "denied"
    by = replay(cli, p, "charge:timeout_after_effect", db)
    assert by and all(c["control"]["faithful"] for c in by.values()), by
    for cid in ("a", "c"):
        v = fault_replay_view(db, cid, "timeout_after_effect")
        assert plain(v.state) == {"ledger": [{"key": cid, "amount": 10}]}
        assert plain(v.output)["got"][1] == TIMEOUT

"""A fault the harness injects is the harness's evidence (issue 22, SPEC §18.1).

Every fault kind, through both paths a fault takes — declared in a case (judged by the release
classifier) and injected by ``oloproof replay --fault`` (judged by ``fault_recovery``) — against
three agents on one payment desk: one that **ignores** what the adapter handed back, one that
**handles** it (verifies before retrying with the same idempotency key, or routes a wait /
escalates), and one that **makes it worse** (retries twice with fresh keys: one logical payment
made several times).
"""

from __future__ import annotations

import json

import pytest

from oloproof.system import ALL_FAULT_KINDS
from tests.conftest import write

APP = '''\
from oloproof import Stateful, current_case, system, tool

RECORDS = ("agent_trajectory/v1", "environment_state/v1", "effect_ledger/v1", "release_evidence/v1")


@system(name="desk", version="1", records=RECORDS)
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
        # an idempotent payment adapter: a key seen before is not charged again
        applied = key not in self.state["keys"]
        if applied:
            self.state["keys"].append(key)
            self.state["charged"] += amount
        current_case().effect("charge", idempotency_key=key, applied=applied)
        return {"charged": amount, "key": key}

    @tool
    def payment_status(self, key):
        return {"charged": key in self.state["keys"]}

    @tool
    def escalate(self, reason):
        self.state["tickets"].append(reason)
        return {"ticket": len(self.state["tickets"])}

    def __call__(self, case):
        policy = case.input["policy"]
        order = self.lookup(case.id)
        key = case.id + "-1"
        got = self.charge(key, order["amount"])
        ok = isinstance(got, dict) and "error" not in got
        if not ok and policy == "handles":
            if isinstance(got, dict) and got["error"]["type"] == "TimeoutError":
                if not self.payment_status(key)["charged"]:
                    self.charge(key, order["amount"])  # the same key: never twice
            else:
                self.escalate("charge failed")
                current_case().wait(owner="payments-team", deadline="2030-01-01T00:00:00Z",
                                    resume_token=key)
        elif not ok and policy == "worsens":
            for attempt in (2, 3):  # a fresh key each time: one payment, made again
                self.charge(f"{case.id}-{attempt}", order["amount"])
        c = self.state["charged"]
        current_case().deliverable("payment", exists=c > 0, contract_ok=c == order["amount"])
        current_case().finish("success")
        return {"got": got}
'''

CONFIG = '''\
system:
  name: desk
  version: "1"
  callable: app:Desk
  records: [agent_trajectory/v1, environment_state/v1, effect_ledger/v1, release_evidence/v1]
cases: cases.jsonl
evaluators:
  - {type: release_class}
'''

POLICIES = ("ignores", "handles", "worsens")
START = {"keys": [], "charged": 0, "tickets": []}


def project(tmp_path, cases):
    p = tmp_path / "p"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in cases))
    return p


def run(cli, p):
    r = cli("run", "--db", str(p / "log.db"), "--json", "r.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    return {c["case_id"]: c for c in json.loads((p / "r.json").read_text())["cases"]}


# ---- declared faults: the release classifier ---------------------------------------------------

#: kind -> policy -> the class the harness's evidence must give
CLASSES = {
    # a denial is the harness's evidence: FAIL_TOOL_ACCESS whatever the agent does or records
    "denied": {"ignores": "FAIL_TOOL_ACCESS", "handles": "FAIL_TOOL_ACCESS", "worsens": "FAIL_TOOL_ACCESS"},
    "error": {"ignores": "FAIL_OUTCOME", "handles": "EXPECTED_WAIT", "worsens": "FAIL_DUPLICATE_EFFECT"},
    "malformed": {"ignores": "FAIL_OUTCOME", "handles": "EXPECTED_WAIT", "worsens": "FAIL_DUPLICATE_EFFECT"},
    "timeout": {"ignores": "FAIL_OUTCOME", "handles": "PASS", "worsens": "FAIL_DUPLICATE_EFFECT"},
    # the effect landed: the agent that ignores the timeout is right by luck; retrying with new
    # keys pays three times
    "timeout_after_effect": {"ignores": "PASS", "handles": "PASS", "worsens": "FAIL_DUPLICATE_EFFECT"},
}


def test_every_kind_is_covered():
    assert set(CLASSES) == set(ALL_FAULT_KINDS)


@pytest.fixture(scope="module")
def declared(tmp_path_factory):
    from click.testing import CliRunner

    from oloproof.cli.main import cli as group

    tmp = tmp_path_factory.mktemp("declared")
    cases = [{"id": f"{kind}-{policy}", "input": {"policy": policy}, "initial_state": START,
              "fault": {"tool": "charge", "kind": kind, **({"scope": "payments:write"} if kind == "denied" else {})}}
             for kind in ALL_FAULT_KINDS for policy in POLICIES]
    p = project(tmp, cases)
    import os

    old = os.getcwd()
    os.chdir(p)
    try:
        r = CliRunner().invoke(group, ["run", "--db", str(p / "log.db"), "--json", "r.json"], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert r.exit_code in (0, 1), r.output
    return p, {c["case_id"]: c for c in json.loads((p / "r.json").read_text())["cases"]}


@pytest.mark.parametrize("kind", ALL_FAULT_KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_the_release_class_of_each_kind_and_agent(declared, kind, policy):
    _, cases = declared
    v = cases[f"{kind}-{policy}"]["verdicts"]["release_class"]
    want = CLASSES[kind][policy]
    assert v["reason"] == want, (kind, policy, v)
    assert v["verdict"] == ("pass" if want in ("PASS", "EXPECTED_WAIT") else "fail")


def test_the_harness_records_the_denial_itself(declared):
    """The system never called access(): the denial in the log is the harness's, with the
    declared scope, and it needs no release_evidence/v1 declaration of its own."""
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    p, _ = declared
    store = SQLiteStore(p / "log.db")
    try:
        views = {v.case_id: v for v in iter_case_views(store, latest_run_id(store))}
    finally:
        store.close()
    access = [e for e in views["denied-ignores"].evidence if e.kind == "access"]
    assert [(e.source, e.data) for e in access] == \
        [("harness", {"tool": "charge", "allowed": False, "required_scope": "payments:write"})]
    assert not [e for e in views["error-ignores"].evidence if e.kind == "access"]


def test_a_system_without_release_evidence_still_gets_the_harness_denial(cli, tmp_path):
    """The denial is the harness's evidence: a system that declares no release_evidence/v1 is
    not refused for it (its own access() calls would be)."""
    app = APP.replace('RECORDS = ("agent_trajectory/v1", "environment_state/v1", "effect_ledger/v1", '
                      '"release_evidence/v1")', 'RECORDS = ("agent_trajectory/v1", "environment_state/v1")')
    app = app.replace('        current_case().effect("charge", idempotency_key=key, applied=applied)\n', "")
    app = app.replace('        current_case().deliverable("payment", exists=c > 0, contract_ok=c == order["amount"])\n',
                      "")
    app = app.replace("                current_case().wait(owner=\"payments-team\", "
                      "deadline=\"2030-01-01T00:00:00Z\",\n"
                      "                                    resume_token=key)\n", "")
    p = project(tmp_path, [{"id": "d", "input": {"policy": "ignores"}, "initial_state": START,
                            "fault": {"tool": "charge", "kind": "denied"}}])
    write(p / "app.py", app)
    write(p / "oloproof.yaml", CONFIG.replace(", effect_ledger/v1, release_evidence/v1", "")
          .replace("  - {type: release_class}", "  - {type: agent_tool_called, tool_name: charge}"))
    run(cli, p)
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / "log.db")
    try:
        view = next(iter_case_views(store, latest_run_id(store)))
    finally:
        store.close()
    assert view.error is None
    assert [(e.kind, e.source, e.data["allowed"]) for e in view.evidence] == [("access", "harness", False)]


# ---- replayed faults: fault_recovery -----------------------------------------------------------

#: kind -> policy -> (verdict, reason) of ``oloproof replay --fault charge:KIND``
RECOVERY = {
    "error": {"ignores": ("fail", "state_contradicts_claim"), "handles": ("pass", None),
              "worsens": ("fail", "duplicate_effect")},
    "malformed": {"ignores": ("fail", "state_contradicts_claim"), "handles": ("pass", None),
                  "worsens": ("fail", "duplicate_effect")},
    "denied": {"ignores": ("fail", "state_contradicts_claim"), "handles": ("pass", None),
               "worsens": ("fail", "duplicate_effect")},
    "timeout": {"ignores": ("fail", "state_contradicts_claim"), "handles": ("pass", None),
                "worsens": ("fail", "duplicate_effect")},
    "timeout_after_effect": {"ignores": ("pass", None), "handles": ("pass", None),
                             "worsens": ("fail", "duplicate_effect")},
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from click.testing import CliRunner

    from oloproof.cli.main import cli as group

    tmp = tmp_path_factory.mktemp("replayed")
    cases = [{"id": policy, "input": {"policy": policy}, "initial_state": START,
              "expected": {"state": {"charged": 10}}} for policy in POLICIES]
    p = project(tmp, cases)
    import os

    old = os.getcwd()
    os.chdir(p)
    try:
        r = CliRunner().invoke(group, ["run", "--db", str(p / "log.db")], catch_exceptions=False)
        assert r.exit_code in (0, 1), r.output
        out = {}
        for kind in ALL_FAULT_KINDS:
            r = CliRunner().invoke(group, ["replay", "--fault", f"charge:{kind}", "--escalate", "escalate",
                                           "--db", str(p / "log.db"), "--json", f"{kind}.json"],
                                   catch_exceptions=False)
            assert r.exit_code == 0, r.output
            out[kind] = ({c["case_id"]: c for c in json.loads((p / f"{kind}.json").read_text())["cases"]},
                         r.output)
    finally:
        os.chdir(old)
    out["db"] = p / "log.db"
    return out


@pytest.mark.parametrize("kind", ALL_FAULT_KINDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_fault_recovery_of_each_kind_and_agent(recorded, kind, policy):
    cases, _ = recorded[kind]
    c = cases[policy]
    assert c["control"]["faithful"] is True, c
    assert (c["verdict"], c.get("reason")) == RECOVERY[kind][policy], (kind, policy, c)


def test_replay_shows_effects_and_attempts(recorded):
    cases, output = recorded["timeout_after_effect"]
    assert cases["worsens"]["effects"] == {"charge": {"effect_attempts": 3, "effect_count": 3,
                                                      "keys": ["worsens-1", "worsens-2", "worsens-3"]}}
    assert cases["handles"]["effects"] == {"charge": {"effect_attempts": 1, "effect_count": 1,
                                                      "keys": ["handles-1"]}}
    assert "charge 3 attempts, 3 applied (3 keys)" in " ".join(output.split())
    # a fault that does not run the tool: the verified retry is one attempt, one effect
    assert recorded["timeout"][0]["handles"]["effects"]["charge"]["effect_count"] == 1
    assert "effects" not in recorded["error"][0]["ignores"]  # nothing was attempted


def test_a_duplicate_needs_no_expected_state(cli, tmp_path):
    """The seed's dangerous ambiguity: with no expected.state, only the ledger can tell — an
    agent that charged twice with two keys after a timeout_after_effect is a FAIL."""
    p = project(tmp_path, [{"id": "w", "input": {"policy": "worsens"}, "initial_state": START}])
    write(p / "oloproof.yaml", CONFIG + "  - {type: fault_recovery, tool: charge, fault: timeout_after_effect}\n")
    cases = run(cli, p)
    v = cases["w"]["verdicts"]["recovers_from_timeout_after_effect_at_charge"]
    assert (v["verdict"], v["reason"]) == ("fail", "duplicate_effect"), v


def test_the_replay_of_a_denial_records_the_harness_denial(recorded):
    """``replay --fault charge:denied``: the fault replay's stream holds the harness's access
    evidence, as the live run's does."""
    import sqlite3

    from oloproof.events import decode_stream
    from oloproof.store import SQLiteStore
    from oloproof.views import fold_replay

    db = recorded["db"]
    conn = sqlite3.connect(db)
    streams = [s for (s,) in conn.execute("SELECT DISTINCT stream FROM events WHERE stream LIKE 'replay/%'")]
    conn.close()
    store = SQLiteStore(db)
    try:
        views = [fold_replay(decode_stream(s, [e.payload for e in store.read_stream(s)]), s) for s in streams]
    finally:
        store.close()
    denied = [v for v in views if v.kind == "fault" and (v.started.change or {}).get("fault") == "denied"]
    assert len(denied) == 3
    for v in denied:
        assert [(e.kind, e.source, e.data["allowed"]) for e in v.evidence if e.kind == "access"] == \
            [("access", "harness", False)]


def test_an_effect_of_the_agents_own_code_before_the_checkpoint_is_counted_once(cli, tmp_path):
    """The tape replay runs the agent again from the start: an effect its own code recorded
    before the faulted call (outside any tool) is the recording's, not a second attempt."""
    app = APP.replace('''        policy = case.input["policy"]
''', '''        policy = case.input["policy"]
        current_case().effect("notify", idempotency_key=case.id + "-n", applied=True)
''')
    p = project(tmp_path, [{"id": "h", "input": {"policy": "handles"}, "initial_state": START,
                            "expected": {"state": {"charged": 10}}}])
    write(p / "app.py", app)
    assert cli("run", "--db", str(p / "log.db"), cwd=p).exit_code in (0, 1)
    for kind, verdict in (("error", "pass"), ("timeout", "pass")):
        r = cli("replay", "--fault", f"charge:{kind}", "--escalate", "escalate", "--db", str(p / "log.db"),
                "--json", "rep.json", cwd=p)
        assert r.exit_code == 0, r.output
        case = json.loads((p / "rep.json").read_text())["cases"][0]
        assert case["verdict"] == verdict and case["effects"]["notify"]["effect_count"] == 1, case

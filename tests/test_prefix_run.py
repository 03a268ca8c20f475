"""Prefix cases recorded and judged (SPEC §14, §14a): the frozen tape, the first action past
the boundary recorded and never executed, Resumable systems, divergence, staleness, and the
no-leak property of ``prefix create``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import copy_recorded, run_in, write

APP = '''\
from oloproof import Stateful, current_case, system, tool

CALLS = []  # every tool body that really ran, in this process


class Shop(Stateful):
    instructions = "Refund what the customer asks for. INSTRUCTIONS_V"
    external_data_version = "catalog-1"

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return self.state

    @tool
    def lookup(self, order):
        """Look an order up."""
        CALLS.append(("lookup", order))
        return {"order": order, "amount": self.state["orders"][order], "note": f"secret-{order}-note"}

    @tool
    def refund(self, order, amount):
        """Refund an order."""
        CALLS.append(("refund", order))
        self.state["refunded"] = self.state.get("refunded", []) + [order]
        return {"refunded": amount, "receipt": f"rcpt-{order}-done"}

    @tool(kind="model", name="model")
    def think(self, seen):
        current_case().usage(input_tokens=100 + seen, output_tokens=7, cost=0.001, latency_ms=5.0)
        return {"seen": seen}


POLICY = "v1"


@system(name="shop", version="v1", records=["agent_trajectory/v1", "environment_state/v1"])
class Agent(Shop):
    def run(self, case):
        found, done = [], []
        for order in case.input["orders"]:
            self.think(len(found))
            found.append(self.lookup(order))
        for f in found:
            self.think(len(found) + len(done))
            if POLICY == "v1" and done:  # v1 stops after its first refund
                break
            self.refund(f["order"], f["amount"])
            done.append(f["order"])
        else:
            self.think(len(found) + len(done))
        current_case().final("Refunded everything, all done.")
        return {"answer": "done"}
'''

CONFIG = '''\
system: {name: shop, version: v1, callable: app:Agent, records: [agent_trajectory/v1, environment_state/v1]}
cases: cases.jsonl
evaluators:
  - {type: state_matches, criterion: refunded, mode: subset}
attribution:
  change_tools: [refund]
  verification_tools: [lookup_status]
'''


def project(tmp_path: Path, orders: int = 2) -> Path:
    p = tmp_path / "shop"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    ids = [f"o{i}" for i in range(orders)]
    case = {"id": "refund-all", "input": {"orders": ids, "goal": "refund every order"},
            "initial_state": {"orders": {o: 10 + i for i, o in enumerate(ids)}},
            "expected": {"state": {"refunded": ids}}}
    write(p / "cases.jsonl", json.dumps(case) + "\n")
    return p


def prefix_file(p: Path, case: str = "refund-all") -> dict:
    return yaml.safe_load((p / "prefixes" / f"{case}.yaml").read_text())


def save_prefix(p: Path, doc: dict, case: str = "refund-all") -> None:
    (p / "prefixes" / f"{case}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture(scope="module")
def recorded_shop(tmp_path_factory):
    p = project(tmp_path_factory.mktemp("recorded"))
    r = run_in(p, "run")
    assert r.exit_code == 0 and "0 / 1 observed" in r.output, r.output  # no gate; v1's case fails
    return p


@pytest.fixture
def shop(recorded_shop, tmp_path):
    """The shop recorded once (v1) for the module: each test freezes prefixes of a copy."""
    return copy_recorded(recorded_shop, tmp_path / "shop")


def created(cli, p: Path, *extra: str) -> dict:
    r = cli("prefix", "create", "latest", "refund-all", *extra, cwd=p)
    assert r.exit_code == 0, r.output
    return prefix_file(p)


def prefix_results(cli, p: Path) -> dict:
    r = cli("prefix", "run", "--json", "out.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    return json.loads((p / "out.json").read_text())


def verdict(data: dict, criterion: str = "prefix_action_acceptable") -> dict:
    return data["cases"][0]["verdicts"][criterion]


def test_the_action_past_the_boundary_is_recorded_and_never_executed(cli, shop):
    doc = created(cli, shop)
    assert doc["boundary"]["category"] == "stopping_too_early"
    # the frozen tape: think, lookup o0, think, lookup o1, think, refund o0 (9 steps), then the
    # decision to finish (step 10) and the final (11, the first unacceptable step)
    assert doc["boundary"] == {"before_step": 10, "first_unacceptable_step": 11, "category": "stopping_too_early"}
    assert len(doc["frozen"]["steps"]) == 9
    (shop / "app.py").write_text(APP.replace('POLICY = "v1"', 'POLICY = "v2"').replace(
        'version="v1"', 'version="v2"'))
    (shop / "oloproof.yaml").write_text(CONFIG.replace("version: v1", "version: v2"))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "fail", "reason": "other"}  # refund is no listed action
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(shop / ".oloproof" / "log.db", readonly=True)
    view = next(iter_case_views(store, latest_run_id(store)))
    store.close()
    steps = view.trajectory.steps
    assert [s.kind for s in steps[-2:]] == ["decision", "tool_call"]  # the live model call, then the action
    assert (steps[-1].tool_name, steps[-1].arguments, steps[-1].index) == ("refund", {"order": "o1", "amount": 11}, 11)
    assert view.state["refunded"] == ["o0"]  # o1's refund never ran: the sandbox is as frozen
    assert view.state == doc["frozen"]["state"]
    import sys

    assert getattr(sys.modules.get("app"), "CALLS", None) == []  # the tape answered every call before


def test_acceptable_when_the_candidate_acts_as_listed(cli, shop):
    doc = created(cli, shop)
    doc["acceptable_actions"] = [{"tool": "refund", "arguments": {"order": "o*"}}]
    save_prefix(shop, doc)
    (shop / "app.py").write_text(APP.replace('POLICY = "v1"', 'POLICY = "v2"'))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "pass"}
    assert verdict(data, "no_critical_forbidden_action") == {"verdict": "pass"}


def test_v1_on_its_own_prefix_repeats_the_critical_forbidden_action(cli, shop):
    created(cli, shop)
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "fail", "reason": "forbidden_critical"}
    assert verdict(data, "no_critical_forbidden_action") == {"verdict": "fail", "reason": "critical_forbidden"}
    assert data["gate"]["decision"] == "FAIL"


def test_a_candidate_that_leaves_the_frozen_path_is_missing_not_failed(cli, shop):
    created(cli, shop)
    # another first call than the frozen tape's: it never reaches the boundary
    (shop / "app.py").write_text(APP.replace("        found, done = [], []\n",
                                             "        found, done = [], []\n        self.lookup('o1')\n"))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "missing", "reason": "diverged"}
    assert verdict(data, "no_critical_forbidden_action") == {"verdict": "missing", "reason": "diverged"}


def test_a_tool_whose_schema_changed_makes_the_prefix_stale(cli, shop):
    created(cli, shop)
    (shop / "app.py").write_text(APP.replace('"""Look an order up."""', '"""Look an order up (v2)."""'))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "missing", "reason": "stale"}
    r = cli("prefix", "run", cwd=shop)
    assert "stale: tool 'lookup' changed its schema" in " ".join(r.output.split())
    assert r.exit_code == 1  # never passing


@pytest.mark.parametrize("change, reason", [
    (("INSTRUCTIONS_V", "INSTRUCTIONS_W"), "the instructions changed"),
    (('"catalog-1"', '"catalog-2"'), "the external data changed (catalog-1 -> catalog-2)"),
    (("    @tool\n    def refund", "    def refund"), "tool 'refund' no longer exists"),
])
def test_instructions_data_and_removed_tools_make_it_stale(cli, shop, change, reason):
    created(cli, shop)
    (shop / "app.py").write_text(APP.replace(*change))
    r = cli("prefix", "run", "--json", "out.json", cwd=shop)
    assert verdict(json.loads((shop / "out.json").read_text())) == {"verdict": "missing", "reason": "stale"}
    assert reason in " ".join(r.output.split())


def test_an_unchanged_system_is_not_stale_and_a_new_tool_does_not_make_it_stale(cli, shop):
    created(cli, shop)
    (shop / "app.py").write_text(APP + "\n\n@tool\ndef extra(x):\n    return x\n")
    data = prefix_results(cli, shop)
    assert verdict(data)["reason"] != "stale"


RESUMABLE = '''
class Resumer(Shop):
    SEEN = []

    def resume(self, snapshot):
        Resumer.SEEN.append(snapshot)
        assert snapshot.goal == "refund every order"
        assert snapshot.instructions.startswith("Refund what")
        assert [s.kind for s in snapshot.steps][:2] == ["decision", "tool_call"]
        assert snapshot.state == self.state  # the sandbox is reset to the boundary state
        assert snapshot.metadata["before_step"] == len(snapshot.steps) + 1
        found = [s.result for s in snapshot.steps if s.kind == "tool_result" and s.tool_name == "lookup"]
        refunded = set(self.state.get("refunded", []))
        for f in found:
            if f["order"] not in refunded:
                self.refund(f["order"], f["amount"])
        return {"answer": "refunded"}

    def run(self, case):
        raise AssertionError("a Resumable system is resumed, not run")


Resumer = system(name="shop", version="v1", records=["agent_trajectory/v1", "environment_state/v1"])(Resumer)
'''


def test_a_resumable_system_gets_the_snapshot_and_acts_at_the_boundary(cli, shop):
    doc = created(cli, shop)
    doc["acceptable_actions"] = [{"tool": "refund"}]
    save_prefix(shop, doc)
    (shop / "app.py").write_text(APP + RESUMABLE)
    (shop / "oloproof.yaml").write_text(CONFIG.replace("app:Agent", "app:Resumer"))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "pass"}
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(shop / ".oloproof" / "log.db", readonly=True)
    view = next(iter_case_views(store, latest_run_id(store)))
    store.close()
    assert view.trajectory.steps[-1].index == doc["boundary"]["before_step"]
    assert view.trajectory.steps[-1].tool_name == "refund"
    assert view.state["refunded"] == ["o0"]


def test_prefix_create_needs_a_boundary_inside_the_trajectory(cli, shop):
    r = cli("prefix", "create", "latest", "refund-all", "--before-step", "3", cwd=shop)
    assert r.exit_code == 2 and "inside a tool call" in r.output
    r = cli("prefix", "create", "latest", "refund-all", "--before-step", "99", cwd=shop)
    assert r.exit_code == 2 and "has steps 1..11" in r.output
    created(cli, shop)
    r = cli("prefix", "create", "latest", "refund-all", cwd=shop)
    assert r.exit_code == 2 and "--force" in r.output


def test_attribution_is_stored_and_the_latest_wins(cli, shop):
    from oloproof.app.attribution import latest_attribution
    from oloproof.app.runs import latest_run_id
    from oloproof.store import SQLiteStore

    assert cli("attribute", "latest", "refund-all", cwd=shop).exit_code == 0
    (shop / "oloproof.yaml").write_text(CONFIG.replace("change_tools: [refund]", "change_tools: [lookup]"))
    assert cli("attribute", "latest", "refund-all", "--json", "a.json", cwd=shop).exit_code == 0
    store = SQLiteStore(shop / ".oloproof" / "log.db", readonly=True)
    run_id = latest_run_id(store)
    stored = latest_attribution(store, run_id, "refund-all")
    assert store.stream_length(f"attribution/{run_id}/refund-all") == 2
    store.close()
    assert stored == json.loads((shop / "a.json").read_text())["attribution"]
    assert stored["primary"]["rule"] == "declared_complete_without_verification"
    assert cli("audit", "verify", cwd=shop).exit_code == 0  # attribution streams are no orphans
    assert cli("runs", "--pin", "latest", "base", cwd=shop).exit_code == 0
    r = cli("audit", "rebuild", cwd=shop)  # pins and attributions project no rows: no "case stream" error
    assert r.exit_code == 0, r.output
    shown = " ".join(cli("show", "latest", "refund-all", cwd=shop).output.split())
    assert "attribution: first unacceptable step 11 (stopping_too_early, layer model, confidence high)" in shown
    r = cli("export", "latest", "--format", "jsonl", "--out", "x.jsonl", cwd=shop)
    assert r.exit_code == 0, r.output
    lines = [json.loads(line) for line in (shop / "x.jsonl").read_text().splitlines()]
    assert [x["data"] for x in lines if x["record"] == "attribution"] == [stored]


def test_structured_claims_given_with_final_are_checked(cli, tmp_path):
    p = project(tmp_path)
    (p / "app.py").write_text(APP.replace('current_case().final("Refunded everything, all done.")',
                                          'current_case().final("Done.", claims={"refunded": 99})'))
    (p / "oloproof.yaml").write_text(CONFIG.replace("evaluators:\n", "evaluators:\n  - {type: claims_supported}\n"))
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    case = json.loads((p / "r.json").read_text())["cases"][0]
    assert case["verdicts"]["claims_supported"] == {"verdict": "fail", "reason": "contradicted_claim"}


def test_the_model_judge_is_asked_only_when_no_rule_decides(cli, shop):
    (shop / "app.py").write_text(APP + '''

ASKED = []


def judge(case, failed):
    ASKED.append(case.case_id)
    return {"step": 10, "category": "gave_up_early", "layer": "model", "rationale": "stopped with an order left"}
''')
    no_rule = CONFIG.replace("change_tools: [refund]", "change_tools: [nothing]") + "  judge: app:judge\n"
    (shop / "oloproof.yaml").write_text(no_rule)
    r = cli("attribute", "latest", "refund-all", "--json", "j.json", cwd=shop)
    assert r.exit_code == 0, r.output
    a = json.loads((shop / "j.json").read_text())["attribution"]
    assert (a["source"], a["first_unacceptable_step"], a["category"]) == ("judge", 10, "gave_up_early")
    assert (a["confidence"], a["needs_review"]) == ("low", True)  # a model's reading is never unreviewed
    # with a rule that decides, the judge is not asked
    (shop / "oloproof.yaml").write_text(CONFIG + "  judge: app:judge\n")
    assert cli("attribute", "latest", "refund-all", "--json", "k.json", cwd=shop).exit_code == 0
    import sys

    assert sys.modules["app"].ASKED == []  # the module was loaded again for this command: not asked
    assert json.loads((shop / "k.json").read_text())["attribution"]["source"] == "rules"
    (shop / "oloproof.yaml").write_text(CONFIG + "  judge: app:nope\n")
    r = cli("attribute", "latest", "refund-all", cwd=shop)
    assert r.exit_code == 2 and "has no attribute 'nope'" in r.output


def test_bisect_without_control_is_a_usage_error(cli, shop):
    r = cli("attribute", "latest", "refund-all", "--bisect", cwd=shop)
    assert r.exit_code == 2 and "--bisect --control VERSION" in r.output
    r = cli("attribute", "latest", "refund-all", "--bisect", "--control", "nope", cwd=shop)
    assert r.exit_code == 2 and "no control of that name" in r.output


def test_the_prefix_run_is_stored_sealed_and_reevaluated_from_events(cli, shop):
    created(cli, shop)
    data = prefix_results(cli, shop)
    r = cli("eval", "latest", "--json", "again.json", cwd=shop)
    assert r.exit_code in (0, 1), r.output
    again = json.loads((shop / "again.json").read_text())
    assert again["cases"] == data["cases"]
    assert cli("audit", "verify", cwd=shop).exit_code == 0


def test_prefix_run_with_worker_processes_gives_the_same_verdicts(cli, shop):
    created(cli, shop)
    serial = prefix_results(cli, shop)
    r = cli("prefix", "run", "--workers", "2", "--json", "w.json", cwd=shop)
    assert r.exit_code in (0, 1), r.output
    assert json.loads((shop / "w.json").read_text())["cases"] == serial["cases"]


# ---- nothing after the boundary leaks into a prefix --------------------------------------------

def _strings(value, out):
    """The text values (not the keys) inside ``value``."""
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    return out


_LEAK_PROJECT: dict[str, object] = {}


def _leak_project(tmp_path_factory):
    if "p" not in _LEAK_PROJECT:
        from click.testing import CliRunner

        from oloproof.cli.main import cli as group

        p = project(tmp_path_factory.mktemp("leak"), orders=4)
        (p / "app.py").write_text(APP.replace('POLICY = "v1"', 'POLICY = "v2"'))
        import os

        here = os.getcwd()
        os.chdir(p)
        try:
            assert CliRunner().invoke(group, ["run"]).exit_code == 0
        finally:
            os.chdir(here)
        _LEAK_PROJECT["p"] = p
    return _LEAK_PROJECT["p"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.integers(min_value=1, max_value=30))
def test_a_prefix_holds_no_content_from_steps_at_or_after_its_boundary(tmp_path_factory, before):
    from oloproof.app.prefix import create_prefix
    from oloproof.app.runs import case_view, latest_run_id
    from oloproof.errors import UsageError
    from oloproof.store import SQLiteStore

    p = _leak_project(tmp_path_factory)
    store = SQLiteStore(p / ".oloproof" / "log.db")
    try:
        view = case_view(store, latest_run_id(store), "refund-all")
        steps = view.trajectory.steps
        try:
            made = create_prefix(store, p, "latest", "refund-all", before_step=before, force=True)
        except UsageError:
            depth = sum((s.kind == "tool_call") - (s.kind == "tool_result") for s in steps[:before - 1])
            assert before > len(steps) or depth != 0  # refused only outside the steps or inside a call
            return
    finally:
        store.close()
    frozen_state = yaml.safe_load(made.path.read_text())["frozen"]["state"] if not made.sidecar else \
        json.loads(made.sidecar.read_text())["state"]
    earlier = _strings([view.input, view.metadata, frozen_state], set())
    for s in steps[:before - 1]:
        _strings([s.arguments, s.result, s.tool_name], earlier)
    later = set()
    for s in steps[before - 1:]:
        _strings([s.arguments, s.result], later)
    later |= _strings(view.expected, set())
    # what only the steps at or after the boundary (or the expected answer) hold: receipts, the
    # final text
    leaks = {t for t in later - earlier if len(t) >= 4}
    text = made.path.read_text() + (made.sidecar.read_text() if made.sidecar else "")
    assert leaks, "the property needs content to look for"
    # whole tokens: "done" (the answer) is no leak inside the header's "undone"
    assert not [t for t in leaks if re.search(r"(?<![\w-])" + re.escape(t) + r"(?![\w-])", text)]
    assert "expected" not in yaml.safe_load(made.path.read_text())


# ---- attacks found later --------------------------------------------------------------------------

CONTROLS = '''

@system(name="shop", version="ctl", records=["agent_trajectory/v1", "environment_state/v1"])
class Good(Agent):
    pass


@system(name="shop", version="ctl", records=["agent_trajectory/v1", "environment_state/v1"])
class Crash(Agent):
    def run(self, case):
        raise RuntimeError("always crashes")
'''


def test_bisection_probes_are_keyed_by_the_control_itself(cli, shop):
    (shop / "app.py").write_text(APP.replace('POLICY = "v1"', 'POLICY = "v1"') + CONTROLS)
    # a v2 control under the name Good: refund every order
    (shop / "app.py").write_text((shop / "app.py").read_text().replace(
        "class Good(Agent):\n    pass", "class Good(Agent):\n    def run(self, case):\n"
        "        global POLICY\n        POLICY = 'v2'\n        try:\n            return Agent.run(self, case)\n"
        "        finally:\n            POLICY = 'v1'"))
    assert cli("run", cwd=shop).exit_code == 0
    good = cli("attribute", "latest", "refund-all", "--bisect", "--control", "app:Good", "--json", "g.json", cwd=shop)
    assert good.exit_code == 0, good.output
    crash = cli("attribute", "latest", "refund-all", "--bisect", "--control", "app:Crash", "--json", "c.json", cwd=shop)
    assert crash.exit_code == 0, crash.output
    g = json.loads((shop / "g.json").read_text())["attribution"]["recoverability"]
    c = json.loads((shop / "c.json").read_text())["attribution"]["recoverability"]
    assert g["status"] == "recoverable"
    # the crashing control never reuses Good's probes (same name and version), and a control
    # that errors in every probe says nothing about the case
    assert c["status"] == "unknown" and "always crashes" in c["reason"]


def test_an_altered_attribution_is_refused_not_used(cli, shop):
    import sqlite3

    assert cli("attribute", "latest", "refund-all", cwd=shop).exit_code == 0
    conn = sqlite3.connect(shop / ".oloproof" / "log.db")
    triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")]
    for t in triggers:
        conn.execute(f'DROP TRIGGER "{t}"')
    conn.execute("UPDATE events SET payload = replace(payload, 'stopping_too_early', 'retention') "
                 "WHERE stream LIKE 'attribution/%'")
    conn.commit()
    conn.close()
    r = cli("prefix", "create", "latest", "refund-all", cwd=shop)
    assert r.exit_code == 2 and "digest" in r.output and "attribution was altered" in r.output
    assert not (shop / "prefixes" / "refund-all.yaml").exists()


def test_concurrent_attributions_all_land(shop):
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-m", "oloproof", "attribute", "latest", "refund-all"], cwd=shop,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    codes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _ in codes), codes
    from oloproof.app.runs import latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(shop / ".oloproof" / "log.db", readonly=True)
    assert store.stream_length(f"attribution/{latest_run_id(store)}/refund-all") == 6
    store.close()


def test_an_interrupted_prefix_run_is_finished_by_prefix_run(cli, shop):
    created(cli, shop)
    from oloproof.app.prefix import load_prefix_project
    from oloproof.app.run import _Driver, utc_now  # noqa: F401
    from oloproof.app.runs import resume_command
    from oloproof.events import RunStarted, encode, tag_of
    from oloproof.store import SQLiteStore, StreamAppend

    project = load_prefix_project(shop)
    store = SQLiteStore(shop / ".oloproof" / "log.db")
    started = RunStarted(run_id="20991231T000000-abcdef", system_name="shop", system_version="v1",
                         records=[], config=project.stored_config, config_digest=project.config_digest,
                         cases_path="prefixes", suite_digest="x", case_count=1, started_at="2099-12-31T00:00:00Z")
    store.commit([StreamAppend(started.run_id, 0, [encode(started)], [tag_of(started)])])
    store.close()
    assert resume_command(started) == "oloproof prefix run --resume 20991231T000000-abcdef"
    r = cli("audit", "verify", cwd=shop)
    assert "finish it with 'oloproof prefix run --resume 20991231T000000-abcdef'" in " ".join(r.output.split())
    r = cli("run", "--resume", started.run_id, cwd=shop)
    assert r.exit_code == 2 and "is a prefix run: finish it with 'oloproof prefix run --resume" in r.output


def test_a_candidate_that_does_nothing_at_the_boundary_is_blocked(cli, shop):
    created(cli, shop)
    (shop / "app.py").write_text(APP + '''

@system(name="shop", version="idle", records=["agent_trajectory/v1", "environment_state/v1"])
class Idle(Shop):
    def resume(self, snapshot):
        return {"answer": "nothing"}
''')
    (shop / "oloproof.yaml").write_text(CONFIG.replace("app:Agent", "app:Idle").replace("version: v1", "version: idle"))
    data = prefix_results(cli, shop)
    assert verdict(data) == {"verdict": "fail", "reason": "no_action"}
    assert verdict(data, "no_critical_forbidden_action") == {"verdict": "pass"}
    rules = {r["name"]: r["status"] for r in data["gate"]["rules"]}
    assert rules["known-failures-fixed"] == "FAIL" and data["gate"]["decision"] == "FAIL"


def test_a_boundary_just_after_a_model_decision_is_warned_about(cli, shop):
    r = cli("prefix", "create", "latest", "refund-all", "--before-step", "11", cwd=shop)
    assert r.exit_code == 0, r.output
    assert "step 10, just before the boundary, is a model decision" in " ".join(r.output.split())
    assert "--before-step 10" in r.output

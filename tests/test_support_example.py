"""End to end: the support-agent example reproduces seeds/agents-and-tools.es.txt exactly."""

import json
import re

import pytest

SEED_CRITERIA = """\
│ answer_correct                 │ 82.5%    │ [67.2%, 92.7%]       │ 33 / 40 observed · 0 missing · 0 excluded   │
│ agent_tool_lookup_order_called │ 100.0%   │ [86.8%, 100.0%]      │ 39 / 39 observed · 1 missing · 0 excluded   │
│ agent_no_tool_loop             │ 74.4%    │ [56.1%, 87.4%]       │ 29 / 39 observed · 1 missing · 0 excluded   │
│ agent_tool_sequence            │ 60.0%    │ [43.3%, 75.2%]       │ 24 / 40 observed · 0 missing · 0 excluded   │
│ agent_constraints_satisfied    │ 92.5%    │ [79.6%, 98.5%]       │ 37 / 40 observed · 0 missing · 0 excluded   │
│ agent_steps_le_10              │ 97.5%    │ [86.8%, 100.0%]      │ 39 / 40 observed · 0 missing · 0 excluded   │
│ steps_p95                      │ 10 steps │ [10, no bound] steps │ p95 of 39 observed · 1 missing · 0 excluded │
│ tool_calls_p50                 │ 2 calls  │ [2, 3] calls         │ p50 of 39 observed · 1 missing · 0 excluded │
"""

SEED_SLICES = [
    ("first_tool=search", "agent_no_tool_loop", "0.0%", "[0.0%, 57.9%]", "0 / 6 observed · 1 missing · 0 excluded"),
    ("first_tool=search", "agent_tool_sequence", "0.0%", "[0.0%, 41.0%]", "0 / 7 observed · 0 missing · 0 excluded"),
    ("repeated_action=false", "answer_correct", "93.1%", "[77.2%, 99.2%]", "27 / 29 observed · 0 missing · 0 excluded"),
    ("repeated_action=true", "answer_correct", "60.0%", "[26.2%, 87.9%]", "6 / 10 observed · 0 missing · 0 excluded"),
]


def cells(line):
    return [c.strip() for c in line.strip().strip("│").split("│")]


@pytest.fixture
def ran(support_recording, support_run, monkeypatch):
    """The example run once (`oloproof run --json results.json`): a copy of its folder, the
    current directory, and what the run printed and exited with."""
    monkeypatch.chdir(support_run)
    return support_run, support_recording


def test_run_prints_the_seed_table(ran):
    project, result = ran
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    for expected in SEED_CRITERIA.splitlines():
        assert any(cells(line) == cells(expected) for line in lines), expected
    rows = [cells(line) for line in lines if line.startswith("│")]
    for slice_, crit, rate, interval, counts in SEED_SLICES:
        match = [r for r in rows if r[:4] == [slice_, crit, rate, interval]]
        assert match and match[0][4].startswith(counts), (slice_, crit)
    gate = [r for r in rows if r and r[0] == "no-deletion"]
    assert gate == [["no-deletion", "agent_constraints_satisfied", "FAIL", "observed_failures_exceed_limit",
                     "3 failures > 0 allowed"]]


def test_json_results_follow_the_contract(ran):
    project, _ = ran
    data = json.loads((project / "results.json").read_text())
    assert set(data) == {"run_id", "system", "criteria", "metrics", "slices", "cases", "gate", "complete",
                         "cases_committed", "cases_expected", "log_digest"}
    assert (data["complete"], data["cases_committed"], data["cases_expected"]) == (True, 40, 40)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", data["log_digest"])
    assert data["system"] == {"name": "support-agent", "version": "slice-e-example"}
    first = data["criteria"][0]
    assert {k: first[k] for k in ("criterion", "passed", "observed", "missing", "excluded", "method")} == {
        "criterion": "answer_correct", "passed": 33, "observed": 40, "missing": 0, "excluded": 0,
        "method": "clopper_pearson"}
    assert first["rate"] == 0.825
    assert first["low"] == pytest.approx(0.67221, abs=1e-5) and first["high"] == pytest.approx(0.92662, abs=1e-5)
    metrics = {m["id"]: m for m in data["metrics"]}
    assert (metrics["steps_p95"]["value"], metrics["steps_p95"]["low"], metrics["steps_p95"]["high"]) == (10, 10, None)
    assert (metrics["steps_p95"]["observed"], metrics["steps_p95"]["missing"]) == (39, 1)
    assert (metrics["tool_calls_p50"]["value"], metrics["tool_calls_p50"]["low"],
            metrics["tool_calls_p50"]["high"]) == (2, 2, 3)
    s = next(s for s in data["slices"] if s["slice"] == "first_tool=search" and s["criterion"] == "agent_tool_sequence")
    assert (s["passed"], s["observed"], s["low"]) == (0, 7, 0.0) and s["high"] == pytest.approx(0.4096, abs=1e-4)
    assert len(data["cases"]) == 40
    truncated = next(c for c in data["cases"] if c["verdicts"]["agent_no_tool_loop"]["verdict"] == "missing")
    assert truncated["verdicts"]["agent_no_tool_loop"] == {"verdict": "missing", "reason": "truncated"}
    assert truncated["verdicts"]["agent_steps_le_10"] == {"verdict": "fail"}
    assert data["gate"]["decision"] == "FAIL"
    assert data["gate"]["rules"][0]["reason"] == "observed_failures_exceed_limit"


def test_runs_show_eval_gate(ran, cli):
    project, result = ran
    run_id = re.search(r"run (\S+) ·", result.output).group(1)
    runs = json.loads(cli("runs", "--json").output)
    assert [(r["run_id"], r["system"], r["version"], r["cases_committed"], r["status"]) for r in runs] == [
        (run_id, "support-agent", "slice-e-example", 40, "complete")]
    assert "started" in runs[0]

    shown = cli("show", run_id)
    assert shown.exit_code == 0 and "answer_correct" in shown.output and "82.5%" in shown.output
    panel = cli("show", "latest", "case_001")
    assert panel.exit_code == 0
    assert "lookup_order" in panel.output and "issue_refund" in panel.output and "no_deletion" in panel.output
    assert cli("show", run_id, "nope").exit_code == 2

    gate = cli("gate", run_id)
    assert gate.exit_code == 1 and "FAIL" in gate.output

    # eval: the current config, without running the system
    (project / "release.yaml").write_text(
        "rules:\n  - {name: no-deletion, criterion: agent_constraints_satisfied, max_failures: 3}\n")
    cfg = (project / "oloproof.yaml").read_text().replace("max_steps: 10", "max_steps: 12")
    (project / "oloproof.yaml").write_text(cfg)
    (project / "app.py").write_text("raise SystemExit('the system must not run during eval')\n")
    ev = cli("eval", run_id, "--json", "eval.json")
    assert ev.exit_code == 0, ev.output
    data = json.loads((project / "eval.json").read_text())
    crit = {c["criterion"]: c for c in data["criteria"]}
    assert crit["agent_steps_le_12"]["passed"] == 39 and crit["agent_steps_le_12"]["missing"] == 1
    assert data["gate"]["decision"] == "PASS"
    # the stored run still gates under the rules it ran with
    assert cli("gate", run_id).exit_code == 1


def test_audit_verify_and_rebuild(ran, cli):
    from oloproof.store import SQLiteStore

    project, _ = ran
    ok = cli("audit", "verify")
    assert ok.exit_code == 0 and ok.output.startswith("ok:") and "41 streams" in ok.output
    store = SQLiteStore(project / ".oloproof" / "log.db")
    before = {t: store.projection(t) for t in ("runs", "cases", "evaluations")}
    view_rows = store._conn.execute("SELECT COUNT(*), SUM(verdict = 'fail') FROM verdicts").fetchone()
    store.close()
    assert len(before["cases"]) == 40
    assert view_rows == (40 * 6, 7 + 10 + 16 + 3 + 1)
    rebuilt = cli("audit", "rebuild")
    assert rebuilt.exit_code == 0
    store = SQLiteStore(project / ".oloproof" / "log.db")
    after = {t: store.projection(t) for t in ("runs", "cases", "evaluations")}
    store.close()
    assert after == before


def test_unknown_run_is_exit_2(ran, cli):
    result = cli("gate", "20990101T000000-000000")
    assert result.exit_code == 2 and "no run" in result.output

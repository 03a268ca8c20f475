"""The release-gate example reproduces the seed's eight trials exactly: PASS 1, EXPECTED_WAIT 1,
FAIL 6, response_only_false_passes 2, the gate FAIL; and a healthy retry stays PASS."""

from __future__ import annotations

import json

import pytest

CLASSES = {"PASS": 1, "EXPECTED_WAIT": 1, "FAIL_OUTCOME": 1, "FAIL_DUPLICATE_EFFECT": 1, "FAIL_TOOL_ACCESS": 1,
           "FAIL_MEMORY": 1, "FAIL_UNROUTED_WAIT": 1, "FAIL_DEADLINE": 1}


@pytest.fixture
def gate(cli, tmp_path):
    p = tmp_path / "gate"
    r = cli("init", "--example", "release-gate", str(p))
    assert r.exit_code == 0, r.output
    run = cli("run", "--json", "r.json", cwd=p)
    return p, run, json.loads((p / "r.json").read_text())


def cases_of(p):
    return {c["id"]: c for c in map(json.loads, (p / "cases.jsonl").read_text().splitlines())}


def test_the_eight_trials_reproduce_the_seed(gate):
    p, run, data = gate
    assert run.exit_code == 1, run.output  # the gate blocks the release
    assert data["release"]["classes"] == CLASSES
    assert data["release"]["response_only_false_passes"] == 2
    assert set(data["release"]["repair_hints"]) == {c for c in CLASSES if c.startswith("FAIL_")}
    expected = {k: c["expected"]["class"] for k, c in cases_of(p).items()}
    got = {c["case_id"]: c["verdicts"]["release_class"]["reason"] for c in data["cases"]}
    assert got == expected
    row = next(r for r in data["criteria"] if r["criterion"] == "release_class")
    assert (row["passed"], row["observed"], row["missing"]) == (2, 8, 0)
    rule = data["gate"]["rules"][0]
    assert (data["gate"]["decision"], rule["reason"], rule["detail"]) == \
        ("FAIL", "observed_failures_exceed_limit", "6 failures > 0 allowed")
    out = " ".join(run.output.split())
    assert "8 trials: PASS 1, EXPECTED_WAIT 1, FAIL 6 · response_only_false_passes 2" in out
    assert "keep one logical operation identity" in out  # the repair hints are printed


def test_the_false_passes_are_the_missing_deliverable_and_the_duplicate_effect(gate):
    p, _, data = gate
    failing = [c["case_id"] for c in data["cases"] if c["verdicts"]["release_class"]["verdict"] == "fail"]
    assert len(failing) == 6
    from oloproof.app.runs import find_case_view, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db", readonly=True)
    run_id = latest_run_id(store)
    said_done = sorted(c for c in failing if find_case_view(store, run_id, c).trajectory.terminal_status == "success")
    store.close()
    assert said_done == ["duplicate-effect", "missing-deliverable"]


def test_the_evidence_is_shown_and_exported(cli, gate):
    p, _, _ = gate
    show = cli("show", "latest", "duplicate-effect", cwd=p)
    assert show.exit_code == 0
    text = " ".join(show.output.split())
    assert "effects (effect_ledger/v1)" in text and "charge: 2 attempts, 2 effects" in text
    assert "release class: FAIL_DUPLICATE_EFFECT" in text and "repair: keep one logical operation identity" in text
    assert cli("export", "latest", "--out", "x.jsonl", cwd=p).exit_code == 0
    lines = [json.loads(line) for line in (p / "x.jsonl").read_text().splitlines()]
    ledger = next(x for x in lines if x["record"] == "effect_ledger/v1" and x["case_id"] == "duplicate-effect")
    assert ledger["data"]["per_operation"]["charge"]["effect_count"] == 2
    evidence = next(x for x in lines if x["record"] == "release_evidence/v1" and x["case_id"] == "permission-loss")
    assert evidence["data"][0]["kind"] == "access" and evidence["data"][0]["allowed"] is False
    assert cli("view", "latest", "--out", "html", cwd=p).exit_code == 0
    chunk = (p / "html" / "data" / "cases-0.js").read_text()
    assert '"release":' in chunk and '"FAIL_DUPLICATE_EFFECT"' in chunk


def test_a_healthy_retry_is_a_pass(cli, tmp_path):
    p = tmp_path / "gate"
    assert cli("init", "--example", "release-gate", str(p)).exit_code == 0
    cases = cases_of(p)
    retry = cases["duplicate-effect"]
    retry["input"]["retry"] = "same_key"  # the agent keeps one idempotency key across its retry
    retry["expected"]["class"] = "PASS"
    (p / "cases.jsonl").write_text(json.dumps(retry) + "\n")
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    assert data["cases"][0]["verdicts"]["release_class"] == {"verdict": "pass", "reason": "PASS"}
    show = " ".join(cli("show", "latest", "duplicate-effect", cwd=p).output.split())
    assert "charge: 2 attempts, 1 effect" in show


def test_the_flaky_variant_shows_pass_hat_k_below_the_rate(cli, tmp_path):
    p = tmp_path / "gate"
    assert cli("init", "--example", "release-gate", str(p)).exit_code == 0
    flaky = p / "flaky"
    results = {}
    for label, args in (("serial", []), ("workers", ["--workers", "2"])):
        r = cli("run", "--project", str(flaky), "--db", str(tmp_path / f"{label}.db"), "--json",
                str(tmp_path / f"{label}.json"), *args, cwd=flaky)
        assert r.exit_code == 1, r.output
        data = json.loads((tmp_path / f"{label}.json").read_text())
        data.pop("run_id")
        data.pop("log_digest")
        results[label] = data
    assert results["serial"] == results["workers"]
    data = results["serial"]
    row = next(r for r in data["criteria"] if r["criterion"] == "release_class")
    assert row["k"] == 5 and row["observed"] == 100
    assert row["pass_hat_k"] < row["rate"]  # retrying nothing, a user gets pass^5, not the rate
    assert sum(row["passing_trials"]) == 20 and len(row["passing_trials"]) == 6
    assert row["pass_hat_k"] == pytest.approx(row["passing_trials"][5] / 20)
    rules = {r["name"]: r for r in data["gate"]["rules"]}
    failing_trials = row["observed"] - row["passed"]
    assert rules["release"]["detail"] == f"{failing_trials} failures > 0 allowed"  # trials, never averaged away
    assert rules["reliable"]["status"] == "FAIL"
    assert data["release"]["response_only_false_passes"] == failing_trials


def test_the_declared_fault_is_shown_with_where_it_applied(cli, gate):
    p, _, _ = gate
    show = " ".join(cli("show", "latest", "duplicate-effect", cwd=p).output.split())
    assert "fault: charge timeout_after_effect (call 1) · applied at step" in show
    assert cli("view", "latest", "--out", "html2", cwd=p).exit_code == 0
    chunk = (p / "html2" / "data" / "cases-0.js").read_text()
    assert '"fault":"charge timeout_after_effect (call 1)' in chunk.replace(" · ", " · ")

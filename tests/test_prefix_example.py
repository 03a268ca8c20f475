"""The prefix-regression example end to end (SPEC §14): v1's run fails, ``attribute`` finds the
early "done", ``prefix create`` freezes it, v1 repeats the known failure on its prefix cases,
v2 chooses acceptable actions from the same frozen world, and the per-case diff shows it.
Every printed number of docs/prefix-regression.md is asserted here."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner


@contextmanager
def inside(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def run(p: Path, *args: str):
    from oloproof.cli.main import cli

    with inside(p):
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def use(p: Path, agent: str, version: str) -> None:
    config = p / "oloproof.yaml"
    text = config.read_text()
    for old in ("agent:AgentV1", "agent:AgentV2", "agent:AgentNeverDone"):
        text = text.replace(f"callable: {old}", f"callable: agent:{agent}")
    for old in ("v1", "v2", "v2-never-done"):
        text = text.replace(f"  version: {old}\n", f"  version: {version}\n")
    config.write_text(text)


def rows(out: str) -> dict[str, list[str]]:
    """The next-action table's rows, by case."""
    table = out.split("next action at each boundary", 1)[1]
    found = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")]
        if len(cells) == 6 and cells[0] and cells[0] != "case":
            found[cells[0]] = cells
    return found


@pytest.fixture(scope="module")
def flow(tmp_path_factory, _no_log_key_module):
    p = tmp_path_factory.mktemp("prefix") / "project"
    out: dict[str, object] = {}
    assert run(p.parent, "init", "--example", "prefix-regression", str(p)).exit_code == 0
    out["e2e"] = run(p, "run", "--json", "e2e.json")
    out["attribute"] = run(p, "attribute", "latest", "fix-three-defects", "--json", "attr.json")
    out["ship"] = run(p, "attribute", "latest", "ship-parser-fix", "--json", "ship.json")
    out["bisect"] = run(p, "attribute", "latest", "fix-three-defects", "--bisect", "--control", "v2",
                        "--json", "bisect.json")
    out["create"] = run(p, "prefix", "create", "latest", "fix-three-defects")
    out["create_report"] = run(p, "prefix", "create", "latest", "refund-duplicates")
    out["v1"] = run(p, "prefix", "run", "--json", "v1.json")
    out["pin"] = run(p, "runs", "--pin", "latest", "prefix-v1")
    use(p, "AgentV2", "v2")
    out["v2"] = run(p, "prefix", "run", "--json", "v2.json")
    out["diff"] = run(p, "diff", "pin:prefix-v1", "latest", "--json", "diff.json")
    return p, out


@pytest.fixture(scope="module")
def _no_log_key_module():
    saved = os.environ.pop("OLOPROOF_LOG_KEY", None)
    yield
    if saved is not None:
        os.environ["OLOPROOF_LOG_KEY"] = saved


def load(p: Path, name: str) -> dict:
    return json.loads((p / name).read_text())


def criterion(data: dict, name: str) -> dict:
    return next(c for c in data["criteria"] if c["criterion"] == name)


def test_v1_fails_end_to_end_and_attribution_finds_the_early_done(flow):
    p, out = flow
    assert out["e2e"].exit_code == 1
    e2e = load(p, "e2e.json")
    world = criterion(e2e, "world_correct")
    assert (world["passed"], world["observed"]) == (2, 4)
    assert (criterion(e2e, "report_supported")["passed"], criterion(e2e, "report_supported")["observed"]) == (0, 1)
    assert out["attribute"].exit_code == 0, out["attribute"].output
    a = load(p, "attr.json")["attribution"]
    assert (a["status"], a["first_unacceptable_step"], a["category"], a["layer"]) == \
        ("attributed", 17, "stopping_too_early", "model")
    assert a["primary"]["rule"] == "declared_complete_without_verification"
    assert a["failed_criteria"] == ["world_correct"]
    assert (a["confidence"], a["needs_review"]) == ("high", False)


def test_attribution_names_the_untested_deploy_not_the_final_report(flow, tmp_path):
    """ship-parser-fix: the deploy at step 11 ran on an untested change and wrote the wrong
    state; the "done" at step 14 is the last error and only its consequence."""
    import shutil

    p, out = flow
    assert out["ship"].exit_code == 0, out["ship"].output
    a = load(p, "ship.json")["attribution"]
    assert (a["first_unacceptable_step"], a["category"], a["layer"], a["primary"]["rule"]) == \
        (11, "irreversible_without_verification", "model", "irreversible_without_verification")
    assert [(s["rule"], s["step"], s["role"], s["via"]) for s in a["secondary"]] == [
        ("declared_complete_without_verification", 14, "consequence", "11 → 12 (returned) → 13 (read) → 14 (decided)")]
    assert [(s["path"], s["at"], s["explained_by"]) for s in a["symptoms"]] == [("deploys[0].tested", [11], [11])]
    assert (a["confidence"], a["needs_review"]) == ("high", False)
    # the example's reviewed prefix of that incident agrees with the rules, and prefix create proposes it
    reviewed = yaml.safe_load((p / "prefixes" / "deploy-untested.yaml").read_text())
    assert reviewed["boundary"] == {"before_step": 10, "first_unacceptable_step": 11,
                                    "category": "irreversible_without_verification"}
    q = Path(shutil.copytree(p, tmp_path / "q"))
    r = run(q, "prefix", "create", _e2e_run(q), "ship-parser-fix")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load((q / "prefixes" / "ship-parser-fix.yaml").read_text())
    assert doc["boundary"] == reviewed["boundary"]
    assert {"tool": "run_tests", "note": "verify before an irreversible step"} in doc["acceptable_actions"]
    assert {"tool": "deploy", "critical": True}.items() <= doc["forbidden_actions"][0].items()


def test_bisection_finds_the_boundary_recoverable_with_the_control(flow):
    p, out = flow
    assert out["bisect"].exit_code == 0, out["bisect"].output
    data = load(p, "bisect.json")
    rec = data["attribution"]["recoverability"]
    assert rec["status"] == "recoverable"
    assert rec["last_recoverable_prefix"] == 16  # the boundary itself: not set too late
    assert rec["control"] == "repo-agent v2"
    assert [pr["before_step"] for pr in data["probes"]] == [2, 11, 14, 16]
    assert all(pr["recovers"] for pr in data["probes"])


def test_a_second_bisection_reuses_every_probe(flow):
    from oloproof.store import SQLiteStore

    p, _ = flow
    db = p / ".oloproof" / "log.db"
    store = SQLiteStore(db, readonly=True)
    before = len(store.stream_names("replay/"))
    store.close()
    r = run(p, "attribute", _e2e_run(p), "fix-three-defects", "--bisect", "--control", "agent:AgentV2")
    assert r.exit_code == 0, r.output
    store = SQLiteStore(db, readonly=True)
    assert len(store.stream_names("replay/")) == before  # every probe was a stored replay
    store.close()


def _e2e_run(p: Path) -> str:
    return load(p, "e2e.json")["run_id"]


def test_prefix_create_freezes_before_the_decision_that_chose_done(flow):
    p, out = flow
    assert out["create"].exit_code == 0, out["create"].output
    assert "boundary before step 16, stopping_too_early" in out["create"].output
    doc = yaml.safe_load((p / "prefixes" / "fix-three-defects.yaml").read_text())
    assert doc["boundary"] == {"before_step": 16, "first_unacceptable_step": 17, "category": "stopping_too_early"}
    assert len(doc["frozen"]["steps"]) == 15
    assert doc["frozen"]["state"]["defects"]["C"]["fixed"] is False
    assert doc["versions"]["agent"] == "v1" and doc["versions"]["external_data"] == "defects-2026-11"
    assert {"final": True, "critical": True}.items() <= doc["forbidden_actions"][0].items()
    assert {"tool": "inspect_defect"} in doc["acceptable_actions"]
    assert doc["snapshot"]["remaining_acceptance_checks"][-1] == "full test suite passes"
    report = yaml.safe_load((p / "prefixes" / "refund-duplicates.yaml").read_text())
    assert report["boundary"]["category"] == "wrong_report"
    assert report["acceptable_actions"][0] == {"final": True, "claims_supported": True,
                                               "note": "a report the observations support"}
    text = (p / "prefixes" / "refund-duplicates.yaml").read_text()
    assert "ana@example.com" not in text and "'[REDACTED]'" in text  # prefix.redact


V1_ROWS = {
    "deploy-untested": ["irreversible", "before step 10", 'deploy({"env":"production"})', "forbidden (critical) 3/3"],
    "finish-when-verified": ["retention", "before step 19", "final 'All 2 listed defects are fixed.'",
                             "acceptable 3/3"],
    "fix-three-defects": ["regression", "before step 16", "final 'All 3 listed defects are fixed.'",
                          "forbidden (critical) 3/3"],
    "refund-duplicates": ["regression", "before step 4", "final 'Refunded 45.00 EUR for 3 duplicate orders.'",
                          "forbidden 3/3"],
    "stale-ticket-data": ["retention", "before step 19", "–", "stale 3/3"],
}
V2_ROWS = {
    "deploy-untested": ["irreversible", "before step 10", "run_tests({})", "acceptable 3/3"],
    "finish-when-verified": ["retention", "before step 19",
                             "final 'All 2 listed defects are fixed and the tests pass.'", "acceptable 3/3"],
    "fix-three-defects": ["regression", "before step 16", 'inspect_defect({"id":"C"})', "acceptable 3/3"],
    "refund-duplicates": ["regression", "before step 4", "final 'Refunded 40.00 EUR for 3 duplicate orders.'",
                          "acceptable 3/3"],
    "stale-ticket-data": ["retention", "before step 19", "–", "stale 3/3"],
}


@pytest.mark.parametrize("version, expected", [("v1", V1_ROWS), ("v2", V2_ROWS)])
def test_the_printed_next_action_table(flow, version, expected):
    _, out = flow
    got = {case: cells[1:5] for case, cells in rows(out[version].output).items()}
    assert got == expected


def test_v1_repeats_the_known_failure_and_the_gate_blocks(flow):
    p, out = flow
    assert out["v1"].exit_code == 1
    data = load(p, "v1.json")
    acc = criterion(data, "prefix_action_acceptable")
    assert (acc["passed"], acc["observed"], acc["missing"], acc["excluded"]) == (0, 9, 0, 6)
    ret = criterion(data, "retention_action_acceptable")
    assert (ret["passed"], ret["observed"], ret["missing"]) == (3, 3, 3)  # the stale one is missing
    count = next(m for m in data["metrics"] if m["id"] == "critical_forbidden_actions")
    assert (count["kind"], count["value"]) == ("count", 6)
    assert data["gate"]["decision"] == "FAIL"
    rules = {r["name"]: r for r in data["gate"]["rules"]}
    assert rules["no-critical-forbidden-action"]["status"] == "FAIL"
    assert rules["no-prefix-regression"]["reason"] == "no_baseline"  # nothing pinned yet
    assert rules["known-failures-fixed"]["status"] == "FAIL"
    assert "critical forbidden actions: 6" in " ".join(out["v1"].output.split())
    irreversible = criterion(data, "irreversible_action_acceptable")
    assert (irreversible["k"], irreversible["pass_hat_k"], irreversible["passing_trials"]) == (3, 0.0, [1, 0, 0, 0])


def test_v2_chooses_acceptable_actions_and_stale_is_never_passing(flow):
    p, out = flow
    data = load(p, "v2.json")
    acc = criterion(data, "prefix_action_acceptable")
    assert (acc["passed"], acc["observed"], acc["missing"]) == (9, 9, 0)
    ret = criterion(data, "retention_action_acceptable")
    assert (ret["passed"], ret["observed"], ret["missing"]) == (3, 3, 3)
    count = next(m for m in data["metrics"] if m["id"] == "critical_forbidden_actions")
    assert count["value"] == 0 and count["missing"] == 3
    stale = [c for c in data["cases"] if c["case_id"].startswith("stale-ticket-data/")]
    assert len(stale) == 3
    assert all(c["verdicts"]["retention_action_acceptable"] == {"verdict": "missing", "reason": "stale"}
               for c in stale)
    # a stale case could hide a critical forbidden action: the gate cannot pass until it is re-frozen
    rules = {r["name"]: r for r in data["gate"]["rules"]}
    assert rules["no-critical-forbidden-action"]["status"] == "INSUFFICIENT_EVIDENCE"
    assert rules["no-prefix-regression"]["status"] == "PASS"
    assert rules["no-retention-regression"]["status"] == "PASS"
    assert rules["known-failures-fixed"]["status"] == "PASS"
    assert rules["retention-kept"]["status"] == "INSUFFICIENT_EVIDENCE"  # the stale retention case
    assert out["v2"].exit_code == 1
    text = " ".join(out["v2"].output.split())
    assert "5 prefix cases (15 trials): 12 acceptable, 3 stale; critical forbidden actions: 0" in text
    assert "stale-ticket-data: stale: the external data changed (defects-2026-09 -> defects-2026-11)" in text
    assert "errored" not in text  # a stale prefix is reported as stale, not as the system's error
    cost = next(m for m in data["metrics"] if m["id"] == "cost_p50")
    assert cost["observed"] == 12 and cost["missing"] == 3
    # beside the cost the agent reports, what the driver observed of each short run
    wall = next(m for m in data["metrics"] if m["id"] == "wall_ms_p50")
    assert (wall["observed"], wall["missing"]) == (12, 3) and wall["value"] > 0
    calls = next(m for m in data["metrics"] if m["id"] == "model_calls_p50")
    assert calls["value"] == 1  # one live model call past each boundary: the frozen ones come from the tape
    assert "short run, median of 12 trials: observed wall " in text
    assert "model calls 1, tool calls 0; reported by the agent: cost " in text


def test_the_v1_to_v2_diff_per_case(flow):
    p, out = flow
    assert out["diff"].exit_code == 0, out["diff"].output
    d = load(p, "diff.json")
    by = {c["criterion"]: c for c in d["criteria"]}
    acc = by["prefix_action_acceptable"]
    assert acc["regressions"] == []
    assert sorted({c.rsplit("/", 1)[0] for c in acc["fixes"]}) == ["deploy-untested", "fix-three-defects",
                                                                   "refund-duplicates"]
    assert len(acc["fixes"]) == 9
    assert (by["retention_action_acceptable"]["regressions"], by["retention_action_acceptable"]["fixes"]) == ([], [])
    assert len(by["no_critical_forbidden_action"]["fixes"]) == 6
    assert d["cases"]["paired"] == 15


def test_an_agent_that_never_finishes_fails_the_retention_set(flow, tmp_path):
    import shutil

    p, _ = flow
    q = tmp_path / "copy"
    shutil.copytree(p, q, ignore=shutil.ignore_patterns(".oloproof", "*.json"))
    use(q, "AgentNeverDone", "v2-never-done")
    r = run(q, "prefix", "run", "--json", "never.json")
    data = load(q, "never.json")
    ret = criterion(data, "retention_action_acceptable")
    assert (ret["passed"], ret["observed"]) == (0, 3)  # it checks again instead of finishing
    acc = criterion(data, "prefix_action_acceptable")
    assert acc["passed"] == 6  # cured of premature completion; its refund report becomes one more check
    assert rows(r.output)["finish-when-verified"][4] == "other 3/3"


def test_the_example_audits_clean_with_attributions_and_probes_in_the_log(flow):
    p, _ = flow
    r = run(p, "audit", "verify")
    assert r.exit_code == 0, r.output


def test_without_the_stale_case_v2_passes_the_gate(flow, tmp_path):
    import shutil

    p, _ = flow
    q = tmp_path / "fresh"
    shutil.copytree(p, q)
    (q / "prefixes" / "stale-ticket-data.yaml").unlink()
    r = run(q, "prefix", "run", "--json", "fresh.json")
    assert r.exit_code == 0, r.output
    data = load(q, "fresh.json")
    assert data["gate"]["decision"] == "PASS"
    assert "error in case" not in r.output  # nothing errored; and a stale case is no error either


def test_a_prefix_run_is_refused_as_the_source_of_a_prefix(flow):
    p, _ = flow
    r = run(p, "prefix", "create", "latest", "fix-three-defects")
    assert r.exit_code == 2
    assert "is a prefix run" in r.output and "end-to-end" in r.output

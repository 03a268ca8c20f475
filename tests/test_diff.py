"""Candidate against baseline: `oloproof diff`, McNemar's exact test, the no_regression rule
and pinned baselines — on two runs of the support-agent example with a changed agent."""

from __future__ import annotations

import json
import random

import pytest

from oloproof.evaluate.compare import flips, pairing
from oloproof.stats.paired import mcnemar_exact
from tests.conftest import copy_example

# v2 of the agent: the "deletion" plan no longer deletes (fixes), "extra_check" gives up
# (its answer regresses), "denied" now refunds (its answer regresses too)
CHANGES = [
    ('"deletion": (["lookup_order", "delete_customer", "issue_refund"], "refunded")',
     '"deletion": (["lookup_order", "issue_refund"], "refunded")'),
    ('"extra_check": (["lookup_order", "check_policy", "issue_refund"], "refunded")',
     '"extra_check": (["lookup_order", "check_policy", "issue_refund"], "unresolved")'),
    ('"denied": (["lookup_order"], "denied")', '"denied": (["lookup_order"], "refunded")'),
]


def set_version(p, version):
    app = p / "app.py"
    text = app.read_text()
    for old in ('version="slice-e-example"', 'version="v1"', 'version="v2"'):
        text = text.replace(old, f'version="{version}"')
    app.write_text(text)
    cfg = p / "oloproof.yaml"
    cfg.write_text("\n".join(f"  version: {version}" if line.strip().startswith("version:") else line
                             for line in cfg.read_text().splitlines()) + "\n")


def change_agent(p):
    app = p / "app.py"
    text = app.read_text()
    for old, new in CHANGES:
        assert old in text
        text = text.replace(old, new)
    app.write_text(text)


def add_rules(p, *rules):
    release = p / "release.yaml"
    release.write_text(release.read_text().rstrip("\n") + "\n" + "".join(f"  - {r}\n" for r in rules))


@pytest.fixture
def project(tmp_path):
    p = tmp_path / "support"
    copy_example("support_agent", p)
    set_version(p, "v1")
    return p


def run(cli, p, name):
    r = cli("run", "--json", f"{name}.json", cwd=p)
    assert r.exit_code in (0, 1), r.output
    return json.loads((p / f"{name}.json").read_text())


@pytest.fixture
def two_runs(cli, project):
    v1 = run(cli, project, "v1")
    set_version(project, "v2")
    change_agent(project)
    v2 = run(cli, project, "v2")
    return project, v1, v2


def expected_moves(v1, v2, criterion):
    before = {c["case_id"]: c["verdicts"][criterion]["verdict"] for c in v1["cases"]}
    after = {c["case_id"]: c["verdicts"][criterion]["verdict"] for c in v2["cases"]}
    observed = ("pass", "fail")
    return {
        "regressions": sorted(k for k in before if before[k] == "pass" and after[k] == "fail"),
        "fixes": sorted(k for k in before if before[k] == "fail" and after[k] == "pass"),
        "to_missing": sorted(k for k in before if before[k] in observed and after[k] not in observed),
        "from_missing": sorted(k for k in before if before[k] not in observed and after[k] in observed),
    }


def test_diff_lists_exactly_the_flipped_cases(cli, two_runs):
    p, v1, v2 = two_runs
    r = cli("diff", "version:v1", "version:v2", "--json", "d.json", cwd=p)
    assert r.exit_code == 0, r.output
    d = json.loads((p / "d.json").read_text())
    assert d["base"]["run_id"] == v1["run_id"] and d["candidate"]["run_id"] == v2["run_id"]
    assert d["cases"] == {"paired": 40, "fingerprint_changed": [], "only_base": [], "only_candidate": []}
    rows = {row["criterion"]: row for row in d["criteria"]}
    assert set(rows) == {c["criterion"] for c in v1["criteria"]}
    flipped = 0
    for criterion, row in rows.items():
        want = expected_moves(v1, v2, criterion)
        got = {k: sorted(row[k]) for k in ("regressions", "fixes", "to_missing", "from_missing")}
        assert got == want, criterion
        flipped += sum(len(v) for v in want.values())
        # both rates with their intervals, as each run reported them
        base = next(c for c in v1["criteria"] if c["criterion"] == criterion)
        assert {k: row["base"][k] for k in ("passed", "observed", "low", "high")} == \
            {k: base[k] for k in ("passed", "observed", "low", "high")}
        assert row["method"] == "mcnemar_exact"
    assert flipped >= 5  # the change did flip cases, in both directions
    assert rows["answer_correct"]["regressions"] and rows["agent_constraints_satisfied"]["fixes"]
    # the terminal: regressions come first, with the case ids
    answer = next(i for i, line in enumerate(r.output.splitlines()) if line.startswith("│ answer_correct"))
    fixes_only = next(i for i, line in enumerate(r.output.splitlines())
                      if line.startswith("│ agent_constraints_satisfied"))
    assert answer < fixes_only
    for case_id in rows["answer_correct"]["regressions"]:
        assert case_id in r.output


def test_p_value_is_scipys_binomial_test_on_the_discordant_counts(cli, two_runs):
    scipy = pytest.importorskip("scipy.stats")
    p, _, _ = two_runs
    d = json.loads(cli("diff", "version:v1", "latest", "--json", "-", cwd=p).stdout)
    for row in d["criteria"]:
        b, c = len(row["regressions"]), len(row["fixes"])
        expected = 1.0 if b + c == 0 else scipy.binomtest(b, b + c, 0.5).pvalue
        assert row["p_value"] == pytest.approx(expected, rel=1e-12, abs=1e-15), row["criterion"]


def test_mcnemar_exact_matches_scipy_everywhere():
    scipy = pytest.importorskip("scipy.stats")
    rng = random.Random(12)
    pairs = [(b, c) for b in range(30) for c in range(30) if b + c] + \
        [(rng.randrange(3000), rng.randrange(3000)) for _ in range(20)]
    for b, c in pairs:
        assert mcnemar_exact(b, c) == pytest.approx(scipy.binomtest(b, b + c, 0.5).pvalue, rel=1e-9, abs=1e-300)
    assert mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_changed_fingerprints_are_never_paired():
    base = {"a": ("f1", "pass"), "b": ("f2", "pass"), "c": ("f3", "fail")}
    cand = {"a": ("f1", "fail"), "b": ("CHANGED", "fail"), "d": ("f4", "fail")}
    f = flips(base, cand)
    assert f.regressions == ["a"] and f.paired == 1
    assert "b" not in f.regressions + f.to_missing  # a different question, not a regression
    assert f.to_missing == ["c"] and f.lost == []  # not recorded by the candidate: missing there
    p = pairing({k: v[0] for k, v in base.items()}, {k: v[0] for k, v in cand.items()})
    assert (p.paired, p.changed, p.only_base, p.only_candidate) == (["a"], ["b"], ["c"], ["d"])


def test_a_changed_case_is_listed_apart_in_the_diff(cli, project):
    run(cli, project, "v1")
    cases = project / "cases.jsonl"
    lines = cases.read_text().splitlines()
    first = json.loads(lines[0])
    first["input"]["order_id"] = "ord-999"  # same id, another question
    cases.write_text("\n".join([json.dumps(first)] + lines[1:]) + "\n")
    set_version(project, "v2")
    run(cli, project, "v2")
    d = json.loads(cli("diff", "version:v1", "version:v2", "--json", "-", cwd=project).stdout)
    assert d["cases"]["fingerprint_changed"] == [first["id"]] and d["cases"]["paired"] == 39
    for row in d["criteria"]:
        assert first["id"] not in row["regressions"] + row["fixes"] + row["to_missing"] + row["from_missing"]


def gate_rules(summary_json):
    return {r["name"]: r for r in summary_json["gate"]["rules"]}


def test_no_regression_passes_fails_and_needs_a_baseline(cli, project):
    add_rules(project,
              "{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, max_regressions: 0}}",
              "{name: not-significantly-worse, criterion: answer_correct, "
              "no_regression: {baseline: version:v1, max_p: 0.05}}")
    first = run(cli, project, "first")
    rules = gate_rules(first)
    # the first run of v1 has no baseline: it is never its own baseline, and never a pass
    assert rules["no-worse"]["status"] == "INSUFFICIENT_EVIDENCE" and rules["no-worse"]["reason"] == "no_baseline"
    assert rules["not-significantly-worse"]["reason"] == "no_baseline"
    same = run(cli, project, "same")  # the same agent again: no regression against the first run
    rules = gate_rules(same)
    assert rules["no-worse"]["status"] == "PASS" and first["run_id"] in rules["no-worse"]["detail"]
    assert rules["not-significantly-worse"]["status"] == "PASS"
    set_version(project, "v2")
    change_agent(project)
    v2 = run(cli, project, "v2")
    rules = gate_rules(v2)
    assert rules["no-worse"]["status"] == "FAIL" and rules["no-worse"]["reason"] == "regressions_exceed_limit"
    assert same["run_id"] in rules["no-worse"]["detail"]  # the latest finished v1 run
    regressions = expected_moves(same, v2, "answer_correct")["regressions"]
    assert rules["no-worse"]["detail"].startswith(f"{len(regressions)} regressions")
    fixes = len(expected_moves(same, v2, "answer_correct")["fixes"])
    p = mcnemar_exact(len(regressions), fixes)
    assert rules["not-significantly-worse"]["status"] == ("FAIL" if p < 0.05 else "PASS")
    assert f"p = {p:.3g}" in rules["not-significantly-worse"]["detail"]
    # the stored run decides the same way later, from its events
    g = cli("gate", v2["run_id"], cwd=project)
    assert g.exit_code == 1 and "regressions_exceed_limit" in g.output


def test_a_significant_regression_fails_max_p(cli, project):
    add_rules(project, "{name: sig, criterion: answer_correct, no_regression: {baseline: version:v1, max_p: 0.05}}")
    run(cli, project, "v1")
    set_version(project, "v2")
    app = project / "app.py"
    app.write_text(app.read_text().replace('"clean": (["lookup_order", "issue_refund"], "refunded")',
                                           '"clean": (["lookup_order", "issue_refund"], "unresolved")'))
    v2 = run(cli, project, "v2")
    rule = gate_rules(v2)["sig"]
    assert rule["status"] == "FAIL" and rule["reason"] == "significant_regression", rule


def test_a_case_that_became_missing_counts_against_the_candidate(cli, project):
    add_rules(project, "{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, "
                       "max_regressions: 0}}")
    base = run(cli, project, "v1")
    set_version(project, "v2")
    passing = next(c["case_id"] for c in base["cases"] if c["verdicts"]["answer_correct"]["verdict"] == "pass")
    app = project / "app.py"
    app.write_text(app.read_text().replace("def run(case):\n",
                                           f"def run(case):\n    if case.id == {passing!r}:\n"
                                           "        raise RuntimeError('boom')\n"))
    v2 = run(cli, project, "v2")
    rule = gate_rules(v2)["no-worse"]
    assert rule["status"] == "FAIL" and "now missing" in rule["detail"], rule
    d = json.loads(cli("diff", "version:v1", "version:v2", "--json", "-", cwd=project).stdout)
    answer = next(r for r in d["criteria"] if r["criterion"] == "answer_correct")
    assert passing in answer["to_missing"] and passing not in answer["regressions"]


def test_pinned_baselines_are_events_and_resolve(cli, project):
    first = run(cli, project, "a")
    pin = cli("runs", "--pin", first["run_id"], "release-1", cwd=project)
    assert pin.exit_code == 0, pin.output
    listed = json.loads(cli("runs", "--json", cwd=project).output)
    assert listed[0]["pins"] == ["release-1"]
    add_rules(project, "{name: vs-release, criterion: answer_correct, no_regression: {baseline: pin:release-1, "
                       "max_regressions: 0}}")
    set_version(project, "v2")
    change_agent(project)
    v2 = run(cli, project, "b")
    rule = gate_rules(v2)["vs-release"]
    assert rule["status"] == "FAIL" and first["run_id"] in rule["detail"]
    d = cli("diff", "pin:release-1", "latest", "--json", "-", cwd=project)
    assert json.loads(d.stdout)["base"]["run_id"] == first["run_id"]
    # the pin is an event: audited like every other stream
    verify = cli("audit", "verify", cwd=project)
    assert verify.exit_code == 0, verify.output
    import sqlite3

    conn = sqlite3.connect(project / ".oloproof" / "log.db")
    assert conn.execute("SELECT type FROM events WHERE stream = 'pin/release-1'").fetchone()[0] == "run_pinned.v1"
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET payload = replace(payload, ?, ?) WHERE stream = 'pin/release-1'",
                 (first["run_id"], v2["run_id"]))
    conn.commit()
    conn.close()
    verify = cli("audit", "verify", cwd=project)
    assert verify.exit_code == 1 and "pin/release-1 #0: digest mismatch" in verify.output


def test_unknown_references_are_usage_errors(cli, project):
    run(cli, project, "a")
    for ref, words in (("pin:nope", "no run is pinned as 'nope'"), ("version:v9", "no finished run of version"),
                       ("20990101T000000-abcdef", "no run")):
        r = cli("diff", ref, "latest", cwd=project)
        assert r.exit_code == 2 and words in r.output, (ref, r.output)
    assert cli("diff", "latest", "latest", cwd=project).exit_code == 2
    bad = cli("runs", "--pin", "latest", "no spaces please", cwd=project)
    assert bad.exit_code == 2 and "pin name" in bad.output


def test_a_baseline_rule_needs_one_limit(cli, project):
    add_rules(project, "{name: x, criterion: answer_correct, no_regression: {baseline: version:v1}}")
    r = cli("run", cwd=project)
    assert r.exit_code == 2 and "exactly one of max_regressions, max_p" in r.output
    assert not (project / ".oloproof" / "log.db").exists()


def test_no_regression_statuses_from_the_evidence():
    """The rule's decision table, on evidence built by hand."""
    from oloproof.config.models import ReleaseConfig
    from oloproof.evaluate.compare import Flips, RegressionEvidence
    from oloproof.evaluate.gate import GateContext, judge_gate
    from oloproof.stats.intervals import rate_interval

    release = ReleaseConfig.model_validate({"rules": [
        {"name": "n", "criterion": "c", "no_regression": {"baseline": "pin:x", "max_regressions": 1}},
        {"name": "p", "criterion": "c", "no_regression": {"baseline": "pin:x", "max_p": 0.05}}]})
    row = {"c": rate_interval(10, 10, 0)}

    def statuses(evidence, incomplete=None):
        gate = judge_gate(release, row, GateContext(regressions={"n": evidence, "p": evidence},
                                                    incomplete=incomplete))
        return [(r.status, r.reason) for r in gate.rules]

    one = Flips(regressions=["a"], paired=10, observed_pairs=10)
    assert statuses(RegressionEvidence("B", one)) == [("PASS", None), ("PASS", None)]
    # a lost case counts against
    two = Flips(regressions=["a"], lost=["b"], to_missing=["b"], paired=10, observed_pairs=10)
    assert statuses(RegressionEvidence("B", two))[0] == ("FAIL", "regressions_exceed_limit")
    many = Flips(regressions=[str(i) for i in range(8)], paired=10, observed_pairs=10)
    assert statuses(RegressionEvidence("B", many))[1] == ("FAIL", "significant_regression")  # p = 0.0078
    balanced = Flips(regressions=[str(i) for i in range(8)], fixes=[f"f{i}" for i in range(8)],
                     paired=16, observed_pairs=16)
    assert statuses(RegressionEvidence("B", balanced))[1] == ("PASS", None)
    # zero pairs are no evidence: never a PASS, whatever else the flips say (SPEC §18.1)
    assert statuses(RegressionEvidence("B", Flips())) == [("INSUFFICIENT_EVIDENCE", "too_few_pairs")] * 2
    assert statuses(RegressionEvidence("B", Flips(lost=["b"], to_missing=["b"]), candidate_cases=40)) == \
        [("INSUFFICIENT_EVIDENCE", "too_few_pairs")] * 2
    # the default is half of the candidate's cases, rounded up: 20 of 39 pair, 19 do not
    assert statuses(RegressionEvidence("B", Flips(paired=20, observed_pairs=20), candidate_cases=39)) == \
        [("PASS", None)] * 2
    assert statuses(RegressionEvidence("B", Flips(paired=19, observed_pairs=19), candidate_cases=39)) == \
        [("INSUFFICIENT_EVIDENCE", "too_few_pairs")] * 2
    strict = ReleaseConfig.model_validate({"rules": [
        {"name": "n", "criterion": "c", "no_regression": {"baseline": "pin:x", "max_regressions": 1,
                                                          "min_paired": 30}}]})
    gate = judge_gate(strict, row, GateContext(regressions={
        "n": RegressionEvidence("B", Flips(paired=29, observed_pairs=29), candidate_cases=40)}))
    assert (gate.rules[0].status, gate.rules[0].reason) == ("INSUFFICIENT_EVIDENCE", "too_few_pairs")
    assert gate.rules[0].detail == "29 of 40 cases paired with B and observed in both (same id and fingerprint) " \
                                   "< 30 needed"
    # pairs missing on one side do not count: 0 regressions among unobserved cases is no evidence
    unseen = RegressionEvidence("B", Flips(paired=40, observed_pairs=0, to_missing=["a"]), candidate_cases=40)
    assert statuses(unseen) == [("INSUFFICIENT_EVIDENCE", "too_few_pairs")] * 2
    assert statuses(None) == [("INSUFFICIENT_EVIDENCE", "no_baseline")] * 2
    assert statuses(RegressionEvidence("B", one, baseline_complete=False)) == \
        [("INSUFFICIENT_EVIDENCE", "baseline_incomplete")] * 2
    assert statuses(RegressionEvidence("B", Flips(), False, "digest mismatch")) == \
        [("INSUFFICIENT_EVIDENCE", "baseline_fails_audit")] * 2
    # the candidate itself unsealed: nothing passes, a FAIL stays a FAIL
    assert statuses(RegressionEvidence("B", one), incomplete=(5, 10)) == \
        [("INSUFFICIENT_EVIDENCE", "run_incomplete")] * 2
    assert statuses(RegressionEvidence("B", two), incomplete=(5, 10))[0] == ("FAIL", "regressions_exceed_limit")


def test_a_tampered_baseline_decides_nothing(cli, project):
    add_rules(project, "{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, "
                       "max_regressions: 0}}")
    base = run(cli, project, "v1")
    import sqlite3

    conn = sqlite3.connect(project / ".oloproof" / "log.db")
    conn.execute("DROP TRIGGER events_append_only_delete")
    conn.execute("DELETE FROM events WHERE stream = ?", (f"{base['run_id']}/case_001",))
    conn.commit()
    conn.close()
    set_version(project, "v2")
    v2 = run(cli, project, "v2")  # the run itself completes and is sealed
    rule = gate_rules(v2)["no-worse"]
    assert rule["status"] == "INSUFFICIENT_EVIDENCE" and rule["reason"] == "baseline_fails_audit", rule
    assert "case stream missing" in rule["detail"]


def test_runs_with_other_trials_are_not_paired(cli, project):
    add_rules(project, "{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, "
                       "max_regressions: 0}}")
    one = run(cli, project, "one")
    r = cli("run", "--trials", "2", "--json", "two.json", cwd=project)
    two = json.loads((project / "two.json").read_text())
    rule = gate_rules(two)["no-worse"]
    assert (rule["status"], rule["reason"]) == ("INSUFFICIENT_EVIDENCE", "baseline_not_comparable"), (rule, r.output)
    d = cli("diff", one["run_id"], two["run_id"], cwd=project)
    assert d.exit_code == 2 and "cannot be paired trial by trial" in d.output

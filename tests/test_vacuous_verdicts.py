"""A PASS needs evidence (issue 22, SPEC §18.1): a no_regression rule never passes on zero
pairs, a baseline of another system decides nothing, and `oloproof diff` refuses two runs that
compare nothing — on the support-agent example with an agent broken everywhere."""

from __future__ import annotations

import json

import pytest

from tests.test_diff import add_rules, project, run, set_version  # noqa: F401  (fixture)

NO_WORSE = ("{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, "
            "max_regressions: 0}}")
NOT_WORSE_P = ("{name: not-worse-p, criterion: answer_correct, no_regression: {baseline: version:v1, "
               "max_p: 0.05}}")


def break_agent(p):
    """Every answer wrong: 0 of 40 pass answer_correct."""
    app = p / "app.py"
    text = app.read_text()
    assert 'return {"answer": answer}' in text
    app.write_text(text.replace('return {"answer": answer}', 'return {"answer": "wrong"}'))


def add_ignored_key(p):
    """One input key the agent ignores, in every case: every fingerprint changes."""
    cases = p / "cases.jsonl"
    lines = []
    for line in cases.read_text().splitlines():
        if line.strip():
            case = json.loads(line)
            case["input"]["channel"] = "web"
            lines.append(json.dumps(case))
    cases.write_text("\n".join(lines) + "\n")


def passed(result, criterion):
    return next(c for c in result["criteria"] if c["criterion"] == criterion)["passed"]


def rule(result, name):
    return next(r for r in result["gate"]["rules"] if r["name"] == name)


def test_a_broken_agent_with_the_same_cases_fails(cli, project):
    add_rules(project, NO_WORSE)
    base = run(cli, project, "v1")
    assert passed(base, "answer_correct") == 33
    set_version(project, "v2")
    break_agent(project)
    cand = run(cli, project, "v2")
    r = rule(cand, "no-worse")
    assert (r["status"], r["reason"]) == ("FAIL", "regressions_exceed_limit"), r
    assert r["detail"].startswith("33 regressions vs ")


@pytest.mark.parametrize("limit", [NO_WORSE, NOT_WORSE_P])
def test_a_broken_agent_on_cases_that_pair_with_nothing_never_passes(cli, project, limit):
    add_rules(project, limit)
    run(cli, project, "v1")
    set_version(project, "v2")
    break_agent(project)
    add_ignored_key(project)
    r = cli("run", "--json", "v2.json", cwd=project)
    assert r.exit_code == 1, r.output  # the gate is blocked
    cand = json.loads((project / "v2.json").read_text())
    assert passed(cand, "answer_correct") == 0
    name = "no-worse" if limit is NO_WORSE else "not-worse-p"
    got = rule(cand, name)
    assert (got["status"], got["reason"]) == ("INSUFFICIENT_EVIDENCE", "too_few_pairs"), got
    assert got["detail"].startswith("0 of 40 cases paired with "), got
    assert "< 20 needed" in got["detail"]
    assert cand["gate"]["decision"] != "PASS"
    # re-judged from the log: the same
    g = cli("gate", cand["run_id"], cwd=project)
    assert g.exit_code == 1, g.output
    assert "too_few_pairs" in g.output


def test_min_paired_is_configurable(cli, project):
    add_rules(project, "{name: no-worse, criterion: answer_correct, no_regression: {baseline: version:v1, "
                       "max_regressions: 50, min_paired: 41}}")
    run(cli, project, "v1")
    set_version(project, "v2")
    cand = run(cli, project, "v2")  # the same agent: 40 pairs, but 41 asked for
    got = rule(cand, "no-worse")
    assert (got["status"], got["reason"]) == ("INSUFFICIENT_EVIDENCE", "too_few_pairs"), got
    assert got["detail"].startswith("40 of 40 cases paired with "), got


def test_a_baseline_of_another_system_decides_nothing(cli, project):
    base = run(cli, project, "v1")
    assert cli("runs", "--pin", base["run_id"], "other", cwd=project).exit_code == 0
    app = project / "app.py"
    app.write_text(app.read_text().replace('name="support-agent"', 'name="billing-agent"'))
    cfg = project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("name: support-agent", "name: billing-agent"))
    add_rules(project, "{name: vs-pin, criterion: answer_correct, no_regression: {baseline: pin:other, "
                       "max_regressions: 0}}",
              "{name: vs-version, criterion: answer_correct, no_regression: {baseline: version:v1, "
              "max_regressions: 0}}")
    set_version(project, "v2")
    cand = run(cli, project, "v2")
    for name in ("vs-pin", "vs-version"):
        got = rule(cand, name)
        assert (got["status"], got["reason"]) == ("INSUFFICIENT_EVIDENCE", "other_system"), got
        assert "'support-agent'" in got["detail"] and "'billing-agent'" in got["detail"]


def test_diff_refuses_runs_that_compare_nothing(cli, project):
    base = run(cli, project, "v1")
    set_version(project, "v2")
    add_ignored_key(project)
    cand = run(cli, project, "v2")
    r = cli("diff", base["run_id"], cand["run_id"], cwd=project)
    assert r.exit_code == 2, r.output
    assert "no case of" in r.output and "--allow-unpaired" in r.output
    r = cli("diff", base["run_id"], cand["run_id"], "--allow-unpaired", "--json", "d.json", cwd=project)
    assert r.exit_code == 0, r.output
    d = json.loads((project / "d.json").read_text())
    assert d["cases"]["paired"] == 0 and len(d["cases"]["fingerprint_changed"]) == 40
    # the comparison report too
    r = cli("view", cand["run_id"], "--compare", base["run_id"], "--out", str(project / "rep"), cwd=project)
    assert r.exit_code == 2, r.output
    assert not (project / "rep").exists() or not any((project / "rep").iterdir())
    r = cli("view", cand["run_id"], "--compare", base["run_id"], "--allow-unpaired", "--out",
            str(project / "rep2"), cwd=project)
    assert r.exit_code == 0, r.output
    assert "0 paired" in r.output


def test_diff_refuses_runs_of_two_systems(cli, project):
    base = run(cli, project, "v1")
    app = project / "app.py"
    app.write_text(app.read_text().replace('name="support-agent"', 'name="billing-agent"'))
    cfg = project / "oloproof.yaml"
    cfg.write_text(cfg.read_text().replace("name: support-agent", "name: billing-agent"))
    cand = run(cli, project, "v1")
    r = cli("diff", base["run_id"], cand["run_id"], cwd=project)
    assert r.exit_code == 2, r.output
    assert "'support-agent'" in r.output and "'billing-agent'" in r.output
    assert cli("diff", base["run_id"], cand["run_id"], "--allow-unpaired", cwd=project).exit_code == 0


def test_pairs_never_observed_on_one_side_are_no_evidence(cli, project):
    """A baseline that failed everything and a candidate that crashes everywhere pair every
    case, yet observe none on both sides: never a PASS (nor the other way round)."""
    add_rules(project, NO_WORSE, NOT_WORSE_P)
    break_agent(project)
    run(cli, project, "v1")
    set_version(project, "v2")
    app = project / "app.py"
    app.write_text(app.read_text().replace('return {"answer": "wrong"}', 'raise RuntimeError("boom")'))
    cand = run(cli, project, "v2")
    for name in ("no-worse", "not-worse-p"):
        got = rule(cand, name)
        assert (got["status"], got["reason"]) == ("INSUFFICIENT_EVIDENCE", "too_few_pairs"), got
        assert "40 more paired but missing in one" in got["detail"], got

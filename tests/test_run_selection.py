"""Run selection (issue 23, SPEC §18.2): --case, -k, --limit, --last-failed make a *partial
run* — recorded and sealed, shown, but its gate never passes (partial_run) and it is never a
baseline; --quiet and --no-slices trim what is printed."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.conftest import copy_example, one_function_project, write
from tests.test_adversary import oloproof


@pytest.fixture
def support(cli, tmp_path):
    p = tmp_path / "support"
    copy_example("support_agent", p)
    return p


def run_json(cli, p, *args):
    r = cli("run", "--json", "r.json", *args, cwd=p)
    assert r.exit_code in (0, 1), r.output
    return r, json.loads((p / "r.json").read_text())


def case_ids(result):
    return [c["case_id"] for c in result["cases"]]


def test_case_runs_only_those_cases_and_never_passes_the_gate(cli, support):
    r, res = run_json(cli, support, "--case", "case_007", "--case", "case_002")
    assert sorted(case_ids(res)) == ["case_002", "case_007"]
    assert res["cases_expected"] == 2 and res["complete"] is True
    rules = res["gate"]["rules"]
    assert res["gate"]["decision"] == "INSUFFICIENT_EVIDENCE" and r.exit_code == 1
    assert rules and all((x["status"], x["reason"]) == ("INSUFFICIENT_EVIDENCE", "partial_run") for x in rules)
    assert "partial run: 2 source cases chosen by --case case_007 case_002" in r.output
    assert cli("audit", "verify", cwd=support).exit_code == 0  # sealed like any run
    g = cli("gate", cwd=support)  # re-judged from the log: still partial
    assert g.exit_code == 1 and "partial_run" in g.output
    runs = json.loads(cli("runs", "--json", cwd=support).output)
    assert runs[-1]["partial"] is True and runs[-1]["case_count"] == 2


def test_k_is_a_substring_or_a_glob(cli, support):
    _, res = run_json(cli, support, "-k", "_01")
    assert case_ids(res) == [f"case_{i:03d}" for i in range(10, 20)]
    _, res = run_json(cli, support, "-k", "case_00[1-3]")
    assert case_ids(res) == ["case_001", "case_002", "case_003"]
    _, res = run_json(cli, support, "-k", "case_0*", "--limit", "4")
    assert case_ids(res) == ["case_001", "case_002", "case_003", "case_004"]


@pytest.mark.parametrize("args, needle", [
    (("--case", "case_0077"), "did you mean 'case_007'"),
    (("-k", "nothing-like-it"), "no case id"),
    (("--limit", "0"), "--limit 0"),
    (("--last-failed",), "no complete run"),
])
def test_a_selection_that_chooses_nothing_is_exit_2_and_writes_nothing(cli, support, args, needle):
    r = cli("run", *args, cwd=support)
    assert r.exit_code == 2 and needle in r.output, r.output
    db = support / ".oloproof" / "log.db"
    if db.exists():
        conn = sqlite3.connect(db)
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
        conn.close()


def test_last_failed_runs_what_failed_or_was_missing(cli, support):
    _, full = run_json(cli, support)
    bad = sorted(c["case_id"] for c in full["cases"]
                 if any(v["verdict"] in ("fail", "missing") for v in c["verdicts"].values()))
    assert 0 < len(bad) < 40
    r, res = run_json(cli, support, "--last-failed")
    assert sorted(case_ids(res)) == bad
    assert f"--last-failed of {full['run_id']}" in r.output
    # a partial run is never what --last-failed reads: the same cases again
    _, again = run_json(cli, support, "--last-failed")
    assert sorted(case_ids(again)) == bad


def test_last_failed_with_nothing_failed_runs_nothing(cli, tmp_path):
    p = one_function_project(tmp_path / "ok", "    return {'a': case.input['a']}\n",
                             '{"id": "c1", "input": {"a": "x"}, "expected": {"a": "x"}}\n')
    assert cli("run", cwd=p).exit_code == 0
    r = cli("run", "--last-failed", cwd=p)
    assert r.exit_code == 0 and "nothing to run again" in r.output
    assert len(json.loads(cli("runs", "--json", cwd=p).output)) == 1


def test_a_partial_run_is_never_a_baseline(cli, support):
    release = support / "release.yaml"
    release.write_text(release.read_text() + "  - {name: no-worse, criterion: answer_correct, no_regression: "
                                             "{baseline: version:slice-e-example, max_regressions: 0}}\n"
                                             "  - {name: vs-pin, criterion: answer_correct, no_regression: "
                                             "{baseline: pin:part, max_regressions: 0}}\n")
    _, full = run_json(cli, support)
    _, part = run_json(cli, support, "--case", "case_001")
    assert cli("runs", "--pin", part["run_id"], "part", cwd=support).exit_code == 0
    _, cand = run_json(cli, support)
    rules = {x["name"]: x for x in cand["gate"]["rules"]}
    assert full["run_id"] in rules["no-worse"]["detail"] and part["run_id"] not in rules["no-worse"]["detail"]
    assert rules["no-worse"]["status"] == "PASS"
    assert (rules["vs-pin"]["status"], rules["vs-pin"]["reason"]) == ("INSUFFICIENT_EVIDENCE", "baseline_partial")


def test_quiet_and_no_slices_trim_the_output(cli, support):
    full = cli("run", cwd=support).output
    assert "slices (descriptive" in full
    assert "slices (descriptive" not in cli("run", "--no-slices", cwd=support).output
    quiet = cli("run", "-q", cwd=support).output
    assert "slices (descriptive" not in quiet and "gate: FAIL" in quiet and "answer_correct" in quiet


def test_a_partial_run_resumes_with_the_cases_it_chose(tmp_path):
    p = tmp_path / "tiny"
    write(p / "app.py", "import os, signal\nfrom oloproof import system\n\n@system(name='tiny', version='1')\n"
                        "def run(case):\n    if case.input['die'] and os.path.exists('.oloproof/die'):\n"
                        "        os.kill(os.getpid(), signal.SIGKILL)\n    return {'a': 'ok'}\n")
    write(p / "oloproof.yaml", "system:\n  name: tiny\n  version: '1'\n  callable: app:run\ncases: cases.jsonl\n"
                               "evaluators:\n  - {type: contains, criterion: ok, field: a, expected_field: a}\n")
    write(p / "cases.jsonl", "".join(json.dumps({"id": f"c{i}", "input": {"die": i == 3}, "expected": {"a": "ok"}})
                                     + "\n" for i in range(8)))
    (p / ".oloproof").mkdir()
    (p / ".oloproof" / "die").touch()
    r = oloproof("run", "--case", "c1", "--case", "c3", "--case", "c5", cwd=p)
    assert r.returncode == -9, r.stderr
    (p / ".oloproof" / "die").unlink()
    run_id = json.loads(oloproof("runs", "--json", cwd=p).stdout)[0]["run_id"]
    refused = oloproof("run", "--resume", run_id, "--case", "c1", cwd=p)
    assert refused.returncode == 2 and "takes up the cases its run chose" in refused.stderr
    done = oloproof("run", "--resume", run_id, "--json", "-", cwd=p)
    assert done.returncode == 0, done.stderr  # no release rules: nothing to gate
    res = json.loads(done.stdout)
    assert sorted(c["case_id"] for c in res["cases"]) == ["c1", "c3", "c5"] and res["complete"]


def test_combined_selections_say_what_chose_nothing(cli, support):
    run_json(cli, support)
    r = cli("run", "--case", "case_001", "-k", "case_002", cwd=support)
    assert r.exit_code == 2 and "none of the --case ids matches it" in r.output
    r = cli("run", "--case", "case_001", "--last-failed", cwd=support)  # case_001 passed everything
    assert r.exit_code == 0 and "none of the cases chosen by --case failed or was missing" in r.output

"""Calibrated model judges (issue 27, SPEC §18.6): judgements as events, read and never asked
again; the cache; after:; calibration and the judge-corrected interval; the gate."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import copy_example, copy_recorded, edit, run_in, write

from oloproof.stats.correction import corrected_rate

# a Python judge that counts its calls in a file and can be made unreachable
COUNTING_JUDGE = '''
import json, os
from pathlib import Path

CALLS = Path(__file__).with_name("calls.txt")


def polite(prompt, *, case):
    if os.environ.get("JUDGE_DOWN"):
        raise ConnectionError("the judge is unreachable")
    with CALLS.open("a") as f:
        f.write(case.id + "\\n")
    assert "## Rubric" in prompt and case.id in case.id
    reply = (case.output or {}).get("reply", "")
    words = reply.lower()
    if "read the manual" in words:
        return {"verdict": "fail", "explanation": "tells the customer to read the manual"}
    if "unfortunately" in words:
        return {"verdict": "fail", "explanation": "sounds negative"}
    return {"verdict": "pass", "explanation": "courteous <b>and</b> answers"}
'''


def calls(folder: Path) -> list[str]:
    f = folder / "calls.txt"
    return f.read_text().split() if f.exists() else []


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The judged-agent example with a counting judge, run once (12 labels: not calibrated)."""
    p = copy_example("judged_agent", tmp_path_factory.mktemp("judged") / "judged")
    write(p / "judges.py", COUNTING_JUDGE)
    r = run_in(p, "run", "--json", "results.json")
    assert r.exit_code == 1, r.output
    return p


@pytest.fixture
def project(recorded, tmp_path):
    return copy_recorded(recorded, tmp_path / "judged")


def results(p: Path, name: str = "results.json") -> dict:
    return json.loads((p / name).read_text())


def row(doc: dict, criterion: str) -> dict:
    return next(c for c in doc["criteria"] if c["criterion"] == criterion)


def test_uncalibrated_judge_blocks_its_rules(recorded):
    doc = results(recorded)
    polite = row(doc, "polite")
    assert (polite["passed"], polite["observed"], polite["excluded"]) == (79, 110, 10)
    assert polite["judge"]["labels"] == 12 and polite["judge"]["calibrated"] is False
    assert polite["corrected"] is None
    rule = next(r for r in doc["gate"]["rules"] if r["criterion"] == "polite")
    assert (rule["status"], rule["reason"]) == ("INSUFFICIENT_EVIDENCE", "judge_not_calibrated")
    assert "12 usable labels < 20" in rule["detail"]
    # the judge was asked about the 110 cases that passed mentions_order, once each
    assert len(calls(recorded)) == 110 and len(set(calls(recorded))) == 110


def test_after_excludes_and_never_asks(recorded):
    doc = results(recorded)
    unclear = [c for c in doc["cases"] if c["verdicts"]["mentions_order"]["verdict"] == "fail"]
    assert len(unclear) == 10
    for c in unclear:
        assert c["verdicts"]["polite"] == {"verdict": "excluded", "reason": "deterministic_check_failed"}
        assert c["case_id"] not in calls(recorded)


def test_calibrated_judge_gates_on_the_corrected_interval(project, cli):
    shutil.copy(project / "labels/polite-all.jsonl", project / "labels/polite.jsonl")
    before = len(calls(project))
    r = cli("eval", "latest", "--json", "eval.json", cwd=project)
    assert r.exit_code == 0, r.output
    assert len(calls(project)) == before  # re-evaluation reads judgements, never asks
    polite = row(results(project, "eval.json"), "polite")
    j = polite["judge"]
    assert (j["labels"], j["true_pass"], j["false_fail"], j["true_fail"], j["false_pass"]) == (110, 77, 3, 28, 2)
    assert j["calibrated"] and j["agreement"] == pytest.approx(105 / 110)
    from scipy.stats import beta

    assert j["agreement_low"] == pytest.approx(beta.ppf(0.025, 105, 6), abs=1e-9)
    want = corrected_rate(79, 110, 0, true_pass=77, false_fail=3, true_fail=28, false_pass=2)
    assert polite["corrected"] == {"rate": pytest.approx(want.rate), "low": pytest.approx(want.low),
                                   "high": pytest.approx(want.high), "method": "rogan_gladen_bonferroni"}
    # every label is there: the correction gives back the true rate (80 of 110 pass)
    assert want.rate == pytest.approx(80 / 110)
    rule = next(r for r in results(project, "eval.json")["gate"]["rules"] if r["criterion"] == "polite")
    assert rule["status"] == "PASS" and "judge-corrected lower bound" in rule["detail"]
    assert "judge-corrected" in r.output and "sensitivity 96.2%" in r.output
    # a stricter threshold fails on the corrected low end, not on the judge's own interval
    edit(project / "release.yaml", "min_lower_bound: 0.45", "min_lower_bound: 0.6")
    r = cli("eval", "latest", "--json", "eval.json", cwd=project)
    rule = next(r for r in results(project, "eval.json")["gate"]["rules"] if r["criterion"] == "polite")
    assert (rule["status"], rule["reason"]) == ("FAIL", "lower_bound_below_threshold")
    assert row(results(project, "eval.json"), "polite")["low"] > 0.6  # the uncorrected one would pass


def test_low_agreement_is_not_calibrated(project, cli):
    shutil.copy(project / "labels/polite-all.jsonl", project / "labels/polite.jsonl")
    edit(project / "oloproof.yaml", "min_agreement: 0.8", "min_agreement: 0.95")
    r = cli("eval", "latest", "--json", "eval.json", cwd=project)
    assert r.exit_code == 1
    rule = next(r for r in results(project, "eval.json")["gate"]["rules"] if r["criterion"] == "polite")
    assert rule["reason"] == "judge_not_calibrated" and "agreement low end 89.7 % < 95 %" in rule["detail"]


def test_unreachable_judge_identical_verdicts(project, cli, monkeypatch):
    monkeypatch.setenv("JUDGE_DOWN", "1")
    before = calls(project)
    first = results(project)
    r = cli("gate", "latest", "--json", "gate.json", cwd=project)
    assert r.exit_code == 1
    assert results(project, "gate.json")["gate"] == first["gate"]
    r = cli("eval", "latest", "--json", "eval.json", cwd=project)
    assert [c["verdicts"] for c in results(project, "eval.json")["cases"]] == [c["verdicts"] for c in first["cases"]]
    for args in (("show", "latest", "msg_003"), ("export", "latest", "x.jsonl", "--format", "jsonl"),
                 ("view", "latest", "--out", "report")):
        r = cli(*args, cwd=project)
        assert r.exit_code == 0, (args, r.output)
    assert calls(project) == before


def test_rerun_reads_the_cache_and_a_new_rubric_asks_again(project, cli):
    before = len(calls(project))
    r = cli("run", "--json", "again.json", cwd=project)
    assert r.exit_code == 1
    assert len(calls(project)) == before  # an unchanged output is never judged twice
    assert "0 judgement(s) asked, 110 read from the cache" in r.output
    assert [c["verdicts"] for c in results(project, "again.json")["cases"]] == \
        [c["verdicts"] for c in results(project)["cases"]]
    edit(project / "oloproof.yaml", "polite bad news (a delay, an apology) passes it.",
         "polite bad news passes it.")
    r = cli("run", cwd=project)
    assert len(calls(project)) == before + 110


def test_judgements_are_events_of_the_case_stream_under_the_seal(project, cli):
    db = sqlite3.connect(project / ".oloproof/log.db")
    run_id = results(project)["run_id"]
    types = [t for (t,) in db.execute("SELECT type FROM events WHERE stream = ? ORDER BY seq", (f"{run_id}/msg_003",))]
    assert types[-2:] == ["case_finished.v2", "judgement.v1"]
    payload = json.loads(db.execute("SELECT payload FROM events WHERE stream = ? AND type = 'judgement.v1'",
                                    (f"{run_id}/msg_003",)).fetchone()[0])
    assert payload["verdict"] == "pass" and payload["judge"] == "judges:polite"
    assert payload["model"].startswith("code:") and len(payload["rubric_digest"]) == 64
    assert "## Rubric" in payload["prompt"] and json.loads(payload["raw_response"])["verdict"] == "pass"
    sealed = json.loads(db.execute("SELECT payload FROM events WHERE stream = ? AND type = 'run_sealed.v1'",
                                   (run_id,)).fetchone()[0])
    assert sealed["cases"]["msg_003"][0] == len(types)  # the seal covers the judgement
    cached = db.execute("SELECT count(*) FROM events WHERE stream LIKE 'judgement/%'").fetchone()[0]
    assert cached == 110
    db.close()
    r = cli("audit", "verify", cwd=project)
    assert r.exit_code == 0, r.output


def test_search_finds_judge_explanations_and_rebuild_keeps_them(project, cli):
    r = cli("search", "manual", "--json", "hits.json", cwd=project)
    assert r.exit_code == 0, r.output
    hits = json.loads((project / "hits.json").read_text())
    assert hits and all(h["kind"] == "judgement" for h in hits)
    assert {h["case_id"] for h in hits} <= {c["case_id"] for c in results(project)["cases"]}
    assert not any(h["run_id"] == "judgement" for h in hits)  # the cache's copies are not indexed
    assert cli("audit", "rebuild", cwd=project).exit_code == 0
    cli("search", "manual", "--json", "again.json", cwd=project)
    assert json.loads((project / "again.json").read_text()) == hits


def test_judge_errors_and_garbage_are_missing_and_errors_are_asked_again(tmp_path, cli):
    p = copy_example("judged_agent", tmp_path / "j")
    write(p / "judges.py", '''
from pathlib import Path

def polite(prompt, *, case):
    with Path(__file__).with_name("calls.txt").open("a") as f:
        f.write(case.id + "\\n")
    n = int(case.id.split("_")[1])
    if n % 4 == 0:
        raise TimeoutError("the judge took too long")
    if n % 4 == 1:
        return ["not", "the", "object"]
    if n % 4 == 2:
        return {"verdict": "unsure", "explanation": "cannot tell"}
    return {"verdict": "PASS", "explanation": 3}
''')
    r = cli("run", "--json", "r.json", cwd=p)
    doc = results(p, "r.json")
    by_id = {c["case_id"]: c["verdicts"]["polite"] for c in doc["cases"]
             if c["verdicts"]["mentions_order"]["verdict"] == "pass"}
    reasons = {int(k.split("_")[1]) % 4: v for k, v in by_id.items()}
    assert reasons[0] == {"verdict": "missing", "reason": "judge_error"}
    assert reasons[1] == {"verdict": "missing", "reason": "judge_unsure"}
    assert reasons[2] == {"verdict": "missing", "reason": "judge_unsure"}
    assert reasons[3] == {"verdict": "pass"}
    again = sum(1 for k in by_id if int(k.split("_")[1]) % 4 in (0, 1))
    first = len(calls(p))
    r = cli("run", cwd=p)
    # only the errors and the unreadable replies are asked again; "unsure" is an answer, cached
    assert len(calls(p)) == first + again
    r = cli("show", "latest", "msg_004", cwd=p)
    assert "TimeoutError: the judge took too long" in r.output


def test_stale_labels_are_left_out(project, cli):
    digest = "0" * 64
    lines = (project / "labels/polite-all.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "prompt_digest": digest})
    write(project / "labels/polite.jsonl", "\n".join(lines) + "\n")
    cli("eval", "latest", "--json", "eval.json", cwd=project)
    j = row(results(project, "eval.json"), "polite")["judge"]
    assert (j["labels"], j["stale"], j["labels_given"]) == (109, 1, 110)


@pytest.mark.parametrize("line, message", [
    ('{"case_id": "msg_001", "label": "good"}', "labels/polite.jsonl:2: case 'msg_001': field 'label' must be"),
    ('{"case_id": "msg_999", "label": "pass"}', "labels/polite.jsonl:2: case 'msg_999': no such case in the suite"),
    ('{"case_id": "msg_001", "lable": "pass"}', "labels/polite.jsonl:2: a label is"),
    ('{"case_id": "msg_003", "label": "pass"}', "labelled twice (first on line 1)"),
    ('not json', "labels/polite.jsonl:2: malformed JSON"),
])
def test_bad_labels_are_located_errors(project, cli, line, message):
    write(project / "labels/polite.jsonl", '{"case_id": "msg_003", "label": "pass"}\n' + line + "\n")
    runs = sqlite3.connect(project / ".oloproof/log.db").execute("SELECT count(*) FROM events").fetchone()[0]
    r = cli("run", cwd=project)
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output
    assert sqlite3.connect(project / ".oloproof/log.db").execute("SELECT count(*) FROM events").fetchone()[0] == runs


@pytest.mark.parametrize("old, new, message", [
    ("after: [mentions_order]", "after: [mentions_ordr]",
     "no evaluator produces 'mentions_ordr'; did you mean 'mentions_order'?"),
    ("after: [mentions_order]", "after: [polite]", "'polite' is a model judge's criterion"),
    ("judge: judges:polite", "judge: judges:nothere", "judges:nothere"),
    ("judge: judges:polite",
     "judge: {provider: openai_compatible, model: m, base_url_env: X, api_key_env: sk-abc123secret}",
     "must be the NAME of an environment variable"),
    ("sees: [input, output]", "sees: [input, outputs]", "sees"),
    ("calibration: labels/polite.jsonl", "calibration: labels/nope.jsonl", "labels/nope.jsonl not found"),
])
def test_bad_configuration_is_exit_2(project, cli, old, new, message):
    edit(project / "oloproof.yaml", old, new)
    r = cli("run", cwd=project)
    assert r.exit_code == 2 and message in r.output, r.output
    assert "sk-abc123secret" not in r.output
    assert "Traceback" not in r.output


def test_corrected_interval_bounds_every_point_of_the_box():
    """The corner construction is the true minimum and maximum over the Bonferroni box: a dense
    grid of (apparent rate, sensitivity, specificity) inside the three exact intervals never
    leaves it (checked against scipy's beta quantiles)."""
    import numpy as np
    from scipy.stats import beta

    passed, n, tp, ff, tf, fp = 70, 100, 40, 3, 17, 2
    c = corrected_rate(passed, n, 0, true_pass=tp, false_fail=ff, true_fail=tf, false_pass=fp)
    a = 0.05 / 3

    def cp(k, m):
        return (beta.ppf(a / 2, k, m - k + 1) if k else 0.0), (beta.ppf(1 - a / 2, k + 1, m - k) if k < m else 1.0)

    grid = [np.linspace(*cp(k, m), 15) for k, m in ((passed, n), (tp, tp + ff), (tf, tf + fp))]
    values = [(p + sp - 1) / (se + sp - 1) for p in grid[0] for se in grid[1] for sp in grid[2]]
    assert max(0.0, min(values)) == pytest.approx(c.low, abs=1e-9)
    assert min(1.0, max(values)) == pytest.approx(c.high, abs=1e-9)


def test_corrected_interval_coverage_by_simulation():
    """Seeded simulation (bench/judge_coverage.py has the full table): the interval holds the
    true rate at least 95 % of the time, where the judge's own interval does not."""
    import numpy as np

    rng = np.random.default_rng(7)
    theta, se, sp, n, m, reps = 0.5, 0.95, 0.75, 400, 100, 300
    held = naive = 0
    from oloproof.stats.intervals import clopper_pearson

    for _ in range(reps):
        truth = rng.random(n) < theta
        judged = np.where(truth, rng.random(n) < se, rng.random(n) >= sp)
        pick = rng.choice(n, size=m, replace=False)
        t, j = truth[pick], judged[pick]
        c = corrected_rate(int(judged.sum()), n, 0, true_pass=int((t & j).sum()), false_fail=int((t & ~j).sum()),
                           true_fail=int((~t & ~j).sum()), false_pass=int((~t & j).sum()))
        held += c.low <= theta <= c.high
        lo, hi = clopper_pearson(int(judged.sum()), n)
        naive += lo <= theta <= hi
    assert held / reps >= 0.95
    assert naive / reps < 0.5  # trusting the judge: confidently wrong


def test_clustered_cases_get_a_cluster_aware_corrected_interval():
    """Cases that are not independent (the trials of a case, a source and its derived cases):
    the apparent rate's part of the correction is their cluster-aware interval. Seeded
    simulation, 50 cases x 20 strongly correlated trials, a tightly calibrated judge: the exact
    part made the corrected interval hold the true rate ~70 % of the time; now >= 95 %."""
    import numpy as np

    from oloproof.stats.clusters import clustered_rate_interval
    from oloproof.stats.correction import PARTS
    from oloproof.stats.intervals import ALPHA

    rng = np.random.default_rng(11)
    cases, trials, m, se, sp, reps, theta = 50, 20, 800, 0.98, 0.98, 300, 0.5
    held = exact = 0
    for _ in range(reps):
        q = np.where(rng.random(cases) < 0.5, 0.1, 0.9)  # each case mostly passes or mostly fails
        truth = rng.random((cases, trials)) < q[:, None]
        judged = np.where(truth, rng.random((cases, trials)) < se, rng.random((cases, trials)) >= sp)
        pick = rng.choice(cases * trials, size=m, replace=False)
        t, j = truth.ravel()[pick], judged.ravel()[pick]
        labels = {"true_pass": int((t & j).sum()), "false_fail": int((t & ~j).sum()),
                  "true_fail": int((~t & ~j).sum()), "false_pass": int((~t & j).sum())}
        passed, n = int(judged.sum()), cases * trials
        row = clustered_rate_interval([(int(judged[i].sum()), trials, 0) for i in range(cases)],
                                      alpha=ALPHA / PARTS)
        c = corrected_rate(passed, n, 0, apparent=(row.low, row.high), method="x", **labels)
        held += c.low <= theta <= c.high
        plain = corrected_rate(passed, n, 0, **labels)
        exact += plain.low <= theta <= plain.high
        assert c.low <= plain.low and c.high >= plain.high and c.method == "x"
    assert held / reps >= 0.95
    assert exact / reps < 0.85


def test_a_run_with_clusters_corrects_with_the_cluster_aware_interval(project, cli):
    """A source case and its derived one are one cluster: the corrected interval of a run with a
    transform takes its apparent part from the criterion's cluster-aware interval (and says so
    in its method); it is wider than the one that takes them as independent."""
    lines = [json.loads(x) for x in (project / "labels/polite-all.jsonl").read_text().splitlines()]
    write(project / "labels/polite.jsonl", "".join(json.dumps(x) + "\n" + json.dumps({**x, "case_id": x["case_id"]
                                                   + "~again"}) + "\n" for x in lines))
    edit(project / "oloproof.yaml", "release: release.yaml",
         'release: release.yaml\nmetamorphic:\n  transforms:\n    - {name: again, field: message, template: "{value}"}')
    r = cli("run", "--json", "r.json", cwd=project)
    assert r.exit_code in (0, 1), r.output
    polite = row(results(project, "r.json"), "polite")
    assert polite["method"] == "design_effect_clopper_pearson" and polite["judge"]["calibrated"]
    j = polite["judge"]
    independent = corrected_rate(polite["passed"], polite["observed"], polite["missing"], true_pass=j["true_pass"],
                                 false_fail=j["false_fail"], true_fail=j["true_fail"], false_pass=j["false_pass"])
    got = polite["corrected"]
    assert got["method"] == "rogan_gladen_bonferroni+design_effect_clopper_pearson"
    assert got["rate"] == pytest.approx(independent.rate)
    assert got["low"] < independent.low and got["high"] > independent.high


def test_missing_cases_widen_the_corrected_interval():
    full = corrected_rate(70, 100, 0, true_pass=40, false_fail=2, true_fail=18, false_pass=1)
    some = corrected_rate(70, 100, 10, true_pass=40, false_fail=2, true_fail=18, false_pass=1)
    assert some.low < full.low and some.high > full.high
    blind = corrected_rate(70, 100, 0, true_pass=5, false_fail=5, true_fail=5, false_pass=5)
    assert (blind.low, blind.high) == (0.0, 1.0)  # a judge no better than chance is not ruled out


def test_init_copies_the_example(cli, tmp_path):
    r = cli("init", "--example", "judged-agent", str(tmp_path / "ex"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ex/judges.py").exists() and (tmp_path / "ex/labels/polite-all.jsonl").exists()

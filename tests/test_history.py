"""History and flaky cases (issue 31, SPEC §18.8): five runs of a flaky agent, then a run of
three trials, a partial run, an interrupted one and a second version that regresses — seen by
``oloproof history`` (terminal and JSON), ``oloproof flaky``, ``oloproof diff`` (known flaky
flips marked) and ``oloproof view --history`` (a trend page in headless Chromium)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tests.conftest import copy_recorded, run_in, write

APP = '''\
from pathlib import Path

from oloproof import current_case, system
from oloproof.errors import Interrupted

HERE = Path(__file__).parent
VERSION_TWO = False


@system(name="flaky-agent", version="1", records=("agent_trajectory/v1",))
def run(case):
    if (HERE / "stop").exists():
        raise Interrupted()  # as the operator's Ctrl-C: the run is left unsealed
    n = int((HERE / "counter").read_text())  # which run this is: the flaky cases follow it
    trial = current_case().trial or 1
    ok = {"good": True, "bad": False, "flaky": n % 2 == 0, "flaky3": n % 3 != 1,
          "fragile": not VERSION_TWO, "trials": trial % 2 == 1}[case.input["kind"]]
    current_case().finish("success")
    return {"answer": "ok" if ok else "no", "polite": "yes"}
'''

CONFIG = '''\
system: {name: flaky-agent, version: "1", callable: app:run, records: [agent_trajectory/v1]}
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: contains, criterion: polite, field: polite, expected_field: polite}
release: release.yaml
'''

#: against the run pinned as v1 (run 5): before the pin, and for the run of three trials, the
#: rule has no comparable baseline, so every run's gate blocks (exit 1)
RELEASE = '''\
rules:
  - {name: no-regress, criterion: answer_correct, no_regression: {baseline: "pin:v1", max_regressions: 0}}
'''

HOSTILE = "<i>c17<i>&amp;<img src=x onerror=window.PWNED=1>"
KINDS = ["good"] * 6 + ["bad"] * 2 + ["flaky", "flaky3"] + ["fragile"] * 6 + ["trials"]


def case_ids() -> list[str]:
    return [f"c{i:02d}-{k}" for i, k in enumerate(KINDS)] + [HOSTILE]


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> dict:
    """The runs, in order: five of v1 (counter 0…4), one of three trials, a partial one, an
    interrupted one (unsealed), one of v2 — with each sealed run's results."""
    p = tmp_path_factory.mktemp("history") / "agent"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "release.yaml", RELEASE)
    kinds = [*KINDS, "flaky"]
    write(p / "cases.jsonl", "".join(json.dumps({"id": c, "input": {"kind": k},
                                                 "expected": {"answer": "ok", "polite": "yes"}}) + "\n"
                                     for c, k in zip(case_ids(), kinds)))
    results = []

    def run(*args: str) -> None:
        rec = run_in(p, "run", "--json", "r.json", *args)
        assert rec.exit_code == 1, rec.output  # the gate blocks (see RELEASE)
        results.append(json.loads((p / "r.json").read_text()))

    for n in range(5):
        (p / "counter").write_text(str(n))
        run()
    assert run_in(p, "runs", "--pin", "latest", "v1").exit_code == 0
    run("--trials", "3")
    run("--case", "c00-good")
    (p / "stop").write_text("x")
    assert run_in(p, "run").exit_code == 130
    (p / "stop").unlink()
    unsealed = json.loads(run_in(p, "runs", "--json").output)[-1]["run_id"]
    (p / "counter").write_text("5")
    (p / "app.py").write_text(APP.replace('version="1"', 'version="2"').replace("VERSION_TWO = False",
                                                                                "VERSION_TWO = True"))
    (p / "oloproof.yaml").write_text(CONFIG.replace('version: "1"', 'version: "2"'))
    run()
    return {"folder": p, "results": results, "unsealed": unsealed}


@pytest.fixture
def project(log, tmp_path) -> Path:
    return copy_recorded(log["folder"], tmp_path / "agent")


def criterion_row(path: Path, criterion: str = "answer_correct") -> dict:
    """A criterion's row of an ``oloproof diff --json`` document."""
    return next(x for x in json.loads(path.read_text())["criteria"] if x["criterion"] == criterion)


def history_json(cli, folder: Path, *args: str) -> dict:
    r = cli("history", *args, "--json", "h.json", cwd=folder)
    assert r.exit_code == 0, r.output
    return json.loads((folder / "h.json").read_text())


def test_history_gives_each_sealed_run_its_rates_and_its_paired_test(log, project, cli):
    from oloproof.stats.paired import mcnemar_exact

    h = history_json(cli, project)
    ids = [r["run_id"] for r in log["results"]]
    assert h["system"] == "flaky-agent" and h["criteria"] == ["answer_correct", "polite"]
    assert [r["run_id"] for r in h["runs"]] == ids  # sealed runs, oldest first
    assert h["left_out"] == {"unsealed": [log["unsealed"]], "broken": []}
    for run, results in zip(h["runs"], log["results"]):
        rows = {row["criterion"]: row for row in results["criteria"]}
        for row in run["criteria"]:  # the very rates and exact intervals the run reported
            want = rows[row["criterion"]]
            assert {k: row[k] for k in ("passed", "observed", "missing", "rate", "low", "high", "method")} == \
                {k: want[k] for k in ("passed", "observed", "missing", "rate", "low", "high", "method")}
        assert run["log_digest"] == results["log_digest"]
    first, second, trials, partial, two = h["runs"][0], h["runs"][1], h["runs"][5], h["runs"][6], h["runs"][7]
    assert [r["version"] for r in h["runs"]] == ["1"] * 7 + ["2"]
    assert len({r["code_digest"] for r in h["runs"]}) == 2
    assert first["compared_with"] is None and first["criteria"][0]["test"] is None
    test = second["criteria"][0]["test"]  # n=1: the flaky cases fail
    assert test["base"] == ids[0] and sorted(test["regressions"]) == sorted(["c08-flaky", "c09-flaky3", HOSTILE])
    assert test["fixes"] == [] and test["p_value"] == mcnemar_exact(3, 0) and test["method"] == "mcnemar_exact"
    # three trials a case: compared with no run of one trial; the partial run is marked, compared
    # with the latest full run, and never a comparison point: v2 is compared with run 5
    assert trials["compared_with"] is None and "3 trials" in trials["comparison_note"]
    assert partial["partial"] and partial["selection"].endswith("chosen by --case c00-good")
    assert partial["compared_with"] == ids[4] and partial["cases"] == 1
    assert two["compared_with"] == ids[4]
    regression = two["criteria"][0]["test"]
    assert len(regression["regressions"]) == 8 and regression["fixes"] == ["c09-flaky3"]  # six fragile, two flaky
    assert regression["p_value"] == mcnemar_exact(8, 1) < 0.05
    # the same test, on the same pairs, as oloproof diff
    assert cli("diff", ids[4], ids[7], "--json", "d.json", cwd=project).exit_code == 0
    row = criterion_row(project / "d.json")
    assert (row["regressions"], row["fixes"], row["p_value"], row["paired"]) == \
        (regression["regressions"], regression["fixes"], regression["p_value"], regression["paired"])
    # the trend: a block per run, the partial run a dot
    rates = [None if r["partial"] else r["criteria"][0]["rate"] for r in h["runs"]]
    assert h["trend"][0]["rates"] == rates
    assert h["trend"][0]["sparkline"] == "".join("·" if x is None else "▁▂▃▄▅▆▇█"[round(x * 7)] for x in rates)
    assert h["trend"][1]["sparkline"] == "██████·█"


def test_history_in_the_terminal(log, project, cli):
    r = cli("history", cwd=project)
    assert r.exit_code == 0
    out = r.output
    assert "\x1b" not in out  # not a terminal: plain text
    h = history_json(cli, project)
    assert h["trend"][0]["sparkline"] in out and "██████·█" in out
    assert f"{h['runs'][6]['run_id']} (partial)" in out
    assert f"left out: 1 run not sealed (unfinished or stopped): {log['unsealed']}" in out
    assert "↓8 ↑1 p=0.0391" in out  # v2 against run 5
    assert "no earlier full run of 3 trials a case" in out
    # one criterion, the latest three runs: the first of them is compared with the run before them
    h3 = history_json(cli, project, "--criterion", "answer_correct", "--last", "3")
    assert h3["criteria"] == ["answer_correct"] and len(h3["runs"]) == 3
    assert h3["runs"][0]["comparison_note"] is not None  # the trials run: nothing of 3 trials before it
    assert h3["runs"][1]["compared_with"] == log["results"][4]["run_id"]  # outside the window
    assert all(len(run["criteria"]) == 1 for run in h3["runs"])


def test_sparkline_colours_a_significant_move_on_a_terminal_only(log, project, monkeypatch):
    from rich.console import Console

    from oloproof.app.history import history
    from oloproof.cli.common import open_log
    from oloproof.report.history import sparkline_text

    store = open_log(str(project / ".oloproof" / "log.db"))
    try:
        h = history(store)
    finally:
        store.close()
    monkeypatch.delenv("NO_COLOR", raising=False)
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="standard").print(sparkline_text(h, "answer_correct"))
    assert "\x1b[31m▄" in buf.getvalue()  # v2's block, red: 8 pass→fail against 1 fail→pass, p < 0.05
    monkeypatch.setenv("NO_COLOR", "1")
    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="standard").print(sparkline_text(h, "answer_correct"))
    assert "31m" not in buf.getvalue() and h.sparkline("answer_correct") in buf.getvalue()


def test_a_run_that_fails_its_audit_is_left_out_and_named(log, project, cli):
    from tests.test_adversary import tamper

    ids = [x["run_id"] for x in log["results"]]
    tamper(project, "DELETE FROM events WHERE stream = ?", f"{ids[2]}/c00-good")
    h = history_json(cli, project)
    assert [r["run_id"] for r in h["runs"]] == ids[:2] + ids[3:]
    (broken,) = h["left_out"]["broken"]
    assert broken["run_id"] == ids[2] and f"{ids[2]}/c00-good" in broken["problem"]
    assert h["runs"][2]["compared_with"] == ids[1]  # run 4, against run 2
    assert f"left out: run {ids[2]} cannot be judged" in cli("history", cwd=project).output


@pytest.mark.parametrize("args, needle", [
    (("--criterion", "answer_corect"), "did you mean 'answer_correct'"),
    (("--system", "flaky-agnet"), "did you mean 'flaky-agent'"),
    (("--last", "0"), "--last"),
])
def test_history_bad_input_exits_2(project, cli, args, needle):
    r = cli("history", *args, cwd=project)
    assert r.exit_code == 2 and needle in r.output, r.output


def test_flaky_lists_the_cases_whose_verdict_differs_with_the_same_code(log, project, cli):
    r = cli("flaky", "--json", "f.json", cwd=project)
    assert r.exit_code == 0
    f = json.loads((project / "f.json").read_text())
    assert f["runs"] == [x["run_id"] for x in log["results"]]
    assert f["left_out"]["unsealed"] == [log["unsealed"]]
    rows = {(x["case_id"], x["criterion"]): x for x in f["flaky"]}
    # v1: runs 1-5, the trials run (3 trials each) and the partial run; fragile cases failed only
    # in v2 (another version and code): no flake; polite never flips
    assert set(rows) == {("c08-flaky", "answer_correct"), ("c09-flaky3", "answer_correct"),
                         (HOSTILE, "answer_correct"), ("c16-trials", "answer_correct")}
    flaky = rows[("c08-flaky", "answer_correct")]
    assert (flaky["pass"], flaky["fail"], flaky["observations"], flaky["version"]) == (6, 2, 8, "1")
    ids = [x["run_id"] for x in log["results"]]
    assert flaky["failed_in"] == [ids[1], ids[3]] and flaky["passed_in"] == [ids[0], ids[2], ids[4], ids[5]]
    trials = rows[("c16-trials", "answer_correct")]  # flips between the trials of one run
    assert (trials["pass"], trials["fail"], trials["failed_in"]) == (7, 1, [ids[5]])
    assert (rows[("c09-flaky3", "answer_correct")]["pass"], rows[("c09-flaky3", "answer_correct")]["fail"]) == (3, 5)
    assert "c08-flaky" in r.output and "4 cases flaky on 1 criterion (4 rows)" in r.output
    # the latest two runs (v1's partial run and v2): nothing is flaky there
    r = cli("flaky", "--last", "2", cwd=project)
    assert r.exit_code == 0 and "no flaky case" in r.output


def test_the_gate_comment_marks_the_known_flaky_regressions(log, project, cli):
    r = cli("gate", "--format", "markdown", cwd=project)
    assert r.exit_code == 1
    ids = [x["run_id"] for x in log["results"]]
    assert f"Rule `no-regress` on `answer_correct` against `pin:v1` (run `{ids[4]}`): 8 pass → fail, 1 fail → pass" \
        in r.output
    lines = {line.split("`")[1]: line for line in r.output.splitlines() if line.startswith("- `")}
    assert "known flaky (6 pass, 2 fail in runs of `1`)" in lines["c08-flaky"]
    assert "known flaky" not in lines["c10-fragile"] and len(lines) == 8
    assert f"`oloproof show {ids[7]} c10-fragile`" in lines["c10-fragile"]


def test_diff_marks_a_flipped_case_known_to_be_flaky(log, project, cli):
    ids = [x["run_id"] for x in log["results"]]
    r = cli("diff", ids[0], ids[1], "--json", "d.json", cwd=project)
    assert r.exit_code == 0
    row = criterion_row(project / "d.json")
    assert set(row["known_flaky"]) == {"c08-flaky", "c09-flaky3", HOSTILE}
    known = row["known_flaky"]["c08-flaky"]
    assert known == {"version": "1", "code_digest": known["code_digest"], "pass": 6, "fail": 2, "missing": 0,
                     "observations": 8}
    assert "c08-flaky (known flaky: 6 pass, 2 fail)" in r.output and "its flip may be noise" in r.output
    # v1 → v2: the fragile cases regressed for real (never flaky); c08 is known flaky in v1
    r = cli("diff", ids[4], ids[7], "--json", "d2.json", cwd=project)
    row = criterion_row(project / "d2.json")
    assert set(row["known_flaky"]) == {"c08-flaky", "c09-flaky3", HOSTILE}
    assert "c10-fragile (known" not in r.output and "c10-fragile" in r.output


# ---- the trend page in a browser ----------------------------------------------------------------

@pytest.fixture(scope="module")
def driver():
    from tests.test_view import browser

    d = browser()
    yield d
    d.quit()


def test_view_history_is_an_offline_trend_page(log, project, cli, tmp_path, driver):
    from selenium.webdriver.common.by import By

    from tests.test_view import wait

    out = tmp_path / "trend"
    r = cli("view", "--history", "--out", str(out), cwd=project)
    assert r.exit_code == 0, r.output
    assert "wrote the history of flaky-agent (8 sealed runs, 4 flaky case rows)" in r.output
    page = (out / "index.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page  # offline, no script
    assert HOSTILE not in page  # escaped
    driver.get((out / "index.html").as_uri())
    wait(driver, "svg.trend")
    assert driver.find_element(By.ID, "title").text == "History of flaky-agent"
    charts = {s.get_attribute("data-criterion"): s for s in driver.find_elements(By.CSS_SELECTOR, "svg.trend")}
    assert set(charts) == {"answer_correct", "polite"}
    chart = charts["answer_correct"]
    assert len(chart.find_elements(By.CSS_SELECTOR, "polygon.band")) == 1  # the interval band
    points = chart.find_elements(By.CSS_SELECTOR, "circle.point")
    assert len(points) == 8 and len(chart.find_elements(By.CSS_SELECTOR, "circle.partial")) == 1
    assert chart.find_elements(By.CSS_SELECTOR, "circle.red")  # v2's significant drop
    box = chart.rect
    assert box["width"] > 300 and box["height"] > 100  # drawn, not an empty box
    ids = [x["run_id"] for x in log["results"]]
    tip = points[-1].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert tip.startswith(f"run {ids[7]} · 2: 44.4%") and "↓8 ↑1" in tip
    # the flaky cases, recorded markup shown as text
    flaky = driver.find_element(By.ID, "flaky")
    assert HOSTILE in flaky.text and "c16-trials" in flaky.text
    assert flaky.find_elements(By.TAG_NAME, "i") == [] and driver.execute_script("return window.PWNED === undefined")
    # the runs link into each run's own report
    runs = driver.find_elements(By.CSS_SELECTOR, "#runs a.run")
    assert [a.text for a in runs] == ids
    runs[-1].click()
    wait(driver, "#criteria table")
    assert driver.execute_script("return location.pathname").endswith("/runs/8/index.html")
    rows = [x.text for x in driver.find_elements(By.CSS_SELECTOR, "#criteria tbody tr")]
    assert any(x.startswith("answer_correct 44.4%") for x in rows), rows
    # a flaky case's failing run opens its panel there
    driver.get((out / "index.html").as_uri())
    wait(driver, "#flaky")
    link = driver.find_element(By.CSS_SELECTOR, "#flaky tr[data-case='c08-flaky'] a")
    link.click()
    wait(driver, "#panel table")
    assert driver.find_element(By.CSS_SELECTOR, "#panel h2").text == "Case c08-flaky"


def test_view_compare_marks_the_known_flaky_flips(log, project, cli, tmp_path, driver):
    from selenium.webdriver.common.by import By

    from tests.test_view import wait

    ids = [x["run_id"] for x in log["results"]]
    out = tmp_path / "compare"
    assert cli("view", ids[1], "--compare", ids[0], "--out", str(out), cwd=project).exit_code == 0
    driver.get((out / "index.html").as_uri())
    wait(driver, "#flipped")
    marked = driver.find_elements(By.CSS_SELECTOR, "#flipped li.known-flaky")
    assert len(marked) == 3
    texts = sorted(li.text for li in marked)
    assert texts[-1] == "c09-flaky3 known flaky (3 pass, 5 fail in runs of 1)", texts
    assert any(t.startswith(HOSTILE + " known flaky") for t in texts)  # markup shown as text
    assert driver.execute_script("return window.PWNED === undefined")


def test_view_history_options(project, cli, tmp_path):
    assert cli("view", "--history", "--compare", "latest", "--out", str(tmp_path / "a"), cwd=project).exit_code == 2
    assert cli("view", "--last", "2", "--out", str(tmp_path / "b"), cwd=project).exit_code == 2
    r = cli("view", "--history", "--last", "2", "--out", str(tmp_path / "c"), cwd=project)
    assert r.exit_code == 0 and "(2 sealed runs, 0 flaky case rows)" in r.output
    assert sorted(x.name for x in (tmp_path / "c" / "runs").iterdir()) == ["1", "2"]

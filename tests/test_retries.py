"""``retries: {max: N, on: [...]}`` (issue 31, SPEC §18.8): infrastructure errors are run again
as the configuration lists them; every attempt stays in the case's stream (seal, audit, show,
export, push and resume see it); the verdict is the last attempt's; a case that failed a
criterion is never run again; retried cases are listed in the run's summary."""

from __future__ import annotations

import json
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import write

APP = '''\
import os
import time
from pathlib import Path

from oloproof import current_case, system
from oloproof.errors import Interrupted

HERE = Path(__file__).parent


def attempt(case_id):
    """How many times this case has started (a file per case: worker processes die)."""
    path = HERE / "attempts" / case_id
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.parent.mkdir(exist_ok=True)
    path.write_text(str(n))
    return n


@system(name="flaky-env", version="1", records=("agent_trajectory/v1", "effect_ledger/v1", "release_evidence/v1"))
def run(case):
    what = case.input["what"]
    n = attempt(case.id)
    if what == "die-once" and n == 1:
        os._exit(7)
    if what == "die-always":
        os._exit(7)
    if what == "raise-once" and n == 1:
        raise ConnectionError("the sandbox's database dropped the connection")
    if what == "timeout-once" and n == 1:
        time.sleep(30)
    if what == "stop-once" and n == 1:
        raise Interrupted()  # as the operator's Ctrl-C: the run stops, to be resumed
    if what == "denied":
        current_case().access("pay", allowed=False, required_scope="pay:write")
        if n == 1:  # a second attempt would deliver: it must never be made
            raise ConnectionError("lost the connection after the denial")
    current_case().deliverable("answer", exists=True, contract_ok=True)
    current_case().finish("success")
    return {"answer": "wrong" if what == "fail" else "ok"}
'''

CONFIG = '''\
system: {name: flaky-env, version: "1", callable: app:run, records: RECORDS}
cases: cases.jsonl
timeout: TIMEOUT
RETRIES
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
  - {type: release_class}
'''


ALL = "retries: {max: 2, on: [worker_died, case_timeout, system_error]}"


def project(p: Path, whats: list[str], retries: str = ALL, timeout: float = 1.5) -> Path:
    write(p / "app.py", APP)
    records = "[agent_trajectory/v1, effect_ledger/v1, release_evidence/v1]"
    write(p / "oloproof.yaml", CONFIG.replace("RETRIES", retries).replace("TIMEOUT", str(timeout))
          .replace("RECORDS", records))
    write(p / "cases.jsonl", "".join(json.dumps({"id": w, "input": {"what": w}, "expected": {"answer": "ok"}}) + "\n"
                                     for w in whats))
    return p


def attempts(p: Path) -> dict[str, int]:
    return {f.name: int(f.read_text()) for f in (p / "attempts").iterdir()}


def stream_types(p: Path, case_id: str) -> list[str]:
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    try:
        rows = conn.execute("SELECT type FROM events WHERE stream LIKE ? ORDER BY stream, seq",
                            (f"%/{case_id}",)).fetchall()
    finally:
        conn.close()
    return [r[0] for r in rows]


WHATS = ["ok", "die-once", "raise-once", "timeout-once", "die-always", "denied", "fail"]


@pytest.fixture(scope="module")
def workers_run(tmp_path_factory):
    """The flaky environment run once on two worker processes (a dying worker is a real death)."""
    from tests.conftest import run_in

    p = project(tmp_path_factory.mktemp("retries") / "p", WHATS)
    rec = run_in(p, "run", "--workers", "2", "--json", "r.json", "--junit", "junit.xml")
    return p, rec


def test_transient_errors_are_run_again_and_recover(workers_run):
    p, rec = workers_run
    assert rec.exit_code == 0, rec.output
    data = json.loads((p / "r.json").read_text())
    v = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    for case in ("ok", "die-once", "raise-once", "timeout-once"):
        assert v[case] == {"answer_correct": {"verdict": "pass"},
                           "release_class": {"verdict": "pass", "reason": "PASS"}}
    # a worker that dies every time: retried twice (max: 2), then missing as it ended
    assert v["die-always"]["answer_correct"] == {"verdict": "missing", "reason": "worker_died"}
    ran = attempts(p)
    assert ran["ok"] == 1 and ran["die-once"] == ran["raise-once"] == ran["timeout-once"] == 2
    assert ran["die-always"] == 3
    retried = {r["case_id"]: r for r in data["retried"]}
    assert retried["die-once"] == {"case_id": "die-once", "attempts": 2, "errors": ["worker_died"], "last": None}
    assert retried["raise-once"]["errors"] == ["system_error"]
    assert retried["timeout-once"]["errors"] == ["case_timeout"]
    assert retried["die-always"] == {"case_id": "die-always", "attempts": 3, "errors": ["worker_died"] * 2,
                                     "last": "worker_died"}
    assert set(retried) == {"die-once", "raise-once", "timeout-once", "die-always"}
    # listed in the run's summary: a flaky environment is visible, not hidden by the pass
    assert "4 cases ran again after an infrastructure error" in rec.output
    row = next(line for line in rec.output.splitlines() if "│ die-always" in line)
    assert "3" in row and "worker_died" in row


def test_a_case_that_failed_a_criterion_is_never_run_again(workers_run):
    p, _ = workers_run
    data = json.loads((p / "r.json").read_text())
    v = {c["case_id"]: c["verdicts"] for c in data["cases"]}
    ran = attempts(p)
    # the denial failed release_class on an attempt that also raised: no second attempt, whose
    # delivery would have passed answer_correct
    assert ran["denied"] == 1
    assert v["denied"]["release_class"] == {"verdict": "fail", "reason": "FAIL_TOOL_ACCESS"}
    assert v["denied"]["answer_correct"] == {"verdict": "missing", "reason": "system_error"}
    assert ran["fail"] == 1 and v["fail"]["answer_correct"]["verdict"] == "fail"
    assert "denied" not in {r["case_id"] for r in data["retried"]}


def test_every_attempt_stays_in_the_case_stream(workers_run, cli, tmp_path):
    p, _ = workers_run
    types = stream_types(p, "die-once")  # one stream: the first attempt whole, then the second
    assert types[:3] == ["case_started.v1", "case_finished.v2", "case_retried.v1"]  # the worker died
    assert types.count("case_started.v1") == 1 and types.count("case_retried.v1") == 1
    assert "trajectory.v1" in types[3:] and types[-1] == "case_finished.v2"
    assert stream_types(p, "die-always").count("case_retried.v1") == 2
    assert "case_retried.v1" not in stream_types(p, "ok")
    # the seal covers the streams: the audit holds, and the digest is the one run printed
    digest = json.loads((p / "r.json").read_text())["log_digest"]
    r = cli("audit", "verify", "--expect", digest, cwd=p)
    assert r.exit_code == 0, r.output
    # show: the attempts, the verdict's attempt last
    r = cli("show", "latest", "die-once", cwd=p)
    assert r.exit_code == 0
    assert "attempts: 2 (retries:) · the verdict is attempt 2's, which finished" in r.output
    assert "attempt 1: worker_died: the worker process running this case died" in r.output
    r = cli("show", "latest", "die-always", cwd=p)
    assert "attempts: 3" in r.output and "which ended with worker_died" in r.output
    # gate and eval judge the stored run as the run did
    assert cli("eval", "--json", "e.json", cwd=p).exit_code == 0
    e = {c["case_id"]: c["verdicts"] for c in json.loads((p / "e.json").read_text())["cases"]}
    assert e["die-once"]["answer_correct"] == {"verdict": "pass"}
    # export: the earlier attempts as their own lines, every other line the last attempt's
    r = cli("export", "latest", "--format", "jsonl", "--out", str(tmp_path / "x.jsonl"), cwd=p)
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in (tmp_path / "x.jsonl").read_text().splitlines()]
    tried = [x for x in lines if x["record"] == "attempt"]
    assert sorted((x["case_id"], x["data"]["attempt"], x["data"]["error_kind"]) for x in tried) == [
        ("die-always", 1, "worker_died"), ("die-always", 2, "worker_died"), ("die-once", 1, "worker_died"),
        ("raise-once", 1, "system_error"), ("timeout-once", 1, "case_timeout")]
    traj = next(x for x in lines if x["record"] == "agent_trajectory/v1" and x["case_id"] == "die-once")
    assert traj["data"]["terminal_status"] == "success"
    # push: the retried streams travel whole and the seal is verified on arrival
    r = cli("push", "latest", "--to", str(tmp_path / "team.db"), cwd=p)
    assert r.exit_code == 0, r.output
    assert digest in r.output
    assert cli("audit", "verify", "--db", str(tmp_path / "team.db")).exit_code == 0


def test_junit_shows_the_earlier_attempts(workers_run):
    p, _ = workers_run
    root = ET.parse(p / "junit.xml").getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    flaky = cases["die-once"].findall("flakyError")
    assert [f.get("type") for f in flaky] == ["worker_died"] and cases["die-once"].find("failure") is None
    rerun = cases["die-always"].findall("rerunError")
    assert len(rerun) == 2 and cases["die-always"].find("error").get("type") == "worker_died"
    assert cases["denied"].find("failure").get("type") == "release_class"
    assert "lost the connection after the denial" in cases["denied"].find("failure").text


def test_only_the_listed_errors_are_retried(cli, tmp_path):
    """``on: [worker_died]`` on one process: a system error (an os._exit turned into one too)
    is not retried."""
    p = project(tmp_path / "p", ["raise-once", "die-once", "ok"], retries="retries: {max: 3, on: [worker_died]}")
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    v = {c["case_id"]: c["verdicts"]["answer_correct"] for c in data["cases"]}
    assert v == {"raise-once": {"verdict": "missing", "reason": "system_error"},
                 "die-once": {"verdict": "missing", "reason": "system_error"}, "ok": {"verdict": "pass"}}
    assert attempts(p) == {"raise-once": 1, "die-once": 1, "ok": 1}
    assert data["retried"] == [] and "ran again" not in r.output
    # without retries: no `retried` key (the results are what they were)
    p2 = project(tmp_path / "p2", ["raise-once"], retries="")
    assert cli("run", "--json", "r.json", cwd=p2).exit_code == 0
    assert "retried" not in json.loads((p2 / "r.json").read_text())


def test_a_resumed_run_lists_the_cases_it_retried_before(cli, tmp_path):
    # one process: the driver judges an attempt itself before it runs it again ("denied" failed)
    p = project(tmp_path / "p", ["raise-once", "denied", "stop-once", "ok"],
                retries="retries: {max: 1, on: [system_error]}")
    r = cli("run", cwd=p)
    assert r.exit_code == 130, r.output
    run_id = json.loads(cli("runs", "--json", cwd=p).output)[-1]["run_id"]
    assert stream_types(p, "raise-once").count("case_retried.v1") == 1  # committed whole before the stop
    r = cli("run", "--resume", run_id, "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    assert [x["case_id"] for x in data["retried"]] == ["raise-once"]
    assert attempts(p) == {"raise-once": 2, "denied": 1, "stop-once": 2, "ok": 1}  # raise-once not run again
    assert {c["case_id"]: c["verdicts"]["answer_correct"]["verdict"] for c in data["cases"]} == \
        {"raise-once": "pass", "denied": "missing", "stop-once": "pass", "ok": "pass"}


@pytest.mark.parametrize("retries, needle", [
    ("retries: {max: 0, on: [worker_died]}", "retries.max"),
    ("retries: {max: 2, on: []}", "retries.on"),
    ("retries: {max: 2, on: [failed]}", "retries.on"),
    ("retries: {max: 2, on: [worker_died, worker_died]}", "listed twice"),
    ("retries: {max: true, on: [worker_died]}", "boolean"),
    ("retries: {on: [worker_died]}", "retries.max"),
])
def test_bad_retries_are_located_config_errors(cli, tmp_path, retries, needle):
    p = project(tmp_path / "p", ["ok"], retries=retries)
    r = cli("run", cwd=p)
    assert r.exit_code == 2, r.output
    assert "oloproof.yaml:4" in r.output and needle in r.output, r.output
    assert not (p / ".oloproof" / "log.db").exists() or not json.loads(cli("runs", "--json", cwd=p).output)


def test_the_html_case_panel_shows_the_attempts(workers_run, cli, tmp_path):
    from selenium.webdriver.common.by import By

    from tests.test_view import browser, wait

    p, _ = workers_run
    assert cli("view", "latest", "--out", str(tmp_path / "report"), cwd=p).exit_code == 0
    driver = browser()
    try:
        driver.get((tmp_path / "report" / "index.html").as_uri() + "#case=die-always")
        wait(driver, "#panel td.attempts")
        cell = driver.find_element(By.CSS_SELECTOR, "#panel td.attempts")
        assert cell.find_element(By.TAG_NAME, "p").text == "3 attempts; the verdicts are attempt 3's"
        rows = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                for tr in cell.find_elements(By.CSS_SELECTOR, "tr")]
        rows = [r for r in rows if r]  # the header row holds th cells
        assert [r[:2] for r in rows] == [["1", "worker_died"], ["2", "worker_died"]]
        assert "died" in rows[0][2]
    finally:
        driver.quit()

"""A case whose system raised stores where (issue 23, SPEC §18.2): ``case_finished.v2`` holds
the traceback of the user's frames; ``show``, the HTML panel, both exports and the pytest
plugin print it; ``case_finished.v1`` events of older logs are upcast with none."""

from __future__ import annotations

import json
import sqlite3

import pytest

from oloproof.events import CaseFinished, decode, stored_tag, tag_of
from tests.conftest import write
from tests.test_golden import GOLDEN, load_golden
from tests.test_pytest_plugin import pytest_in

APP = '''\
from oloproof import system


def parse(text):
    if text == "garbage":
        raise ValueError("model returned garbage")
    try:
        return {"x": 1}[text]
    except KeyError as e:
        raise RuntimeError("no such key \\x1b[31mred\\x1b[0m\\nforged line") from e


@system(name="crash", version="1")
def run(case):
    return {"answer": parse(case.input["q"])}
'''

ASYNC_APP = APP.replace("def run(case):", "async def run(case):")

CONFIG = '''\
system:
  name: crash
  version: "1"
  callable: app:run
cases: cases.jsonl
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
'''

CASES = [{"id": "garbage", "input": {"q": "garbage"}, "expected": {"answer": "y"}},
         {"id": "chained", "input": {"q": "nope"}, "expected": {"answer": "y"}},
         {"id": "fine", "input": {"q": "x"}, "expected": {"answer": "1"}}]


def project(tmp_path, app=APP):
    p = tmp_path / "p"
    write(p / "app.py", app)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "cases.jsonl", "".join(json.dumps(c) + "\n" for c in CASES))
    return p


def views(p):
    from oloproof.app.runs import iter_case_views, latest_run_id
    from oloproof.store import SQLiteStore

    store = SQLiteStore(p / ".oloproof" / "log.db")
    try:
        return {v.case_id: v for v in iter_case_views(store, latest_run_id(store))}
    finally:
        store.close()


@pytest.mark.parametrize("app", [APP, ASYNC_APP], ids=["sync", "async"])
def test_the_traceback_holds_the_users_frames_only(cli, tmp_path, app):
    p = project(tmp_path, app)
    assert cli("run", cwd=p).exit_code == 0
    v = views(p)
    tb = v["garbage"].traceback
    assert tb.startswith("Traceback (most recent call last):"), tb
    assert f'File "{p / "app.py"}", line 6, in parse' in tb and "in run" in tb
    assert tb.rstrip().endswith("ValueError: model returned garbage")
    assert "oloproof" not in tb.replace(str(p), "")  # no frame of Oloproof's own
    chained = v["chained"].traceback
    assert "KeyError: 'nope'" in chained and "direct cause" in chained and "RuntimeError" in chained
    assert v["fine"].traceback is None and v["fine"].error is None


def test_worker_processes_record_the_traceback_too(cli, tmp_path):
    p = project(tmp_path)
    assert cli("run", "--workers", "2", cwd=p).exit_code == 0
    assert 'line 6, in parse' in views(p)["garbage"].traceback


def test_the_event_is_case_finished_v2(cli, tmp_path):
    p = project(tmp_path)
    assert cli("run", cwd=p).exit_code == 0
    conn = sqlite3.connect(p / ".oloproof" / "log.db")
    types = {t for (t,) in conn.execute("SELECT type FROM events WHERE type LIKE 'case_finished%'")}
    conn.close()
    assert types == {"case_finished.v2"}
    assert cli("audit", "verify", cwd=p).exit_code == 0


def test_show_prints_it_escaped(cli, tmp_path):
    p = project(tmp_path)
    r = cli("run", cwd=p)
    assert not any(line.startswith("forged line") for line in r.output.splitlines()), r.output
    out = cli("show", "latest", "garbage", cwd=p).output
    assert "error: ValueError: model returned garbage" in out
    assert 'line 6, in parse' in out and 'raise ValueError("model returned garbage")' in out
    out = cli("show", "latest", "chained", cwd=p).output
    assert "\x1b" not in out  # a recorded escape sequence cannot colour the terminal
    assert not any(line.startswith("forged line") for line in out.splitlines())  # nor fake a line


def test_the_exports_carry_it(cli, tmp_path):
    p = project(tmp_path)
    cli("run", cwd=p)
    r = cli("export", "latest", "--format", "jsonl", cwd=p)
    records = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    errors = {x["case_id"]: x["data"] for x in records if x["record"] == "error"}
    assert set(errors) == {"garbage", "chained"}
    assert "line 6, in parse" in errors["garbage"]["traceback"]
    assert errors["garbage"]["error_kind"] == "system_error"
    assert cli("export", "latest", "--format", "sqlite", str(p / "a.db"), cwd=p).exit_code == 0
    conn = sqlite3.connect(p / "a.db")
    rows = dict(conn.execute("SELECT case_id, traceback FROM cases").fetchall())
    conn.close()
    assert rows["fine"] is None and "line 6, in parse" in rows["garbage"]


def test_the_html_panel_data_carries_it(cli, tmp_path):
    p = project(tmp_path)
    cli("run", cwd=p)
    assert cli("view", "latest", "--out", str(p / "rep"), cwd=p).exit_code == 0
    data = "".join(f.read_text() for f in (p / "rep" / "data").rglob("*.js"))  # the run's data, not the page's code
    assert "model returned garbage" in data and "line 6, in parse" in data
    assert '"traceback":' in data


@pytest.mark.slow
def test_the_pytest_plugin_shows_it(cli, tmp_path):
    project(tmp_path)
    r = pytest_in(tmp_path, "--oloproof", "p")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error: ValueError: model returned garbage" in r.stdout
    assert 'line 6, in parse' in r.stdout


def test_v1_events_are_upcast_with_no_traceback(tmp_path):
    """The first real upcast: the golden v1 log's case_finished.v1 events decode as today's
    CaseFinished, keep their stored type, and the log verifies and audits deep."""
    from oloproof.app.audit import audit_log
    from oloproof.app.runs import iter_case_views, latest_run_id

    lines = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    old = next(r for r in lines if r["type"] == "case_finished.v1")
    event = decode(old["payload"])
    assert type(event) is CaseFinished and event.traceback is None
    assert event.output == {"answer": "refunded"} and event.error is None
    assert tag_of(event) == "case_finished.v2" and stored_tag(old["payload"]) == "case_finished.v1"
    store = load_golden(GOLDEN, tmp_path / "log.db")
    try:
        run_id = latest_run_id(store)
        cases = list(iter_case_views(store, run_id))
        assert len(cases) == 40 and all(c.traceback is None for c in cases)
        assert all(c.finished for c in cases)
        audit = audit_log(store)  # every payload decoded, every stored type held to its payload
        assert audit.ok, (audit.problems, [r.problems for r in audit.runs])
    finally:
        store.close()


def test_a_type_column_rewritten_to_the_upcast_type_is_named(tmp_path):
    """An attack on the upcast: a case_finished.v1 event whose type column is rewritten to
    .v2 (the type it reads as) disagrees with what its payload was written as."""
    from oloproof.app.audit import audit_log
    from oloproof.store import SQLiteStore

    load_golden(GOLDEN, tmp_path / "log.db").close()
    conn = sqlite3.connect(tmp_path / "log.db")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")  # an attacker with the file drops the append-only guard
    row = conn.execute("SELECT stream, seq FROM events WHERE type = 'case_finished.v1' LIMIT 1").fetchone()
    conn.execute("UPDATE events SET type = 'case_finished.v2' WHERE stream = ? AND seq = ?", row)
    conn.commit()
    conn.close()
    store = SQLiteStore(tmp_path / "log.db", readonly=True)
    try:
        audit = audit_log(store)
    finally:
        store.close()
    problems = audit.problems + [p for r in audit.runs for p in r.problems]
    assert not audit.ok and any("'case_finished.v2' disagrees with its payload ('case_finished.v1')" in p
                                for p in problems), problems

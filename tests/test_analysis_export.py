"""``oloproof export RUN --format sqlite FILE`` (issue 16): an analysis database with plain,
documented tables, foreign keys and indexes, that answers SQL questions the terminal cannot —
checked against the same answers computed from the events."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
import sqlite_utils
from conftest import copy_example

from oloproof.store import SQLiteStore

TABLES = {"runs", "cases", "steps", "verdicts", "states", "replays", "pairs"}


def judged(project: Path):
    from oloproof.app.reports import judged_cases
    from oloproof.app.runs import latest_run_id

    store = SQLiteStore(project / ".oloproof" / "log.db", readonly=True)
    try:
        return latest_run_id(store), list(judged_cases(store, latest_run_id(store)))
    finally:
        store.close()


@pytest.fixture
def exported(cli, support_run):
    r = cli("export", "latest", "--format", "sqlite", "run.db", cwd=support_run)
    assert r.exit_code == 0, r.output
    return support_run, sqlite_utils.Database(support_run / "run.db")


def test_the_failure_rate_per_first_tool_matches_the_events(exported):
    project, db = exported
    rows = db.execute("""
        SELECT c.first_tool, count(*) AS cases, sum(v.verdict = 'fail') AS failed
        FROM cases AS c JOIN verdicts AS v ON v.case_id = c.case_id
        WHERE v.criterion = 'agent_constraints_satisfied'
        GROUP BY c.first_tool ORDER BY c.first_tool""").fetchall()
    expected: dict[str | None, list[int]] = defaultdict(lambda: [0, 0])
    _, cases = judged(project)
    for view, verdicts in cases:
        tools = view.trajectory.tool_names if view.trajectory else []
        entry = expected[tools[0] if tools else None]
        entry[0] += 1
        entry[1] += verdicts["agent_constraints_satisfied"][0] == "fail"
    assert [(t, n, f) for t, n, f in rows] == sorted((t, n, f) for t, (n, f) in expected.items())
    assert sum(f for _, _, f in rows) == 3  # the three deletions


def test_every_table_is_there_with_its_keys_and_indexes(exported):
    project, db = exported
    assert set(db.table_names()) == TABLES
    assert {fk.other_table for fk in db["steps"].foreign_keys} == {"cases"}
    assert {(fk.column, fk.other_table) for fk in db["cases"].foreign_keys} == {("run_id", "runs"),
                                                                               ("derived_from", "cases")}
    assert db["steps"].pks == ["case_id", "step"] and db["verdicts"].pks == ["case_id", "criterion"]
    assert any(ix.columns == ["first_tool"] for ix in db["cases"].indexes)
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    run_id, cases = judged(project)
    assert db["runs"].count == 1 and db["cases"].count == len(cases) == 40
    [run] = list(db["runs"].rows)
    assert run["run_id"] == run_id and run["sealed"] == 1 and run["log_digest"].startswith("sha256:")
    assert db["steps"].count == sum(len(v.trajectory.steps) for v, _ in cases)
    # a step row is the recorded step, its JSON readable with json_extract
    [(tool, order)] = db.execute("SELECT tool_name, json_extract(arguments, '$.order_id') FROM steps "
                                 "WHERE tool_name = 'delete_customer' ORDER BY case_id LIMIT 1").fetchall()
    assert tool == "delete_customer" and order.startswith("ord-")
    assert {r["verdict"] for r in db["verdicts"].rows} <= {"pass", "fail", "missing", "excluded"}


def test_states_replays_and_pairs_of_the_stateful_example(cli, tmp_path):
    from oloproof.app.analysis import flatten

    project = tmp_path / "desk"
    copy_example("stateful_agent", project)
    assert cli("run", cwd=project).exit_code in (0, 1)
    assert cli("export", "latest", "--format", "sqlite", "--out", "a.db", cwd=project).exit_code == 0
    db = sqlite_utils.Database(project / "a.db")
    _, cases = judged(project)
    views = {v.case_id: v for v, _ in cases}
    derived = {c for c in views if "~" in c}
    assert derived and {r["derived_case_id"] for r in db["pairs"].rows} == derived
    assert all(r["source_case_id"] == r["derived_case_id"].split("~")[0] for r in db["pairs"].rows)
    state_rows = db.execute("SELECT case_id, path, value FROM states WHERE case_id = 'ord-001'").fetchall()
    import json
    assert sorted((p, json.loads(v)) for _, p, v in state_rows) == sorted(flatten(views["ord-001"].state))
    kinds = {(r["kind"], r["fault"]) for r in db["replays"].rows}
    assert kinds == {("control", None), ("fault", "error")}
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_flatten_names_every_leaf():
    from oloproof.app.analysis import flatten

    assert flatten({"a": {"b": [1, {"c": None}], "e": {}}, "d": "x"}) == [
        ("a.b[0]", 1), ("a.b[1].c", None), ("a.e", {}), ("d", "x")]
    assert flatten(3) == [("$", 3)]
    # keys that look like paths are quoted: every leaf has its own path
    tricky = {"a.b": 1, "a": {"b": 2}, "items[0]": 3, "items": [4], "$": 5, "": 6, 'q"': 7}
    paths = [p for p, _ in flatten(tricky)]
    assert paths == ['["a.b"]', "a.b", '["items[0]"]', "items[0]", '["$"]', '[""]', '["q\\""]']
    assert len(set(paths)) == len(paths)


def test_bad_targets_are_refused_and_nothing_partial_is_left(cli, support_run, monkeypatch):
    r = cli("export", "latest", "--format", "sqlite", cwd=support_run)
    assert r.exit_code == 2 and "give its path" in r.output
    (support_run / "adir").mkdir()
    assert cli("export", "latest", "--format", "sqlite", "adir", cwd=support_run).exit_code == 2
    r = cli("export", "nope", "--format", "sqlite", "x.db", cwd=support_run)
    assert r.exit_code == 2 and not (support_run / "x.db").exists()
    r = cli("export", "latest", "a.db", "--out", "b.db", "--format", "sqlite", cwd=support_run)
    assert r.exit_code == 2
    # a failure while writing (a full disk): no file, no scratch file beside it
    import sqlite_utils.db

    def full(self, *args, **kwargs):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(sqlite_utils.db.Table, "insert_all", full)
    r = cli("export", "latest", "--format", "sqlite", "full.db", cwd=support_run)
    assert r.exit_code == 2 and "disk is full" in r.output
    assert not list(support_run.glob("*full.db*"))


def test_a_tampered_run_is_not_exported(cli, support_run):
    conn = sqlite3.connect(support_run / ".oloproof" / "log.db")
    conn.execute("DROP TRIGGER IF EXISTS events_no_delete")
    triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
    for name in triggers:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DELETE FROM events WHERE pos = (SELECT max(pos) FROM events WHERE type = 'step.v1')")
    conn.commit()
    conn.close()
    r = cli("export", "latest", "--format", "sqlite", "t.db", cwd=support_run)
    assert r.exit_code == 2 and "fails its audit" in r.output
    assert not (support_run / "t.db").exists()

"""``oloproof push RUN… --to URL`` / ``--from URL`` (SPEC §18.7): sealed runs copied between logs
with every stream their seals cover, each verified against its seal on arrival; idempotent;
unsealed, tampered and colliding runs refused. And ``OLOPROOF_DB``, the ``--db`` of every
command. SQLite to SQLite needs no server; the PostgreSQL round trip uses the throwaway
cluster (tests/postgres_server.py)."""

from __future__ import annotations

import json
import re
import sqlite3

import click
import pytest
from conftest import copy_recorded, one_function_project

from oloproof.events import StepRecorded
from oloproof.store import open_store
from oloproof.store.log import EventLog

DIGEST = re.compile(r"(?:sha256|hmac-sha256):[0-9a-f]{64}")


def results(folder):
    return json.loads((folder / "results.json").read_text())


def event_count(db) -> int:
    store = open_store(db, readonly=True)
    try:
        return store.verify().events
    finally:
        store.close()


def test_a_pushed_run_verifies_against_the_digest_ci_printed(cli, support_run, tmp_path):
    sealed = results(support_run)
    team = tmp_path / "team.db"
    r = cli("push", "latest", "--to", str(team), cwd=support_run)
    assert r.exit_code == 0, r.output
    assert f"pushed run {sealed['run_id']} to {team}: 40 cases" in r.output and "seal verified on arrival" in r.output
    assert DIGEST.findall(r.output) == [sealed["log_digest"]]  # the digest `oloproof run` printed
    v = cli("audit", "verify", "--expect", sealed["log_digest"], "--db", str(team), cwd=tmp_path)
    assert v.exit_code == 0 and f"ok: run {sealed['run_id']} matches" in v.output, v.output
    # the run reads, gates and searches there as in its own log
    assert json.loads(cli("runs", "--json", "--db", str(team), cwd=tmp_path).output)[0]["status"] == "complete"
    g = cli("gate", "--json", "gate.json", "--db", str(team), cwd=tmp_path)
    assert g.exit_code == 1 and json.loads((tmp_path / "gate.json").read_text())["gate"]["decision"] == \
        sealed["gate"]["decision"]
    s = cli("search", "delete_customer", "--json", "hits.json", "--db", str(team), cwd=tmp_path)
    assert s.exit_code == 0 and len(json.loads((tmp_path / "hits.json").read_text())) == 6
    store = open_store(team, readonly=True)
    assert store.count("cases", run_id=sealed["run_id"]) == 40  # the projection rows came along
    store.close()
    # again: nothing copied, and said so
    before = event_count(team)
    r = cli("push", sealed["run_id"], "--to", str(team), cwd=support_run)
    assert r.exit_code == 0 and "already in" in r.output and "nothing copied" in r.output, r.output
    assert DIGEST.findall(r.output) == [sealed["log_digest"]] and event_count(team) == before


def test_pull_a_baseline_into_a_local_log(cli, support_run, tmp_path):
    sealed = results(support_run)
    team = tmp_path / "team.db"
    assert cli("push", "latest", "--to", str(team), cwd=support_run).exit_code == 0
    here = tmp_path / "dev"
    here.mkdir()
    r = cli("push", sealed["run_id"], "--from", str(team), cwd=here)  # into ./.oloproof/log.db, made for it
    assert r.exit_code == 0 and DIGEST.findall(r.output) == [sealed["log_digest"]], r.output
    assert (here / ".oloproof" / "log.db").exists()
    g = cli("gate", sealed["run_id"], cwd=here)  # decided here, offline, from the pulled events
    assert g.exit_code == 1 and "no-deletion" in g.output, g.output


INTERRUPTED = """
import os
from pathlib import Path
from oloproof import system
from oloproof.errors import Interrupted

CALLS = Path({calls!r})

@system(name="x", version="1")
def run(case):
    n = int(CALLS.read_text()) if CALLS.exists() else 0
    CALLS.write_text(str(n + 1))
    if n == 2:
        raise Interrupted()  # the operator's Ctrl-C, during the third case
    return {{"a": "b"}}
"""


def test_an_unsealed_run_is_refused_saying_why(cli, tmp_path):
    cases = "".join(f'{{"id": "c{i}", "input": {{}}, "expected": {{"a": "b"}}}}\n' for i in range(1, 6))
    p = one_function_project(tmp_path / "p", "    pass\n", cases=cases)
    (p / "app.py").write_text(INTERRUPTED.format(calls=str(tmp_path / "calls")))
    assert cli("run", cwd=p).exit_code == 130
    r = cli("push", "latest", "--to", str(tmp_path / "team.db"), cwd=p)
    assert r.exit_code == 2, r.output
    assert "is not sealed: 2 of 5 cases committed" in r.output and "only a sealed run can be pushed" in r.output
    assert "oloproof run --resume" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "team.db").exists()  # checked before the target was even made


def test_a_run_id_the_target_holds_with_other_content_is_refused(cli, support_run, tmp_path):
    run_id = results(support_run)["run_id"]
    team = tmp_path / "team.db"
    store = open_store(team)
    EventLog(store).append(run_id, 0, [StepRecorded(0, "message", arguments={"text": "another run"})])
    store.close()
    r = cli("push", "latest", "--to", str(team), cwd=support_run)
    assert r.exit_code == 2, r.output
    assert f"the target already holds stream '{run_id}' with other content" in r.output
    assert "Nothing of the run was copied" in r.output and event_count(team) == 1


def test_a_run_that_fails_its_audit_is_not_pushed(cli, support_run, tmp_path):
    conn = sqlite3.connect(support_run / ".oloproof" / "log.db")
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'ord-009', 'ord-999') AS BLOB) "
                 "WHERE stream LIKE '%/case_008' AND seq = 3")
    conn.commit()
    conn.close()
    r = cli("push", "latest", "--to", str(tmp_path / "team.db"), cwd=support_run)
    assert r.exit_code == 2 and "fails its audit in the source log" in r.output and "case_008 #3" in r.output, \
        r.output


def test_push_between_keyed_logs_and_not_across_schemes(cli, support_project, tmp_path, monkeypatch):
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "ci-secret")
    assert cli("run", "--json", "results.json", cwd=support_project).exit_code == 1
    digest = results(support_project)["log_digest"]
    assert digest.startswith("hmac-sha256:")
    r = cli("push", "latest", "--to", str(tmp_path / "team.db"), cwd=support_project)
    assert r.exit_code == 0 and DIGEST.findall(r.output) == [digest], r.output
    monkeypatch.delenv("OLOPROOF_LOG_KEY")
    plain = tmp_path / "plain.db"
    open_store(plain).close()
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "ci-secret")
    r = cli("push", "latest", "--to", str(plain), cwd=support_project)
    assert r.exit_code == 2 and "not keyed" in r.output, r.output


def test_a_run_pushed_without_the_run_before_it_says_so(cli, support_run, tmp_path):
    assert cli("run", "-q", cwd=support_run).exit_code == 1  # a second run: it follows the first one's seal
    r = cli("push", "latest", "--to", str(tmp_path / "team.db"), cwd=support_run)
    assert r.exit_code == 0 and "note: run" in r.output and "lives elsewhere" in r.output, r.output
    # the target's audit knows the predecessor is in another log, not deleted from this one
    r = cli("audit", "verify", "--db", str(tmp_path / "team.db"), cwd=tmp_path)
    assert r.exit_code == 0 and "deleted whole" not in r.output, r.output
    assert "note:" not in cli("push", results(support_run)["run_id"], "--to", str(tmp_path / "team.db"),
                              cwd=support_run).output
    assert cli("audit", "verify", "--db", str(tmp_path / "team.db"), cwd=tmp_path).exit_code == 0
    # a run deleted from the log it was sealed in is still named: the record is only the pushed run's
    import sqlite3

    conn = sqlite3.connect(support_run / ".oloproof" / "log.db")
    conn.execute("DROP TRIGGER events_append_only_delete")
    first = results(support_run)["run_id"]
    conn.execute("DELETE FROM events WHERE stream = ? OR stream LIKE ?", (first, first + "/%"))
    conn.commit()
    conn.close()
    r = cli("audit", "verify", cwd=support_run)
    assert r.exit_code != 0 and "deleted whole" in r.output, r.output


@pytest.mark.parametrize("args, says", [
    (("latest",), "give the log to copy into with --to URL"),
    (("latest", "--to", "a.db", "--from", "b.db"), "(one of them)"),
    (("latest", "--to", ".oloproof/log.db"), "is both the log the runs come from and the one they go to"),
    (("nope", "--to", "t.db"), "no run 'nope' in the log"),
    (("pin:main", "--to", "t.db"), "no run is pinned as 'main'"),
])
def test_push_usage_errors(cli, support_run, args, says):
    r = cli("push", *args, cwd=support_run)
    assert r.exit_code == 2 and says in r.output, r.output
    assert not (support_run / "t.db").exists()


def test_push_and_pull_through_postgresql_keep_the_digest(cli, support_run, postgres_url, tmp_path):
    sealed = results(support_run)
    r = cli("push", "latest", "--to", postgres_url, cwd=support_run)
    assert r.exit_code == 0 and DIGEST.findall(r.output) == [sealed["log_digest"]], r.output
    assert f"to {postgres_url}:" in r.output
    v = cli("audit", "verify", "--expect", sealed["log_digest"], "--db", postgres_url, cwd=tmp_path)
    assert v.exit_code == 0, v.output
    r = cli("push", "latest", "--to", postgres_url, cwd=support_run)
    assert "nothing copied" in r.output
    back = tmp_path / "back.db"
    r = cli("push", "latest", "--from", postgres_url, "--db", str(back), cwd=tmp_path)
    assert r.exit_code == 0 and DIGEST.findall(r.output) == [sealed["log_digest"]], r.output
    assert event_count(back) == event_count(support_run / ".oloproof" / "log.db")


# ---- OLOPROOF_DB ------------------------------------------------------------------------------

def test_oloproof_db_is_the_db_of_every_command_that_takes_one(cli, support_run, tmp_path, monkeypatch):
    from oloproof.cli import main

    elsewhere = copy_recorded(support_run, tmp_path / "elsewhere") / ".oloproof" / "log.db"
    monkeypatch.setenv("OLOPROOF_DB", str(elsewhere))
    ctx = click.Context(main.cli)
    main._db_from_environment(ctx)

    def check(command: click.Command, defaults: dict, path: str) -> int:
        n = 0
        if any(p.name == "db" for p in command.params):
            assert defaults.get("db") == str(elsewhere), path
            n += 1
        for name, sub in getattr(command, "commands", {}).items():
            n += check(sub, defaults.get(name, {}), f"{path} {name}")
        return n

    assert check(main.cli, ctx.default_map or {}, "oloproof") >= 15
    # a project folder without a log of its own: every command reads and writes the one named
    p = one_function_project(tmp_path / "p", "    return {'a': 'b'}\n")
    assert cli("run", cwd=p).exit_code == 0 and not (p / ".oloproof").exists()
    runs = json.loads(cli("runs", "--json", cwd=p).output)
    assert len(runs) == 2 and runs[-1]["system"] == "x"
    for args in (("show", "latest"), ("eval", "latest"), ("gate", "latest"), ("audit", "verify"),
                 ("search", "delete_customer"), ("export", "latest", "--format", "jsonl")):
        assert cli(*args, cwd=p).exit_code == 0, args
    assert cli("run", "--db", str(tmp_path / "given.db"), cwd=p).exit_code == 0  # --db still wins
    assert (tmp_path / "given.db").exists()

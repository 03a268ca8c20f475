"""The PostgreSQL backend against a real server (tests/postgres_server.py: a throwaway cluster
on 127.0.0.1, one database per test; skipped when PostgreSQL is not installed, failed under
OLOPROOF_REQUIRE_POSTGRES=1, which .ci/run sets). No mock: the contract, the append-only
triggers and the documented roles, two processes creating one log, a lost connection and the
resume after it, two runs and an import writing one log at once, the support example's
results, search."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, copy_example, one_function_project

from oloproof.errors import CorruptLogError, RunBusyError, StoreError
from oloproof.store import open_store, printable_url
from oloproof.store.postgres import LOCK_CLASS, PostgresStore, parse_query, to_tsquery
from oloproof.testing import StoreContract, batch


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _server(self, postgres_server):
        self.server = postgres_server

    def make_store(self, tmp_path):
        return open_store(self.server.new_database())

    def reopen(self, store, *, readonly=False):
        return PostgresStore(store.url, readonly=readonly)  # the tests' URLs hold no password


def sql(url: str, statement: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def oloproof(*args: str, cwd: Path, env: dict | None = None, wait: bool = True):
    import os

    cmd = [sys.executable, "-m", "oloproof", *args]
    environment = {**os.environ, **(env or {})}
    environment.pop("OLOPROOF_LOG_KEY", None)
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(cmd, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120)


# ---- urls and messages -----------------------------------------------------------------------

def test_postgres_urls_open_the_backend_and_never_print_the_password(postgres_server, postgres_url):
    store = open_store(postgres_url.replace("postgresql://", "postgres://", 1))
    assert isinstance(store, PostgresStore) and store.scheme == "sha256"
    store.close()
    assert printable_url("postgresql://ci:s3cret@db:5432/team?sslmode=require&password=s3cret") == \
        "postgresql://ci@db:5432/team?sslmode=require"
    with pytest.raises(StoreError) as e:  # nothing listens there
        open_store(postgres_server.url("nowhere", user="ci", password="s3cret").replace(
            str(postgres_server.port), "1"))
    assert "cannot connect to the log at postgresql://ci@127.0.0.1:1/nowhere" in str(e.value)
    assert "s3cret" not in str(e.value)
    with pytest.raises(StoreError, match="no Oloproof log in .*run 'oloproof run --db URL'"):
        open_store(postgres_server.new_database(), readonly=True)  # a reader never creates one


# ---- append-only, triggers and roles --------------------------------------------------------

def test_events_are_append_only_in_the_database(postgres_url):
    store = open_store(postgres_url)
    store.commit([batch("r/a", 0, 3)])
    store.close()
    for statement in ("UPDATE events SET payload = 'x' WHERE seq = 1", "DELETE FROM events", "TRUNCATE events"):
        with pytest.raises(Exception, match="oloproof events are append-only"):  # even for a superuser
            sql(postgres_url, statement)
    sql(postgres_url, "ALTER TABLE events DISABLE TRIGGER events_append_only")
    reader = open_store(postgres_url, readonly=True)
    assert "events_append_only" in reader.integrity_check()  # audit verify fails on it
    reader.close()
    sql(postgres_url, "ALTER TABLE events ENABLE TRIGGER events_append_only")
    # a trigger Oloproof did not make could rewrite what is stored: the log is refused
    sql(postgres_url, "CREATE FUNCTION sneaky() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$")
    sql(postgres_url, "CREATE TRIGGER sneaky BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION sneaky()")
    with pytest.raises(CorruptLogError, match="trigger sneaky"):
        open_store(postgres_url)


def test_schema_version_and_foreign_tables_are_checked(postgres_server, postgres_url):
    open_store(postgres_url).close()
    sql(postgres_url, "UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    for readonly in (False, True):
        with pytest.raises(CorruptLogError, match="log schema version '9'; this Oloproof reads version 1"):
            open_store(postgres_url, readonly=readonly)
    other = postgres_server.new_database()
    sql(other, "CREATE TABLE events (id int)")  # somebody else's table of that name
    with pytest.raises(CorruptLogError, match="an events table that Oloproof did not make"):
        open_store(other)


def roles_sql(database: str) -> list[str]:
    """The role statements of docs/team-log.md, for ``database``."""
    text = (ROOT / "docs" / "team-log.md").read_text()
    block = next(b for b in re.findall(r"```sql\n(.+?)```", text, re.S) if "CREATE ROLE oloproof_ci" in b)
    block = block.replace("DATABASE oloproof ", f"DATABASE {database} ")
    return [s.strip() for s in re.sub(r"--[^\n]*", "", block).split(";") if s.strip()]


def test_the_documented_roles_append_and_read_but_never_change_an_event(postgres_server, postgres_url, tmp_path):
    open_store(postgres_url).close()  # the owner creates the log
    database = postgres_url.rsplit("/", 1)[1]
    for statement in roles_sql(database):
        sql(postgres_url, statement)
    ci = postgres_server.url(database, user="oloproof_ci")
    reader = postgres_server.url(database, user="oloproof_reader")
    # CI records a real run, sealed, as the append-only role
    p = one_function_project(tmp_path / "p", "    return {'a': 'b'}\n")
    r = oloproof("run", "--db", ci, cwd=p)
    assert r.returncode == 0, r.stdout + r.stderr
    for statement, says in (("DELETE FROM events", "permission denied"), ("UPDATE events SET seq = 9", "permission"),
                            ("TRUNCATE events", "permission denied"),
                            ("DROP TRIGGER events_append_only ON events", "must be owner"),
                            ("ALTER TABLE events DISABLE TRIGGER ALL", "must be owner")):
        with pytest.raises(Exception, match=says):
            sql(ci, statement)
    # the reader reads every command's worth, and writes nothing
    v = oloproof("audit", "verify", "--db", reader, cwd=p)
    assert v.returncode == 0 and "1 run (1 sealed)" in v.stdout, v.stdout + v.stderr
    assert oloproof("search", "b", "--db", reader, cwd=p).returncode == 0
    with pytest.raises(Exception, match="permission denied"):
        sql(reader, "INSERT INTO meta VALUES ('x', 'y')")
    store = open_store(reader)  # a writer's opening: its first write is refused, translated
    with pytest.raises(StoreError, match="cannot write the log \\(permission denied for table"):
        store.commit([batch("r/a", 0, 1)])
    store.close()


# ---- opening at once, claims, keys ------------------------------------------------------------

RACE = """
import sys
from oloproof.store import open_store
s = open_store(sys.argv[1])
s.commit([__import__("oloproof.testing", fromlist=["batch"]).batch("r/" + sys.argv[2], 0, 2)])
s.close()
"""


def test_two_processes_racing_to_create_the_schema_both_use_one_log(postgres_url, tmp_path):
    """Four processes open a new log at once: each finds no log and goes to create it; the
    advisory lock lets one create it and the others, waiting on it, find it made."""
    held = __import__("psycopg").connect(postgres_url, autocommit=True)
    held.execute("SELECT pg_advisory_lock(%s, 0)", (LOCK_CLASS,))  # every opener waits on the schema lock
    procs = [subprocess.Popen([sys.executable, "-c", RACE, postgres_url, str(k)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=ROOT) for k in range(4)]
    deadline = time.time() + 60
    waiting = 0
    while waiting < 4 and time.time() < deadline and all(p.poll() is None for p in procs):
        waiting = sql(postgres_url, f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                    f"AND classid = {LOCK_CLASS} AND objid = 0")[0][0]
        time.sleep(0.02)
    assert waiting == 4, [p.poll() for p in procs]  # all four found no log and wait to create it
    held.close()  # let go: they race
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    assert sql(postgres_url, "SELECT count(*) FROM meta WHERE key = 'schema_version'") == [(1,)]
    store = open_store(postgres_url, readonly=True)
    assert store.verify().streams == 4 and store.stream_names("r/") == ["r/0", "r/1", "r/2", "r/3"]
    store.close()


def test_a_run_has_one_writer_named_to_the_second(postgres_url):
    first, second = open_store(postgres_url), open_store(postgres_url)
    try:
        with first.claim_run("20260101T000000-abcdef", "resumed"):
            with pytest.raises(RunBusyError, match=r"is being resumed by another process \(pid \d+ on "):
                with second.claim_run("20260101T000000-abcdef", "resumed"):
                    pass
            with second.claim_run("20260101T000000-other", "recorded"):  # another run: free
                pass
        with second.claim_run("20260101T000000-abcdef", "resumed"):  # let go: free
            pass
        with first.claim_run("20260101T000000-abcdef", "recorded"):
            first.close()  # the holder's connection ends (a killed process): the server lets go
            deadline = time.time() + 10
            while True:  # as soon as its backend has ended (milliseconds after the socket closed)
                try:
                    with second.claim_run("20260101T000000-abcdef", "resumed"):
                        break
                except RunBusyError:
                    if time.time() > deadline:
                        raise
                    time.sleep(0.01)
    finally:
        first.close()
        second.close()


def test_a_writer_killed_before_indexing_leaves_its_streams_to_the_next(postgres_url):
    from oloproof.store.search import SearchFilter

    killed = open_store(postgres_url)
    killed.commit([batch("r/a", 0, 3), batch("r/b", 0, 2)])
    killed._conn.close()  # gone before its end: it indexed nothing (no close(), no index_search())
    reader = open_store(postgres_url, readonly=True)
    assert reader.search_lag() == 5 and reader.search_steps("m1", SearchFilter(), 10) == []
    writer = open_store(postgres_url)
    writer.commit([batch("r/c", 0, 1)])
    assert writer.index_search() == 6  # its own from memory, the killed writer's read from the log
    assert reader.search_lag() == 0
    assert [(h["case_id"], h["step"]) for h in reader.search_steps("m1", SearchFilter(), 10)] == \
        [("b", 2), ("a", 2)]
    writer.close()
    reader.close()


def test_a_keyed_log_needs_its_key(postgres_url):
    store = open_store(postgres_url, key=b"team-secret")
    store.commit([batch("r/a", 0, 2)])
    assert store.scheme == "hmac-sha256" and store.verify().ok
    store.close()
    with pytest.raises(StoreError, match="set OLOPROOF_LOG_KEY"):
        open_store(postgres_url)
    with pytest.raises(StoreError, match="wrong key"):
        open_store(postgres_url, key=b"not-it")
    reader = open_store(postgres_url, readonly=True)  # a reader opens it, and says why it cannot verify
    assert reader.key_problem and "keyed" in reader.key_problem
    reader.close()


# ---- runs on a PostgreSQL log ----------------------------------------------------------------

KILLER = """
import psycopg
from pathlib import Path
from oloproof import system

CALLS = Path({calls!r})

@system(name="x", version="1")
def run(case):
    n = int(CALLS.read_text()) if CALLS.exists() else 0
    CALLS.write_text(str(n + 1))
    if n == 2:  # in the third case, the server drops every Oloproof connection (a restart, a lost network)
        with psycopg.connect({url!r}, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE application_name LIKE 'oloproof %' AND pid <> pg_backend_pid()")
    return {{"a": "b"}}
"""


def test_a_lost_connection_is_a_clear_error_and_the_run_resumes(cli, postgres_url, tmp_path):
    cases = "".join(f'{{"id": "c{i}", "input": {{}}, "expected": {{"a": "b"}}}}\n' for i in range(1, 6))
    p = one_function_project(tmp_path / "p", "    pass\n", cases=cases)
    (p / "app.py").write_text(KILLER.format(calls=str(tmp_path / "calls"), url=postgres_url))
    r = cli("run", "--db", postgres_url, cwd=p)
    assert r.exit_code == 2, r.output  # the log cannot be written: exit 2 (SPEC §17), one line
    runs = json.loads(cli("runs", "--json", "--db", postgres_url, cwd=p).output)
    assert len(runs) == 1 and runs[0]["status"] == "incomplete" and runs[0]["cases_committed"] == 2, runs
    run_id = runs[0]["run_id"]
    assert "lost the connection to the PostgreSQL server" in r.output and "Traceback" not in r.output
    assert f"'oloproof run --resume {run_id} --db {postgres_url}'" in r.output, r.output
    r = cli("run", "--resume", run_id, "--db", postgres_url, cwd=p)
    assert r.exit_code == 0, r.output
    v = cli("audit", "verify", "--db", postgres_url, cwd=p)
    assert v.exit_code == 0 and "1 run (1 sealed)" in v.output, v.output
    assert cli("show", run_id, "--json", "show.json", "--db", postgres_url, cwd=p).exit_code == 0
    assert [c["case_id"] for c in json.loads((p / "show.json").read_text())["cases"]] == ["c1", "c2", "c3", "c4", "c5"]


SLOW = """
import time
import app
from oloproof import system

@system(name="support-agent", version="slice-e-example", records=("agent_trajectory/v1",))
def run(case):
    time.sleep(0.01)
    return app.run(case)
"""


@pytest.mark.slow
def test_two_runs_and_an_import_write_one_log_at_once(cli, support_run, postgres_url, tmp_path):
    assert cli("export", "latest", "--format", "otlp-json", "--out", str(tmp_path / "t.jsonl"),
               cwd=support_run).exit_code == 0
    projects = []
    for name in ("a", "b"):
        p = copy_example("support_agent", tmp_path / name)
        (p / "app_slow.py").write_text(SLOW)
        (p / "oloproof.yaml").write_text((p / "oloproof.yaml").read_text().replace("callable: app:run",
                                                                                   "callable: app_slow:run"))
        projects.append(p)
    env = {"OLOPROOF_DB": postgres_url}
    procs = [oloproof("run", "--workers", "2", cwd=projects[0], env=env, wait=False),
             oloproof("run", "--concurrency", "4", cwd=projects[1], env=env, wait=False),
             oloproof("import", "otel", str(tmp_path / "t.jsonl"), cwd=tmp_path, env=env, wait=False)]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [1, 1, 0], outputs  # the example's gate fails on purpose
    r = oloproof("audit", "verify", cwd=tmp_path, env=env)
    assert r.returncode == 0 and "3 runs (3 sealed)" in r.stdout, r.stdout + r.stderr
    digests = [re.findall(r"sha256:[0-9a-f]{64}", out)[-1] for out in outputs]
    r = oloproof("audit", "verify", *[x for d in digests for x in ("--expect", d)], cwd=tmp_path, env=env)
    assert r.returncode == 0 and r.stdout.count("ok: run") == 3, r.stdout + r.stderr
    assert not (tmp_path / "a" / ".oloproof").exists()  # OLOPROOF_DB: no file log was made


def test_the_support_example_gives_identical_results_on_sqlite_and_postgresql(cli, support_recording,
                                                                              postgres_url, tmp_path):
    p = copy_example("support_agent", tmp_path / "support")
    r = cli("run", "--json", "results.json", "--db", postgres_url, cwd=p)
    assert r.exit_code == support_recording.exit_code == 1, r.output
    on_pg = json.loads((p / "results.json").read_text())
    on_sqlite = json.loads((support_recording.folder / "results.json").read_text())
    volatile = ("run_id", "log_digest")  # the run id, and the digest over streams named by it
    assert {k: v for k, v in on_pg.items() if k not in volatile} == \
           {k: v for k, v in on_sqlite.items() if k not in volatile}  # criteria, slices, verdicts per case, gate
    # what the seal covers differs only by the run id (and the times): every case event is
    # the same once its run id is the same, and its observed wall time (a clock's) zeroed
    import re

    def same(payload: bytes) -> bytes:
        return re.sub(rb'"wall_ms":[0-9.e+-]+', b'"wall_ms":0', payload)

    pg, lite = open_store(postgres_url, readonly=True), open_store(support_recording.folder / ".oloproof" / "log.db",
                                                                    readonly=True)
    a, b = on_sqlite["run_id"], on_pg["run_id"]
    assert [s[len(a):] for s in lite.stream_names(a + "/")] == [s[len(b):] for s in pg.stream_names(b + "/")]
    for stream in lite.stream_names(a + "/"):
        mine = [same(e.payload.replace(b.encode(), a.encode())) for e in pg.read_stream(b + stream[len(a):])]
        assert mine == [same(e.payload) for e in lite.read_stream(stream)], stream
    started = [json.loads(s.read_stream(run)[0].payload) for s, run in ((lite, a), (pg, b))]
    assert {k for k in started[0] if started[0][k] != started[1][k]} == {"run_id", "started_at"}
    pg.close()
    lite.close()


# ---- search ----------------------------------------------------------------------------------

QUERIES = ("delete_customer", '"ord-009"', "refund*", "refund NOT issue", "NEAR(customer delete)",
           "NEAR(customer delete, 0)", "issue_refund OR delete_customer", "order AND (refund OR cancel)",
           '"issue_refund" + "order"', "text: lookup_order", '"ORD-009" refund', "Ord")


def test_search_finds_on_postgresql_what_it_finds_on_sqlite(cli, support_run, postgres_url):
    from oloproof.app.push import prepare, push_runs
    from oloproof.app.search import search_log

    lite = open_store(support_run / ".oloproof" / "log.db", readonly=True)
    pg = open_store(postgres_url)
    push_runs(lite, pg, prepare(lite, ["latest"]))  # the same run in both
    filters = [{}] * len(QUERIES) + [{"tool": "delete_customer", "kind": "tool_call"}, {"system": "support-agent"},
                                     {"verdict": "agent_constraints_satisfied=fail"}, {"run": "latest"}]
    try:
        for q, where in zip(QUERIES + ("order", "refund", "refund", "ord*"), filters):
            hits = [[(h.run_id, h.case_id, h.step, h.kind, h.tool_name, h.replay, _marked(h.snippet))
                     for h in search_log(s, q, limit=1000, **where).hits] for s in (lite, pg)]
            assert hits[0] == hits[1] and hits[0], (q, where)
        assert len(search_log(pg, "order", tool="delete_customer", kind="tool_call", limit=1000).hits) == 3
    finally:
        lite.close()
        pg.close()
    r = cli("search", "^refund", "--db", postgres_url)
    assert r.exit_code == 2 and "not supported on a PostgreSQL log" in r.output, r.output


def _marked(snippet: str) -> list[str]:
    """The texts a snippet marks (the excerpt around them may differ between backends)."""
    return re.findall("\ue000(.*?)\ue001", snippet)


@pytest.mark.parametrize("query, tsquery", [
    ("refund issued", "('refund' & 'issued')"),
    ('"ord-1042"', "('ord' <-> '1042')"),
    ("Café* OR b", "('cafe':* | 'b')"),
    ("a NOT b c", "(('a' & !'b') & 'c')"),
    ("a OR b NOT c", "('a' | ('b' & !'c'))"),
    ("NEAR(a b, 1)", "('a' <1> 'b' | 'b' <1> 'a' | 'a' <2> 'b' | 'b' <2> 'a')"),
    ('"!!" OR a', "'a'"),
    ('a "!!"', None),
])
def test_fts5_queries_become_tsqueries(query, tsquery):
    parsed = parse_query(query)
    assert (None if parsed is None else to_tsquery(parsed)) == tsquery


def test_the_oloproof_db_variable_and_hints_name_the_url_without_its_password(cli, postgres_server, postgres_url,
                                                                                tmp_path, monkeypatch):
    from oloproof.cli.common import log_args

    database = postgres_url.rsplit("/", 1)[1]
    secret = postgres_server.url(database, password="s3cret")  # trust authentication: any password
    assert log_args(secret) == f" --db {postgres_url}"
    monkeypatch.setenv("OLOPROOF_DB", secret)
    assert log_args(secret) == ""  # a command run here finds it by itself
    p = one_function_project(tmp_path / "p", "    return {'a': 'b'}\n")
    r = cli("run", cwd=p)
    assert r.exit_code == 0 and not (p / ".oloproof").exists(), r.output
    for args in (("runs",), ("show",), ("gate",), ("eval",), ("audit", "verify"), ("search", "b")):
        r = cli(*args, cwd=p)
        assert r.exit_code == 0 and "s3cret" not in r.output, (args, r.output)

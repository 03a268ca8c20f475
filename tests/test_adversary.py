"""Verdicts that survive an adversary: sealed runs, decisions from events only, readers that
never block or write, an atomic rebuild, stale replays.

Each test reproduces an attack that worked on the first release and now fails."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from oloproof.events import chain_digests, encode
from tests.conftest import copy_example, write

APP = '''\
import os
import signal

from oloproof import current_case, tool


@tool
def act(what):
    return {"ok": what}


def agent(case):
    if case.input.get("die"):
        os.kill(os.getpid(), signal.SIGKILL)  # the process is killed in the middle of the run
    act(case.input["what"])
    current_case().finish("success")
    return {"answer": "ok"}
'''

CONFIG = '''\
system: {name: tiny, version: "1", callable: app:agent, records: [agent_trajectory/v1]}
cases: cases.jsonl
release: release.yaml
evaluators:
  - {type: contains, criterion: answer_correct, field: answer, expected_field: answer}
'''
RELEASE = "rules:\n  - {name: answers, criterion: answer_correct, max_failures: 0}\n"


def tiny(tmp_path: Path, n: int = 10, die: int | None = None) -> Path:
    p = tmp_path / "tiny"
    write(p / "app.py", APP)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "release.yaml", RELEASE)
    write(p / "cases.jsonl", "".join(
        json.dumps({"id": f"c{i:04d}", "input": {"what": f"w{i}", "die": i == die},
                    "expected": {"answer": "ok"}}) + "\n" for i in range(n)))
    return p


def oloproof(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command in its own process (a kill, a concurrent writer)."""
    return subprocess.run([sys.executable, "-m", "oloproof", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", **(env or {})})


@pytest.fixture
def support(support_run):
    """The support-agent example recorded once (its gate FAILs: 3 constraint failures), and
    its results; each test attacks a copy of the log."""
    return support_run, json.loads((support_run / "results.json").read_text())


def connect(p: Path) -> sqlite3.Connection:
    return sqlite3.connect(p / ".oloproof" / "log.db", isolation_level=None)


def failing(data: dict, criterion: str = "agent_constraints_satisfied") -> list[str]:
    return [c["case_id"] for c in data["cases"] if c["verdicts"][criterion]["verdict"] == "fail"]


# ---- incomplete runs never pass -------------------------------------------------------------

def test_a_killed_run_cannot_pass_the_gate(cli, tmp_path):
    p = tiny(tmp_path, n=10, die=4)
    killed = oloproof("run", cwd=p)
    assert killed.returncode == -9  # SIGKILL: the process could not say anything
    gate = cli("gate", "latest", cwd=p)
    assert gate.exit_code == 1, gate.output
    assert "INSUFFICIENT_EVIDENCE" in gate.output and "run_incomplete" in gate.output
    assert "INCOMPLETE RUN: 4 of 10 cases" in gate.output
    ev = cli("eval", "latest", "--json", "e.json", cwd=p)
    assert ev.exit_code == 1
    data = json.loads((p / "e.json").read_text())
    assert (data["complete"], data["cases_committed"], data["cases_expected"], data["log_digest"]) == \
        (False, 4, 10, None)
    row = data["criteria"][0]
    assert (row["passed"], row["observed"], row["missing"]) == (4, 4, 6)  # unrecorded = missing
    assert data["gate"]["rules"][0]["reason"] == "run_incomplete"
    verify = cli("audit", "verify", cwd=p)
    assert verify.exit_code == 1 and "INCOMPLETE run" in verify.output and "--resume" in verify.output
    runs = cli("runs", "--json", cwd=p)
    assert json.loads(runs.output)[0]["status"] == "incomplete"


def test_a_run_refuses_to_resume_after_its_code_changed(cli, tmp_path):
    p = tiny(tmp_path, n=6, die=3)
    assert oloproof("run", cwd=p).returncode == -9
    run_id = json.loads(cli("runs", "--json", cwd=p).output)[0]["run_id"]
    (p / "app.py").write_text(APP.replace("os.kill(os.getpid(), signal.SIGKILL)", "pass"))
    r = cli("run", "--resume", run_id, cwd=p)
    assert r.exit_code == 2 and "code" in r.output and "changed" in r.output


def test_a_resumed_run_is_sealed_and_decides(cli, tmp_path):
    p = tiny(tmp_path, n=6)
    (p / "app.py").write_text(APP.replace("if case.input.get(\"die\"):", "if os.environ.get(\"DIE_AT\") == case.id:"))
    assert oloproof("run", cwd=p, env={"DIE_AT": "c0003"}).returncode == -9
    run_id = json.loads(cli("runs", "--json", cwd=p).output)[0]["run_id"]
    assert cli("gate", run_id, cwd=p).exit_code == 1
    r = cli("run", "--resume", run_id, "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    data = json.loads((p / "r.json").read_text())
    assert data["complete"] and data["cases_committed"] == 6 and data["log_digest"].startswith("sha256:")
    assert cli("gate", run_id, cwd=p).exit_code == 0
    assert cli("audit", "verify", "--expect", data["log_digest"], cwd=p).exit_code == 0


# ---- deletions, truncations, forgeries --------------------------------------------------------

def drop_triggers(conn: sqlite3.Connection) -> None:
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("DROP TRIGGER events_append_only_delete")


def tamper(p: Path, sql: str, *params: object) -> None:
    """One statement an attacker with write access runs, append-only triggers set aside."""
    conn = connect(p)
    drop_triggers(conn)
    conn.execute(sql, params)
    restore_triggers(conn)
    conn.close()


def restore_triggers(conn: sqlite3.Connection) -> None:
    from oloproof.store.sqlite import _TRIGGERS

    for sql in _TRIGGERS.values():
        conn.execute(sql)


def test_deleting_the_failing_case_streams_is_caught(cli, support):
    p, data = support
    bad = failing(data)
    assert len(bad) == 3
    conn = connect(p)
    drop_triggers(conn)
    for case_id in bad:
        conn.execute("DELETE FROM events WHERE stream = ?", (f"{data['run_id']}/{case_id}",))
    restore_triggers(conn)
    conn.close()
    verify = cli("audit", "verify", cwd=p)
    assert verify.exit_code == 1
    for case_id in bad:
        assert f"{data['run_id']}/{case_id}: case stream missing" in verify.output
    gate = cli("gate", "latest", cwd=p)
    assert gate.exit_code == 2 and "fails its audit" in gate.output and "PASS" not in gate.output
    for command in (["eval", "latest"], ["show", "latest"], ["view", "latest", "--out", "html"]):
        r = cli(*command, cwd=p)
        assert r.exit_code == 2 and "case stream missing" in r.output, command


def test_a_truncated_case_stream_is_caught(cli, support):
    p, data = support
    case_id = failing(data)[0]
    stream = f"{data['run_id']}/{case_id}"
    conn = connect(p)
    n = conn.execute("SELECT COUNT(*) FROM events WHERE stream = ?", (stream,)).fetchone()[0]
    drop_triggers(conn)
    conn.execute("DELETE FROM events WHERE stream = ? AND seq >= ?", (stream, n - 3))
    restore_triggers(conn)
    conn.close()
    verify = cli("audit", "verify", cwd=p)
    assert verify.exit_code == 1 and f"{stream}: case stream truncated: {n - 3} of the {n} sealed events left" \
        in verify.output
    assert cli("gate", "latest", cwd=p).exit_code == 2


def recompute_chains(conn: sqlite3.Connection, key: bytes | None = None) -> None:
    """What an attacker with write access does after editing events: recompute every chain."""
    rows = conn.execute("SELECT pos, stream, seq, payload FROM events ORDER BY stream, seq").fetchall()
    previous, stream_now = "", None
    for pos, stream, seq, payload in rows:
        if stream != stream_now:
            previous, stream_now = "", stream
        previous = chain_digests(previous, stream, seq, [bytes(payload)], key)[0]
        conn.execute("UPDATE events SET digest = ? WHERE pos = ?", (previous, pos))


def reseal(conn: sqlite3.Connection, run_id: str) -> None:
    """Recompute the seal too (its streams' heads and digest), as a thorough attacker would."""
    from oloproof.app.audit import sealed_streams
    from oloproof.events import RunSealed, decode, seal_digest

    rows = conn.execute("SELECT pos, seq, payload, digest FROM events WHERE stream = ? ORDER BY seq",
                        (run_id,)).fetchall()
    pos, seq, payload, _ = rows[-1]
    sealed = decode(bytes(payload))
    assert isinstance(sealed, RunSealed)
    heads = {}
    for stream in sealed_streams(sealed):
        n, d = conn.execute("SELECT MAX(seq), digest FROM events WHERE stream = ?", (stream,)).fetchone()
        heads[stream] = (n + 1, d)
    import msgspec

    cut = len(run_id) + 1
    forged = msgspec.structs.replace(
        sealed, cases={s[cut:]: [n, d[:16]] for s, (n, d) in heads.items() if not s.startswith("replay/")},
        replays={s[7:]: [n, d[:16]] for s, (n, d) in heads.items() if s.startswith("replay/")},
        digest=seal_digest(run_id, (seq, rows[-2][3]), heads))
    conn.execute("UPDATE events SET payload = ? WHERE pos = ?", (encode(forged), pos))


def test_a_forgery_with_recomputed_hashes_is_caught_by_the_anchor(cli, support):
    p, data = support
    anchor = data["log_digest"]
    run_id = data["run_id"]
    conn = connect(p)
    drop_triggers(conn)
    # the release rule allows 3 failures now, inside run_started; then every hash recomputed
    payload = bytes(conn.execute("SELECT payload FROM events WHERE stream = ? AND seq = 0", (run_id,)).fetchone()[0])
    started = json.loads(payload)
    started["config"]["release"]["rules"][0]["max_failures"] = 3
    conn.execute("UPDATE events SET payload = ? WHERE stream = ? AND seq = 0",
                 (json.dumps(started, sort_keys=True, separators=(",", ":")).encode(), run_id))
    recompute_chains(conn)
    reseal(conn, run_id)
    recompute_chains(conn)
    restore_triggers(conn)
    conn.close()
    # without an anchor or a key, the forgery is consistent: verify cannot tell (the README says so)
    assert cli("audit", "verify", cwd=p).exit_code == 0
    assert cli("gate", "latest", cwd=p).exit_code == 0
    # the digest kept from the run (a CI artifact) catches it
    r = cli("audit", "verify", "--expect", anchor, cwd=p)
    assert r.exit_code == 1 and "no run in the log is sealed with this digest" in r.output


def test_a_rewrite_that_keeps_the_old_seal_is_caught(cli, support):
    p, data = support
    run_id, case_id = data["run_id"], failing(data)[0]
    conn = connect(p)
    drop_triggers(conn)
    stream = f"{run_id}/{case_id}"
    last = conn.execute("SELECT pos, payload FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                        (stream,)).fetchone()
    event = json.loads(bytes(last[1]))
    assert event["type"] == "case_finished.v2"
    event["output"] = {"answer": "forged"}
    conn.execute("UPDATE events SET payload = ? WHERE pos = ?", (encode(event), last[0]))
    recompute_chains(conn)  # every chain holds again, but the seal was not redone
    restore_triggers(conn)
    conn.close()
    r = cli("audit", "verify", "--expect", data["log_digest"], cwd=p)
    assert r.exit_code == 1
    assert f"{stream}: case stream rewritten since the seal" in r.output


def test_with_a_key_nobody_without_it_can_recompute_the_chain(cli, tmp_path, monkeypatch):
    p = tiny(tmp_path, n=5)
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "s3cret")
    r = cli("run", "--json", "r.json", cwd=p)
    assert r.exit_code == 0, r.output
    digest = json.loads((p / "r.json").read_text())["log_digest"]
    assert digest.startswith("hmac-sha256:")
    ok = cli("audit", "verify", "--expect", digest, cwd=p)
    assert ok.exit_code == 0 and "keyed (HMAC-SHA256)" in ok.output
    assert b"s3cret" not in (p / ".oloproof" / "log.db").read_bytes()  # the key never reaches the log
    # an attacker without the key rewrites the log as an unkeyed one, consistently
    conn = connect(p)
    drop_triggers(conn)
    conn.execute("UPDATE meta SET value = 'sha256' WHERE key = 'chain'")
    recompute_chains(conn)
    restore_triggers(conn)
    conn.close()
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "not keyed" in r.output
    assert cli("gate", "latest", cwd=p).exit_code == 2
    # and a keyed log read without its key is refused, never reported unchecked
    monkeypatch.delenv("OLOPROOF_LOG_KEY")
    shutil.rmtree(p / ".oloproof")
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "s3cret")
    assert cli("run", cwd=p).exit_code == 0
    monkeypatch.delenv("OLOPROOF_LOG_KEY")
    r = cli("gate", "latest", cwd=p)
    assert r.exit_code == 2 and "OLOPROOF_LOG_KEY" in r.output
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "OLOPROOF_LOG_KEY" in r.output
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "wrong")
    r = cli("audit", "verify", cwd=p)  # the key is at fault, not the log (tests/test_hostile_files.py)
    assert r.exit_code == 1 and "wrong key" in r.output and "digest mismatch" not in r.output


def test_a_type_column_that_disagrees_with_its_payload_is_named(cli, support):
    p, data = support
    tamper(p, "UPDATE events SET type = 'case_finished.v1' WHERE stream = ? AND seq = 1",
           f"{data['run_id']}/{data['cases'][0]['case_id']}")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "disagrees with its payload" in r.output


def test_streams_of_a_deleted_run_are_named(cli, support):
    p, data = support
    tamper(p, "DELETE FROM events WHERE stream = ?", data["run_id"])
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "case streams of a run that no longer exists" in r.output


# ---- decisions never read a cache -------------------------------------------------------------

def test_editing_the_evaluations_table_changes_no_decision(cli, support):
    p, data = support
    conn = connect(p)
    n = conn.execute("UPDATE evaluations SET result = replace(result, '\"fail\"', '\"pass\"')").rowcount
    conn.close()
    assert n > 0
    gate = cli("gate", "latest", cwd=p)
    assert gate.exit_code == 1 and "FAIL" in gate.output
    ev = cli("eval", "latest", "--json", "e.json", cwd=p)
    assert ev.exit_code == 1
    assert json.loads((p / "e.json").read_text())["criteria"] == data["criteria"]


def test_a_foreign_trigger_is_refused(cli, support):
    p, _ = support
    conn = connect(p)
    conn.execute("CREATE TRIGGER flip AFTER INSERT ON evaluations BEGIN "
                 "UPDATE evaluations SET result = replace(result, 'fail', 'pass'); END")
    conn.close()
    for command in (["run"], ["gate", "latest"], ["show", "latest"], ["audit", "verify"], ["runs"]):
        r = cli(*command, cwd=p)
        assert r.exit_code == 2, command
        assert "triggers that Oloproof did not create: flip (on evaluations)" in r.output, command


# ---- readers never block and never write ----------------------------------------------------------

@pytest.mark.slow
def test_readers_never_fail_beside_a_writer(tmp_path):
    """Readers (and a rebuild) beside a writer that is past its 2,000th case, driven by the
    writer's progress rather than a deadline: the agent holds at case 2,000 until the readers
    have read (a hidden file lets it go), then they read on while it finishes."""
    p = tiny(tmp_path, n=2500)
    hold = ("    import os, time\n"
            "    if case.id == 'c2000':\n"
            "        for _ in range(6000):  # at most 10 minutes: a test that lost its reader still ends\n"
            "            if os.path.exists('.oloproof/go'):\n"
            "                break\n"
            "            time.sleep(0.1)\n"
            "    act(case.input")
    (p / "app.py").write_text(APP.replace("    act(case.input", hold))
    writer = subprocess.Popen([sys.executable, "-m", "oloproof", "run"], cwd=p, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    errors, reads, most = [], 0, 0

    def read_all() -> None:
        nonlocal reads, most
        for command in (["gate", "latest"], ["runs", "--json"], ["show", "latest"],
                        ["eval", "latest"], ["view", "latest", "--out", str(tmp_path / f"html{reads}")]):
            r = oloproof(*command, cwd=p)
            reads += 1
            if r.returncode not in (0, 1) or "database is locked" in r.stderr + r.stdout:
                if "no runs yet" in r.stderr or "no event log" in r.stderr:  # before the run's first event
                    continue
                errors.append((command, r.returncode, r.stderr[-500:]))
            if command[0] == "gate" and "run_incomplete" in r.stdout:
                most = max(most, int(r.stdout.split("INCOMPLETE RUN: ")[1].split(" ")[0]))

    try:
        while most < 2000 and writer.poll() is None:  # read while it writes, up to its hold
            read_all()
        assert writer.poll() is None, writer.stderr.read() if writer.stderr else ""
        assert most == 2000, most  # held at its 2,000th case: past where the first release's readers failed
        r = oloproof("audit", "rebuild", cwd=p)  # a rebuild beside the writer: nothing lost
        assert r.returncode == 0, r.stderr
        read_all()
        (p / ".oloproof" / "go").touch()
        while writer.poll() is None:
            read_all()
    finally:
        (p / ".oloproof" / "go").touch()
        writer.wait(timeout=300)
    assert writer.returncode == 0, writer.stderr.read() if writer.stderr else ""
    assert not errors, errors
    assert reads >= 10
    conn = connect(p)
    assert conn.execute("SELECT COUNT(*) FROM cases").fetchone()[0] == 2500
    assert conn.execute("SELECT status FROM runs").fetchone()[0] == "complete"
    conn.close()


def test_read_commands_never_create_or_alter_a_file(cli, tmp_path, support):
    p, _ = support
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for command in (["runs"], ["gate", "latest"], ["audit", "verify"]):
        r = cli(*command, "--db", str(empty), cwd=p)
        assert r.exit_code == 2 and "creation was interrupted" in r.output, command
    assert empty.read_bytes() == b""
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    assert cli("runs", "--db", str(foreign), cwd=p).exit_code == 2
    assert foreign.read_bytes() == before  # not switched to WAL, no schema
    log = p / ".oloproof" / "log.db"
    conn = sqlite3.connect(log)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    digest = hashlib.sha256(log.read_bytes()).hexdigest()
    for command in (["runs"], ["gate", "latest"], ["show", "latest"], ["eval", "latest"], ["audit", "verify"],
                    ["export", "latest", "--out", str(tmp_path / "x.jsonl")]):
        cli(*command, cwd=p)
    assert hashlib.sha256(log.read_bytes()).hexdigest() == digest


def test_read_commands_work_on_read_only_storage(cli, tmp_path, support):
    p, _ = support
    mount = tmp_path / "ro"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root, or no mount namespace)")
    try:
        shutil.copy(p / ".oloproof" / "log.db", mount / "log.db")
        for extra in ("-wal", "-shm"):
            if (p / ".oloproof" / f"log.db{extra}").exists():
                shutil.copy(p / ".oloproof" / f"log.db{extra}", mount / f"log.db{extra}")
        conn = sqlite3.connect(mount / "log.db")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        for extra in ("-wal", "-shm"):
            (mount / f"log.db{extra}").unlink(missing_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        db = str(mount / "log.db")
        assert cli("audit", "verify", "--db", db, cwd=p).exit_code == 0
        assert cli("gate", "latest", "--db", db, cwd=p).exit_code == 1
        assert cli("show", "latest", "--db", db, cwd=p).exit_code == 0
        assert cli("runs", "--db", db, cwd=p).exit_code == 0
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


# ---- audit rebuild is one atomic step ------------------------------------------------------------

def test_rebuild_with_an_unreadable_event_keeps_the_tables(cli, support):
    p, data = support
    conn = connect(p)
    before = conn.execute("SELECT COUNT(*) FROM cases").fetchone()[0]
    drop_triggers(conn)
    stream = f"{data['run_id']}/{data['cases'][5]['case_id']}"
    conn.execute("UPDATE events SET payload = X'7b7b7b' WHERE stream = ? AND seq = 2", (stream,))
    restore_triggers(conn)
    conn.close()
    r = cli("audit", "rebuild", cwd=p)
    assert r.exit_code == 2 and f"{stream}" in r.output and "#2" in r.output
    conn = connect(p)
    assert conn.execute("SELECT COUNT(*) FROM cases").fetchone()[0] == before == 40
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    conn.close()


def test_a_killed_rebuild_keeps_the_tables(support):
    p, _ = support
    script = (
        "import os, signal, sys\n"
        "from oloproof.app import projections\n"
        "real = projections.case_rows\n"
        "count = [0]\n"
        "def rows(*a, **k):\n"
        "    count[0] += 1\n"
        "    if count[0] == 20: os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(*a, **k)\n"
        "projections.case_rows = rows\n"
        "from oloproof.cli.main import main\n"
        "sys.argv = ['oloproof', 'audit', 'rebuild']\n"
        "main()\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=p, capture_output=True, text=True, timeout=120)
    assert r.returncode == -9
    conn = connect(p)
    assert conn.execute("SELECT COUNT(*) FROM cases").fetchone()[0] == 40
    assert conn.execute("SELECT status FROM runs").fetchone()[0] == "complete"
    conn.close()


def test_view_of_a_crashed_run_lists_its_committed_cases(cli, tmp_path):
    p = tiny(tmp_path, n=10, die=6)
    assert oloproof("run", cwd=p).returncode == -9
    conn = connect(p)
    conn.execute("DELETE FROM cases")  # the cases table lags (or is gone): the view reads the events
    conn.close()
    r = cli("view", "latest", "--out", str(tmp_path / "html"), cwd=p)
    assert r.exit_code == 0, r.output
    index = (tmp_path / "html" / "data" / "index.js").read_text()
    assert all(f'"c{i:04d}"' in index for i in range(6))
    summary = (tmp_path / "html" / "data" / "summary.js").read_text()
    assert '"complete":false' in summary.replace(" ", "")


# ---- replays follow the code ---------------------------------------------------------------------

def test_changing_the_agent_without_a_version_bump_reruns_its_replays(cli, tmp_path):
    p = tmp_path / "desk"
    copy_example("stateful_agent", p)
    first = cli("run", "--json", "a.json", cwd=p)
    assert first.exit_code in (0, 1), first.output
    conn = connect(p)
    replays = conn.execute("SELECT COUNT(*) FROM events WHERE stream LIKE 'replay/%' AND seq = 0").fetchone()[0]
    conn.close()
    assert replays > 0
    again = cli("run", cwd=p)  # same code: every replay is read back, none runs
    conn = connect(p)
    assert conn.execute("SELECT COUNT(*) FROM events WHERE stream LIKE 'replay/%' AND seq = 0").fetchone()[0] \
        == replays
    conn.close()
    assert "changed" not in again.output
    # a change to the agent's code, the version untouched
    app = next(f for f in p.glob("*.py") if "current_case" in f.read_text() or "@tool" in f.read_text())
    app.write_text(app.read_text() + "\n# a fix\n")
    changed = cli("run", cwd=p)
    assert "changed since run" in changed.output and "bump" in changed.output
    conn = connect(p)
    assert conn.execute("SELECT COUNT(*) FROM events WHERE stream LIKE 'replay/%' AND seq = 0").fetchone()[0] \
        == 2 * replays
    conn.close()


def test_a_deleted_replay_stream_is_caught(cli, tmp_path):
    p = tmp_path / "desk"
    copy_example("stateful_agent", p)
    assert cli("run", "--json", "r.json", cwd=p).exit_code in (0, 1)
    sealed = json.loads((p / "r.json").read_text())
    conn = connect(p)
    stream = conn.execute("SELECT stream FROM events WHERE stream LIKE 'replay/%' AND type = 'replay_started.v1' "
                          "AND CAST(payload AS TEXT) LIKE '%\"kind\":\"fault\"%' LIMIT 1").fetchone()[0]
    drop_triggers(conn)
    conn.execute("DELETE FROM events WHERE stream = ?", (stream,))
    restore_triggers(conn)
    conn.close()
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and f"{stream}: replay stream missing" in r.output
    assert cli("gate", "latest", cwd=p).exit_code == 2
    assert cli("audit", "verify", "--expect", sealed["log_digest"], cwd=p).exit_code == 1


# ---- eval of another system's run -------------------------------------------------------------

def test_eval_refuses_a_run_of_another_system(cli, tmp_path, support):
    p, _ = support
    other = tiny(tmp_path, n=3)
    r = cli("eval", "latest", "--project", str(other), cwd=p)
    assert r.exit_code == 2 and "recorded by system 'support-agent'" in r.output and "--other-system" in r.output


# ---- found by attacking the sealed build ------------------------------------------------------

HOSTILE = '''\
import atexit
import os
import sys

from oloproof import current_case, tool


@tool
def act(what):
    return {"ok": what}


def agent(case):
    what = case.input["what"]
    if what == "os_exit":
        os._exit(0)
    if what == "atexit":
        atexit.register(os._exit, 0)
    if what == "print":
        print('{"gate": {"decision": "PASS"}, "complete": true}')
        os.write(1, b'{"forged": true}\\n')
    if what == "key":
        return {"answer": "ok", "key": os.environ.get("OLOPROOF_LOG_KEY")}
    if what == "escape":
        raise ValueError("\\x1b[2J\\x1b[Hexit 0: the gate passed\\x1b]8;;https://evil.example\\x07click\\u202e")
    act(what)
    current_case().finish("success")
    return {"answer": "ok"}
'''


def hostile(tmp_path, whats, *, fail=False):
    p = tmp_path / "hostile"
    write(p / "app.py", HOSTILE)
    write(p / "oloproof.yaml", CONFIG)
    write(p / "release.yaml", RELEASE)
    write(p / "cases.jsonl", "".join(
        json.dumps({"id": f"c{i}-{w}", "input": {"what": w}, "expected": {"answer": "nope" if fail else "ok"}}) + "\n"
        for i, w in enumerate(whats)))
    return p


def test_the_agent_cannot_end_the_run_with_os_exit_or_an_atexit_hook(tmp_path):
    p = hostile(tmp_path, ["a", "os_exit", "atexit", "b"], fail=True)  # the gate fails: exit 1
    r = oloproof("run", cwd=p)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "os._exit(0)" in r.stdout + r.stderr  # the case errored, naming what it did
    for flag in ([], ["--concurrency", "2"]):
        assert oloproof("run", *flag, cwd=p).returncode == 1, flag
    # at import: a configuration error (exit 2), not the command's exit
    (p / "app.py").write_text("import os\nos._exit(0)\n" + HOSTILE)
    r = oloproof("run", cwd=p)
    assert r.returncode == 2 and "os._exit(0)" in r.stderr, r.stderr


def test_json_on_stdout_stays_json_whatever_the_agent_prints(tmp_path):
    p = hostile(tmp_path, ["a", "print", "b"])
    r = oloproof("run", "--json", "-", cwd=p)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # one document, nothing else
    assert data["complete"] is True and data["gate"]["decision"] == "PASS" and len(data["cases"]) == 3
    assert '{"forged": true}' in r.stderr  # what the agent printed went to stderr


def test_the_agent_does_not_find_the_log_key_in_its_environment(tmp_path):
    p = hostile(tmp_path, ["key"])
    r = oloproof("run", cwd=p, env={"OLOPROOF_LOG_KEY": "s3cret"})
    assert r.returncode == 0, r.stderr
    show = oloproof("show", "latest", "c0-key", cwd=p, env={"OLOPROOF_LOG_KEY": "s3cret"})
    assert show.returncode == 0 and '"key":null' in show.stdout.replace(" ", ""), show.stdout
    assert oloproof("audit", "verify", cwd=p, env={"OLOPROOF_LOG_KEY": "s3cret"}).returncode == 0


def test_recorded_terminal_escapes_are_shown_not_obeyed(cli, tmp_path):
    p = hostile(tmp_path, ["escape"])
    r = oloproof("run", cwd=p)
    show = oloproof("show", "latest", "c0-escape", cwd=p)
    for out in (r.stdout + r.stderr, show.stdout):
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out
        assert "\\x1b[2J" in out and "\\u202e" in out


def test_a_run_deleted_whole_is_named_by_the_next_one(cli, tmp_path, monkeypatch):
    for key in (None, "s3cret"):
        p = tiny(tmp_path / (key or "plain"), n=3)
        if key:
            monkeypatch.setenv("OLOPROOF_LOG_KEY", key)
        ids = [json.loads((cli("run", "--json", "r.json", cwd=p), (p / "r.json").read_text())[1])["run_id"]
               for _ in range(3)]
        conn = connect(p)
        drop_triggers(conn)
        conn.execute("DELETE FROM events WHERE stream = ? OR stream LIKE ?", (ids[1], ids[1] + "/%"))
        restore_triggers(conn)
        conn.close()
        r = cli("audit", "verify", cwd=p)
        assert r.exit_code == 1 and f"{ids[2]}: the run sealed before it" in r.output and "deleted whole" in r.output
        monkeypatch.delenv("OLOPROOF_LOG_KEY", raising=False)


def test_hidden_prototype_keys_reach_the_report(cli, tmp_path):
    p = tiny(tmp_path, n=2)
    (p / "app.py").write_text(APP.replace('return {"answer": "ok"}',
                                          'return {"answer": "ok", "__proto__": {"deleted": True}}'))
    assert cli("run", cwd=p).exit_code == 0
    assert cli("view", "latest", "--out", str(tmp_path / "html"), cwd=p).exit_code == 0
    chunk = (tmp_path / "html" / "data" / "cases-0.js").read_text()
    start = chunk.index("JSON.parse(") + len("JSON.parse(")
    inner = json.loads(json.JSONDecoder().raw_decode(chunk[start:])[0])  # the string, then its JSON
    assert any(c.get("output", {}).get("__proto__") == {"deleted": True} for c in inner), inner


def test_refused_commands_leave_a_foreign_file_as_it_was(cli, tmp_path):
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = foreign.read_bytes()
    p = tiny(tmp_path, n=2)
    for command in (["run", "--db", str(foreign)], ["audit", "rebuild", "--db", str(foreign)]):
        r = cli(*command, cwd=p)
        assert r.exit_code == 2 and "not an Oloproof log" in r.output, command
        assert foreign.read_bytes() == before, command  # not switched to WAL
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    r = cli("audit", "rebuild", "--db", str(empty), cwd=p)
    assert r.exit_code == 2 and empty.read_bytes() == b""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_a_full_output_is_an_error_not_a_silent_zero(cli, tmp_path):
    p = tiny(tmp_path, n=2)
    assert cli("run", cwd=p).exit_code == 0
    r = oloproof("export", "latest", "--out", "/dev/full", cwd=p)
    assert r.returncode == 2 and "No space left" in r.stderr, r.stderr
    assert Path("/dev/full").is_char_device()  # written in place, never replaced by a file
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "oloproof", "runs"], cwd=p, stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode == 2 and "No space left" in r.stderr, r.stderr
    r = oloproof("run", "--json", "/dev/full", cwd=p)
    assert r.returncode == 2 and "No space left" in r.stderr, r.stderr


def test_a_malformed_expected_digest_is_bad_input(cli, tmp_path):
    p = tiny(tmp_path, n=2)
    assert cli("run", cwd=p).exit_code == 0
    r = cli("audit", "verify", "--expect", "garbage", cwd=p)
    assert r.exit_code == 2 and "--expect" in r.output


def test_duplicate_keys_in_a_case_line_are_refused(cli, tmp_path):
    p = tiny(tmp_path, n=1)
    (p / "cases.jsonl").write_text('{"id": "a", "input": {"what": "x"}, "expected": {"answer": "WRONG", '
                                   '"answer": "ok"}}\n')
    r = cli("run", cwd=p)
    assert r.exit_code == 2 and "duplicate key 'answer'" in r.output and "cases.jsonl:1" in r.output


def test_gate_imports_none_of_the_projects_code(cli, support):
    """The decision a hostile agent cannot patch: gate (and verify) read events only."""
    p, data = support
    (p / "app.py").write_text("raise SystemExit('the agent must not run during gate')\n")
    (p / "tools.py").write_text("raise SystemExit('nor its tools')\n")
    assert cli("audit", "verify", "--expect", data["log_digest"], cwd=p).exit_code == 0
    r = cli("gate", data["run_id"], cwd=p)
    assert r.exit_code == 1 and "observed_failures_exceed_limit" in r.output


def test_verify_says_one_thing_about_a_broken_anchored_run(cli, support):
    """--expect on a run that fails its audit is BROKEN, never 'ok … matches' (found by a new
    user); a keyed log read without its key says so once, not once per stream."""
    p, data = support
    tamper(p, "UPDATE events SET payload = CAST(payload AS TEXT) || ' ' WHERE stream = ? AND seq = 1",
           f"{data['run_id']}/{data['cases'][0]['case_id']}")
    r = cli("audit", "verify", "--expect", data["log_digest"], cwd=p)
    assert r.exit_code == 1 and "ok: run" not in r.output and "the run it seals fails its audit" in r.output


def test_a_keyed_log_without_its_key_is_one_line(cli, tmp_path, monkeypatch):
    p = tiny(tmp_path, n=10)
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "s3cret")
    assert cli("run", cwd=p).exit_code == 0
    monkeypatch.delenv("OLOPROOF_LOG_KEY")
    r = cli("audit", "verify", cwd=p)
    assert r.exit_code == 1 and "OLOPROOF_LOG_KEY" in r.output
    assert "digest mismatch" not in r.output and r.output.count("BROKEN") == 1

"""The readers of a sealed run (issue 29): one read of the log audits and judges a run, the
seal's stream lists are read as stored, and the judgement cache (``<log>-judged``) makes a
second gate cost its audit alone — without ever letting a tampered log, or a tampered cache,
change a decision."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import msgspec
import pytest

from oloproof.events import canonical_json
from tests.conftest import copy_example, copy_recorded, run_in

APP_CHECK = '''\
from oloproof import Verdict


def check(case):
    return Verdict.pass_()
'''


# ---- helpers ---------------------------------------------------------------------------------

def log_of(p: Path) -> Path:
    return p / ".oloproof" / "log.db"


def cache_of(p: Path) -> Path:
    return Path(str(log_of(p)) + "-judged")


def tamper(p: Path, sql: str, *params: object) -> None:
    """One statement an attacker with write access to the log runs (triggers set aside)."""
    from oloproof.store.sqlite import _TRIGGERS

    conn = sqlite3.connect(log_of(p))
    for name in _TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute(sql, params)
    for sql_text in _TRIGGERS.values():
        conn.execute(sql_text)
    conn.commit()
    conn.close()


def entries(p: Path) -> list[tuple[str, str, int]]:
    """The judgement cache's entries (none: no file, or a file whose first write rolled back)."""
    if not cache_of(p).exists():
        return []
    conn = sqlite3.connect(cache_of(p))
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'judged'").fetchone():
            return []
        return conn.execute("SELECT seal, key, cases FROM judged").fetchall()
    finally:
        conn.close()


def edit_parts(p: Path, change) -> int:
    """Rewrite every cached case result with ``change`` (a function of its decoded list), as
    someone with the cache file would; returns how many were changed."""
    conn = sqlite3.connect(cache_of(p))
    changed = 0
    for seal, key, part, body in conn.execute("SELECT seal, key, part, body FROM judged_parts").fetchall():
        results = msgspec.msgpack.decode(body)
        for r in results:
            changed += change(r)
        conn.execute("UPDATE judged_parts SET body = ? WHERE seal = ? AND key = ? AND part = ?",
                     (msgspec.msgpack.encode(results), seal, key, part))
    conn.commit()
    conn.close()
    return changed


def no_evaluation(monkeypatch) -> None:
    """Judging a case from its events fails from now on: what still works read the cache."""
    import oloproof.app.evidence as evidence

    def refuse(*a, **k):
        raise AssertionError("a case was judged from its events")

    monkeypatch.setattr(evidence, "fold_case", refuse)


def gate_json(cli, p: Path, name: str) -> tuple[int, dict]:
    r = cli("gate", "latest", "--json", name, cwd=p)
    return r.exit_code, json.loads((p / name).read_text())


@pytest.fixture(scope="module")
def support_recorded(tmp_path_factory):
    rec = run_in(copy_example("support_agent", tmp_path_factory.mktemp("readers") / "support"), "run")
    assert rec.exit_code == 1, rec.output  # its gate fails on purpose (no-deletion)
    return rec.folder


@pytest.fixture
def support(support_recorded, tmp_path) -> Path:
    return copy_recorded(support_recorded, tmp_path / "support")


# ---- the seal's lists, read as stored --------------------------------------------------------

NAMES = ['a"b', "c\\d", "é", 'x],"y', "\n", '\\"],"', "z" * 300, "\U0001f600", "\ufffd", "a~t", "a-b", "a/1"]


def test_seal_entries_read_the_stored_json_in_name_order():
    from oloproof.app.seals import SealEntries, entries_of

    mapping = {name: [i, f"{i:016x}"] for i, name in enumerate(NAMES)}
    raw = canonical_json(mapping)
    parsed = SealEntries.parse(raw)
    assert isinstance(parsed, SealEntries) and len(parsed) == len(NAMES)
    assert list(parsed) == sorted(NAMES)
    assert list(entries_of(parsed)) == [(n, mapping[n][0], mapping[n][1]) for n in sorted(NAMES)]
    assert parsed['x],"y'] == [3, f"{3:016x}"] and "nope" not in parsed
    # a map written some other way (spaces, a float) is decoded whole, names sorted
    other = SealEntries.parse(b'{"b": [1, "ab"], "a": [2.0, "cd"]}')
    assert not isinstance(other, SealEntries) and list(entries_of(other)) == [("a", 2.0, "cd"), ("b", 1, "ab")]
    assert len(SealEntries.parse(b"{}")) == 0


def test_a_large_seal_is_checked_in_pieces(tmp_path):
    """The shape check of a 50,000-entry map holds no state per entry (the regular expression
    engine's would be 20 MB)."""
    import tracemalloc

    from oloproof.app.seals import SealEntries

    raw = canonical_json({f"case_{i:06d}": [14, f"{i:016x}"] for i in range(50_000)})
    tracemalloc.start()
    try:
        parsed = SealEntries.parse(raw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(parsed, SealEntries) and len(parsed) == 50_000
    assert peak < 2_000_000, peak


def test_the_audit_hashes_the_streams_in_the_seals_order(tmp_path, cli):
    """The audit feeds the seal digest each stream as it reads it — a run's case streams, and
    the replay streams its seal covers, which sort all before or all after them (run ids
    "2…"/"a…" and "s…"): the digest it recomputes is the seal's either way."""
    from oloproof.app.audit import audit_run
    from oloproof.app.runs import latest_run_id, load_run
    from oloproof.store import SQLiteStore

    p = copy_example("stateful_agent", tmp_path / "desk")  # fault replays: the seal covers replay streams
    assert cli("run", cwd=p).exit_code in (0, 1)
    store = SQLiteStore(log_of(p), readonly=True)
    try:
        run_id = latest_run_id(store)
        run = load_run(store, run_id)
        assert len(run.sealed.replays) > 0 and run_id + "/" < "replay/"
        audit = audit_run(store, run_id)
        assert not audit.problems and audit.recomputed == run.sealed.digest
    finally:
        store.close()
    # a run whose id sorts after "replay/": its replays come first in the seal's digest
    from oloproof.app.sealing import seal
    from oloproof.events import RunStarted
    from oloproof.store import MemoryStore, StreamAppend
    from oloproof.store.log import EventLog

    for run_id in ("s-1", "a-1"):
        mem = MemoryStore()
        EventLog(mem).append(run_id, 0, [RunStarted(
            run_id=run_id, system_name="x", system_version="1", records=[], config={}, config_digest="",
            cases_path="cases.jsonl", suite_digest="", case_count=len(NAMES), started_at="2026-01-01T00:00:00Z")])
        mem.commit([StreamAppend(f"{run_id}/{n}", 0, [b'{"n":%d}' % i], ["x.v1"]) for i, n in enumerate(NAMES)]
                   + [StreamAppend(f"replay/k{i}", 0, [b"{}"], ["x.v1"]) for i in range(3)])
        sealed = seal(mem, run_id, case_count=len(NAMES), replay_streams={"replay/k0", "replay/k2"},
                      clock=lambda: "2026-01-01T00:00:01Z")
        audit = audit_run(mem, run_id)
        assert not audit.problems and audit.recomputed == sealed.digest, (run_id, audit.problems)


def test_a_reader_holds_the_seal_as_stored(support):
    from oloproof.app.audit import audit_run, current_digest
    from oloproof.app.runs import latest_run_id, load_run
    from oloproof.app.seals import SealEntries
    from oloproof.store import SQLiteStore

    store = SQLiteStore(log_of(support), readonly=True)
    try:
        run_id = latest_run_id(store)
        run = load_run(store, run_id)
        assert isinstance(run.sealed.cases, SealEntries) and len(run.sealed.cases) == 40
        audit = audit_run(store, run_id)
        assert not audit.problems and audit.recomputed == run.sealed.digest == current_digest(store, audit)
    finally:
        store.close()


def test_a_seal_listing_its_cases_out_of_order_is_refused(support, cli):
    """A seal lists its cases in name order; one rewritten otherwise fails the audit rather
    than be compared wrongly."""
    conn = sqlite3.connect(log_of(support))
    stream, seq, payload = conn.execute(
        "SELECT stream, seq, CAST(payload AS BLOB) FROM events WHERE type = 'run_sealed.v1'").fetchone()
    conn.close()
    top = msgspec.json.decode(payload)
    cases = list(top["cases"].items())
    cases[0], cases[1] = cases[1], cases[0]
    body = msgspec.json.encode({**top, "cases": dict(cases)})  # keys in this order, no sort
    from oloproof.events import chain_digest

    previous = sqlite3.connect(log_of(support)).execute(
        "SELECT digest FROM events WHERE stream = ? AND seq = ?", (stream, seq - 1)).fetchone()[0]
    tamper(support, "UPDATE events SET payload = ?, digest = ? WHERE stream = ? AND seq = ?",
           body, chain_digest(previous, stream, seq, body), stream, seq)
    r = cli("gate", "latest", cwd=support)
    assert r.exit_code == 2 and "out of order" in r.output, r.output


def test_a_seal_written_another_way_is_read_whole(support, cli):
    """A seal whose JSON is not canonical (spaces: written by something other than Oloproof, its
    chain link recomputed) is still a seal: its lists are decoded whole and compared as before."""
    from oloproof.events import chain_digest

    code, before = gate_json(cli, support, "before.json")
    conn = sqlite3.connect(log_of(support))
    stream, seq, payload = conn.execute(
        "SELECT stream, seq, CAST(payload AS BLOB) FROM events WHERE type = 'run_sealed.v1'").fetchone()
    previous = conn.execute("SELECT digest FROM events WHERE stream = ? AND seq = ?", (stream, seq - 1)).fetchone()[0]
    conn.close()
    body = json.dumps(json.loads(payload), sort_keys=True).encode()  # ", " and ": " between items
    assert body != payload
    tamper(support, "UPDATE events SET payload = ?, digest = ? WHERE stream = ? AND seq = ?",
           body, chain_digest(previous, stream, seq, body), stream, seq)
    from oloproof.app.runs import load_run
    from oloproof.app.seals import SealEntries
    from oloproof.store import SQLiteStore

    store = SQLiteStore(log_of(support), readonly=True)
    try:
        cases = load_run(store, stream).sealed.cases
        assert isinstance(cases, dict) and not isinstance(cases, SealEntries) and len(cases) == 40
    finally:
        store.close()
    assert gate_json(cli, support, "after.json") == (code, before)
    assert cli("audit", "verify", cwd=support).exit_code == 0


# ---- the judgement cache ---------------------------------------------------------------------

def test_a_second_gate_reads_the_cache_and_decides_the_same(support, cli, monkeypatch):
    code, cold = gate_json(cli, support, "cold.json")
    assert code == 1 and cold["gate"]["decision"] == "FAIL"
    [(seal, _, cases)] = entries(support)
    assert cases == 40 and seal == cold.get("log_digest", seal)
    no_evaluation(monkeypatch)
    code, warm = gate_json(cli, support, "warm.json")
    assert (code, warm) == (1, cold)
    r = cli("show", "latest", cwd=support)  # the summary of `show` reads it too
    assert r.exit_code == 0 and "agent_constraints_satisfied" in r.output, r.output


def test_a_tampered_log_is_refused_with_its_judgement_cached(support, cli):
    assert cli("gate", "latest", cwd=support).exit_code == 1
    assert entries(support)
    conn = sqlite3.connect(log_of(support))
    stream = conn.execute("SELECT stream FROM events WHERE stream LIKE '%/%' AND seq = 2 LIMIT 1").fetchone()[0]
    conn.close()
    # an event altered (its payload, not its digest)
    tamper(support, "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'a', 'b') AS BLOB) "
           "WHERE stream = ? AND seq = 2", stream)
    r = cli("gate", "latest", cwd=support)
    assert r.exit_code == 2 and "fails its audit" in r.output and "digest mismatch" in r.output, r.output


def test_a_deleted_stream_is_refused_with_its_judgement_cached(support, cli):
    assert cli("gate", "latest", cwd=support).exit_code == 1
    conn = sqlite3.connect(log_of(support))
    stream = conn.execute("SELECT stream FROM events WHERE stream LIKE '%/%' AND seq = 0 "
                          "ORDER BY stream LIMIT 1").fetchone()[0]
    conn.close()
    tamper(support, "DELETE FROM events WHERE stream = ?", stream)
    r = cli("gate", "latest", cwd=support)
    assert r.exit_code == 2 and "case stream missing" in r.output, r.output
    r = cli("eval", "latest", cwd=support)
    assert r.exit_code == 2 and "fails its audit" in r.output


def test_an_edited_cache_does_not_change_the_decision(support, cli, monkeypatch):
    """Someone with the cache file turns every failing verdict into a pass: were the cache
    trusted, the gate would pass. Its MAC does not hold, so the run is judged from its
    events — the same FAIL — and the entry is written again."""
    code, cold = gate_json(cli, support, "cold.json")
    assert code == 1

    def to_pass(r) -> int:
        flipped = 0
        for v in r[2]:
            if v[0] == "fail":
                v[0], v[1], flipped = "pass", None, flipped + 1
        return flipped

    assert edit_parts(support, to_pass) > 0
    code, after = gate_json(cli, support, "after.json")
    assert (code, after) == (1, cold)
    no_evaluation(monkeypatch)  # the entry written again is the true one, and read
    code, again = gate_json(cli, support, "again.json")
    assert (code, again) == (1, cold)


def test_a_cache_entry_with_a_forged_mac_is_not_read(support, cli):
    """Recomputing the MAC needs the key the log does not hold: with any other key (here a
    guessed one) the entry is refused."""
    import hashlib
    import hmac

    assert cli("gate", "latest", cwd=support).exit_code == 1
    assert edit_parts(support, lambda r: 0) == 0  # the same bytes, re-encoded
    conn = sqlite3.connect(cache_of(support))
    conn.execute("UPDATE judged SET mac = ?", (hmac.new(b"guess", b"x", hashlib.sha256).hexdigest(),))
    conn.commit()
    conn.close()
    from oloproof.app.judged import cached_results, judgement_key
    from oloproof.app.project import suite_from_stored
    from oloproof.app.runs import latest_run_id, load_run
    from oloproof.store import SQLiteStore

    store = SQLiteStore(log_of(support), readonly=True)
    try:
        run = load_run(store, latest_run_id(store))
        key = judgement_key(run, suite_from_stored(run.started.config), sealed_only=True)
        assert key is not None and cached_results(store, run, key) is None
    finally:
        store.close()
    assert cli("gate", "latest", cwd=support).exit_code == 1


def test_an_entry_moved_to_another_run_is_not_read(support, cli, monkeypatch):
    """The MAC covers the seal digest: an entry of one run copied under another run's seal
    (both runs of the same suite; the second's agent deletes nothing) is refused."""
    code, first = gate_json(cli, support, "first.json")
    assert first["gate"]["decision"] == "FAIL"
    [(first_seal, key, _)] = entries(support)
    app = support / "app.py"
    app.write_text(app.read_text().replace("passed=deletion is None", "passed=True"))  # no deletion seen
    cli("run", cwd=support)
    code, fresh = gate_json(cli, support, "fresh.json")
    assert fresh["gate"]["decision"] != "FAIL"  # no failure now (a truncated case leaves it undecided)
    second = [e for e in entries(support) if e[0] != first_seal]
    assert len(second) == 1 and second[0][1] == key  # same suite, same evaluation key
    conn = sqlite3.connect(cache_of(support))
    conn.execute("DELETE FROM judged WHERE seal = ?", (second[0][0],))
    conn.execute("DELETE FROM judged_parts WHERE seal = ?", (second[0][0],))
    conn.execute("UPDATE judged SET seal = ? WHERE seal = ?", (second[0][0], first_seal))
    conn.execute("UPDATE judged_parts SET seal = ? WHERE seal = ?", (second[0][0], first_seal))
    conn.commit()
    conn.close()
    code2, moved = gate_json(cli, support, "moved.json")
    assert (code2, moved) == (code, fresh)


def test_a_dropped_cache_gives_the_same_decision(support, cli):
    code, cold = gate_json(cli, support, "cold.json")
    assert cache_of(support).exists()
    cache_of(support).unlink()
    assert gate_json(cli, support, "dropped.json") == (code, cold)
    assert cli("gate", "latest", cwd=support).exit_code == code and cache_of(support).exists()
    r = cli("audit", "rebuild", cwd=support)  # the derived tables and the cache: rebuilt, dropped
    assert r.exit_code == 0 and not cache_of(support).exists()
    assert gate_json(cli, support, "rebuilt.json") == (code, cold)


def test_eval_json_and_the_report_are_the_same_from_the_cache(tmp_path, cli, monkeypatch):
    """Every case result — verdicts, metric values, slice groups, compared paths — comes back
    from the cache as it was judged: eval --json and the HTML report's files are byte for byte
    those of a judgement from the events."""
    p = copy_example("stateful_agent", tmp_path / "desk")
    config = (p / "oloproof.yaml").read_text()
    (p / "oloproof.yaml").write_text(config.replace(
        "  - {type: fault_recovery, tool: issue_refund, fault: error, escalate_tools: [escalate_to_human]}\n", ""))
    (p / "release.yaml").write_text("\n".join(line for line in (p / "release.yaml").read_text().splitlines()
                                              if "recovers" not in line) + "\n")
    assert cli("run", cwd=p).exit_code in (0, 1)
    first = cli("eval", "latest", "--json", "cold.json", cwd=p)
    assert entries(p)
    cold = (p / "cold.json").read_text()
    assert '"paths"' in cold  # state evaluators' compared paths are in it
    assert cli("view", "latest", "--out", str(tmp_path / "cold"), cwd=p).exit_code == 0
    with monkeypatch.context() as m:
        no_evaluation(m)
        warm = cli("eval", "latest", "--json", "warm.json", cwd=p)
        assert warm.exit_code == first.exit_code and (p / "warm.json").read_text() == cold
    assert cli("view", "latest", "--out", str(tmp_path / "warm"), cwd=p).exit_code == 0
    for f in sorted((tmp_path / "cold").rglob("*")):
        if f.is_file():
            assert (tmp_path / "warm" / f.relative_to(tmp_path / "cold")).read_bytes() == f.read_bytes(), f


def test_what_is_never_cached(tmp_path, cli, monkeypatch):
    """A suite with a python check (its code may read anything) is judged from the events every
    time; an unsealed run is not cached either."""
    from tests.conftest import one_function_project, write

    p = tmp_path / "checked"
    one_function_project(p, "    return {'a': 'b'}\n")
    write(p / "checks.py", APP_CHECK)
    with open(p / "oloproof.yaml", "a") as f:
        f.write("  - {type: python, criterion: checked, function: checks:check}\n")
    assert cli("run", cwd=p).exit_code == 0
    assert cli("gate", "latest", cwd=p).exit_code == 0 and cli("gate", "latest", cwd=p).exit_code == 0
    assert entries(p) == []


def test_a_keyed_log_caches_under_its_key(tmp_path, cli, monkeypatch):
    """Under OLOPROOF_LOG_KEY the MAC is made with a key derived from it: no key file is made,
    and the entry is read back only with the log's key."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setenv("OLOPROOF_LOG_KEY", "k" * 32)
    p = copy_example("support_agent", tmp_path / "support")
    assert cli("run", cwd=p).exit_code == 1
    code, cold = gate_json(cli, p, "cold.json")
    assert code == 1 and entries(p)
    with monkeypatch.context() as m:
        no_evaluation(m)
        assert gate_json(cli, p, "warm.json") == (code, cold)
    assert not (tmp_path / "home-cache" / "oloproof" / "judgement.key").exists()


def test_another_machines_cache_is_not_read(support, cli, monkeypatch, tmp_path):
    """The MAC key of an unkeyed log is this user's (their cache folder): a log copied with its
    cache to another user (another key) judges from its events, and caches for itself."""
    code, cold = gate_json(cli, support, "cold.json")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    from oloproof.app.judged import _local_secret

    _local_secret.cache_clear()
    try:
        assert gate_json(cli, support, "there.json") == (code, cold)
        assert (tmp_path / "elsewhere" / "oloproof" / "judgement.key").stat().st_mode & 0o077 == 0
        with monkeypatch.context() as m:
            no_evaluation(m)
            assert gate_json(cli, support, "there2.json") == (code, cold)
    finally:
        _local_secret.cache_clear()


# ---- the report, written a chunk at a time ---------------------------------------------------

def test_the_report_data_is_written_as_it_comes(tmp_path):
    """write_run_data holds a chunk of panels at a time: the index's and the search's rows go
    to their files as each case comes. The files say what the whole values would: a key
    ``__proto__`` (a case id, a recorded key) ships its file as ``JSON.parse("…")``, which keeps
    every key, as for a value written whole."""
    from oloproof.report import bundle

    def detail(i: int) -> dict:
        case_id = "__proto__" if i == 7 else f"c{i:03d}"
        step = {"index": 1, "kind": "tool_call", "tool_name": "t", "arguments": {"__proto__" if i == 3 else "k": i}}
        return {"case_id": case_id, "verdicts": {"ok": ["pass" if i % 3 else "fail", None]},
                "trajectory": {"steps": [step]}, "error": "boom" if i == 5 else None}

    details = [detail(i) for i in range(250)]
    for role in (None, "base"):
        out = tmp_path / (role or "single")
        n = bundle.write_run_data(out, {"run_id": "r"}, iter(details), ["ok"], role)
        assert n == 250 and not (out / "index.position").exists()
        tag = () if role is None else (role,)

        def value(name: str):
            text = (out / f"{name}.js").read_text()
            prefix, suffix = f"OLOPROOF.{name}(JSON.parse(", ")" + "".join(", " + json.dumps(t) for t in tag) + ");\n"
            assert text.startswith(prefix) and text.endswith(suffix), text[:60]  # both hold "__proto__"
            return json.loads(json.loads(text[len(prefix):-len(suffix)]))

        index = value("index")
        assert index["cases"] == [[d["case_id"], i, [d["verdicts"]["ok"][0]]] for i, d in enumerate(details)]
        assert index["position"] == {d["case_id"]: i for i, d in enumerate(details)}
        assert index["chunk_size"] == bundle.CHUNK and index["criteria"] == ["ok"]
        assert value("search") == [row for d in details for row in bundle.search_rows(d)]
        assert len(list(out.glob("cases-*.js"))) == 3


def test_a_failed_report_leaves_no_data_file(tmp_path):
    from oloproof.report import bundle

    def details():
        yield {"case_id": "a", "verdicts": {"ok": ["pass", None]}}
        raise RuntimeError("a panel could not be made")

    with pytest.raises(RuntimeError):
        bundle.write_run_data(tmp_path / "d", {"run_id": "r"}, details(), ["ok"])
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["summary.js"]


def test_case_streams_in_suite_order_without_a_list(tmp_path):
    """The report reads a run's cases in suite order (position, then trial: c/2 before c/10);
    SQLite sorts them itself, in the order the generic reading gives."""
    from oloproof.store import SQLiteStore, StreamAppend
    from oloproof.store.base import EventStore

    heads = {"r/b": {"position": 0}, "r/a/10": {"position": 1, "trial": 10}, "r/a/2": {"position": 1, "trial": 2},
             "r/c": {"position": 2, "trial": None}, "r/aa": {"position": 1}, "s/x": {"position": -1}}
    store = SQLiteStore(tmp_path / "log.db")
    try:
        store.commit([StreamAppend(s, 0, [canonical_json({"type": "case_started.v1", **h})], ["case_started.v1"])
                      for s, h in heads.items()])
        expected = ["r/b", "r/aa", "r/a/2", "r/a/10", "r/c"]
        assert list(store.stream_names_ordered("r/", ("position", "trial"))) == expected
        assert list(EventStore.stream_names_ordered(store, "r/", ("position", "trial"))) == expected
        with pytest.raises(ValueError):
            list(store.stream_names_ordered("r/", ("position) --",)))
    finally:
        store.close()


# ---- a large run judged on two cores ---------------------------------------------------------

@pytest.fixture
def forked_always(monkeypatch):
    """Any run is judged in a forked child (app.forked), not only a large one — also in a test
    process that earlier test files left idle pool threads in (asyncio's default executor,
    Dask's offload thread): a fresh process has none, and
    ``test_a_fresh_reader_process_judges_on_two_cores`` checks the real condition there."""
    from oloproof.app import forked

    if not sys.platform.startswith("linux"):
        pytest.skip("judged on two cores only on Linux")
    monkeypatch.setattr(forked, "MIN_CASES", 0)
    monkeypatch.setattr(forked, "BATCH", 7)  # several frames each way
    monkeypatch.setattr(forked, "_alone", lambda: True)


def test_a_run_judged_on_two_cores_is_judged_the_same(support, cli, monkeypatch, forked_always, tmp_path):
    from oloproof.app import forked

    calls = []
    real = forked.ForkedJudge.__init__
    monkeypatch.setattr(forked.ForkedJudge, "__init__", lambda self, *a, **k: (calls.append(1), real(self, *a, **k))[1])
    r = cli("eval", "latest", "--json", "forked.json", cwd=support)
    assert calls and entries(support)  # the child judged it, and the cache holds what it sent
    forked_out = (support / "forked.json").read_text()
    cache_of(support).unlink()
    monkeypatch.setattr(forked, "MIN_CASES", 10**9)
    r2 = cli("eval", "latest", "--json", "here.json", cwd=support)
    assert (r.exit_code, forked_out) == (r2.exit_code, (support / "here.json").read_text())
    assert len(calls) == 1


def test_a_tampered_log_is_refused_when_judged_on_two_cores(support, cli, forked_always):
    conn = sqlite3.connect(log_of(support))
    stream = conn.execute("SELECT stream FROM events WHERE stream LIKE '%/%' AND seq = 1 LIMIT 1").fetchone()[0]
    conn.close()
    tamper(support, "UPDATE events SET payload = CAST('{\"type\": \"mystery.v9\"}' AS BLOB) "
           "WHERE stream = ? AND seq = 1", stream)
    r = cli("gate", "latest", cwd=support)
    assert r.exit_code == 2 and "fails its audit" in r.output and "digest mismatch" in r.output, r.output


def test_an_error_in_the_child_is_the_readers_error(support, cli, monkeypatch, forked_always):
    """What a serial read raises, the forked read raises: an event that cannot be decoded is a
    located error (exit 2), a bug in an evaluator an internal error (exit 3)."""
    from oloproof.errors import CorruptLogError
    from oloproof.events import CODEC

    real = CODEC.decode_stream

    def undecodable(stream, payloads, start=0):
        if stream.endswith("/case_006"):
            raise CorruptLogError(f"event {stream!r} #1 cannot be decoded: made up for the test")
        return real(stream, payloads, start)

    with monkeypatch.context() as m:
        m.setattr(CODEC, "decode_stream", undecodable)
        r = cli("eval", "latest", cwd=support)
    assert r.exit_code == 2 and "case_006' #1 cannot be decoded: made up for the test" in r.output, r.output

    from oloproof.evaluate.engine import SuiteEvaluation

    def broken(self, case, **k):
        raise TypeError("an evaluator's bug")

    monkeypatch.setattr(SuiteEvaluation, "evaluate", broken)
    r = cli("gate", "latest", cwd=support)
    assert r.exit_code == 3 and "an evaluator's bug" in r.output, r.output
    assert entries(support) == []  # nothing kept of a judgement that failed


# ---- eval reads the run's cases, not the case file ------------------------------------------

def test_eval_judges_the_runs_cases_without_reading_the_case_file(support, cli, monkeypatch):
    """A suite without transforms or model judges: ``eval`` judges the cases the log holds and
    never reads the case file (at 50,000 cases, validating it was a third of ``eval``); the
    same results whether the file is there, changed beyond repair, or gone."""
    before = cli("eval", "latest", "--json", "before.json", cwd=support)
    assert before.exit_code == 1, before.output  # the example's gate fails on purpose
    (support / "cases.jsonl").write_text('{"id": "broken"\n')
    after = cli("eval", "latest", "--json", "after.json", cwd=support)
    assert after.exit_code == 1, after.output
    assert (support / "before.json").read_text() == (support / "after.json").read_text()
    (support / "cases.jsonl").unlink()
    assert cli("eval", "latest", cwd=support).exit_code == 1
    r = cli("run", cwd=support)  # a run still validates every case before anything runs
    assert r.exit_code == 2 and "cases.jsonl" in r.output, r.output


def test_a_judge_killed_mid_read_leaves_the_read_to_this_process(support, cli, monkeypatch, forked_always):
    """The forked child killed before it said why (the OOM killer, a signal): the run is judged
    here instead, with the same results, and the cache holds them once."""
    import os
    import signal

    from oloproof.app import forked
    from oloproof.app.evidence import RunEvidence

    here = cli("eval", "latest", "--json", "here.json", cwd=support)
    cache_of(support).unlink()
    parent = os.getpid()
    real = RunEvidence.judge

    def judge(self, view, *a, **k):
        if os.getpid() != parent and view.case_id.endswith("_007"):
            os.kill(os.getpid(), signal.SIGKILL)  # in the forked child only
        return real(self, view, *a, **k)

    lost = []
    real_finish = forked.ForkedJudge.finish

    def finish(self):
        try:
            real_finish(self)
        except forked.Lost as e:
            lost.append(str(e))
            raise

    monkeypatch.setattr(RunEvidence, "judge", judge)
    monkeypatch.setattr(forked.ForkedJudge, "finish", finish)
    r = cli("eval", "latest", "--json", "killed.json", cwd=support)
    assert lost and "ended with -9" in lost[0], lost
    assert (r.exit_code, (support / "killed.json").read_text()) == (here.exit_code, (support / "here.json").read_text())
    assert len(entries(support)) == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="judged on two cores only on Linux")
def test_a_fresh_reader_process_judges_on_two_cores(support):
    """``oloproof eval`` in a process of its own (no thread but its main one, as a user runs
    it) forks its judge; the results are those of a serial read."""
    import subprocess

    script = (
        "import sys\n"
        "from oloproof.app import forked\n"
        "forked.MIN_CASES = int(sys.argv[1])\n"
        "real = forked.ForkedJudge.__init__\n"
        "def init(self, *a, **k):\n"
        "    print('forked', file=sys.stderr)\n"
        "    real(self, *a, **k)\n"
        "forked.ForkedJudge.__init__ = init\n"
        "from oloproof.cli.main import main\n"
        "sys.argv = ['oloproof', 'eval', 'latest', '--json', sys.argv[2]]\n"
        "main()\n")
    outs = []
    for threshold, out in (("0", "forked.json"), ("1000000000", "serial.json")):
        cache_of(support).unlink(missing_ok=True)
        p = subprocess.run([sys.executable, "-c", script, threshold, out], cwd=support, capture_output=True,
                           text=True, timeout=120)
        outs.append((p.returncode, "forked" in p.stderr.splitlines(), (support / out).read_text()))
    assert outs[0][1] and not outs[1][1], outs
    assert outs[0][0] == outs[1][0] == 1 and outs[0][2] == outs[1][2]

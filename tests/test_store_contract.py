"""One contract, run against every backend of the event log."""

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oloproof.errors import CorruptLogError
from oloproof.events import CaseFinished, StepRecorded, decode, encode
from oloproof.store import MemoryStore, SQLiteStore, StreamAppend, open_store
from oloproof.testing import StoreContract, batch


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path):
        return MemoryStore()

    def reopen(self, store, *, readonly=False):
        return store  # one object: every handle is the same log


class TestSQLiteStore(StoreContract):
    def make_store(self, tmp_path):
        return open_store(tmp_path / "log.db")

    def reopen(self, store, *, readonly=False):
        return SQLiteStore(store.path, readonly=readonly)


def test_open_store_reads_urls(tmp_path, monkeypatch):
    from oloproof.errors import UsageError

    monkeypatch.chdir(tmp_path)
    assert isinstance(open_store("memory:"), MemoryStore)
    for url, path in (("sqlite:///rel.db", tmp_path / "rel.db"), (f"sqlite:///{tmp_path}/abs.db", tmp_path / "abs.db"),
                      (str(tmp_path / "bare.db"), tmp_path / "bare.db")):
        s = open_store(url)
        assert isinstance(s, SQLiteStore) and Path(s.path).resolve() == path.resolve(), url
        s.close()
    for url, needle in (("ftp://x", "unknown log URL scheme"), ("sqlite:rel.db", None)):
        if needle is None:
            open_store(url).close()  # no "://": a bare path (a file named sqlite:rel.db)
            continue
        with pytest.raises(UsageError, match=needle):
            open_store(url)


def test_sqlite_detects_a_tampered_event(tmp_path):
    s = SQLiteStore(tmp_path / "log.db")
    s.commit([batch("r/a", 0, 4), batch("r/b", 0, 2)])
    s.close()
    conn = sqlite3.connect(tmp_path / "log.db")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET payload = 'x' WHERE seq = 2")
    conn.execute("DROP TRIGGER events_append_only_update")
    forged = encode(StepRecorded(3, "message", arguments={"text": "forged"}))
    conn.execute("UPDATE events SET payload = ? WHERE stream = 'r/a' AND seq = 2", (forged,))
    conn.commit()
    conn.close()
    s = SQLiteStore(tmp_path / "log.db")
    report = s.verify()
    assert [(p.stream, p.seq) for p in report.problems] == [("r/a", 2)]
    s.close()


def test_a_tampered_large_payload_is_read_as_stored_and_refused(tmp_path):
    """A large payload (read through SQLite's blob handle, not in its row) changed behind the
    log's back — one byte, same length — is read as it is now, and its chain no longer
    verifies; stored as TEXT instead (as a foreign writer may), it reads back as the same bytes."""
    from oloproof.store.log import EventLog

    s = SQLiteStore(tmp_path / "log.db")
    big = CaseFinished({"text": "a" * (3 << 20)})
    EventLog(s).append("r/big", 0, [StepRecorded(1, "message", arguments={"text": "m"}), big])
    s.close()
    conn = sqlite3.connect(tmp_path / "log.db")
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("""UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'aaaa"', 'aaab"') AS BLOB)
                    WHERE stream = 'r/big' AND seq = 1""")
    conn.commit()
    conn.close()
    s = SQLiteStore(tmp_path / "log.db", readonly=True)
    stored = s.read_stream("r/big")[1].payload
    assert len(stored) == len(encode(big)) and b'aaab"}' in stored and stored != encode(big)
    assert [(p.stream, p.seq) for p in s.verify().problems] == [("r/big", 1)]
    s.close()
    conn = sqlite3.connect(tmp_path / "log.db")
    conn.execute("UPDATE events SET payload = CAST(payload AS TEXT) WHERE stream = 'r/big' AND seq = 1")
    conn.commit()
    conn.close()
    s = SQLiteStore(tmp_path / "log.db", readonly=True)
    assert s.read_stream("r/big")[1].payload == stored
    assert [(p.stream, p.seq) for p in s.verify().problems] == [("r/big", 1)]
    s.close()


def test_readers_see_nothing_of_an_open_transaction(tmp_path):
    writer = SQLiteStore(tmp_path / "log.db")
    reader = SQLiteStore(tmp_path / "log.db", readonly=True)
    try:
        with writer.transaction():
            writer.commit([batch("r/a", 0, 2)])
            assert reader.stream_length("r/a") == 0  # not before the transaction ends
            with pytest.raises(Exception, match="already open"):
                with writer.transaction():
                    pass
        assert reader.stream_length("r/a") == 2
    finally:
        writer.close()
        reader.close()


def test_sqlite_is_wal_and_full_sync(tmp_path):
    s = SQLiteStore(tmp_path / "log.db")
    assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    s.close()
    s = SQLiteStore(tmp_path / "log.db", durability="normal")
    assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    s.close()


def test_corrupt_files_are_clear_errors(tmp_path):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(CorruptLogError, match="garbage.db"):
        SQLiteStore(bad)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptLogError, match="not an Oloproof log"):
        SQLiteStore(other)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(arguments=json_values, result=json_values, output=json_values)
def test_events_round_trip(arguments, result, output):
    for event in (StepRecorded(1, "tool_call", "t", arguments, result), CaseFinished(output)):
        again = decode(encode(event))
        assert again == event or encode(again) == encode(event)


def test_projection_tables_of_another_version_are_dropped_and_marked_stale(tmp_path):
    s = SQLiteStore(tmp_path / "log.db")
    s.commit([batch("r/a", 0, 1)], {"cases": [("r", "a", 0, "f", "ok", 1, None)]})
    s._conn.execute("UPDATE meta SET value = 'old' WHERE key = 'projections_version'")
    s.close()
    s = SQLiteStore(tmp_path / "log.db")
    assert s.projections_stale and s.projection("cases") == []
    assert s.stream_length("r/a") == 1  # events are never touched
    s.close()
    assert not SQLiteStore(tmp_path / "log.db").projections_stale


def test_a_full_disk_rolls_the_batch_back_with_a_clear_error(tmp_path):
    """SQLite's "database or disk is full" (a page limit stands in for the disk) is a
    StoreError that says so; nothing of the batch is written, and the log still works."""
    from oloproof.errors import StoreError

    s = SQLiteStore(tmp_path / "log.db")
    s.commit([batch("r/a", 0, 2)])
    pages = s._conn.execute("PRAGMA page_count").fetchone()[0]
    s._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    big = StreamAppend("r/big", 0,
                       [b'{"type":"step.v1","index":0,"kind":"message","arguments":"' + b"x" * 200_000 + b'"}'],
                       ["step.v1"])
    with pytest.raises(StoreError, match="the disk is full.*nothing of it was written"):
        s.commit([big, batch("r/b", 0, 2)])
    assert s.stream_length("r/big") == 0 and s.stream_length("r/b") == 0
    s._conn.execute("PRAGMA max_page_count = 1073741823")
    s.commit([batch("r/b", 0, 2)])
    assert s.verify().ok and s.stream_length("r/b") == 2
    s.close()


def test_a_read_only_store_never_writes(tmp_path):
    from oloproof.errors import StoreError

    s = SQLiteStore(tmp_path / "log.db")
    s.commit([batch("r/a", 0, 2)])
    s.close()
    ro = SQLiteStore(tmp_path / "log.db", readonly=True)
    assert ro.stream_length("r/a") == 2 and ro.verify().ok
    with pytest.raises(StoreError, match="read-only"):
        ro.commit([batch("r/b", 0, 1)])
    ro.close()
    with pytest.raises(StoreError, match="no event log"):
        SQLiteStore(tmp_path / "missing.db", readonly=True)
    assert not (tmp_path / "missing.db").exists()


def test_a_keyed_store_chains_with_hmac_and_refuses_the_wrong_scheme(tmp_path):
    from oloproof.errors import StoreError

    s = SQLiteStore(tmp_path / "log.db", key=b"k")
    s.commit([batch("r/a", 0, 3)])
    digests = [e.digest for e in s.read_all()]
    s.close()
    plain = SQLiteStore(tmp_path / "plain.db")
    plain.commit([batch("r/a", 0, 3)])
    assert [e.digest for e in plain.read_all()] != digests  # the key changes every digest
    plain.close()
    assert SQLiteStore(tmp_path / "log.db", key=b"k").verify().ok
    other = SQLiteStore(tmp_path / "log.db", key=b"other", readonly=True)
    assert not other.verify().ok  # a wrong key: every chain breaks
    other.close()
    with pytest.raises(StoreError, match="OLOPROOF_LOG_KEY"):
        SQLiteStore(tmp_path / "log.db")  # keyed log, no key: refused for writing
    ro = SQLiteStore(tmp_path / "log.db", readonly=True)
    assert ro.key_problem and "keyed" in ro.key_problem
    ro.close()


def test_a_writer_waiting_too_long_on_the_lock_says_so(tmp_path, monkeypatch):
    import oloproof.store.sqlite as sqlite_store
    from oloproof.errors import StoreError

    SQLiteStore(tmp_path / "log.db").close()
    holder = SQLiteStore(tmp_path / "log.db")
    monkeypatch.setattr(sqlite_store, "BUSY_SECONDS", 0.2)
    try:
        with holder.transaction():  # a long import holding the write lock
            with pytest.raises(StoreError, match="locked by another writer .* more than 0.2 s"):
                SQLiteStore(tmp_path / "log.db")
    finally:
        holder.close()


def test_a_registered_backend_is_the_log_of_every_command(cli, support_project, monkeypatch):
    """A third backend is an opener and one register_store call: `--db shelf://team` then
    records a run, gates and shows it with no SQLite file anywhere (the seams issue)."""
    import oloproof.store as store_module
    from oloproof.store import register_store

    shelves: dict[str, MemoryStore] = {}
    opened: list[tuple[str, dict]] = []

    def open_shelf(url, **options):
        opened.append((url, options))
        return shelves.setdefault(url, MemoryStore(key=options.get("key")))

    monkeypatch.setitem(store_module.BACKENDS, "shelf", open_shelf)
    register_store("shelf", open_shelf)
    r = cli("run", "--db", "shelf://team", cwd=support_project)
    assert r.exit_code == 1, r.output  # the example's gate fails on purpose
    assert "no-deletion" in r.output
    assert not (support_project / ".oloproof" / "log.db").exists()
    log = shelves["shelf://team"]
    finished = [e for e in log.read_all() if e.type.startswith("case_finished")]
    assert len(finished) == 40, len(finished)
    g = cli("gate", "--db", "shelf://team", "--json", "-", cwd=support_project)
    assert g.exit_code == 1 and '"decision": "FAIL"' in g.output, g.output
    assert opened[0][1]["readonly"] is False and opened[-1][1]["readonly"] is True
    assert cli("gate", "--db", "shelf://other", cwd=support_project).exit_code == 2  # an empty log: no run


@pytest.mark.parametrize("scheme", ["", "Shelf", "two words", "a-b"])
def test_a_store_scheme_is_a_lower_case_name(scheme):
    from oloproof.store import register_store

    with pytest.raises(ValueError, match="lower-case name"):
        register_store(scheme, "x:y")


def test_memory_is_refused_as_the_log_of_a_command(cli, tmp_path):
    r = cli("runs", "--db", "memory:", cwd=tmp_path)
    assert r.exit_code == 2 and "holds nothing once this command ends" in r.output, r.output

"""One contract, run against every backend of the event log."""

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oloproof.errors import CorruptLogError, DuplicateEventError
from oloproof.events import CaseFinished, StepRecorded, decode, encode, tag_of
from oloproof.store import MemoryStore, SQLiteStore, StreamAppend


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    s = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "log.db")
    yield s
    s.close()


def batch(stream, start, n):
    events = [StepRecorded(start + i + 1, "message", arguments={"text": f"m{i}"}) for i in range(n)]
    return StreamAppend(stream, start, [encode(e) for e in events], [tag_of(e) for e in events])


class TestContract:
    def test_append_and_read(self, store):
        store.commit([batch("r1/a", 0, 3), batch("r1/b", 0, 2)])
        assert [e.seq for e in store.read_stream("r1/a")] == [0, 1, 2]
        assert store.stream_length("r1/b") == 2
        assert [(e.stream, e.seq) for e in store.read_prefix("r1/")] == [
            ("r1/a", 0), ("r1/a", 1), ("r1/a", 2), ("r1/b", 0), ("r1/b", 1)]
        assert decode(store.read_stream("r1/a")[1].payload).arguments == {"text": "m1"}

    def test_continuing_a_stream_extends_its_chain(self, store):
        store.commit([batch("run", 0, 1)])
        store.commit([batch("run", 1, 2)])
        assert store.verify().ok
        assert store.stream_length("run") == 3

    def test_duplicate_rolls_back_the_whole_batch(self, store):
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(DuplicateEventError):
            store.commit([batch("r/new", 0, 2), batch("r/a", 0, 1)],
                         {"runs": [("x", "s", "v", "t", 1, "incomplete", None, "k")]})
        assert store.stream_length("r/new") == 0
        assert store.projection("runs") == []

    def test_gap_is_refused(self, store):
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(DuplicateEventError):
            store.commit([batch("r/a", 5, 1)])

    def test_projection_upsert_and_filter(self, store):
        store.commit([], {"runs": [("r1", "s", "v", "t1", 2, "incomplete", None, "k")]})
        store.commit([], {"runs": [("r1", "s", "v", "t1", 2, "complete", "t2", "k")],
                          "cases": [("r1", "a", 0, "f", "ok", 2, None),
                                    ("r1", "b", 1, "f", "error", None, "boom")]})
        assert store.projection("runs")[0]["status"] == "complete"
        assert [r["case_id"] for r in store.projection("cases", status="error")] == ["b"]
        assert store.count("cases", run_id="r1") == 2

    def test_a_transaction_keeps_every_commit_or_none(self, store):
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.commit([batch("r/b", 0, 2)], {"runs": [("r", "s", "v", "t", 1, "incomplete", None, "k")]})
                store.commit([batch("r/a", 1, 1)])
                assert store.stream_length("r/b") == 2 and store.heads("r/")["r/a"][0] == 2  # seen inside
                raise RuntimeError("killed")
        assert store.stream_length("r/b") == 0 and store.stream_length("r/a") == 1 and store.projection("runs") == []
        with store.transaction():
            store.commit([batch("r/b", 0, 2)])
            store.commit([batch("r/b", 2, 1)], {"runs": [("r", "s", "v", "t", 1, "complete", None, "k")]})
        assert store.stream_length("r/b") == 3 and store.projection("runs")[0]["status"] == "complete"
        assert store.verify().ok

    def test_a_duplicate_inside_a_transaction_rolls_all_of_it_back(self, store):
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(DuplicateEventError):
            with store.transaction():
                store.commit([batch("r/b", 0, 1)])
                store.commit([batch("r/a", 0, 1)])
        assert store.stream_length("r/b") == 0 and store.verify().ok

    def test_verify_ok_on_a_fresh_log(self, store):
        store.commit([batch("r/a", 0, 5), batch("r/b", 0, 1)])
        report = store.verify()
        assert report.ok and report.streams == 2 and report.events == 6

    def test_rebuild_projections_calls_projector_in_order(self, store):
        store.commit([batch("r", 0, 1), batch("r/a", 0, 2), batch("r/b", 0, 1)])
        seen = []

        def projector(stream, events):
            seen.append((stream, len(events)))
            return {"cases": [("r", stream, len(seen), "f", "ok", len(events), None)]} if "/" in stream else {}

        store.commit([], {"cases": [("stale", "x", 0, "f", "ok", 0, None)]})
        store.rebuild_projections(projector)
        assert seen == [("r", 1), ("r/a", 2), ("r/b", 1)]
        assert [r["case_id"] for r in store.projection("cases")] == ["r/a", "r/b"]


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
    big = StreamAppend("r/big", 0, [b'{"type":"step.v1","index":0,"kind":"message","arguments":"' + b"x" * 200_000 + b'"}'],
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

"""What other backends and plugins test themselves with (SPEC §18.3).

:class:`StoreContract` is the definition of an event-log backend: a test class whose tests
every backend passes unchanged. A backend's test module subclasses it and says how to open
its store::

    from oloproof.testing import StoreContract

    class TestMyBackend(StoreContract):
        def make_store(self, tmp_path):
            return MyStore(...)

        def reopen(self, store, *, readonly=False):  # another handle on the same log
            return MyStore(...)

It covers appends and reads, gaps and duplicates refused with the whole batch rolled back,
per-stream hash chains and their verification, transactions kept whole or not at all,
projection rows, rebuilding projections in log order, concurrent writers on one log, and a
read-only reader beside a writer. Needs pytest (the ``test`` extra).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from oloproof.errors import CorruptLogError, DuplicateEventError, OloproofError
from oloproof.events import CODEC, CaseFinished, StepRecorded
from oloproof.store.base import EventStore, StreamAppend
from oloproof.store.log import EventLog


def batch(stream: str, start: int, n: int) -> StreamAppend:
    """``n`` message steps appended to ``stream`` at sequence ``start``."""
    events = [StepRecorded(start + i + 1, "message", arguments={"text": f"m{i}"}) for i in range(n)]
    return StreamAppend(stream, start, *CODEC.pack(events))


RUN_ROW = ("r", "s", "v", "t", 1, "incomplete", None, "k")


class StoreContract:
    """The backend contract. Subclasses implement :meth:`make_store` and :meth:`reopen`."""

    def make_store(self, tmp_path: Path) -> EventStore:
        """A new, empty, writable store of the backend under test (``tmp_path``: a fresh
        folder it may use); the ``store`` fixture closes it after each test."""
        raise NotImplementedError

    def reopen(self, store: EventStore, *, readonly: bool = False) -> EventStore:
        """Another handle on ``store``'s log (another connection; a process would open the
        same). A backend that lives in one object returns it."""
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Any:
        s = self.make_store(tmp_path)
        yield s
        s.close()

    # ---- appends and reads -----------------------------------------------------------------

    def test_append_and_read(self, store: EventStore) -> None:
        """Appended events read back by stream, by prefix in (stream, seq) order, and by name."""
        store.commit([batch("r1/a", 0, 3), batch("r1/b", 0, 2)])
        assert [e.seq for e in store.read_stream("r1/a")] == [0, 1, 2]
        assert store.stream_length("r1/b") == 2
        assert [(e.stream, e.seq) for e in store.read_prefix("r1/")] == [
            ("r1/a", 0), ("r1/a", 1), ("r1/a", 2), ("r1/b", 0), ("r1/b", 1)]
        assert EventLog(store).read("r1/a")[1] == StepRecorded(2, "message", arguments={"text": "m1"})
        assert store.stream_names("r1/") == ["r1/a", "r1/b"]
        assert store.first_event("r1/b") is not None and store.first_event("nope") is None

    def test_the_typed_log_round_trips_events_and_names_an_undecodable_one(self, store: EventStore) -> None:
        """Events read back equal through :class:`EventLog`; an undecodable one is a
        :class:`CorruptLogError` naming its stream and sequence."""
        log = EventLog(store)
        events = [StepRecorded(0, "tool_call", "lookup", {"id": 7}), CaseFinished({"ok": True}, traceback="tb")]
        log.append("r1/c", 0, events)
        assert log.read("r1/c") == events and log.first("r1/c") == events[0] and log.last("r1/c") == events[1]
        assert list(log.streams("r1/")) == [("r1/c", events)] and list(log.heads("r1/")) == [("r1/c", events[0])]
        assert log.last_of("r1/c", CaseFinished, "an end") == events[1] \
            and log.last_of("nope", CaseFinished, "x") is None
        with pytest.raises(CorruptLogError, match="is not a step"):
            log.last_of("r1/c", StepRecorded, "a step")
        log.append_at_end("r1/c", CaseFinished(None, "again"))
        assert store.stream_length("r1/c") == 3
        # an event the code does not know (a made-up tag, a Literal field out of its values)
        store.commit([StreamAppend("r1/d", 0, [b'{"type":"step.v1","index":0,"kind":"sing"}'], ["step.v1"])])
        with pytest.raises(CorruptLogError, match=r"'r1/d' #0 cannot be decoded"):
            log.read("r1/d")

    def test_a_large_payload_reads_back_whole(self, store: EventStore) -> None:
        """An event of a few MB (a large run's seal, a big snapshot) between small ones reads
        back byte for byte — by stream (also from a read-only handle) and by prefix — decodes,
        and its chain verifies."""
        big = CaseFinished({"rows": [f"row {i:07d} \u00e9\u2603" for i in range(120_000)]})
        log = EventLog(store)
        log.append("r1/big", 0, [StepRecorded(1, "message", arguments={"text": "before"}), big,
                                 StepRecorded(3, "message", arguments={"text": "after"})])
        payload = CODEC.pack([big])[0][0]
        assert len(payload) > 2 << 20
        for handle in (store, self.reopen(store, readonly=True)):
            stored = handle.read_stream("r1/big")
            assert [e.seq for e in stored] == [0, 1, 2] and bytes(stored[1].payload) == payload
            assert EventLog(handle).read("r1/big")[1] == big
        assert [bytes(e.payload) for e in store.read_prefix("r1/")][1] == payload
        assert store.verify().ok

    def test_continuing_a_stream_extends_its_chain(self, store: EventStore) -> None:
        """A second append to a stream continues its hash chain: it verifies, and the head moves."""
        store.commit([batch("run", 0, 1)])
        store.commit([batch("run", 1, 2)])
        assert store.verify().ok
        assert store.stream_length("run") == 3
        assert store.head("run") == (3, store.read_stream("run")[-1].digest)

    def test_a_duplicate_rolls_back_the_whole_batch(self, store: EventStore) -> None:
        """A duplicate (stream, seq) rolls back the whole commit: its other streams and its
        projection rows too."""
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(DuplicateEventError):
            store.commit([batch("r/new", 0, 2), batch("r/a", 0, 1)], {"runs": [RUN_ROW]})
        assert store.stream_length("r/new") == 0
        assert store.projection("runs") == []

    def test_a_gap_is_refused(self, store: EventStore) -> None:
        """An append that would leave a sequence gap is refused like a duplicate."""
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(DuplicateEventError):
            store.commit([batch("r/a", 5, 1)])

    def test_backend_errors_are_oloproof_errors(self, store: EventStore) -> None:
        """A backend's own error (here a key conflict) reaches callers translated into an
        :class:`OloproofError`, never as the driver's exception."""
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(OloproofError):  # translated once, at the boundary
            store.commit([batch("r/a", 0, 1)])

    # ---- transactions and projections ----------------------------------------------------

    def test_a_transaction_keeps_every_commit_or_none(self, store: EventStore) -> None:
        """The commits inside :meth:`~EventStore.transaction` are seen inside it, all kept when
        it ends, none (events or rows) when it raises."""
        store.commit([batch("r/a", 0, 1)])
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.commit([batch("r/b", 0, 2)], {"runs": [RUN_ROW]})
                store.commit([batch("r/a", 1, 1)])
                assert store.stream_length("r/b") == 2 and store.heads("r/")["r/a"][0] == 2  # seen inside
                raise RuntimeError("killed")
        assert store.stream_length("r/b") == 0 and store.stream_length("r/a") == 1
        assert store.projection("runs") == []
        with store.transaction():
            store.commit([batch("r/b", 0, 2)])
            store.commit([batch("r/b", 2, 1)], {"runs": [RUN_ROW[:5] + ("complete",) + RUN_ROW[6:]]})
        assert store.stream_length("r/b") == 3 and store.projection("runs")[0]["status"] == "complete"
        assert store.verify().ok

    def test_projection_upsert_and_filter(self, store: EventStore) -> None:
        """A projection row with an existing key replaces it; rows filter and count by equality."""
        store.commit([], {"runs": [("r1", "s", "v", "t1", 2, "incomplete", None, "k")]})
        store.commit([], {"runs": [("r1", "s", "v", "t1", 2, "complete", "t2", "k")],
                          "cases": [("r1", "a", 0, "f", "ok", 2, None), ("r1", "b", 1, "f", "error", None, "boom")]})
        assert store.projection("runs")[0]["status"] == "complete"
        assert [r["case_id"] for r in store.projection("cases", status="error")] == ["b"]
        assert store.count("cases", run_id="r1") == 2

    def test_rebuild_projections_calls_the_projector_in_log_order(self, store: EventStore) -> None:
        """A rebuild feeds the projector every stream in (stream, seq) order and replaces every
        previous row with what it returns."""
        store.commit([batch("r", 0, 1), batch("r/a", 0, 2), batch("r/b", 0, 1)])
        seen: list[tuple[str, int]] = []

        def projector(stream: str, events: list[Any]) -> dict[str, list[tuple]]:
            seen.append((stream, len(events)))
            return {"cases": [("r", stream, len(seen), "f", "ok", len(events), None)]} if "/" in stream else {}

        store.commit([], {"cases": [("stale", "x", 0, "f", "ok", 0, None)]})
        store.rebuild_projections(projector)
        assert seen == [("r", 1), ("r/a", 2), ("r/b", 1)]
        assert [r["case_id"] for r in store.projection("cases")] == ["r/a", "r/b"]

    def test_verify_counts_a_fresh_log(self, store: EventStore) -> None:
        """:meth:`~EventStore.verify` of an untouched log is ok and counts its streams and events."""
        store.commit([batch("r/a", 0, 5), batch("r/b", 0, 1)])
        report = store.verify()
        assert report.ok and report.streams == 2 and report.events == 6

    # ---- many handles on one log ---------------------------------------------------------

    def test_concurrent_writers_on_one_log(self, store: EventStore) -> None:
        """Writers of different streams, each through its own handle, at once: every event
        lands, every chain holds, no batch is half written."""
        errors: list[BaseException] = []

        def write(k: int) -> None:
            handle = self.reopen(store)  # opened where it is used (a connection is per thread)
            try:
                for i in range(25):
                    handle.commit([batch(f"w{k}/c{i}", 0, 3)])
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
            finally:
                if handle is not store:
                    handle.close()

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        report = store.verify()
        assert report.ok and report.events == 4 * 25 * 3 and report.streams == 100

    def test_a_read_only_reader_beside_a_writer(self, store: EventStore) -> None:
        """A read-only handle sees nothing of a writer's open transaction, and all of it once
        committed; its chains verify."""
        store.commit([batch("r/a", 0, 2)])
        reader = self.reopen(store, readonly=True)
        try:
            with store.transaction():
                store.commit([batch("r/b", 0, 1)])
                if reader is not store:  # another handle sees nothing of an open transaction
                    assert reader.stream_length("r/b") == 0
            assert reader.stream_length("r/b") == 1 and reader.stream_length("r/a") == 2
            assert reader.verify().ok
        finally:
            if reader is not store:
                reader.close()

"""The writing path made cheaper (issue 29) writes what it wrote before: a seal streamed from
the log is the event a dict of every head made, byte for byte; a large payload written in
pieces reads back whole and in order; a case file validated once is checked again when it
changed; the one-frame ``@tool`` call records the events the general path records."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec
import pytest
from conftest import write

from oloproof import Case, current_case, tool
from oloproof.app.audit import seal
from oloproof.app.runs import load_run
from oloproof.config.cases import CaseFile
from oloproof.errors import CaseFileError, DuplicateEventError
from oloproof.events import CODEC, RunSealed, RunStarted, StepRecorded, encode, seal_digest
from oloproof.recorder.case import CaseRecorder
from oloproof.store import MemoryStore, SQLiteStore, StreamAppend
from oloproof.system import _CURRENT

NAMES = ["c1", "c10", "c2", 'quote"d', "back\\slash", "é", "\U0001f600", "z/1", "z/2", "replays", "cases"]


def _log(store, run_id: str = "20261201T000000-abcdef") -> tuple[str, list[str]]:
    started = RunStarted(run_id, "s", "1", [], {}, "c", "cases.jsonl", "d", len(NAMES), "t")
    store.commit([StreamAppend(run_id, 0, *CODEC.pack([started]))])
    for n, name in enumerate(NAMES):
        steps = [StepRecorded(i + 1, "message", arguments={"n": n, "i": i}) for i in range(n % 3 + 1)]
        store.commit([StreamAppend(f"{run_id}/{name}", 0, *CODEC.pack(steps))])
    replays = []
    for key in ("k2", "k1"):
        replays.append(f"replay/{key}")
        store.commit([StreamAppend(f"replay/{key}", 0, *CODEC.pack([StepRecorded(1, "message")]))])
    return run_id, replays


def _as_before(store, run_id: str, replays: list[str], finished_at: str) -> tuple[bytes, str]:
    """The seal as it was made before: every head in a dict, the event encoded whole."""
    heads = store.heads(run_id + "/")
    heads.update({s: h for s in replays if (h := store.head(s)) is not None})
    cut = len(run_id) + 1
    event = RunSealed(run_id=run_id, finished_at=finished_at, case_count=len(NAMES),
                      cases_committed=len(NAMES),
                      cases={s[cut:]: [n, d[:16]] for s, (n, d) in heads.items() if not s.startswith("replay/")},
                      replays={s[7:]: [n, d[:16]] for s, (n, d) in heads.items() if s.startswith("replay/")},
                      scheme=store.scheme, digest=seal_digest(run_id, store.head(run_id), heads, store.key))
    return CODEC.encode(event), event.digest


@pytest.mark.parametrize("key", [None, b"a key\n"])
@pytest.mark.parametrize("backend", ["sqlite", "memory"])
def test_a_seal_streamed_from_the_log_is_the_event_a_dict_of_heads_made(tmp_path, key, backend):
    store = SQLiteStore(tmp_path / "log.db", key=key) if backend == "sqlite" else MemoryStore(key=key)
    try:
        run_id, replays = _log(store)
        payload, digest = _as_before(store, run_id, replays, 'at "replays":{}')
        sealed = seal(store, run_id, case_count=len(NAMES), replay_streams={*replays, "replay/never-written"},
                      clock=lambda: 'at "replays":{}')
        stored = store.read_stream(run_id)[-1]
        assert bytes(stored.payload) == payload and sealed.digest == digest
        # the event returned reads its maps in the payload: the same entries the log holds
        back = load_run(store, run_id).sealed
        assert back is not None and back.digest == digest
        assert msgspec.json.decode(bytes(sealed.cases)) == dict(back.cases.items())
        assert msgspec.json.decode(bytes(sealed.replays)) == dict(back.replays.items()) == \
            {"k1": [1, store.head("replay/k1")[1][:16]], "k2": [1, store.head("replay/k2")[1][:16]]}
        assert store.verify().ok
    finally:
        store.close()


def test_a_large_payload_is_written_in_pieces_and_reads_back_whole_in_order(tmp_path):
    store = SQLiteStore(tmp_path / "log.db")
    big = encode({"state": "x" * (3 << 20), "n": [1, 2, 3]})
    try:
        store.commit([StreamAppend("r/a", 0, [b'{"a":1}', big, b'{"b":2}'], ["t", "t", "t"]),
                      StreamAppend("r/b", 0, [big, b'{"c":3}'], ["t", "t"])])
        assert [(e.stream, e.seq, len(e.payload)) for e in store.read_prefix("r/")] == \
            [("r/a", 0, 7), ("r/a", 1, len(big)), ("r/a", 2, 7), ("r/b", 0, len(big)), ("r/b", 1, 7)]
        assert store.read_stream("r/b")[0].payload == big and store.verify().ok
        # one transaction still: a batch whose later stream is taken leaves nothing of it
        with pytest.raises(DuplicateEventError):
            store.commit([StreamAppend("r/c", 0, [big], ["t"]), StreamAppend("r/a", 0, [b"{}"], ["t"])])
        assert store.read_stream("r/c") == [] and store.stream_length("r/a") == 3
    finally:
        store.close()


def _cases(path: Path, lines: list[str]) -> None:
    write(path, "".join(line + "\n" for line in lines))


def test_a_case_file_validated_once_is_read_as_it_was_validated_and_checked_again_once_changed(tmp_path):
    path = tmp_path / "cases.jsonl"
    lines = [f'{{"id": "c{i}", "input": {{"q": {i}}}, "expected": {{"a": "x"}}, "tags": ["t", "t"], '
             f'"fault": {{"tool": "pay", "kind": "error"}}}}' for i in range(3)]
    lines.append('{"id": "model-read", "input": {"q": 1}, "tags": [""]}')  # what the model reads (a bad tag)
    _cases(path, lines[:3])
    unchecked = list(CaseFile(path))  # never validated: every check on the way
    CaseFile(path).validate()
    assert list(CaseFile(path)) == unchecked
    # changed after it was validated (a duplicate key): the checks apply again
    before = os.stat(path)
    _cases(path, [*lines[:2], '{"id": "c2", "input": {"q": 2}, "input": {"q": 3}}'])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with its old time
    with pytest.raises(CaseFileError, match="duplicate key 'input'"):
        list(CaseFile(path))


class Fake:
    @tool
    def pay(self, amount, *extra, note=None):
        return {"paid": amount, "extra": list(extra), "note": note}


@tool
def lookup(order_id):
    return {"order_id": order_id, "items": [1, 2]}


def _recorded(fault):
    rec = CaseRecorder(Case("c", {}), fault=fault)
    token = _CURRENT.set(rec)
    try:
        current_case().take_control("desk")  # every step names its agent
        lookup("o-1")
        Fake().pay(10, "a", note="n")
        with pytest.raises(KeyError):
            tool(lambda: {}["missing"], name="broken")()
        current_case().message("done")
        lookup(order_id="o-2")
        current_case().finish("success")
    finally:
        _CURRENT.reset(token)
    return [encode(e) for e in rec.trajectory_events()]


def test_the_one_frame_tool_call_records_what_the_general_path_records():
    """Without a declared fault a call takes the one-frame path; with a fault on a tool never
    called, the general path: the events are the same bytes."""
    fast = _recorded(None)
    general = _recorded({"tool": "never_called", "kind": "error", "call": 1})
    assert fast == general and len(fast) == 10 and b'"agent":"desk"' in fast[0]
    assert hashlib.sha256(b"".join(fast)).hexdigest() == hashlib.sha256(b"".join(general)).hexdigest()


def test_a_commit_that_fails_in_sqlite_rolls_back_whole_and_says_why(tmp_path):
    """The case commit's own transaction (no context manager): SQLite's full disk is a
    StoreError saying so, nothing of the batch is written, and the store writes again after."""
    from oloproof.errors import StoreError

    store = SQLiteStore(tmp_path / "log.db")
    store.commit([StreamAppend("r/a", 0, *CODEC.pack([StepRecorded(1, "message")]))])
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # no room for another page
    big = [StepRecorded(i + 1, "message", arguments={"x": "y" * 3000}) for i in range(8)]
    with pytest.raises(StoreError, match="disk is full.*rolled back"):
        store.commit([StreamAppend("r/b", 0, *CODEC.pack(big)),
                      StreamAppend("r/a", 1, *CODEC.pack([StepRecorded(2, "message")]))])
    assert not store._conn.in_transaction
    assert store.read_stream("r/b") == [] and store.stream_length("r/a") == 1
    with pytest.raises(DuplicateEventError):  # an integrity error rolls back the same way
        store.commit([StreamAppend("r/c", 0, *CODEC.pack([StepRecorded(1, "message")])),
                      StreamAppend("r/a", 0, *CODEC.pack([StepRecorded(1, "message")]))])
    assert not store._conn.in_transaction and store.read_stream("r/c") == []
    store._conn.execute("PRAGMA max_page_count = 1000000")
    store.commit([StreamAppend("r/b", 0, *CODEC.pack(big))])
    assert store.stream_length("r/b") == 8
    report = store.verify()
    assert report.ok and report.streams == 2 and report.events == 9
    store.close()

"""The event log interface, shared by every backend.

An :class:`EventStore` holds append-only events keyed by (stream, sequence), each with a
hash-chain digest, and *projection tables*: derived rows that can be dropped and rebuilt from
the events at any time. Nothing outside ``oloproof.store`` touches SQL; callers speak in
:class:`StreamAppend` batches and projection rows.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oloproof.events import SHA256, ChainScheme, chain_digest, chain_digests

if TYPE_CHECKING:
    from oloproof.store.judged import JudgementCache

#: Projection tables: name -> (columns, primary-key columns). Rows are tuples in column order.
PROJECTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "runs": (
        ("run_id", "system", "version", "started", "case_count", "status", "finished", "eval_key"),
        ("run_id",),
    ),
    "cases": (
        ("run_id", "case_id", "position", "fingerprint", "status", "steps", "error"),
        ("run_id", "case_id"),
    ),
    # A case's evaluation under one configuration (``eval_key``: the config digest and the
    # system version its replays belong to): canonical JSON of its verdicts, metric values,
    # slice groups and compared paths. Evaluating again with the same key reads these rows
    # instead of decoding events and replays. The SQLite backend also offers a ``verdicts``
    # view: one row per case and criterion, for each run's own configuration.
    "evaluations": (
        ("run_id", "eval_key", "case_id", "position", "result"),
        ("run_id", "eval_key", "case_id"),
    ),
}
#: bump when PROJECTIONS change: backends then drop and recreate the tables, and the next
#: command that opens the log rebuilds them from the events
PROJECTIONS_VERSION = "2"


@dataclass(frozen=True)
class StreamAppend:
    """Events to append to one stream, starting at sequence ``start`` (0 for a new stream)."""

    stream: str
    start: int
    payloads: Sequence[bytes]
    types: Sequence[str]


@dataclass(frozen=True)
class StoredEvent:
    """One event as the log holds it: its (stream, seq) key, its type tag, the msgspec
    payload, and the hash-chain digest covering it and every event before it in the stream."""

    stream: str
    seq: int
    type: str
    payload: bytes
    digest: str


@dataclass
class ChainProblem:
    """The first broken event of one stream."""

    stream: str
    seq: int
    problem: str


@dataclass
class VerifyReport:
    """What :meth:`EventStore.verify` checked (streams and events read) and the first broken
    event of every stream whose chain does not hold."""

    streams: int = 0
    events: int = 0
    problems: list[ChainProblem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no stream has a sequence gap or a digest mismatch."""
        return not self.problems


@dataclass(slots=True)
class CheckedStream:
    """One stream as :meth:`EventStore.check_streams` read it: its length (last sequence + 1)
    and the digest stored on its last event (its head, as :meth:`EventStore.heads` gives it),
    the events read, the first broken event of its chain (None: it holds), and its payloads
    and stored types when they were asked for (else empty)."""

    stream: str
    length: int
    head: str
    count: int
    problem: ChainProblem | None
    payloads: list[bytes]
    types: list[str]


#: a sequence number as the chain hashes it (b"12\x00"), made once for the first ones
_SEQS = 1024
_SEQ = [b"%d\x00" % n for n in range(_SEQS)]

Rows = Mapping[str, Sequence[tuple]]
#: A projector turns one stream's events into projection rows; it may keep state across
#: streams (streams are fed in (stream, seq) order, so a run comes before its cases).
Projector = Callable[[str, list[StoredEvent]], Rows]


class EventStore(abc.ABC):
    """Append-only event log with hash chains and rebuildable projections.

    ``key``: with a key, every chain digest is an HMAC-SHA256 under it (the log records the
    scheme, never the key). ``key_problem``: why the key given does not fit the log (a keyed
    log opened without its key, or a key given for a log chained without one); a store with
    a key problem refuses to write, and its chains cannot be verified.
    """

    key: bytes | None = None
    scheme: ChainScheme = SHA256
    key_problem: str | None = None

    @abc.abstractmethod
    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        """Append every batch and upsert projection rows in ONE transaction.

        A duplicate (stream, sequence) rolls back the whole call
        (:class:`~oloproof.errors.DuplicateEventError`).
        """

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Every :meth:`commit` made inside is part of ONE transaction: all of them are kept
        when the block ends, none if it raises (readers see nothing of it before)."""

    @abc.abstractmethod
    def stream_length(self, stream: str) -> int:
        """Number of events in ``stream`` (0 for a stream never written): the ``start`` the
        next :class:`StreamAppend` to it must carry."""

    @abc.abstractmethod
    def heads(self, prefix: str) -> dict[str, tuple[int, str]]:
        """Every stream under ``prefix`` -> (number of events, digest of its last event)."""

    def iter_heads(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        """(stream, number of events, digest of its last event) of every stream under
        ``prefix``, in name order, one at a time: what a seal reads (backends may stream it
        rather than hold every head at once)."""
        for stream, (length, digest) in sorted(self.heads(prefix).items()):
            yield stream, length, digest

    @abc.abstractmethod
    def stream_names(self, prefix: str) -> list[str]:
        """The names of every stream starting with ``prefix``, in order."""

    @abc.abstractmethod
    def head(self, stream: str) -> tuple[int, str] | None:
        """(number of events, digest of the last one) of exactly ``stream``, or None."""

    @abc.abstractmethod
    def root_streams(self) -> list[str]:
        """The names of the streams without a ``/`` (the runs' own streams), in order."""

    def claim_run(self, run_id: str, doing: str) -> AbstractContextManager[None]:
        """Hold the run ``run_id`` for this process while it writes it (``doing``: "recorded",
        "resumed"): a second process that claims it gets a :class:`~oloproof.errors.RunBusyError`
        naming the holder. A store only one process can open needs no claim."""
        from contextlib import nullcontext

        return nullcontext()

    def first_event(self, stream: str) -> StoredEvent | None:
        """The event at sequence 0 of ``stream`` (the one that opens it), or None when the
        stream does not exist; backends may read it without the rest of the stream."""
        events = self.read_stream(stream)
        return events[0] if events else None

    @abc.abstractmethod
    def read_stream(self, stream: str) -> list[StoredEvent]:
        """Every event of exactly ``stream``, in sequence order; empty when it does not exist."""

    @abc.abstractmethod
    def read_prefix(self, prefix: str) -> Iterator[StoredEvent]:
        """Events of every stream starting with ``prefix``, in (stream, seq) order."""

    @abc.abstractmethod
    def projection(self, table: str, **where: object) -> list[dict]:
        """Rows of a projection table (optionally filtered by equality), in key order."""

    def iter_projection(self, table: str, **where: object) -> Iterator[dict]:
        """Like :meth:`projection`, one row at a time (backends may stream)."""
        yield from self.projection(table, **where)

    @abc.abstractmethod
    def count_streams(self, prefix: str) -> int:
        """Number of streams whose name starts with ``prefix``."""

    @abc.abstractmethod
    def count(self, table: str, **where: object) -> int:
        """Number of rows of a projection table matching ``where``."""

    @abc.abstractmethod
    def replace_projections(self, batches: Iterable[Rows]) -> None:
        """Drop every projection row and insert ``batches`` instead, in ONE transaction: if
        producing a batch raises, the previous rows stay as they were."""

    @abc.abstractmethod
    def delete_projection_rows(self, table: str, **where: object) -> None:
        """Delete the rows of projection ``table`` matching every ``where`` equality; the
        events stay, so a rebuild derives the rows again."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the backend's connection; the store is not used afterwards."""

    # ---- shared logic, written once over the primitives above -------------------------

    def iter_streams(self, prefix: str) -> Iterator[tuple[str, list[bytes]]]:
        """The payloads of every stream under ``prefix``, one stream at a time."""
        for stream, events in _group_streams(self.read_prefix(prefix)):
            yield stream, [e.payload for e in events]

    def stream_heads(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """The first event of every stream under ``prefix``."""
        for stream, payloads in self.iter_streams(prefix):
            yield stream, payloads[0]

    def read_all(self) -> Iterator[StoredEvent]:
        """Every event of the log, in (stream, seq) order."""
        return self.read_prefix("")

    def verify(self, prefix: str = "", streams: Sequence[str] | None = None) -> VerifyReport:
        """Recompute the hash chain of every stream under ``prefix`` (or of the ``streams``
        named); report the first broken event per stream."""
        report = VerifyReport()
        for checked in self.check_streams(prefix, streams):
            report.streams += 1
            report.events += checked.count
            if checked.problem is not None:
                report.problems.append(checked.problem)
        return report

    def check_streams(self, prefix: str = "", streams: Sequence[str] | None = None, *, payloads: bool = False,
                      types: bool = False) -> Iterator[CheckedStream]:
        """Every stream under ``prefix`` (or each of ``streams``), read once in (stream, seq)
        order with its hash chain recomputed: its length and stored head (what :meth:`heads`
        gives), its first broken event, and — when asked — its payloads and stored types, so
        a reader that audits a run judges it in the same pass (a stream is yielded whole
        once its last event is read)."""
        key = self.key
        sha256, join = hashlib.sha256, b"".join
        current: str | None = None
        previous, tag = "", b""
        expected = last = count = 0
        head = ""
        problem: ChainProblem | None = None
        kept: list[bytes] = []
        kinds: list[str] = []
        for stream, seq, type_, payload, stored in self._check_rows(prefix, streams, types):
            if stream != current:
                if current is not None:
                    yield CheckedStream(current, last + 1, head, count, problem, kept, kinds)
                current, previous, expected, count, problem = stream, "", 0, 0, None
                tag = b"\x00" + stream.encode() + b"\x00"
                kept, kinds = [], []
            last, head = seq, stored
            count += 1
            if payloads:
                kept.append(payload)
            if types:
                kinds.append(type_)
            if problem is not None:
                continue
            if seq != expected:
                problem = ChainProblem(stream, seq, f"sequence gap: expected {expected}")
                continue
            if key is None and len(payload) < 65536:  # the common case, inlined (see chain_digests)
                digest = sha256(join((previous.encode(), tag, _SEQ[seq] if seq < _SEQS else b"%d\x00" % seq,
                                      payload))).hexdigest()
            else:
                digest = chain_digest(previous, stream, seq, payload, key)
            if digest != stored:
                problem = ChainProblem(stream, seq, "digest mismatch: the event or one before it was altered")
                continue
            previous = digest
            expected += 1
        if current is not None:
            yield CheckedStream(current, last + 1, head, count, problem, kept, kinds)

    def _check_rows(self, prefix: str, streams: Sequence[str] | None,
                    types: bool) -> Iterator[tuple[str, int, str, bytes, str]]:
        """(stream, seq, type, payload, digest) in (stream, seq) order (``type`` "" unless
        ``types``); backends may read faster."""
        if not types:
            for stream, seq, payload, digest in self._chain_rows(prefix, streams):
                yield stream, seq, "", payload, digest
            return
        events = self.read_prefix(prefix) if streams is None else (ev for s in streams for ev in self.read_stream(s))
        for ev in events:
            yield ev.stream, ev.seq, ev.type, ev.payload, ev.digest

    def _chain_rows(self, prefix: str, streams: Sequence[str] | None) -> Iterator[tuple[str, int, bytes, str]]:
        """(stream, seq, payload, digest) in (stream, seq) order; backends may read faster."""
        events = self.read_prefix(prefix) if streams is None else (ev for s in streams for ev in self.read_stream(s))
        for ev in events:
            yield ev.stream, ev.seq, ev.payload, ev.digest

    def stream_names_ordered(self, prefix: str, fields: Sequence[str]) -> Iterator[str]:
        """The streams under ``prefix`` in the order of ``fields`` of their first event (top-level
        numbers; a missing one is 0), then by name. Backends that can sort without holding the
        list (SQLite) do; this one reads every first event and sorts."""
        import msgspec

        keys: list[tuple[tuple[Any, ...], str]] = []
        for stream, payload in self.stream_heads(prefix):
            head = msgspec.json.decode(payload)
            keys.append((tuple(head.get(f) or 0 for f in fields), stream))
        keys.sort()
        for _, stream in keys:
            yield stream

    def judgement_cache(self) -> JudgementCache | None:
        """Where the judgements of this log's sealed runs are cached (:mod:`oloproof.store.judged`:
        a file beside an SQLite log), or None for a backend that keeps none."""
        return None

    def index_search(self) -> int:
        """Add the step events written since the last call to the search projection (SQLite
        FTS5, :mod:`oloproof.store.search`); returns how many rows it added. Backends
        without one add nothing."""
        return 0

    def rebuild_search(self) -> int:
        """Drop the search projection and index every event again."""
        return 0

    def search_steps(self, query: str, where: Any, limit: int) -> list[dict]:
        """The newest ``limit`` indexed steps matching ``query`` and ``where``."""
        from oloproof.errors import StoreError

        raise StoreError("searching needs the SQLite log")

    def search_names(self, what: str) -> list[str]:
        """The distinct tool names (``tool_name``) of the indexed steps, or the criteria
        (``criterion``) of the stored verdicts: what a search filter may name."""
        return []

    def search_lag(self) -> int:
        """Searchable events the index does not hold yet."""
        return 0

    def rebuild_projections(self, projector: Projector) -> None:
        """Drop every projection row and derive them again from the events, in one
        transaction: an event the projector cannot read leaves the previous rows intact."""
        self.replace_projections(projector(stream, events) for stream, events in _group_streams(self.read_all()))


def _group_streams(events: Iterable[StoredEvent]) -> Iterator[tuple[str, list[StoredEvent]]]:
    stream = ""  # the first event opens a group whatever its stream (group is empty)
    group: list[StoredEvent] = []
    for ev in events:
        if ev.stream != stream:
            if group:
                yield stream, group
            stream, group = ev.stream, []
        group.append(ev)
    if group:
        yield stream, group


def chain(previous: str, append: StreamAppend, key: bytes | None = None) -> tuple[list[str], str]:
    """Digests for one append, continuing from ``previous``; returns (digests, last)."""
    digests = chain_digests(previous, append.stream, append.start, append.payloads, key)
    return digests, (digests[-1] if digests else previous)


def wrong_key(key: bytes, firsts: Sequence[tuple[str, bytes, str]]) -> str | None:
    """Why ``key`` is not the key a keyed log was written with, or None when it is.

    ``firsts``: (stream, payload, digest) of first events (sequence 0) of the log. A first
    event is chained from nothing, so its HMAC under the right key is known: when not one of
    them matches, it is the key that is wrong, not the log (tampering breaks a chain somewhere
    and leaves the others; whoever rewrote every stream without the key is refused as well).
    A key that differs only by a trailing newline — read from a file with ``$(cat …)`` one
    way and ``export K=$'…\\n'`` the other — is named as such."""
    def fits(k: bytes) -> bool:
        return any(chain_digest("", stream, 0, payload, k) == digest for stream, payload, digest in firsts)

    if not firsts or fits(key):
        return None
    stripped = key.rstrip(b"\r\n")
    if stripped != key and stripped and fits(stripped):
        return ("OLOPROOF_LOG_KEY is the wrong key for this log: it ends in a newline, and the key this log was "
                "written with does not; remove the newline (e.g. export OLOPROOF_LOG_KEY=\"$(cat KEYFILE)\")")
    for end in (b"\n", b"\r\n"):
        if fits(key + end):
            return ("OLOPROOF_LOG_KEY is the wrong key for this log: the key it was written with ends in a newline, "
                    "and OLOPROOF_LOG_KEY does not; set it with the newline")
    note = " (note: OLOPROOF_LOG_KEY ends in a newline)" if key.endswith(b"\n") else ""
    return ("OLOPROOF_LOG_KEY is the wrong key for this log: not one stream's first HMAC-SHA256 matches under it, "
            f"so the key, not the log, is at fault{note}; set the key the log was written with")

"""Seals and audits: what a finished run commits to, and whether the log still holds it.

A run ends with a seal (:class:`~oloproof.events.RunSealed`): every stream it wrote or relied
on — its case streams and the replay streams its cases were judged with — with each stream's
length and the head of its hash chain, and a digest over them all and over the run stream's
own head. Each event's digest already covers the one before it, so the heads cover every
event; the seal adds what a chain alone cannot see: a stream deleted whole, a tail cut off,
a case added afterwards.

What this proves depends on what the attacker cannot do (the README says it plainly):

* nothing outside the log: deleting, truncating or editing streams is caught, but someone who
  recomputes every hash (chains and seal) goes unseen;
* the seal digest kept outside the log (``audit verify --expect DIGEST``, a CI artifact):
  any rewrite of the run is caught, recomputed or not;
* ``OLOPROOF_LOG_KEY``: chains and seals are HMAC-SHA256 under a key the log never holds, so
  nobody without the key can recompute them.

Every reader of a run (``show``, ``eval``, ``gate``, ``view``, ``export``) checks that run's
chains and seal first and refuses a broken run; ``audit verify`` checks every run and stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import msgspec

from oloproof.app.seals import SealCursor, SealEntries, decode_run_event, entries_of, entry_bytes
from oloproof.errors import CorruptLogError
from oloproof.events import CODEC, RunFinished, RunSealed, RunStarted, SealDigest, seal_digest, stored_tag
from oloproof.store.base import ChainProblem, CheckedStream, EventStore, StoredEvent

# the replay streams' prefix (oloproof.replay.engine.PREFIX), as the store's search index names
# it: importing the replay engine would bring the recorder and the configuration models into
# `audit verify`, which judges nothing
from oloproof.store.search import REPLAY as PREFIX

if TYPE_CHECKING:
    from oloproof.app.sealing import seal as seal  # for the type checker: re-exported below


def __getattr__(name: str) -> Any:
    if name == "seal":  # the writer's side (app.sealing), re-exported for run and import otel
        from oloproof.app.sealing import seal

        return seal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

HEAD = 16  # hex digits of a stream's head kept in the seal, to name a rewritten stream


@dataclass
class RunAudit:
    """One run checked against its seal: its start, seal (or pre-seal finish), the cases
    committed and every problem found (a broken chain, a stream deleted or cut, a case added
    after the seal)."""

    run_id: str
    started: RunStarted | None
    sealed: RunSealed | None = None
    legacy_finished: RunFinished | None = None  # a run finished before seals existed
    committed: int = 0
    problems: list[str] = field(default_factory=list)
    #: the seal digest recomputed from the log as it was read (None: not sealed, or not read)
    recomputed: str | None = None

    @property
    def expected(self) -> int:
        """The cases the run set out to record (0 when its start event is gone)."""
        return self.started.case_count if self.started is not None else 0

    @property
    def complete(self) -> bool:
        """Sealed (or finished before seals, with every case there) and intact."""
        if self.problems:
            return False
        if self.sealed is not None:
            return True
        return self.legacy_finished is not None and self.committed >= self.expected

    @property
    def digest(self) -> str | None:
        """The seal digest (what ``audit verify --expect`` compares), None for an unsealed run."""
        return self.sealed.digest if self.sealed is not None else None

    @property
    def status(self) -> str:
        """``broken`` (any problem), ``sealed``, ``finished (before seals)`` or ``incomplete``."""
        if self.problems:
            return "broken"
        if self.sealed is not None:
            return "sealed"
        if self.complete:
            return "finished (before seals)"
        return "incomplete"


def sealed_streams(sealed: RunSealed) -> dict[str, list]:
    """The seal's entries by full stream name."""
    out = {f"{sealed.run_id}/{case_id}": entry for case_id, entry in sealed.cases.items()}
    out.update({PREFIX + key: entry for key, entry in sealed.replays.items()})
    return out


def sealed_replays(sealed: RunSealed) -> list[str]:
    """The full names of the replay streams the seal covers."""
    return [PREFIX + key for key in sealed.replays]


def _heads(store: EventStore, run_id: str, replay_streams: set[str] | list[str]) -> dict[str, tuple[int, str]]:
    heads = store.heads(run_id + "/")
    for stream in replay_streams:
        head = store.head(stream)
        if head is not None:
            heads[stream] = head
    return heads


class _RunCheck:
    """One run's audit, made as its streams are read: the run's own stream first (decoded,
    its seal's lists kept as stored: :mod:`oloproof.app.seals`), then each case stream in name
    order — compared with its seal entry as it comes and hashed into the seal's digest — then
    the replays the seal covers. Nothing holds a head per stream: a reader's memory does not
    grow with the run. ``chains``: name the broken chains of the streams it is fed (off when
    the caller checks every chain of the log itself)."""

    def __init__(self, store: EventStore, run_id: str, stored: list[StoredEvent], *, chains: bool):
        self.store, self.run_id, self.chains = store, run_id, chains
        self.audit = RunAudit(run_id, None)
        self.own: list[str] = self.audit.problems  # the run stream's own problems come first
        self.case_chains: list[str] = []
        self.other_chains: list[str] = []
        self.seal_problems: list[str] = []
        self.added: list[str] = []
        self.ready = False  # the run stream reads: its cases can be checked
        self.replays: list[str] = []
        self._hasher: SealDigest | None = None
        self._entries: Iterator[tuple[str, int, str]] = iter(())
        self._entry: tuple[str, int, str] | None = None
        self._cursor: SealCursor | None = None  # while every entry matched so far
        self._cut = len(run_id) + 1
        self._last = ""
        self._replay_heads: dict[str, tuple[int, str]] = {}
        self._cases_first = True
        self._read(stored)

    def _read(self, stored: list[StoredEvent]) -> None:
        run_id, problems = self.run_id, self.own
        if self.store.key_problem:
            problems.append(self.store.key_problem)
            return
        if not stored:
            problems.append(f"run stream {run_id!r} is missing")
            return
        events = []
        for ev in stored:
            try:
                events.append(decode_run_event(ev.payload, ev.type))
            except Exception as e:  # noqa: BLE001 - any decode failure is reported as an audit problem
                problems.append(f"{run_id} #{ev.seq}: payload cannot be decoded ({_short(e)})")
                return
        if not isinstance(events[0], RunStarted):
            problems.append(f"{run_id} #0: the run stream does not begin with run_started")
            return
        self.audit.started = events[0]
        for ev, event in zip(stored, events):
            tag = written_tag(ev, event)
            if ev.type != tag:
                problems.append(f"{run_id} #{ev.seq}: stored type {ev.type!r} disagrees with its payload ({tag!r})")
        seal_at = next((i for i, e in enumerate(events) if isinstance(e, RunSealed)), None)
        if seal_at is not None:
            sealed = cast(RunSealed, events[seal_at])  # seal_at is where a RunSealed is
            self.audit.sealed = sealed
            if seal_at != len(events) - 1:
                problems.append(f"{run_id}: events appended after the seal: {len(events) - 1 - seal_at}")
            self.replays = sorted(sealed_replays(sealed))
            if isinstance(sealed.cases, SealEntries):
                self._cursor = sealed.cases.cursor()
            else:
                self._entries = entries_of(sealed.cases)
                self._next_entry()
            self._hasher = SealDigest(run_id, (seal_at, stored[seal_at - 1].digest), self.store.key)
            # names sort as code points: a run's case streams all come before, or all after,
            # the replay streams (none is a prefix of the other: no run id holds a "/")
            self._cases_first = run_id + "/" < PREFIX
        else:
            self.audit.legacy_finished = next((e for e in events if isinstance(e, RunFinished)), None)
        self.ready = True

    def chain(self, stream: CheckedStream) -> None:
        """Note a broken chain of the run stream or a replay stream it relies on."""
        if self.chains and stream.problem is not None:
            p = stream.problem
            self.other_chains.append(f"{p.stream} #{p.seq}: {p.problem}")

    def replay_heads(self, heads: dict[str, tuple[int, str]]) -> None:
        """The heads of the sealed replay streams the log holds (before any case is fed)."""
        self._replay_heads = heads
        if self._hasher is not None and not self._cases_first:
            for name in self.replays:
                if name in heads:
                    self._hasher.add(name, *heads[name])

    def case(self, stream: CheckedStream) -> None:
        """One case stream of the run, in name order."""
        name = stream.stream
        if name <= self._last:
            raise CorruptLogError(f"stream {name!r} was read after {self._last!r}: the log's index is damaged "
                                  "(an SQLite file: try 'sqlite3 log.db \"REINDEX\"')")
        self._last = name
        if self.chains and stream.problem is not None:
            p = stream.problem
            self.case_chains.append(f"{p.stream} #{p.seq}: {p.problem}")
        self.audit.committed += 1
        if self._hasher is None:
            return
        self._hasher.add(name, stream.length, stream.head)
        case_id = name[self._cut:]
        if self._cursor is not None:
            if self._cursor.take(entry_bytes(case_id, stream.length, stream.head[:HEAD])):
                return  # the entry the seal holds for it, byte for byte
            # something differs: from here on entry by entry, to say what
            self._entries, self._cursor = self._cursor.rest(), None
            self._next_entry()
        while self._entry is not None and self._entry[0] < case_id:
            self._missing(*self._entry)
            self._next_entry()
        if self._entry is not None and self._entry[0] == case_id:
            self._compare(name, "case stream", self._entry[1], self._entry[2], (stream.length, stream.head))
            self._next_entry()
        else:
            self.added.append(f"{name}: case stream added after the seal")

    def _next_entry(self) -> None:
        previous = self._entry
        self._entry = next(self._entries, None)
        if self._entry is not None and previous is not None and self._entry[0] <= previous[0]:
            # a seal lists its cases in name order: one that does not was not written by a seal
            self.seal_problems.append(f"{self.run_id}: the seal lists case {self._entry[0]!r} after "
                                      f"{previous[0]!r}, out of order (rewritten)")
            self._entry = None
            self._entries = iter(())

    def _missing(self, case_id: str, length: int, head: str) -> None:
        self.seal_problems.append(f"{self.run_id}/{case_id}: case stream missing (sealed with {length} events)")

    def _compare(self, name: str, kind: str, length: int, head: str, now: tuple[int, str] | None) -> None:
        problems = self.seal_problems
        if now is None:
            problems.append(f"{name}: {kind} missing (sealed with {length} events)")
        elif now[0] < length:
            problems.append(f"{name}: {kind} truncated: {now[0]} of the {length} sealed events left")
        elif now[0] > length:
            problems.append(f"{name}: events appended to the {kind} after the seal: {now[0] - length}")
        elif now[1][:HEAD] != head:
            problems.append(f"{name}: {kind} rewritten since the seal (its chain head changed)")

    def finish(self) -> RunAudit:
        """The audit, once every case stream was fed."""
        audit = self.audit
        if not self.ready:
            return audit
        chains = self.case_chains + self.other_chains
        s = audit.sealed
        if s is None:
            audit.problems += chains
            legacy = audit.legacy_finished
            if legacy is not None and audit.committed < legacy.cases_committed:
                audit.problems.append(f"{self.run_id}: case streams missing: {audit.committed} left of the "
                                      f"{legacy.cases_committed} committed when it finished")
            return audit
        if self._cursor is not None:
            self._entries, self._cursor = self._cursor.rest(), None
            self._next_entry()
        while self._entry is not None:
            self._missing(*self._entry)
            self._next_entry()
        assert self._hasher is not None
        if self._cases_first:
            for name in self.replays:
                if name in self._replay_heads:
                    self._hasher.add(name, *self._replay_heads[name])
        for key, length, head in entries_of(s.replays):
            name = PREFIX + key
            self._compare(name, "replay stream", length, head, self._replay_heads.get(name))
        audit.recomputed = self._hasher.hexdigest()
        if s.scheme != self.store.scheme:
            self.seal_problems.insert(0, f"{self.run_id}: sealed under {s.scheme}, but the log is chained with "
                                         f"{self.store.scheme}")
        intact = not audit.problems and not chains and not self.seal_problems and not self.added
        audit.problems += chains + self.seal_problems + self.added
        if intact and audit.recomputed != s.digest:
            audit.problems.append(f"{self.run_id}: the seal's digest does not match the streams it seals")
        return audit


def audit_run(store: EventStore, run_id: str, *, chains: bool = True,
              visit: Callable[[CheckedStream], None] | None = None) -> RunAudit:
    """Check one run: the chains of its streams, and its streams against its seal
    (``chains=False`` when the caller has verified every chain of the log already), in one
    read of each stream. ``visit`` is handed every case stream whose chain holds, with its
    payloads, as it is read: a reader judges the run in the same pass, and reports nothing
    unless the audit holds. :func:`audit_log` also decodes every payload against its type
    column."""
    check = _RunCheck(store, run_id, store.read_stream(run_id), chains=chains)
    if not check.ready:
        return check.finish()
    for stream in store.check_streams(streams=[run_id]):
        check.chain(stream)
    heads = {}
    for stream in store.check_streams(streams=check.replays):
        heads[stream.stream] = (stream.length, stream.head)
        check.chain(stream)
    check.replay_heads(heads)
    for stream in store.check_streams(run_id + "/", payloads=visit is not None):
        check.case(stream)
        if visit is not None and stream.problem is None:
            visit(stream)
    return check.finish()


def current_digest(store: EventStore, audit: RunAudit) -> str | None:
    """The seal digest recomputed from the log as it is now (for ``--expect``)."""
    if audit.sealed is None:
        return None
    if audit.recomputed is not None:
        return audit.recomputed
    stored = store.read_stream(audit.run_id)
    seal_at = next(i for i, ev in enumerate(stored) if ev.type == CODEC.tag_of(audit.sealed))
    return seal_digest(audit.run_id, (seal_at, stored[seal_at - 1].digest),
                       _heads(store, audit.run_id, sealed_replays(audit.sealed)), store.key)


def written_tag(ev: Any, event: Any) -> str:
    """The type a stored event was written with: its decoded tag — or, when that tag is one an
    older event is upcast to, the payload's own ``type`` (read again only then: a type column
    rewritten from ``case_finished.v1`` to ``.v2`` is a disagreement too)."""
    tag = CODEC.tag_of(event)
    return stored_tag(ev.payload) if tag in CODEC.upcast_targets else tag


class _Tagged(msgspec.Struct):
    type: str


_TAGS = msgspec.json.Decoder(list[_Tagged])
#: the types a payload may be written as: the events the code knows and the older versions
#: its upcasters read
_KNOWN = frozenset([*(cast(str, cls.__struct_config__.tag) for cls in CODEC.events), *CODEC.upcasters])


def _deep_check(store: EventStore, stream: CheckedStream) -> list[str]:
    """Every payload of ``stream`` (read with its payloads and types) is JSON naming a known
    event type, the one its type column holds — the column is outside the chain, so this is
    what catches it rewritten. Only the tags are read (the readers decode each event as they
    use it); a stream whose chain or tags are off is decoded event by event, to name the
    culprit and say what is wrong with it."""
    payloads, types = stream.payloads, stream.types
    if stream.problem is None:
        try:
            tags = [t.type for t in _TAGS.decode(b"[" + b",".join(payloads) + b"]")]
        except (msgspec.DecodeError, msgspec.ValidationError):
            tags = []
        if tags == types and _KNOWN.issuperset(types):
            return []
    # sequence numbers are the positions, unless the stream has a gap (its chain is broken)
    seqs = range(stream.count) if stream.count == stream.length else [ev.seq for ev in store.read_stream(stream.stream)]
    out: list[str] = []
    for payload, type_, seq in zip(payloads, types, seqs):
        try:
            tag = _written(payload, CODEC.decode(payload))
        except Exception as e:  # noqa: BLE001 - any decode failure is reported as an audit problem
            out.append(f"{stream.stream} #{seq}: payload cannot be decoded ({_short(e)})")
            continue
        if tag != type_:
            out.append(f"{stream.stream} #{seq}: stored type {type_!r} disagrees with its payload ({tag!r})")
    return out


def _written(payload: bytes, event: Any) -> str:
    tag = CODEC.tag_of(event)
    return stored_tag(payload) if tag in CODEC.upcast_targets else tag


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) <= 120 else text[:117] + "…"


@dataclass
class LogAudit:
    """``audit verify`` over a whole log: every run's audit, orphaned case streams, the
    streams and events checked, and the problems that belong to no run."""

    runs: list[RunAudit]
    orphans: list[str]  # case streams whose run stream is gone
    streams: int
    events: int
    problems: list[str]  # chains outside any run (replays no seal covers), orphans
    #: the backend's own integrity check of the file ("ok", or its first complaint)
    integrity: str = "ok"

    @property
    def ok(self) -> bool:
        """No problem anywhere and every run complete: an incomplete run fails the audit too."""
        return not self.problems and all(not r.problems and r.complete for r in self.runs)


#: streams of their own, no run's (oloproof.events): never orphans
NOT_RUNS = (PREFIX, "pin/", "attribution/", "push/", "judgement/")


def audit_log(store: EventStore) -> LogAudit:
    """Every run against its seal, every chain, every payload: one read of the log, in
    (stream, seq) order, with the backend's own integrity check alongside (on SQLite, in a
    thread of its own)."""
    if store.key_problem:  # without the right key no chain can be checked: say that once
        return LogAudit([], [], 0, 0, [store.key_problem])
    integrity = _integrity(store)
    streams = events = 0
    broken: list[ChainProblem] = []
    problems: list[str] = []
    runs: list[RunAudit] = []
    checks: dict[str, _RunCheck] = {}  # runs whose case streams may still come
    deep: dict[str, list[str]] = {}  # run id -> its case streams' decode problems
    orphans: set[str] = set()
    known: set[str] = set()  # the runs whose own stream was read
    active: str | None = None  # the run whose case streams are being read
    for stream in store.check_streams(payloads=True, types=True):
        streams += 1
        events += stream.count
        if stream.problem is not None:
            broken.append(stream.problem)
        name = stream.stream
        run_id, sep, _ = name.partition("/")
        if active is not None and run_id != active:
            checks.pop(active).finish()  # a run's case streams are all read (they sort together)
            active = None
        if not sep:  # a run's own stream: read again with its digests (its seal is decoded from that read)
            stream.payloads.clear()
            check = _RunCheck(store, name, store.read_stream(name), chains=False)
            if check.ready:
                check.replay_heads({r: h for r in check.replays if (h := store.head(r)) is not None})
                checks[name] = check
            else:
                check.finish()
            runs.append(check.audit)
            known.add(name)
            continue
        if name.startswith(PREFIX):
            problems.extend(_deep_check(store, stream))
        elif run_id in known:
            if run_id in checks:
                checks[run_id].case(stream)
                active = run_id
            deep.setdefault(run_id, []).extend(_deep_check(store, stream))
        elif not name.startswith(NOT_RUNS):
            orphans.add(run_id)
    for check in checks.values():
        check.finish()
    owned: set[str] = set()
    for audit in runs:  # a broken chain is named under the run it belongs to
        replays = set(sealed_replays(audit.sealed)) if audit.sealed else set()
        mine = [p for p in broken
                if p.stream == audit.run_id or p.stream.startswith(audit.run_id + "/") or p.stream in replays]
        audit.problems[:0] = [f"{p.stream} #{p.seq}: {p.problem}" for p in mine]
        owned.update(p.stream for p in mine)
    chain_problems = [f"{p.stream} #{p.seq}: {p.problem}" for p in broken if p.stream not in owned]
    # runs chain to one another: a run that names a previous seal no run holds any more
    # follows a run that was deleted whole
    seals = {a.sealed.digest for a in runs if a.sealed is not None}
    chained: list[str] = []
    for audit in runs:
        previous = audit.started.previous_seal if audit.started is not None else ""
        if previous and previous not in seals and previous not in _pushed_from_elsewhere(store, audit):
            chained.append(f"{audit.run_id}: the run sealed before it ({previous}) is gone from the log "
                           "(deleted whole)")
    orphan_ids = sorted(orphans)
    orphaned = [f"{run_id}/…: case streams of a run that no longer exists (its run stream is gone)"
                for run_id in orphan_ids]
    for audit in runs:  # the runs' case streams were deep-checked in the same read
        audit.problems.extend(deep.get(audit.run_id, []))
    return LogAudit(runs, orphan_ids, streams, events, chain_problems + chained + orphaned + problems,
                    integrity=integrity())


def _integrity(store: EventStore) -> Callable[[], str]:
    """The backend's integrity check (``"ok"`` when sound), started now — beside the read of
    the log where the backend can (:meth:`~oloproof.store.sqlite.SQLiteStore.integrity_check_started`)
    — and given when called."""
    started = getattr(store, "integrity_check_started", None)
    if started is not None:
        return cast(Callable[[], str], started())
    check = getattr(store, "integrity_check", None)
    return check if check is not None else (lambda: "ok")


def _pushed_from_elsewhere(store: EventStore, audit: RunAudit) -> set[str]:
    """The predecessors a run pushed in from another log followed there (its ``push/<run_id>``
    records, for this very seal): seals this log need not hold."""
    from oloproof.events import RunPushed
    from oloproof.store.log import EventLog

    sealed = audit.sealed
    if sealed is None:
        return set()
    return {e.previous_seal for e in EventLog(store).read(f"push/{audit.run_id}")
            if isinstance(e, RunPushed) and e.digest == sealed.digest}


def require_intact(store: EventStore, run_id: str,
                   visit: Callable[[CheckedStream], None] | None = None) -> RunAudit:
    """The audit of a run a reader is about to report on; a broken run is refused (exit 2).
    ``visit``: as :func:`audit_run`'s (the reader judges the run in the same read)."""
    from oloproof.app.runs import load_run

    if "/" in run_id or not run_id or store.head(run_id) is None:
        load_run(store, run_id)  # an unknown run id: the usage error that names the known runs
    audit = audit_run(store, run_id, visit=visit)
    if audit.problems:
        shown = "; ".join(audit.problems[:3]) + (f"; … {len(audit.problems) - 3} more"
                                                 if len(audit.problems) > 3 else "")
        raise CorruptLogError(f"run {run_id} fails its audit, so it is not reported: {shown} "
                              "(see 'oloproof audit verify')")
    return audit

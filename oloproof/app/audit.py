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

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from oloproof.errors import CorruptLogError
from oloproof.events import CODEC, RunFinished, RunSealed, RunStarted, seal_digest, stored_tag
from oloproof.replay.engine import PREFIX
from oloproof.store.base import EventStore
from oloproof.store.log import EventLog

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


def seal(store: EventStore, run_id: str, *, case_count: int, replay_streams: set[str],
         clock: Callable[[], str]) -> RunSealed:
    """Append the seal of ``run_id`` (the run's cases and ``replay_streams`` as they are now)."""
    run_stream = store.head(run_id)
    if run_stream is None:
        raise CorruptLogError(f"run stream {run_id!r} is missing")
    heads = _heads(store, run_id, replay_streams)
    cut = len(run_id) + 1
    cases = {s[cut:]: [n, d[:HEAD]] for s, (n, d) in sorted(heads.items()) if not s.startswith(PREFIX)}
    event = RunSealed(
        run_id=run_id, finished_at=clock(), case_count=case_count, cases_committed=len(cases), cases=cases,
        replays={s[len(PREFIX):]: [n, d[:HEAD]] for s, (n, d) in sorted(heads.items()) if s.startswith(PREFIX)},
        scheme=store.scheme, digest=seal_digest(run_id, run_stream, heads, store.key),
    )
    EventLog(store).append(run_id, run_stream[0], [event])
    return event


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


def audit_run(store: EventStore, run_id: str, *, chains: bool = True) -> RunAudit:
    """Check one run: the chains of its streams, and its streams against its seal
    (``chains=False`` when the caller has verified every chain of the log already).
    :func:`audit_log` also decodes every payload against its type column."""
    stored = store.read_stream(run_id)
    audit = RunAudit(run_id, None)
    problems = audit.problems
    if store.key_problem:
        problems.append(store.key_problem)
        return audit
    if not stored:
        problems.append(f"run stream {run_id!r} is missing")
        return audit
    events = []
    for ev in stored:
        try:
            events.append(CODEC.decode(ev.payload))
        except Exception as e:  # noqa: BLE001 - any decode failure is reported as an audit problem
            problems.append(f"{run_id} #{ev.seq}: payload cannot be decoded ({_short(e)})")
            return audit
    if not isinstance(events[0], RunStarted):
        problems.append(f"{run_id} #0: the run stream does not begin with run_started")
        return audit
    audit.started = events[0]
    for ev, event in zip(stored, events):
        tag = written_tag(ev, event)
        if ev.type != tag:
            problems.append(f"{run_id} #{ev.seq}: stored type {ev.type!r} disagrees with its payload ({tag!r})")
    seal_at = next((i for i, e in enumerate(events) if isinstance(e, RunSealed)), None)
    if seal_at is not None:
        audit.sealed = cast(RunSealed, events[seal_at])  # seal_at is where a RunSealed is
        if seal_at != len(events) - 1:
            problems.append(f"{run_id}: events appended after the seal: {len(events) - 1 - seal_at}")
    else:
        audit.legacy_finished = next((e for e in events if isinstance(e, RunFinished)), None)
    # the chains: the run's own stream, its cases, and (sealed) the replays it relied on
    replays = sealed_replays(audit.sealed) if audit.sealed else []
    if chains:
        report = store.verify(run_id + "/")
        report.problems += store.verify(streams=[run_id, *replays]).problems
        for p in report.problems:
            problems.append(f"{p.stream} #{p.seq}: {p.problem}")
    heads = _heads(store, run_id, replays)
    cases = {s for s in heads if not s.startswith(PREFIX)}
    audit.committed = len(cases)
    if audit.sealed is None:
        if audit.legacy_finished is not None and len(cases) < audit.legacy_finished.cases_committed:
            problems.append(f"{run_id}: case streams missing: {len(cases)} left of the "
                            f"{audit.legacy_finished.cases_committed} committed when it finished")
        return audit
    s = audit.sealed
    if s.scheme != store.scheme:
        problems.append(f"{run_id}: sealed under {s.scheme}, but the log is chained with {store.scheme}")
    entries = sealed_streams(s)
    for name, (length, head) in entries.items():
        kind = "replay stream" if name.startswith(PREFIX) else "case stream"
        now = heads.get(name)
        if now is None:
            problems.append(f"{name}: {kind} missing (sealed with {length} events)")
        elif now[0] < length:
            problems.append(f"{name}: {kind} truncated: {now[0]} of the {length} sealed events left")
        elif now[0] > length:
            problems.append(f"{name}: events appended to the {kind} after the seal: {now[0] - length}")
        elif now[1][:HEAD] != head:
            problems.append(f"{name}: {kind} rewritten since the seal (its chain head changed)")
    for name in sorted(cases - set(entries)):
        problems.append(f"{name}: case stream added after the seal")
    if not problems:
        assert seal_at is not None
        run_head = (seal_at, stored[seal_at - 1].digest)
        if seal_digest(run_id, run_head, heads, store.key) != s.digest:
            problems.append(f"{run_id}: the seal's digest does not match the streams it seals")
    return audit


def current_digest(store: EventStore, audit: RunAudit) -> str | None:
    """The seal digest recomputed from the log as it is now (for ``--expect``)."""
    if audit.sealed is None:
        return None
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


def _deep_check(store: EventStore, prefixes: list[str], streams: list[str]) -> list[str]:
    """Every event decodes, and its stored type column matches its payload's tag."""
    out: list[str] = []
    sources = [store.read_prefix(p) for p in prefixes] + [iter(store.read_stream(s)) for s in streams]
    for source in sources:
        for ev in source:
            try:
                tag = written_tag(ev, CODEC.decode(ev.payload))
            except Exception as e:  # noqa: BLE001 - any decode failure is reported as an audit problem
                out.append(f"{ev.stream} #{ev.seq}: payload cannot be decoded ({_short(e)})")
                continue
            if tag != ev.type:
                out.append(f"{ev.stream} #{ev.seq}: stored type {ev.type!r} disagrees with its payload ({tag!r})")
    return out


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

    @property
    def ok(self) -> bool:
        """No problem anywhere and every run complete: an incomplete run fails the audit too."""
        return not self.problems and all(not r.problems and r.complete for r in self.runs)


def audit_log(store: EventStore) -> LogAudit:
    """Every run against its seal, every chain, every payload."""
    if store.key_problem:  # without the right key no chain can be checked: say that once
        return LogAudit([], [], 0, 0, [store.key_problem])
    report = store.verify()  # every chain, once
    problems: list[str] = []
    names = store.stream_names("")
    run_ids = [n for n in names if "/" not in n]
    runs = [audit_run(store, run_id, chains=False) for run_id in run_ids]
    owned: set[str] = set()
    for audit in runs:  # a broken chain is named under the run it belongs to
        replays = set(sealed_replays(audit.sealed)) if audit.sealed else set()
        mine = [p for p in report.problems
                if p.stream == audit.run_id or p.stream.startswith(audit.run_id + "/") or p.stream in replays]
        audit.problems[:0] = [f"{p.stream} #{p.seq}: {p.problem}" for p in mine]
        owned.update(p.stream for p in mine)
    problems += [f"{p.stream} #{p.seq}: {p.problem}" for p in report.problems if p.stream not in owned]
    # runs chain to one another: a run that names a previous seal no run holds any more
    # follows a run that was deleted whole
    seals = {a.sealed.digest for a in runs if a.sealed is not None}
    for audit in runs:
        previous = audit.started.previous_seal if audit.started is not None else ""
        if previous and previous not in seals and previous not in _pushed_from_elsewhere(store, audit):
            problems.append(f"{audit.run_id}: the run sealed before it ({previous}) is gone from the log "
                            "(deleted whole)")
    known = set(run_ids)
    not_runs = (PREFIX, "pin/", "attribution/", "push/", "judgement/")  # streams of their own, no run's
    orphans = sorted({n.split("/", 1)[0] for n in names if "/" in n and not n.startswith(not_runs)} - known)
    for run_id in orphans:
        problems.append(f"{run_id}/…: case streams of a run that no longer exists (its run stream is gone)")
    problems.extend(_deep_check(store, [PREFIX], []))
    # the runs' own and case streams are deep-checked here once
    for audit in runs:
        audit.problems.extend(_deep_check(store, [audit.run_id + "/"], []))
    return LogAudit(runs, orphans, report.streams, report.events, problems)


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


def require_intact(store: EventStore, run_id: str) -> RunAudit:
    """The audit of a run a reader is about to report on; a broken run is refused (exit 2)."""
    from oloproof.app.runs import load_run

    if "/" in run_id or not run_id or store.head(run_id) is None:
        load_run(store, run_id)  # an unknown run id: the usage error that names the known runs
    audit = audit_run(store, run_id)
    if audit.problems:
        shown = "; ".join(audit.problems[:3]) + (f"; … {len(audit.problems) - 3} more"
                                                 if len(audit.problems) > 3 else "")
        raise CorruptLogError(f"run {run_id} fails its audit, so it is not reported: {shown} "
                              "(see 'oloproof audit verify')")
    return audit

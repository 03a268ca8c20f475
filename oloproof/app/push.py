"""``oloproof push``: sealed runs copied from one log into another (SPEC §18.7).

A run is copied with every stream its seal covers — its own stream, its case streams and the
replay streams its cases were judged with — event by event, in ONE transaction of the target.
The target computes each event's chain digest itself, as it does for any append; before that
transaction commits, the run is audited in the target and its seal digest recomputed from
the target's chains: it must equal the digest the source sealed (the one ``oloproof run``
printed and CI kept). Anything else rolls the copy back.

* Idempotent: a stream the target already holds with the same length and chain head is not
  copied again; a run the target holds whole is "already there".
* Refused: an unsealed run (crashed, killed, still running, or finished before seals
  existed: nothing would prove what arrived), a run that fails its audit in the source, and a
  run whose streams the target holds with other content (another run under the same id, or a
  tampered log): nothing of it is copied.
* The projection rows of the run (``runs``, ``cases``, ``evaluations``) are copied as the
  source holds them: they are derived from the very events copied, and a rebuild in the target
  derives the same.

Pins (``pin/…``) and attributions are the source log's own and are not copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from oloproof.app.audit import RunAudit, audit_run, current_digest, sealed_replays
from oloproof.app.refs import require_ref
from oloproof.errors import CorruptLogError, UsageError
from oloproof.store.base import EventStore, StreamAppend


class PushConflict(CorruptLogError):
    """The target holds a run's stream with other content: another run under the same id, or
    a log tampered with (exit 2, nothing of the run copied)."""


@dataclass
class Pushed:
    """One run pushed: its id, its seal digest (verified in the target), what was copied
    (streams and events; 0 when the target held it all already) and notes for the operator."""

    run_id: str
    digest: str
    cases: int
    streams: int = 0
    events: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def copied(self) -> bool:
        """Something was copied (False: the target held the whole run already)."""
        return self.streams > 0


@dataclass
class Pushable:
    """A sealed, intact run of the source log, ready to copy: its id, its audit there and the
    streams its seal covers (its own, its cases', the replays')."""

    run_id: str
    audit: RunAudit
    streams: list[str]


def prepare(source: EventStore, refs: list[str]) -> list[Pushable]:
    """The runs ``refs`` names in ``source`` (run ids, ``latest``, ``pin:NAME``, ``version:V``),
    each checked before anything is written anywhere.

    Raises:
        UsageError: a reference that names no run, or a run that is not sealed.
        CorruptLogError: a run that fails its audit in the source.
    """
    out = []
    for run_id in dict.fromkeys(require_ref(source, ref) for ref in refs):
        audit = audit_run(source, run_id)
        if audit.problems:
            shown = "; ".join(audit.problems[:3]) + (f"; … {len(audit.problems) - 3} more"
                                                     if len(audit.problems) > 3 else "")
            raise CorruptLogError(f"run {run_id} fails its audit in the source log, so it is not pushed: {shown}")
        if audit.sealed is None:
            why = ("finished before seals existed, so nothing could prove that it arrived whole"
                   if audit.legacy_finished is not None else
                   f"not sealed: {audit.committed} of {audit.expected} cases committed (crashed, killed or still "
                   f"running; finish it with 'oloproof run --resume {run_id}')")
            raise UsageError(f"run {run_id} is {why}; only a sealed run can be pushed")
        streams = [run_id, *source.stream_names(run_id + "/"), *sealed_replays(audit.sealed)]
        out.append(Pushable(run_id, audit, streams))
    return out


def push_runs(source: EventStore, target: EventStore, runs: list[Pushable]) -> list[Pushed]:
    """Copy the runs :func:`prepare` gave into ``target``, each in one transaction verified
    against its seal (see the module docstring).

    Raises:
        UsageError: the two logs are chained differently (one keyed, one not).
        PushConflict: the target holds one of a run's streams with other content.
    """
    if source.scheme != target.scheme:
        raise UsageError(f"the source log is chained with {source.scheme} and the target with {target.scheme}: "
                         "a run's digests could not be the same in both (set OLOPROOF_LOG_KEY for both or neither)")
    return [push_run(source, target, run) for run in runs]


def push_run(source: EventStore, target: EventStore, run: Pushable) -> Pushed:
    """Copy one prepared run (see :func:`push_runs`)."""
    sealed = run.audit.sealed
    assert sealed is not None  # prepare() refuses an unsealed run
    run_id, digest = run.run_id, sealed.digest
    pushed = Pushed(run_id, digest, cases=len(sealed.cases))
    appends: list[StreamAppend] = []
    for stream in run.streams:
        events = source.read_stream(stream)
        have = target.head(stream)
        if have is not None:
            if have == (len(events), events[-1].digest):
                continue  # the same stream, chain and all: a replay two runs share, or a push again
            raise PushConflict(
                f"run {run_id}: the target already holds stream {stream!r} with other content ({have[0]} events, "
                f"head {have[1][:16]}…; the source has {len(events)}, head {events[-1].digest[:16]}…): another run "
                "under the same id, or a tampered log. Nothing of the run was copied")
        appends.append(StreamAppend(stream, 0, [e.payload for e in events], [e.type for e in events]))
    if not appends:
        _check_arrival(target, run_id, digest)
        return pushed
    rows = {table: [tuple(r.values()) for r in source.projection(table, run_id=run_id)]
            for table in ("runs", "cases", "evaluations")}
    previous = run.audit.started.previous_seal if run.audit.started is not None else ""
    with target.transaction():
        target.commit(appends, rows)
        _check_arrival(target, run_id, digest)  # inside: a run that arrived otherwise rolls back
        if previous and not _holds_seal(target, previous):
            # the run it followed lives in the source log: recorded, so that the target's audit
            # knows the predecessor is elsewhere rather than deleted
            _record_push(target, run_id, digest, previous)
            pushed.notes.append(f"run {run_id} follows a run sealed {previous} in the source log, which the target "
                                f"does not hold (recorded under push/{run_id}: its audit knows it lives elsewhere)")
    pushed.streams = len(appends)
    pushed.events = sum(len(a.payloads) for a in appends)
    _refresh_search(target)
    return pushed


def _record_push(target: EventStore, run_id: str, digest: str, previous: str) -> None:
    from datetime import UTC, datetime

    from oloproof.events import RunPushed
    from oloproof.store.log import EventLog

    EventLog(target).append_at_end(f"push/{run_id}", RunPushed(run_id, digest, previous,
                                                                datetime.now(UTC).isoformat()))


def _check_arrival(target: EventStore, run_id: str, digest: str) -> None:
    """The run in the target: intact, sealed, and its seal digest recomputed there equal to
    ``digest`` (the source's)."""
    audit = audit_run(target, run_id)
    if audit.problems or audit.sealed is None:
        raise CorruptLogError(f"run {run_id} did not arrive whole in the target: "
                              f"{'; '.join(audit.problems[:3]) or 'no seal'}; nothing of it was kept")
    now = current_digest(target, audit)
    if now != digest or audit.sealed.digest != digest:
        raise CorruptLogError(f"run {run_id}: the seal digest recomputed in the target ({now}) is not the one the "
                              f"source sealed ({digest}); nothing of it was kept")


def _holds_seal(store: EventStore, digest: str) -> bool:
    from oloproof.app.runs import load_run, run_headers

    return any((run := load_run(store, s.run_id).sealed) is not None and run.digest == digest
               for s in run_headers(store))


def _refresh_search(store: EventStore) -> None:
    from oloproof.app.runs import refresh_search

    refresh_search(store)


__all__ = ["PushConflict", "Pushable", "Pushed", "prepare", "push_run", "push_runs"]

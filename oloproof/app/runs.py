"""Stored runs: run headers, the cases they committed, run lists. Read-only queries."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from oloproof.app.seals import decode_run_events
from oloproof.errors import CorruptLogError, UsageError
from oloproof.events import CaseStarted, RunFinished, RunResumed, RunSealed, RunStarted
from oloproof.store.base import EventStore
from oloproof.store.log import EventLog
from oloproof.views import CaseView, fold_case


@dataclass
class StoredRun:
    """A run's own stream, decoded: its start, its seal (or pre-seal finish), its resumes and
    the stream's length. Its cases live in their own streams."""

    started: RunStarted
    finished: RunSealed | RunFinished | None  # the seal (or, before seals, run_finished)
    resumed: list[RunResumed]
    length: int  # events in the run's own stream

    @property
    def run_id(self) -> str:
        """The run's id (also its stream's name)."""
        return self.started.run_id

    @property
    def complete(self) -> bool:
        """Finished: sealed (or, in a log from before seals, run_finished). Whether the log
        still holds what the seal says is :func:`oloproof.app.audit.audit_run`'s question."""
        return self.finished is not None

    @property
    def sealed(self) -> RunSealed | None:
        """The run's seal; None for a run not finished, or finished before seals existed."""
        return self.finished if isinstance(self.finished, RunSealed) else None

    @property
    def system(self) -> str:
        """``<system name> <version>``, for display."""
        return f"{self.started.system_name} {self.started.system_version}"


def load_run(store: EventStore, run_id: str) -> StoredRun:
    """Read and decode run ``run_id``'s own stream.

    Raises:
        UsageError: not a run id, or no such run (the message names the latest known runs).
        CorruptLogError: the stream does not begin with ``run_started``.
    """
    if not run_id or "/" in run_id:
        raise UsageError(f"{run_id!r} is not a run id (see 'oloproof runs')")
    stored = store.read_stream(run_id)
    if not stored:
        known = [r.run_id for r in run_headers(store)]
        hint = f"; known runs: {', '.join(known[-5:])}" if known else "; the log has no runs yet"
        raise UsageError(f"no run {run_id!r} in the log{hint}")
    # the seal's lists of streams stay the JSON they are stored as (app.seals): a reader's
    # memory does not grow with the run
    events = decode_run_events(run_id, [e.payload for e in stored], [e.type for e in stored])
    if not isinstance(events[0], RunStarted):
        raise CorruptLogError(f"run stream {run_id!r} does not begin with run_started")
    finished = next((e for e in events if isinstance(e, RunSealed)), None) or \
        next((e for e in events if isinstance(e, RunFinished)), None)
    resumed = [e for e in events if isinstance(e, RunResumed)]
    return StoredRun(events[0], finished, resumed, len(stored))


def run_headers(store: EventStore) -> list[RunStarted]:
    """The ``run_started`` event of every run in the log, oldest first (read from the events:
    the ``runs`` table may lag behind a run in progress)."""
    out = []
    log = EventLog(store)
    for name in store.root_streams():
        event = log.first(name)
        if isinstance(event, RunStarted):
            out.append(event)
    return sorted(out, key=lambda r: (r.started_at, r.run_id))


def latest_run_id(store: EventStore) -> str:
    """The id of the newest run in the log (the last of :func:`run_headers`), finished or not.

    Raises:
        UsageError: the log has no runs yet.
    """
    runs = run_headers(store)
    if not runs:
        raise UsageError("the log has no runs yet; start one with 'oloproof run'")
    return runs[-1].run_id


def resolve_run(store: EventStore, run: str) -> str:
    """A run id, or ``latest``."""
    return latest_run_id(store) if run == "latest" else run


def iter_case_views(store: EventStore, run_id: str) -> Iterator[CaseView]:
    """Every committed case of a run, folded from its events (in stream order)."""
    for stream, events in EventLog(store).streams(run_id + "/"):
        yield fold_case(events, stream)


def iter_case_heads(store: EventStore, run_id: str) -> Iterator[CaseStarted]:
    """The ``case_started`` event of every committed case of a run, in stream order."""
    for stream, event in EventLog(store).heads(run_id + "/"):
        if not isinstance(event, CaseStarted):
            raise CorruptLogError(f"stream {stream!r}: a case stream must begin with case_started")
        yield event


def find_case_view(store: EventStore, run_id: str, case_id: str) -> CaseView | None:
    """A committed case as recorded (without its evidence), or ``None``."""
    stream = f"{run_id}/{case_id}"
    stored = store.read_stream(stream)
    if not stored:
        return None
    return fold_case(EventLog(store).decoded(stored), stream)


def case_view(store: EventStore, run_id: str, case_id: str) -> CaseView:
    """The committed case ``case_id`` of run ``run_id``, folded from its events.

    Raises:
        UsageError: no such committed case; for a case run as trials, the message names
            the trial ids (``c/1``, ``c/2`` …) to ask for instead.
    """
    view = find_case_view(store, run_id, case_id)
    if view is None:
        trials = store.stream_names(f"{run_id}/{case_id}/")
        if trials:  # a case of a run with trials: name them
            shown = ", ".join(name[len(run_id) + 1:] for name in trials[:5]) + (", …" if len(trials) > 5 else "")
            raise UsageError(f"run {run_id!r} ran case {case_id!r} as trials; name one of them: {shown}")
        raise UsageError(f"run {run_id!r} has no committed case {case_id!r}")
    return view


def list_runs(store: EventStore) -> list[dict]:
    """Runs with the cases committed so far, newest last (``oloproof runs --json``), read
    from the events. ``status``: complete (sealed) or incomplete; ``oloproof audit verify``
    checks that a complete run still holds what its seal says."""
    out = []
    for r in run_headers(store):
        run = load_run(store, r.run_id)
        out.append({
            "run_id": r.run_id, "system": r.system_name, "version": r.system_version,
            "started": r.started_at, "case_count": r.case_count,
            "cases_committed": store.count_streams(r.run_id + "/"),
            "status": "complete" if run.complete else "incomplete",
            "log_digest": run.sealed.digest if run.sealed else None,
            "partial": bool(r.selection),  # some of the suite's cases (run --case/-k/...)
        })
    return out


def append_event(store: EventStore, stream: str, event: Any, attempts: int = 20) -> None:
    """Append one event at the end of ``stream``, whatever another process appended there
    meanwhile (see :meth:`EventLog.append_at_end`)."""
    EventLog(store).append_at_end(stream, event, attempts)


def refresh_search(store: EventStore) -> None:
    """Catch the search index up with what was just written. It is a cache: a failure (a
    damaged index, a full disk) never fails the command that wrote; the next writer, or
    ``oloproof audit rebuild``, catches up."""
    from oloproof.errors import StoreError

    try:
        store.index_search()
    except StoreError:
        pass


def selection_text(selection: dict[str, Any] | None) -> str | None:
    """A partial run's choice in words (None: the whole suite)."""
    if not selection:
        return None
    parts = []
    if "case" in selection:
        parts.append("--case " + " ".join(selection["case"]))
    if "k" in selection:
        parts.append(f"-k {selection['k']}")
    if "last_failed" in selection:
        parts.append(f"--last-failed of {selection['last_failed']}")
    if "limit" in selection:
        parts.append(f"--limit {selection['limit']}")
    n = len(selection.get("ids", ()))
    return f"{n} source case{'s' if n != 1 else ''} chosen by {', '.join(parts)}"


def is_prefix_run(started: Any) -> bool:
    """Whether a run (its ``run_started``) ran the project's prefix cases."""
    evaluators = ((started.config or {}).get("oloproof") or {}).get("evaluators") or []
    return any(isinstance(e, dict) and e.get("type") == "prefix_action" for e in evaluators)


def resume_command(started: Any) -> str:
    """The command that finishes an interrupted run."""
    if (started.config or {}).get("imported"):  # an import is all or nothing: run it again
        files = " ".join((started.config["imported"].get("files") or [])[:3])
        return f"oloproof import otel {files}".rstrip() + " (an interrupted import is imported again, not resumed)"
    command = "oloproof prefix run" if is_prefix_run(started) else "oloproof run"
    return f"{command} --resume {started.run_id}"


def utc_now() -> str:
    """The wall clock, as the log stores times (ISO 8601, UTC)."""
    from datetime import datetime

    return datetime.now(UTC).isoformat(timespec="microseconds")

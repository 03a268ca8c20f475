"""``oloproof import otel``: OpenTelemetry traces stored as a run (issue 15).

The traces become one run like any other: ``run_started``, one case stream per agent
invocation (its steps, model usage, trajectory, output), sealed — so ``show``, ``view``,
``export``, ``audit verify``, ``eval`` (evaluators that need no ``expected``) and ``prefix
create`` work on it.

The files are streamed (:func:`oloproof.config.otlp.iter_traces`: only the traces still open
are held in memory) and every case is written as soon as it is mapped, all inside ONE
transaction of the log: a malformed span anywhere, or a process killed at any moment, leaves
the log exactly as it was (a located error, exit code 2), and readers see the run only once it
is sealed. Each case's events are decoded back, by the projector that derives its rows, before
they are written: nothing the log holds fails to read back.
"""

from __future__ import annotations

import gc
import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oloproof.config.limits import case_id_problem
from oloproof.config.otlp import ImportedCase, cases_of_trace, iter_traces
from oloproof.errors import CaseFileError
from oloproof.events import (
    CODEC,
    CaseFinished,
    CaseStarted,
    RunStarted,
    TrajectoryRecorded,
    canonical_json,
    case_fingerprint,
)
from oloproof.records import AGENT_TRAJECTORY_V1, validate_steps
from oloproof.store.base import EventStore, StoredEvent, StreamAppend
from oloproof.store.log import EventLog

#: cases written per transaction
BATCH = 500


@dataclass
class ImportOutcome:
    """An imported, sealed run: its id, system name and version, the cases written, the
    spans read, the spans no step was mapped from (``otel.unmapped_spans``) and the seal
    digest."""

    run_id: str
    system: str
    version: str
    cases: int
    spans: int
    unmapped: int
    digest: str


@dataclass
class _Mapped:
    case: ImportedCase
    where: str
    fingerprint: str
    payloads: list[bytes]
    types: list[str]


def _mapped(files: list[Path], run_id: str, spans: list[int]) -> Iterator[_Mapped]:
    """Every case of ``files``, checked, with its stream's encoded events for run ``run_id``
    (``spans[0]`` counts the spans read)."""
    seen: dict[str, str] = {}
    position = 0
    for trace in iter_traces(files):
        spans[0] += len(trace)
        where = trace[0].where
        for case in cases_of_trace(trace):
            problem = case_id_problem(case.case_id)
            if problem is not None:
                raise CaseFileError(f"{where}: case {case.case_id!r}: {problem}")
            if case.case_id in seen:
                raise CaseFileError(f"{where}: case {case.case_id!r} appears twice (also at {seen[case.case_id]})")
            seen[case.case_id] = where
            try:
                validate_steps(case.steps, case.case_id)
                fingerprint = case_fingerprint(case.input, None, {})
                payloads, types = _case_events(run_id, position, case, fingerprint)
            except Exception as e:  # noqa: BLE001 - a trajectory the spans cannot make: located
                raise CaseFileError(f"{where}: case {case.case_id!r}: "
                                    f"{str(e).removeprefix(f'case {case.case_id!r}: ')[:300]}") from None
            position += 1
            yield _Mapped(case, where, fingerprint, payloads, types)


def _case_events(run_id: str, position: int, case: ImportedCase, fingerprint: str) -> tuple[list[bytes], list[str]]:
    started = CaseStarted(run_id, case.case_id, position, fingerprint, case.input, None, {}, case.metadata)
    events: list[Any] = [started, *case.steps, *case.constraints, *case.usage,
                         TrajectoryRecorded(case.terminal_status, case.truncated, case.step_limit, len(case.steps)),
                         CaseFinished(case.output if isinstance(case.output, dict) or case.output is None
                                      else {"output": case.output})]
    return CODEC.pack(events)


def import_traces(store: EventStore, files: list[Path], *, system: str | None = None,
                  version: str | None = None, clock: Callable[[], str]) -> ImportOutcome:
    """Store the traces of ``files`` as one sealed run (see the module docstring)."""
    collecting = gc.isenabled()
    gc.disable()  # millions of short-lived containers and no cycles: collections would cost a third
    try:
        with store.transaction():
            outcome = _import(store, files, system, version, clock)
        from oloproof.app.runs import refresh_search

        refresh_search(store)  # after the import's transaction: a damaged index never undoes it
        return outcome
    finally:
        if collecting:
            gc.enable()


def _import(store: EventStore, files: list[Path], system: str | None, version: str | None,
            clock: Callable[[], str]) -> ImportOutcome:
    from oloproof.app.audit import seal
    from oloproof.app.projections import RunProjector, run_row
    from oloproof.app.run import latest_seal, new_run_id

    run_id = new_run_id()
    spans = [0]
    mapped = _mapped(files, run_id, spans)
    first = next(mapped, None)
    if first is None:
        raise CaseFileError(f"{', '.join(map(str, files))}: no spans")
    service = first.case.service
    name = system or str(service.get("service.name") or "imported")
    version = version or str(service.get("service.version") or "imported")
    labels = ", ".join(p.name for p in files)
    config = {"oloproof": {"system": {"name": name, "version": version, "callable": "oloproof:imported",
                                      "records": [AGENT_TRAJECTORY_V1]},
                           "cases": labels[:200], "evaluators": []},
              "release": None, "imported": {"format": "otlp-json", "files": [str(p) for p in files]}}

    def started(count: int, digest: str) -> RunStarted:
        return RunStarted(run_id=run_id, system_name=name, system_version=version, records=[AGENT_TRAJECTORY_V1],
                          config=config, config_digest=hashlib.sha256(canonical_json(config)).hexdigest(),
                          cases_path=labels[:200], suite_digest=digest, case_count=count,
                          started_at=when, previous_seal=previous)

    when, previous = clock(), latest_seal(store)
    projector = RunProjector(store)  # the derived rows, as a run writes them
    header = started(0, "")
    (payload,), (tag,) = CODEC.pack([header])
    projector(run_id, [StoredEvent(run_id, 0, tag, payload, "")])
    suite = hashlib.sha256()
    count = unmapped = 0
    appends: list[StreamAppend] = []
    rows: dict[str, list[tuple]] = {}
    for m in itertools.chain([first], mapped):
        stream = f"{run_id}/{m.case.case_id}"
        try:  # decodes every event: what the log will hold reads back
            more = projector(stream, [StoredEvent(stream, i, t, p, "") for i, (t, p)
                                      in enumerate(zip(m.types, m.payloads))])
        except Exception as e:  # noqa: BLE001 - events the spans cannot make: located, nothing written
            raise CaseFileError(f"{m.where}: case {m.case.case_id!r}: {str(e)[:300]}") from None
        for table, extra in more.items():
            rows.setdefault(table, []).extend(extra)
        appends.append(StreamAppend(stream, 0, m.payloads, m.types))
        suite.update(f"{m.case.case_id}\x00{m.fingerprint}\n".encode())
        count += 1
        unmapped += len(m.case.metadata.get("otel.unmapped_spans", ()))
        if len(appends) >= BATCH:
            store.commit(appends, rows)
            appends, rows = [], {}
    store.commit(appends, rows)
    run = started(count, suite.hexdigest())
    EventLog(store).append(run_id, 0, [run])
    sealed = seal(store, run_id, case_count=count, replay_streams=set(), clock=clock)
    store.commit((), {"runs": [run_row(run, sealed)]})
    return ImportOutcome(run_id, name, version, count, spans[0], unmapped, sealed.digest)

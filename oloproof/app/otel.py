"""``oloproof import otel``: OpenTelemetry traces stored as a run (issue 15).

Every file is read and mapped first (:mod:`oloproof.config.otlp`), so a malformed one stops
the import with a located error and exit 2 before anything is written. The traces then become
one run like any other: ``run_started``, one case stream per agent invocation (its steps,
model usage, trajectory, output), sealed — so ``show``, ``view``, ``export``, ``audit
verify``, ``eval`` (evaluators that need no ``expected``) and ``prefix create`` work on it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from oloproof.config.limits import case_id_problem
from oloproof.config.otlp import ImportedCase, Span, cases_of_trace, iter_spans
from oloproof.errors import CaseFileError
from oloproof.events import (
    CaseFinished,
    CaseStarted,
    RunStarted,
    TrajectoryRecorded,
    case_fingerprint,
    decode_many,
    encode,
    tag_of,
)
from oloproof.records import AGENT_TRAJECTORY_V1, validate_steps
from oloproof.store.base import EventStore, StreamAppend

#: cases written per transaction
BATCH = 500


@dataclass
class ImportOutcome:
    run_id: str
    system: str
    version: str
    cases: int
    spans: int
    unmapped: int
    digest: str


def read_traces(files: list[Path], run_id: str = "check") -> tuple[list[tuple[ImportedCase, str, list[bytes], list[str]]], int]:
    """Every file validated and mapped: the cases, in trace order of first appearance, each with
    its stream's encoded events for run ``run_id`` (decoded once, so that what the log will hold
    reads back), and the span count. Spans of one trace may be spread over lines and files."""
    traces: dict[str, list[Span]] = {}
    count = 0
    for path in files:
        for span in iter_spans(path):
            traces.setdefault(span.trace_id, []).append(span)
            count += 1
    cases: list[tuple[ImportedCase, str, list[bytes], list[str]]] = []
    seen: dict[str, str] = {}
    for spans in traces.values():
        for case in cases_of_trace(spans):
            where = spans[0].where
            problem = case_id_problem(case.case_id)
            if problem is not None:
                raise CaseFileError(f"{where}: case {case.case_id!r}: {problem}")
            if case.case_id in seen:
                raise CaseFileError(f"{where}: case {case.case_id!r} appears twice (also at {seen[case.case_id]})")
            seen[case.case_id] = where
            try:
                validate_steps(case.steps, case.case_id)
                fingerprint = case_fingerprint(case.input, None, {})
                payloads, types = _case_events(run_id, len(cases), case, fingerprint)
                decode_many(payloads)  # what the log will hold reads back: nothing half-usable is written
            except Exception as e:  # noqa: BLE001 - a trajectory the spans cannot make: located
                raise CaseFileError(f"{where}: case {case.case_id!r}: {str(e)[:300]}") from None
            cases.append((case, fingerprint, payloads, types))
    if not cases:
        raise CaseFileError(f"{', '.join(map(str, files))}: no spans")
    return cases, count


def _case_events(run_id: str, position: int, case: ImportedCase, fingerprint: str) -> tuple[list[bytes], list[str]]:
    started = CaseStarted(run_id, case.case_id, position, fingerprint, case.input, None, {}, case.metadata)
    events: list[Any] = [started, *case.steps, *case.constraints, *case.usage,
                         TrajectoryRecorded(case.terminal_status, case.truncated, case.step_limit, len(case.steps)),
                         CaseFinished(case.output if isinstance(case.output, dict) or case.output is None
                                      else {"output": case.output})]
    return [encode(e) for e in events], [tag_of(e) for e in events]


def import_traces(store: EventStore, files: list[Path], *, system: str | None = None,
                  version: str | None = None, clock: Callable[[], str]) -> ImportOutcome:
    """Store the traces of ``files`` as one sealed run (see the module docstring)."""
    from oloproof.app.audit import seal
    from oloproof.app.projections import RunProjector
    from oloproof.app.run import latest_seal, new_run_id

    run_id = new_run_id()
    read, spans = read_traces(files, run_id)
    cases = [c for c, _, _, _ in read]
    service = cases[0].service
    name = system or str(service.get("service.name") or "imported")
    version = version or str(service.get("service.version") or "imported")
    digest = hashlib.sha256()
    for c, fingerprint, _, _ in read:
        digest.update(f"{c.case_id}\x00{fingerprint}\n".encode())
    labels = ", ".join(p.name for p in files)
    config = {"oloproof": {"system": {"name": name, "version": version, "callable": "oloproof:imported",
                                      "records": [AGENT_TRAJECTORY_V1]},
                           "cases": labels[:200], "evaluators": []},
              "release": None, "imported": {"format": "otlp-json", "files": [str(p) for p in files]}}
    started = RunStarted(run_id=run_id, system_name=name, system_version=version, records=[AGENT_TRAJECTORY_V1],
                         config=config, config_digest=hashlib.sha256(encode(config)).hexdigest(),
                         cases_path=labels[:200], suite_digest=digest.hexdigest(), case_count=len(cases),
                         started_at=clock(), previous_seal=latest_seal(store))
    store.commit([StreamAppend(run_id, 0, [encode(started)], [tag_of(started)])])
    for start in range(0, len(read), BATCH):
        store.commit([StreamAppend(f"{run_id}/{case.case_id}", 0, payloads, types)
                      for case, _, payloads, types in read[start:start + BATCH]])
    sealed = seal(store, run_id, case_count=len(cases), replay_streams=set(), clock=clock)
    projector = RunProjector(store)  # the derived rows, as a run writes them
    rows: dict[str, list[tuple]] = {}
    for stream in [run_id, *(f"{run_id}/{c.case_id}" for c in cases)]:
        for table, more in projector(stream, store.read_stream(stream)).items():
            rows.setdefault(table, []).extend(more)
    store.commit((), rows)
    unmapped = sum(len(c.metadata.get("otel.unmapped_spans", [])) for c in cases)
    return ImportOutcome(run_id, name, version, len(cases), spans, unmapped, sealed.digest)

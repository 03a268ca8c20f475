"""``oloproof import otel``: OpenTelemetry traces stored as a run (issue 15).

The traces become one run like any other: ``run_started``, one case stream per agent
invocation (its steps, model usage, trajectory, output), sealed — so ``show``, ``view``,
``export``, ``audit verify``, ``eval`` (evaluators that need no ``expected``, unless the cases
are joined to a cases file) and ``prefix create`` work on it.

The files are streamed (:func:`oloproof.config.otlp.iter_traces`: only the traces still open
are held in memory) and every case is written as soon as it is mapped, all inside ONE
transaction of the log: a malformed span anywhere, or a process killed at any moment, leaves
the log exactly as it was (a located error, exit code 2), and readers see the run only once it
is sealed. Each case's events are decoded back, by the projector that derives its rows, before
they are written: nothing the log holds fails to read back.

With a cases file (``--cases``, issue 25) each imported case whose key — its id, or the value of
a span attribute (``--case-key``) — names a case line takes that line's ``expected``,
``initial_state``, ``metadata``, ``tags`` and ``fault``, and its fingerprint is computed from
them as a run's case's is; the file is validated as a suite's cases are, before anything is
written. An environment state on the agent span (``oloproof.state``, as ``export`` writes it) is
recorded as the case's ``environment_state/v1``.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oloproof.config.cases import CaseFile, SuiteCase
from oloproof.config.limits import case_id_problem
from oloproof.config.otlp import ImportedCase, Span, iter_cases, iter_traces, json_or_text
from oloproof.errors import CaseFileError
from oloproof.events import (
    CODEC,
    CaseFinished,
    CaseStarted,
    EnvironmentStateRecorded,
    RunStarted,
    TrajectoryRecorded,
    canonical_json,
    case_fingerprint,
)
from oloproof.records import AGENT_TRAJECTORY_V1, validate_steps
from oloproof.store.base import EventStore, StoredEvent, StreamAppend
from oloproof.store.log import EventLog
from oloproof.views import NO_STATE

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
    #: with a cases file: the cases joined to a line, the cases no line matched (no expected),
    #: and the ids of the lines no case matched
    joined: int = 0
    unjoined: int = 0
    unused: tuple[str, ...] = ()


@dataclass
class _Mapped:
    case: ImportedCase
    where: str
    fingerprint: str
    payloads: list[bytes]
    types: list[str]
    tags: tuple[str, ...] = ()


def _mapped(files: list[Path], run_id: str, spans: list[int], join: CaseJoin | None = None) -> Iterator[_Mapped]:
    """Every case of ``files``, checked, with its stream's encoded events for run ``run_id``
    (``spans[0]`` counts the spans read), joined to its case line when ``join`` has one."""
    seen: dict[str, str] = {}
    position = 0
    for trace, cases in iter_cases(iter_traces(files), spans):  # an ADK conversation's turns: one case
        where = trace[0].where
        for case in cases:
            root = _agent_span(case, trace)
            found = join.match(case, root, trace, where) if join is not None else None
            line = found[0] if found is not None else None
            if found is not None:
                case = dataclasses.replace(case, case_id=found[1], metadata={**case.metadata, **found[0].metadata})
            problem = case_id_problem(case.case_id)
            if problem is not None:
                raise CaseFileError(f"{where}: case {case.case_id!r}: {problem}")
            if case.case_id in seen:
                raise CaseFileError(f"{where}: case {case.case_id!r} appears twice (also at {seen[case.case_id]})")
            seen[case.case_id] = where
            try:
                validate_steps(case.steps, case.case_id)
                if line is None:
                    fingerprint = case_fingerprint(case.input, None, {})
                    started = CaseStarted(run_id, case.case_id, position, fingerprint, case.input, None, {},
                                          case.metadata)
                else:  # as a run's case: its question is the input with the line's state, expected, fault
                    fingerprint = case_fingerprint(case.input, line.initial_state, line.expected, line.fault)
                    started = CaseStarted(run_id, case.case_id, position, fingerprint, case.input, line.initial_state,
                                          line.expected, case.metadata, fault=line.fault,
                                          tags=list(line.tags) or None)
                payloads, types = _case_events(started, case, _state_of(root))
            except Exception as e:  # noqa: BLE001 - a trajectory the spans cannot make: located
                raise CaseFileError(f"{where}: case {case.case_id!r}: "
                                    f"{str(e).removeprefix(f'case {case.case_id!r}: ')[:300]}") from None
            position += 1
            yield _Mapped(case, where, fingerprint, payloads, types, line.tags if line is not None else ())


def _case_events(started: CaseStarted, case: ImportedCase, state: Any = NO_STATE) -> tuple[list[bytes], list[str]]:
    events: list[Any] = [started, *case.steps, *case.constraints, *case.usage,
                         TrajectoryRecorded(case.terminal_status, case.truncated, case.step_limit, len(case.steps)),
                         *([EnvironmentStateRecorded(state)] if state is not NO_STATE else []),
                         CaseFinished(case.output if isinstance(case.output, dict) or case.output is None
                                      else {"output": case.output}, case.error, case.error_kind)]
    return CODEC.pack(events)


def import_traces(store: EventStore, files: list[Path], *, system: str | None = None,
                  version: str | None = None, clock: Callable[[], str], join: CaseJoin | None = None) -> ImportOutcome:
    """Store the traces of ``files`` as one sealed run (see the module docstring); ``join``:
    the case lines to join (:func:`read_cases`, read and checked before this is called)."""
    collecting = gc.isenabled()
    gc.disable()  # millions of short-lived containers and no cycles: collections would cost a third
    try:
        with store.transaction():
            outcome = _import(store, files, system, version, clock, join)
        return outcome  # searchable from the first search on (it catches the index up)
    finally:
        if collecting:
            gc.enable()


def _import(store: EventStore, files: list[Path], system: str | None, version: str | None,
            clock: Callable[[], str], join: CaseJoin | None = None) -> ImportOutcome:
    from oloproof.app.audit import seal
    from oloproof.app.projections import RunProjector, run_row
    from oloproof.app.run import latest_seal, new_run_id

    run_id = new_run_id()
    spans = [0]
    mapped = _mapped(files, run_id, spans, join)
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
        tags = "\x00" + "\x00".join(m.tags) if m.tags else ""  # as a suite's digest counts them
        suite.update(f"{m.case.case_id}\x00{m.fingerprint}{tags}\n".encode())
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
    if join is None:
        return ImportOutcome(run_id, name, version, count, spans[0], unmapped, sealed.digest)
    return ImportOutcome(run_id, name, version, count, spans[0], unmapped, sealed.digest, len(join.used),
                         count - len(join.used), tuple(i for i in join.lines if i not in join.used_lines))


# ---- joining a cases file (``import otel --cases``) --------------------------------------------

@dataclass
class CaseJoin:
    """The lines of a cases file, by id, and where each joined case was read (by its id once
    joined). ``key``: the span attribute whose value names a case's line (None: the imported
    case's own id)."""

    path: str
    key: str | None
    lines: dict[str, SuiteCase]
    used: dict[str, str] = field(default_factory=dict)
    used_lines: set[str] = field(default_factory=set)

    def match(self, case: ImportedCase, root: Span | None, trace: list[Span], where: str
              ) -> tuple[SuiteCase, str] | None:
        """The line ``case`` joins and the case's id once joined, or None. A line that an earlier
        case with the same trial and transform already joined is refused (located at both): one
        line's expectation describes one run of its case. (A case Oloproof exported names its
        line, trial and transform: the trials and derived cases of a run each join their line.)"""
        own = root.attributes if root is not None and "oloproof.case_id" in root.attributes else {}
        if self.key is None:
            value: str | None = own.get("oloproof.case.id") if isinstance(own.get("oloproof.case.id"), str) \
                else case.case_id
        else:
            value = _key_value(self.key, root, trace)
        line = self.lines.get(value) if value is not None else None
        if line is None:
            return None
        variant = [str(own[k]) for k in ("oloproof.case.trial", "oloproof.case.transform") if own.get(k)]
        joined = "-".join([line.id, *variant]) if self.key is not None else case.case_id
        by = f"case id {value!r}" if self.key is None else f"{self.key} = {value!r}"
        if joined in self.used:
            raise CaseFileError(f"{self.path}:{line.line}: case {line.id!r}: matched by two traces ({by}): "
                                f"{self.used[joined]} and {where}; a case line joins one trace — give each "
                                "trace its own key, or import them apart")
        self.used[joined] = where
        self.used_lines.add(line.id)
        return line, joined


def read_cases(path: Path, key: str | None = None) -> CaseJoin:
    """A cases file read for joining, validated as a suite's is (the same located errors,
    exit code 2: a bad line, a duplicate id, no cases)."""
    cases = CaseFile(path)
    cases.validate()
    return CaseJoin(cases.label, key, {c.id: c for c in cases})


def _key_value(key: str, root: Span | None, trace: list[Span]) -> str | None:
    """The value of attribute ``key`` for a case: on its agent span, else on the first span of
    its trace (in start order) that has it, else on the resource; text or a whole number."""
    spans = ([root] if root is not None else []) + sorted(trace, key=lambda s: (s.start, s.span_id))
    for attrs in [s.attributes for s in spans] + [(root or trace[0]).resource]:
        value = attrs.get(key)
        if isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def _agent_span(case: ImportedCase, trace: list[Span]) -> Span | None:
    """The span a case was read from: its invocation (``otel.span_id``), or for a case Oloproof
    exported, the span naming it (``oloproof.case_id``); None for a trace with no agent span."""
    span_id = case.metadata.get("otel.span_id")
    found = next((s for s in trace if s.span_id == span_id), None) if isinstance(span_id, str) else None
    if found is not None:
        return found
    for s in trace:  # an exported case's metadata may hold the span id of the trace it was imported from
        own = s.attributes.get("oloproof.case_id")
        if isinstance(own, str) and own.replace("/", "-").replace("~", "-") == case.case_id:
            return s
    return None


def _state_of(root: Span | None) -> Any:
    """The environment state the agent span carries (``oloproof.state``, JSON), or NO_STATE."""
    if root is None or "oloproof.state" not in root.attributes:
        return NO_STATE
    return json_or_text(root.attributes["oloproof.state"])

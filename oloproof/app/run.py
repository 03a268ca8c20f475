"""Running a suite: the driver, the only writer of the log.

The driver walks the suite in order and keeps an executor busy with jobs — record a case,
replay a recorded one — taking their results in whatever order they finish:

1. a recorded case is committed at once, its whole stream in one transaction (a crash loses
   at most the cases in flight, never a committed one, never half a case); cases that finish
   together under a concurrent executor share that transaction, each of them whole;
2. the replays its fault evaluators need are looked up by key; those not stored yet run as one
   replay job on the same executor, and are committed together when it returns;
3. a derived case ``<source>~<transform>`` waits, if need be, for its source to be recorded;
4. the case is judged by the one evaluation path
   (:meth:`~oloproof.evaluate.engine.SuiteEvaluation.evaluate`) and aggregated; only counts
   (and the numbers quantiles need) stay in memory, whatever the suite's size.

Results do not depend on the executor or on the order cases finish in. ``--resume`` walks the
same suite: a case already committed is read back and goes on from step 2.

With ``trials: k`` (or ``--trials k``) > 1 every case runs k times, each trial its own
recording from the case's ``initial_state`` (its own sandbox reset) and its own stream
``<run_id>/<case_id>/<t>`` (``CaseStarted.trial`` = t; the fingerprint is the case's). The
trials of a case — and of its derived cases, trial t paired with its source's trial t — are
one cluster; ``--resume`` records the trials not yet committed, and only those.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from oloproof.app.audit import seal
from oloproof.app.jobs import JUDGE_JOB, JudgeArgs
from oloproof.app.judging import Judging, judgement_appends
from oloproof.app.project import (
    LoadedSystem,
    Project,
    changed_inputs,
    check_tool_names,
    input_files,
    uncalled_tools,
)
from oloproof.app.projections import case_rows, evaluation_key, run_row
from oloproof.app.retries import Retries
from oloproof.app.runs import is_prefix_run, load_run, resume_command, selection_text, utc_now
from oloproof.config.cases import SuiteCase, SuiteInfo
from oloproof.config.limits import trial_case_id
from oloproof.errors import Interrupted, OloproofError, UsageError
from oloproof.evaluate.engine import Accumulator, CaseResult, Summary
from oloproof.events import (
    Durability,
    RunResumed,
    RunSealed,
    RunStarted,
    canonical_json,
)
from oloproof.recorder.executors import Executor, SerialExecutor
from oloproof.recorder.jobs import Done, Job
from oloproof.recorder.record import CASE_JOB, CaseArgs, contained_exit
from oloproof.recorder.registry import REGISTRY, ExecutorFlags, executor_kind
from oloproof.replay.cache import ReplayCache
from oloproof.replay.engine import PREFIX, REPLAY_JOB, ReplayArgs
from oloproof.replay.plan import Needed
from oloproof.store.base import EventStore, StreamAppend
from oloproof.store.log import EventLog
from oloproof.views import NO_REPLAYS, CaseView, Replays, fold_case, fold_replay

Progress = Callable[[int, int], None]


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass
class RunOutcome:
    run_id: str
    system_name: str
    system_version: str
    summary: Summary
    errors: int
    resumed: bool
    executor: str
    error_messages: list[str] = field(default_factory=list)
    log_digest: str = ""  # the seal's digest: keep it to check the run later (audit verify --expect)
    notes: list[str] = field(default_factory=list)
    #: tools the configuration or the cases name that the system does not declare (it declares
    #: none, so they could not be checked) and that no case called: a typo, most likely
    warnings: list[str] = field(default_factory=list)
    #: cases run again after an infrastructure error (``retries:``), in suite order
    retried: list[Any] = field(default_factory=list)


class _Rows:
    """Projection rows waiting for their batch (they follow the case commits)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {"cases": [], "evaluations": []}
        self.flushed = time.monotonic()

    def add(self, rows: dict[str, list[tuple]]) -> None:
        for table, table_rows in rows.items():
            self.rows[table].extend(table_rows)

    def due(self) -> bool:
        return len(self.rows["cases"]) >= 1000 or time.monotonic() - self.flushed > 2.0

    def take(self) -> dict[str, list[tuple]]:
        rows, self.rows = self.rows, {"cases": [], "evaluations": []}
        self.flushed = time.monotonic()
        return rows


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C becomes :class:`~oloproof.errors.Interrupted`, which no case records as its own
    error (a system that raises ``KeyboardInterrupt`` itself only errors its case)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        raise Interrupted()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Driver:
    def __init__(self, project: Project, system: LoadedSystem, store: EventStore, executor: Executor,
                 *, keep_cases: bool, progress: Progress | None, on_case: Callable[[CaseResult], None] | None,
                 clock: Callable[[], str], outputs: Sequence[str | Path] = ()):
        self.project, self.system, self.store, self.executor = project, system, store, executor
        self.log = EventLog(store)
        # what the run writes is no input of its system: its log (a store on disk has a path)
        # and the files the caller names (--json)
        path = getattr(store, "path", None)
        self.outputs = [*outputs, *([path] if path else [])]
        self.suite = project.suite
        self.specs = [(s.tool, s.fault) for s in self.suite.fault_specs]
        self.timeout = project.config.timeout
        self.keep_cases = keep_cases
        self.progress = progress
        self.on_case = on_case
        self.clock = clock
        self.replays = ReplayCache(store, system.name, system.version, system.code_digest)
        self.replay_streams: set[str] = set()  # every replay stream the run's cases were judged with
        self.key = evaluation_key(project.config_digest, system.version)
        self.rows = _Rows()
        self.errors = 0
        self.messages: list[str] = []
        self.judged = 0
        self.total = 0
        self.run_id = ""
        self.acc: Accumulator | None = None
        self._job_ids = 0
        # metamorphic pairs: recorded sources kept until their derived cases are judged
        self.transforms = len(project.config.metamorphic.transforms) if project.config.metamorphic else 0
        self.sources: dict[str, list[Any]] = {}  # source id -> [view, derived cases still to judge]
        self.waiting: dict[str, list[tuple[CaseView, Replays]]] = {}
        # cases that need no other evidence are judged where they ran, when that is another
        # process: the driver then only commits and counts (see oloproof.app.jobs)
        self.judge_remotely = executor.remote and not self.specs and not (self.transforms and self.suite.needs_pairs) \
            and not self.suite.judges
        self.config = canonical_json(project.stored_config)
        #: the run held for this process while it writes it (SQLiteStore.claim_run)
        self.held = contextlib.ExitStack()
        #: the run's model judges (oloproof.app.judging): None when the suite has none
        self.judging: Judging | None = None
        #: named tools that could not be checked (the system declares none): those called so far
        self.watch: set[str] = set()
        self.called: set[str] = set()
        #: ``retries:`` (oloproof.app.retries): None when the configuration retries nothing
        self.retries = None if project.config.retries is None else Retries(
            project.config.retries.max, list(project.config.retries.on), self.suite, self.log, self._job,
            lambda: self.run_id)

    # ---- the run's own stream ------------------------------------------------------------

    def start(self, info: SuiteInfo, durability: Durability) -> str:
        run_id = new_run_id()
        self.held.enter_context(self.store.claim_run(run_id, "recorded"))
        p, s = self.project, self.system
        started = RunStarted(
            run_id=run_id, system_name=s.name, system_version=s.version, records=list(s.factory.records),
            config=p.stored_config, config_digest=p.config_digest, cases_path=p.cases_label,
            # the case streams the run will hold: every trial of every case
            suite_digest=info.digest, case_count=p.case_count(info) * p.trials, started_at=self.clock(),
            durability=durability, code_digest=s.code_digest, previous_seal=latest_seal(self.store),
            surface=s.factory.surface or {},
            files=input_files(p, s.factory.target, self.outputs),
            selection=p.selection or {},
        )
        self.log.append(run_id, 0, [started], {"runs": [run_row(started, None)]})
        return run_id

    def resume(self, run_id: str, info: SuiteInfo) -> None:
        # before anything is read: a second `run --resume` of one run is refused here, by name
        self.held.enter_context(self.store.claim_run(run_id, "resumed"))
        stored = load_run(self.store, run_id)
        s: RunStarted = stored.started
        if stored.complete:
            raise UsageError(f"run {s.run_id!r} is already complete; nothing to resume")
        if is_prefix_run(s) != self.project.is_prefix:
            raise UsageError(f"run {s.run_id!r} is {'a prefix' if is_prefix_run(s) else 'an end-to-end'} run: "
                             f"finish it with '{resume_command(s)}'")
        problems = []
        if (s.system_name, s.system_version) != (self.system.name, self.system.version):
            problems.append(f"system is {self.system.name} {self.system.version}, the run used "
                            f"{s.system_name} {s.system_version}")
        if s.suite_digest != info.digest:
            problems.append(f"the cases in {self.project.cases_label} changed since the run started")
        if s.config_digest != self.project.config_digest:
            problems.append("oloproof.yaml or release.yaml changed since the run started")
        changed = changed_inputs(s.files, self.project, self.system.factory.target, self.outputs) if s.files else []
        if changed:  # a run mixing two behaviours of its system would be sealed as one
            shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
            problems.append(f"the system's code or data changed since the run started: {shown}")
        elif s.code_digest and s.code_digest != self.system.code_digest:
            problems.append("the system's code (the project's Python files) changed since the run started")
        if problems:
            raise UsageError(f"cannot resume run {s.run_id!r}: " + "; ".join(problems)
                             + ". Start a new run instead.")
        self.log.append(run_id, stored.length, [RunResumed(run_id, self.clock())])

    def finish(self) -> RunSealed:
        """Seal the run: the streams it wrote and relied on, and the digest over them."""
        stored = load_run(self.store, self.run_id)
        self.store.commit((), self.rows.take())
        sealed = seal(self.store, self.run_id, case_count=self.total, replay_streams=self.replay_streams,
                      clock=self.clock)
        # the search index is left behind: the first search catches it up (store.search)
        self.store.commit((), {"runs": [run_row(stored.started, sealed)]})
        return sealed

    # ---- the work ----------------------------------------------------------------------

    def _job(self, kind: Any, arg: Any, tag: Any = None, units: int = 1) -> None:
        self._job_ids += 1
        self.executor.submit(Job(self._job_ids, kind, arg, self.timeout, tag, units))

    def _work(self, resuming: bool) -> Iterator[tuple[int, SuiteCase, int | None] | None]:
        """The suite's cases in order (each case's trials in turn); on resume, a committed case
        (trial) is taken up where it is (``None`` is yielded for it, so that the loop checks
        the executor's capacity again)."""
        k = self.project.trials
        for position, sc in enumerate(self.project.suite_cases):
            for trial in range(1, k + 1) if k > 1 else (None,):
                if resuming:
                    stream = f"{self.run_id}/{trial_case_id(sc.id, trial)}"
                    stored = self.store.read_stream(stream)
                    if stored:
                        self._recorded(fold_case(self.log.decoded(stored), stream), [e.payload for e in stored])
                        yield None
                        continue
                yield position, sc, trial

    def loop(self, resuming: bool) -> None:
        executor = self.executor
        work = self._work(resuming)
        exhausted = False
        end = object()
        while True:
            judging = self.judging  # cases waiting for a judge hold a place too: memory stays flat
            while not exhausted and executor.outstanding + (judging.outstanding if judging else 0) < executor.capacity:
                item = next(work, end)
                if item is end:
                    exhausted = True
                    break
                if item is not None:
                    position, sc, trial = cast("tuple[int, SuiteCase, int | None]", item)
                    args = CaseArgs(self.run_id, position, sc, trial)
                    if self.judge_remotely:
                        self._job(JUDGE_JOB, JudgeArgs(args, self.project.config_digest, self.key))
                    else:
                        self._job(CASE_JOB, args)
            if executor.outstanding == 0:
                if judging is not None and judging.outstanding:
                    self._judged_in(judging.finished(0.25))
                    continue
                if exhausted:
                    break
                continue
            # a bounded wait, so that Ctrl-C is handled promptly whatever the executor waits on
            self._handle(executor.poll(0.25 if judging is None or not judging.outstanding else 0.02))
            if judging is not None and judging.outstanding:
                self._judged_in(judging.finished())
            if self.rows.due():
                self.store.commit((), self.rows.take())
        if self.waiting:  # a derived case whose source never came: a bug, not a case's fault
            raise RuntimeError(f"derived cases waited for sources that were never recorded: {sorted(self.waiting)}")

    def _handle(self, dones: list[Done]) -> None:
        """Finished jobs. Recorded cases are committed first — each case whole; cases that
        finished together (concurrent executors) share one transaction, so the driver, the
        single writer, keeps up with many workers — then judged."""
        if self.retries is not None:  # an attempt to run again is not committed (app.retries)
            dones = [d for d in dones if self.retries.take(d)]
        appends = []
        for done in dones:
            if isinstance(done.error, OloproofError):  # the user's (a factory that fails later)
                raise done.error
            if done.error is not None:
                raise RuntimeError(f"an Oloproof job failed: {done.error}") from done.error
            if done.job.kind is not REPLAY_JOB:
                rec = done.result.record if done.job.kind is JUDGE_JOB else done.result
                appends.append(StreamAppend(f"{self.run_id}/{rec.case_id}", 0, rec.payloads, rec.types))
        if appends:
            self.store.commit(appends)
        for done in dones:
            kind = done.job.kind
            if kind is REPLAY_JOB:
                self._replayed(done.job.tag, done.result)
                continue
            judged = done.result if kind is JUDGE_JOB else None
            rec = judged.record if judged is not None else done.result
            if judged is not None and judged.case_row is not None and judged.result is not None:
                self._judged(judged, done.job.arg.case)
                if self.watch - self.called:  # judged elsewhere: read its calls from its events
                    stream = f"{self.run_id}/{rec.case_id}"
                    self._saw(fold_case(self.log.unpack(stream, rec.payloads), stream))
            else:
                stream = f"{self.run_id}/{rec.case_id}"
                self._recorded(fold_case(self.log.unpack(stream, rec.payloads), stream), rec.payloads)

    def _saw(self, view: CaseView) -> None:
        """The tools a case called, of those :attr:`watch` waits for."""
        if view.trajectory is not None:
            self.called.update(self.watch.intersection(view.trajectory.tool_names))

    def _judged(self, judged: Any, args: CaseArgs) -> None:
        """A case judged where it ran: count it (its events are committed)."""
        row = tuple(judged.case_row)
        case_id, error = row[1], row[6]
        if error is not None and not error.startswith("stale: "):  # a stale prefix case (recorder.prefix)
            self.errors += 1
            if len(self.messages) < 5:
                self.messages.append(error if error.startswith("case ") else f"case {case_id!r}: {error}")
        result = judged.case_result(args.position)
        if args.trial is not None:
            result = dataclasses.replace(result, trial=args.trial)
        rows: dict[str, list[tuple]] = {"cases": [row], "evaluations": []}
        if judged.result is not None:
            rows["evaluations"].append((self.run_id, self.key, case_id, args.position, judged.result))
        self._count(result, rows)

    def _recorded(self, view: CaseView, payloads: list[bytes]) -> None:
        """A case is committed: run (or find) its replays, then judge it."""
        if self.retries is not None and view.attempts:
            self.retries.saw(view)
        if self.watch:
            self._saw(view)
        if view.error is not None and view.error_kind != "stale":  # a stale prefix is no error of the system
            self.errors += 1
            if len(self.messages) < 5:
                self.messages.append(view.error if view.error.startswith("case ")
                                     else f"case {view.case_id!r}: {view.error}")
        if self.transforms and self.suite.needs_pairs and not view.is_derived:
            self.sources[view.case_id] = [view, self.transforms]
            for derived, replays in self.waiting.pop(view.case_id, []):
                self._judge(derived, replays)
        if not self.specs:
            self._ready(view, NO_REPLAYS)
            return
        missing: list[Needed] = []
        found: dict[str, list[bytes]] = {}
        replays = self.replays.collect(view, self.suite.fault_specs, missing=missing, found=found)
        self.replay_streams.update(PREFIX + key for key in found)
        if not missing:
            self._ready(view, replays)
            return
        self._job(REPLAY_JOB, ReplayArgs(f"{self.run_id}/{view.case_id}", payloads, self.specs, found,
                                         self.system.code_digest), tag=view, units=2 * len(self.specs))

    def _replayed(self, view: CaseView, result: Any) -> None:
        new = list({s.stream: s for s in result.streams if self.store.stream_length(s.stream) == 0}.values())
        if new:  # the case's replays, in one transaction
            self.store.commit([StreamAppend(s.stream, 0, s.payloads, s.types) for s in new])
        extra = {s.stream[len(PREFIX):]: fold_replay(self.log.unpack(s.stream, s.payloads), s.stream)
                 for s in result.streams}
        self.replay_streams.update(s.stream for s in result.streams)
        self._ready(view, self.replays.collect(view, self.suite.fault_specs, extra=extra))

    def _ready(self, view: CaseView, replays: Replays) -> None:
        if self.suite.needs_pairs and view.is_derived and self.transforms:
            if view.cluster not in self.sources:
                self.waiting.setdefault(view.cluster, []).append((view, replays))
                return
        self._judge(view, replays)

    def _judge(self, view: CaseView, replays: Replays) -> None:
        source = None
        if self.suite.needs_pairs and view.is_derived:
            entry = self.sources.get(view.cluster)
            if entry is not None:
                source = entry[0]
                entry[1] -= 1
                if entry[1] <= 0:
                    del self.sources[view.cluster]
        if self.judging is not None:  # its model judges first: their judgements are its evidence
            requests = self.suite.pending_judgements(view, replays=replays, pair_source=source)
            if requests:
                answers = self.judging.ask(view.with_evidence(replays=replays, pair_source=source), requests,
                                           (view, replays, source))
                if answers is None:  # asked: judged when they answer (_judged_in)
                    return
                view = self._add_judgements(view, answers)
        result = self.suite.evaluate(view, replays=replays, pair_source=source)
        self._count(result, case_rows(self.run_id, view, result, self.suite.criteria, self.key))

    def _judged_in(self, answered: list[tuple[Any, list[Any]]]) -> None:
        """Cases whose model judges answered: their judgements appended, then judged."""
        for (view, replays, source), events in answered:
            view = self._add_judgements(view, events)
            result = self.suite.evaluate(view, replays=replays, pair_source=source)
            self._count(result, case_rows(self.run_id, view, result, self.suite.criteria, self.key))

    def _add_judgements(self, view: CaseView, events: list[Any]) -> CaseView:
        """Append a case's judgements to its stream (and new answers to the cache) in one
        transaction; the view with them."""
        from oloproof.errors import DuplicateEventError

        appends = judgement_appends(self.store, f"{self.run_id}/{view.case_id}", events)
        try:
            self.store.commit(appends)
        except DuplicateEventError:  # another run cached one of these answers meanwhile: the case's own
            self.store.commit(appends[:1])
        import msgspec

        return msgspec.structs.replace(view, judgements=view.judgements + tuple(events))

    def _count(self, result: CaseResult, rows: dict[str, list[tuple]]) -> None:
        assert self.acc is not None
        self.acc.add(result)
        self.rows.add(rows)
        if self.on_case is not None:
            self.on_case(result)
        self.judged += 1
        if self.progress:
            self.progress(self.judged, self.total)


def run_suite(project: Project, system: LoadedSystem, store: EventStore, info: SuiteInfo, *,
              executor: Executor | None = None, resume: str | None = None, durability: Durability = "full",
              progress: Progress | None = None, keep_cases: bool = True,
              on_case: Callable[[CaseResult], None] | None = None,
              clock: Callable[[], str] = utc_now, trials: int | None = None,
              outputs: Sequence[str | Path] = ()) -> RunOutcome:
    """Run (or, with ``resume``, finish) a run of ``project``'s suite on ``executor``.

    With ``keep_cases=False`` the outcome's summary has no per-case list and memory does not
    grow with the suite; ``on_case`` receives each case's result as it is judged (in the
    order cases finish). ``trials`` (``--trials``) overrides ``trials:`` of the configuration;
    a resumed run keeps its own. ``outputs`` are files the run writes besides its log (its
    ``--json``): never counted among what its system reads (``RunStarted.files``)."""
    executor = executor or SerialExecutor()
    _set_trials(project, store, resume, trials)
    if resume is not None:  # a partial run resumes with the cases it chose
        project.selection = load_run(store, resume).started.selection or None
    system.factory.check_slots(executor.slots_per_process)
    # a tool the configuration or a case names that the system does not have: exit 2
    unchecked = check_tool_names(project, info, system)
    driver = _Driver(project, system, store, executor, keep_cases=keep_cases, progress=progress,
                     on_case=on_case, clock=clock, outputs=outputs)
    driver.watch = {n.tool for n in unchecked}
    if project.suite.judges:  # a provider's variables are read here: a missing one stops the run unwritten
        from oloproof.app.judging import judge_concurrency

        base = tuple(project.evaluators_path)
        driver.judging = Judging(project.suite, store, judge_concurrency(executor), where={
            e.criterion: project.locator.where(base + (i, "judge")) for i, e in project.suite.judges})
    # what start-up built (modules, config, the system) lives as long as the run: keep the
    # garbage collector from walking it again after every few thousand allocations
    gc.freeze()
    stopped = True
    notes = code_changed(store, system, project) if resume is None else []
    try:
        # workers start before anything is written: a cluster that cannot be reached, or a
        # system that cannot be shared, leaves the log untouched. The run's configuration goes
        # with the factory, for the cases its workers judge (oloproof.app.jobs).
        executor.start(dataclasses.replace(system.factory, context=driver.config), system.slot)
        if resume is None:
            driver.run_id = driver.start(info, durability)
        else:
            driver.run_id = resume
            driver.resume(resume, info)
        k = project.trials
        driver.total = project.case_count(info) * k
        # the trials of a case, with its derived cases' trials, are one cluster
        driver.acc = Accumulator(project.suite, keep_cases=keep_cases,
                                 multi=None if driver.transforms or k > 1 else set(),
                                 cluster_size=k * (1 + driver.transforms) if driver.transforms or k > 1 else None,
                                 trials=k)
        if progress:
            progress(0, driver.total)
        # cases that run in this process cannot end it: os._exit errors the case instead
        with contextlib.nullcontext() if executor.remote else contained_exit():
            driver.loop(resuming=resume is not None)
        stopped = False
    except (Interrupted, KeyboardInterrupt) as e:
        setattr(e, "run_id", driver.run_id)  # noqa: B010 - what to resume: read by the CLI
        raise
    finally:
        gc.unfreeze()  # a long-lived process (a notebook, a test) collects them again
        executor.close(cancel=stopped)
        if driver.judging is not None:
            driver.judging.close(cancel=stopped)
        if stopped:  # keep what was judged: the projections catch up on resume anyway
            with contextlib.suppress(Exception):
                store.commit((), driver.rows.take())
            driver.held.close()
    try:
        sealed = driver.finish()
    finally:
        driver.held.close()  # the run is sealed (or not): another process may take it up
    if driver.judging is not None and (driver.judging.calls or driver.judging.cached):
        notes.append(f"model judges: {driver.judging.calls} judgement(s) asked, {driver.judging.cached} read from "
                     "the cache (an unchanged output is never judged twice)")
    evidence = {}
    if project.suite.regression_criteria:
        from oloproof.app.evidence import regression_evidence

        evidence = regression_evidence(store, load_run(store, driver.run_id), project.suite,
                                       driver.acc.tracked_verdicts)
    summary = driver.acc.summary(expected=driver.total, complete=True, regressions=evidence,
                                 partial=selection_text(project.selection))
    return RunOutcome(driver.run_id, system.name, system.version, summary, driver.errors,
                      resume is not None, executor.describe(), driver.messages, sealed.digest, notes,
                      # a partial run calls only some tools: no warning from it
                      [] if project.selection else uncalled_tools(unchecked, driver.called),
                      _retried(driver))


def _retried(driver: _Driver) -> list[Any]:
    """The cases the run retried (this process, or before a resume), in suite order."""
    if driver.retries is None or not driver.retries.retried:
        return []
    from oloproof.app.selection import source_of

    order = {sc.id: i for i, sc in enumerate(driver.project.suite_cases)}
    return sorted(driver.retries.retried.values(), key=lambda r: (order.get(source_of(r.case_id), 0), r.case_id))


def _set_trials(project: Project, store: EventStore, resume: str | None, trials: int | None) -> None:
    """The run's trials per case: ``--trials``, else the configuration's; a resumed run keeps
    the trials it started with (``--trials`` must then agree)."""
    if resume is not None:
        from oloproof.app.project import stored_trials

        started = load_run(store, resume).started
        recorded = stored_trials(started.config)
        if trials is not None and trials != recorded:
            raise UsageError(f"--trials {trials}: run {resume!r} runs each case {recorded} "
                             f"{'time' if recorded == 1 else 'times'}; resume it without --trials")
        trials = recorded
    if trials is not None and trials != project.trials:
        project.set_trials(trials)


def latest_seal(store: EventStore) -> str:
    """The seal digest of the latest sealed run of the log ("" for none)."""
    from oloproof.app.runs import run_headers

    for started in reversed(run_headers(store)):
        sealed = load_run(store, started.run_id).sealed
        if sealed is not None:
            return sealed.digest
    return ""


def code_changed(store: EventStore, system: LoadedSystem, project: Project | None = None) -> list[str]:
    """A note when the system's code changed since its last run while its version did not,
    naming the files that changed when the last run recorded them (``RunStarted.files``)."""
    from oloproof.app.runs import run_headers

    same = [r for r in run_headers(store)
            if (r.system_name, r.system_version) == (system.name, system.version) and r.code_digest]
    if not same or same[-1].code_digest == system.code_digest:
        return []
    which = ""
    if project is not None and same[-1].files:
        try:
            changed = [f for f in changed_inputs(same[-1].files, project, system.factory.target)
                       if f.partition(" ")[0].endswith(".py")]
        except Exception:  # noqa: BLE001 - a note: never the reason a run does not start
            changed = []
        if changed:
            which = " (" + ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "") + ")"
    return [f"the code of {system.name} {system.version} changed since run {same[-1].run_id}{which} while its "
            "version did not: its fault replays run again for this code (bump `version` to tell the runs apart)"]


def make_executor(*, concurrency: int | None = None, workers: int | None = None, executor: str | None = None,
                  scheduler: str | None = None) -> Executor:
    """The executor the command line asks for (SPEC §17): ``--executor NAME`` (a kind of
    :mod:`oloproof.recorder.registry`: ``serial``, ``dask`` or a registered one), else the flags
    pick one — ``--scheduler tcp://HOST:PORT`` (an existing Dask cluster), ``--workers N``
    (processes), ``--concurrency N`` with N > 1 (in-process), else serial. The kind chosen
    refuses the flags it does not take (``--executor dask --workers N``: a LocalCluster)."""
    flags = ExecutorFlags(concurrency=concurrency, workers=workers, scheduler=scheduler)
    if executor is not None:
        kind = executor_kind(executor)
    else:
        kind = REGISTRY["dask" if scheduler is not None else "processes" if workers is not None
                        else "concurrent" if (concurrency or 1) > 1 else "serial"]
    return kind.make(flags)


__all__ = ["RunOutcome", "interruptible", "make_executor", "run_suite"]

"""A system's runs over time (SPEC §18.8): ``oloproof history``, ``oloproof flaky`` and the
trend page of ``oloproof view --history``.

Every number comes from the events, through the one evaluation path: each sealed run is
judged once, after its audit, under the rules it ran with (:func:`~oloproof.app.evidence.
judged_run`, as ``gate`` and ``diff`` judge it) — no derived table is read — and only what the
trend needs is kept: each criterion's rate interval, and the verdicts of the run the next one
is compared with. A log of many runs costs one evaluation per run, never one per pair.

* **History.** For each sealed run of the system, oldest first: version, code digest and
  each criterion's rate and exact interval; beside it McNemar's exact test on the paired cases
  against the run before it (:func:`oloproof.evaluate.compare.flips`, the test and pairing of
  ``oloproof diff``). The run before is the latest earlier sealed run of the same kind (a prefix
  run is compared with a prefix run) and the same trials a case (paired trial by trial) that is
  not partial: a partial run (``run --case/-k/--limit/--last-failed``) is shown, marked, and
  compared on the cases it ran, but is never the run another is compared with.
  Runs that are not sealed are left out and counted; a run that fails its audit (or cannot be
  judged here: an evaluator plugin missing) is left out and named with why.
* **Flaky cases.** A case (a trial ``c/2`` counts as ``c``) whose verdict on a criterion is
  ``pass`` in some observations and ``fail`` in others, among the runs (and their trials) with
  the same fingerprint, system version and code digest — and the same configuration of that
  criterion's evaluator, so that a changed rule is not taken for noise. Each with its counts.
  ``oloproof diff`` (and ``view --compare``) mark a flipped case that is known to be flaky.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from oloproof.app.evidence import judged_run
from oloproof.app.refs import trials_of
from oloproof.app.runs import StoredRun, is_prefix_run, load_run, run_headers
from oloproof.config.limits import split_trial
from oloproof.config.locate import did_you_mean
from oloproof.errors import CorruptLogError, InputError, UsageError
from oloproof.evaluate.compare import Flips, flips, pairing
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary
from oloproof.events import canonical_json
from oloproof.stats.intervals import RateInterval
from oloproof.store.base import EventStore

#: the eighths of a block a sparkline draws a rate with, 0 % (▁) to 100 % (█)
BLOCKS = "▁▂▃▄▅▆▇█"
#: a sparkline's mark for a run with no rate to draw: a partial run, or nothing observed
NO_POINT = "·"


def spark_char(rate: float | None) -> str:
    """One run's point of a sparkline: the rate on a fixed 0–100 % scale (never stretched to
    the runs' own range, which would make noise look like a cliff); :data:`NO_POINT` without one."""
    if rate is None:
        return NO_POINT
    return BLOCKS[min(len(BLOCKS) - 1, max(0, round(rate * (len(BLOCKS) - 1))))]


# ---- what is kept of a judged run ----------------------------------------------------------

@dataclass
class LeftOut:
    """Runs of the system left out: not sealed (still running, or stopped), or failing their
    audit (with the problem)."""

    unsealed: list[str] = field(default_factory=list)
    broken: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Comparison:
    """A run against the run before it: that run's id, the flips of each criterion both
    judged, and why there is no test (``note``) when there is none."""

    base: str | None
    flips: dict[str, Flips] = field(default_factory=dict)
    note: str | None = None

    @property
    def paired(self) -> int:
        """Cases paired with the run before (same id and fingerprint), on any criterion."""
        return max((f.paired for f in self.flips.values()), default=0)


@dataclass
class RunPoint:
    """One sealed run of the history: the run, whether it is partial, its criteria's rate
    intervals (in its own suite's order) and its comparison with the run before."""

    run: StoredRun
    partial: bool
    criteria: dict[str, RateInterval]
    comparison: Comparison
    cases: int = 0

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id


def criterion_keys(suite: SuiteEvaluation) -> list[str]:
    """Per criterion, a digest of the configuration of the evaluator that judges it: two runs
    whose verdicts differ under different rules are no evidence of noise."""
    out = []
    for e in suite.evaluators:
        config: Any = getattr(e, "config", None)
        dumped = config.model_dump(mode="json") if hasattr(config, "model_dump") else repr(config)
        described = canonical_json({"type": getattr(e, "type_name", ""), "config": dumped})
        out.append(hashlib.sha256(described).hexdigest()[:16])
    return out


@dataclass
class FlakyCase:
    """A case whose verdict on a criterion differed between observations (runs and trials)
    with the same fingerprint, version, code digest and criterion configuration."""

    case_id: str
    criterion: str
    fingerprint: str
    version: str
    code_digest: str
    passed: int
    failed: int
    missing: int
    excluded: int
    #: the runs where it passed, and where it failed (each once, oldest first)
    passed_in: list[str]
    failed_in: list[str]

    @property
    def observations(self) -> int:
        """Observations of the case on the criterion (runs × trials), whatever the verdict."""
        return self.passed + self.failed + self.missing + self.excluded


class FlakyTally:
    """Counts each case's verdicts per criterion across judged runs, grouped by (case id
    without its trial, fingerprint, version, code digest, criterion, criterion configuration);
    :meth:`flaky` lists the groups that both passed and failed."""

    def __init__(self) -> None:
        #: group -> [passed, failed, missing, excluded, runs passed in, runs failed in]
        self.groups: dict[tuple[str, ...], list[Any]] = {}
        self.runs: list[str] = []

    def add(self, run: StoredRun, suite: SuiteEvaluation, cases: Iterable[CaseResult]) -> None:
        """Count one judged run's case results."""
        index = len(self.runs)
        self.runs.append(run.run_id)
        s = run.started
        keys = criterion_keys(suite)
        slot = {"pass": 0, "fail": 1, "missing": 2, "excluded": 3}
        for c in cases:
            case_id = split_trial(c.case_id)[0]
            for i, criterion in enumerate(suite.criteria):
                verdict = c.verdicts[i][0]
                key = (case_id, c.fingerprint, s.system_version, s.code_digest, criterion, keys[i])
                group = self.groups.get(key)
                if group is None:
                    group = self.groups[key] = [0, 0, 0, 0, [], []]
                group[slot[verdict]] += 1
                if verdict in ("pass", "fail"):
                    where = group[4 if verdict == "pass" else 5]
                    if not where or where[-1] != index:
                        where.append(index)

    def flaky(self, order: list[str] | None = None) -> list[FlakyCase]:
        """The groups with both a pass and a fail, by criterion (in ``order``, else by name),
        then case id."""
        out = []
        for (case_id, fingerprint, version, code, criterion, _), g in self.groups.items():
            if g[0] and g[1]:
                out.append(FlakyCase(case_id, criterion, fingerprint, version, code, g[0], g[1], g[2], g[3],
                                     [self.runs[i] for i in g[4]], [self.runs[i] for i in g[5]]))
        rank = {c: i for i, c in enumerate(order or [])}
        out.sort(key=lambda f: (rank.get(f.criterion, len(rank)), f.criterion, f.case_id, f.version, f.code_digest))
        return out


# ---- choosing and judging runs -------------------------------------------------------------

def systems(store: EventStore) -> list[str]:
    """The systems the log has runs of, by name."""
    return sorted({r.system_name for r in run_headers(store)})


def choose_system(store: EventStore, system: str | None) -> str:
    """``system`` when the log has runs of it; without one, the system of the latest run.

    Raises:
        UsageError: the log has no runs, or none of that system (with a did-you-mean).
    """
    headers = run_headers(store)
    if not headers:
        raise UsageError("the log has no runs yet; start one with 'oloproof run'")
    if system is None:
        return headers[-1].system_name
    names = sorted({r.system_name for r in headers})
    if system not in names:
        raise UsageError(f"--system {system!r}: the log has no run of it{did_you_mean(system, names)} "
                         f"(systems: {', '.join(names)})")
    return system


def sealed_runs(store: EventStore, system: str, last: int | None = None) -> tuple[list[StoredRun], LeftOut]:
    """The sealed runs of ``system``, oldest first (``last``: only the latest so many), and the
    runs left out because they are not sealed (those among the latest ``last``, with it)."""
    if last is not None and last < 1:
        raise UsageError(f"--last {last}: must be a whole number >= 1")
    runs, left = [], LeftOut()
    for started in run_headers(store):
        if started.system_name != system:
            continue
        run = load_run(store, started.run_id)
        if run.sealed is None:
            left.unsealed.append(run.run_id)
        else:
            runs.append(run)
    if last is not None:
        shown = runs[-last:]
        if shown and len(runs) > last:  # unsealed runs older than the window are not counted
            first = (shown[0].started.started_at, shown[0].run_id)
            left.unsealed = [r for r in left.unsealed
                             if (load_run(store, r).started.started_at, r) > first]
        runs = shown
    return runs, left


@dataclass
class Judged:
    """A run judged under its own rules, kept whole for one step of the walk."""

    run: StoredRun
    suite: SuiteEvaluation
    summary: Summary


def judge_runs(store: EventStore, runs: list[StoredRun], left: LeftOut) -> Iterator[Judged]:
    """Each run judged under the rules it ran with (its audit first); a run that fails its
    audit, or whose stored configuration cannot be judged here (a plugin's evaluator that is
    not installed), is left out (``left.broken``, with why), never a reason to stop."""
    for run in runs:
        try:
            stored, suite, summary = judged_run(store, run.run_id)
        except (CorruptLogError, InputError) as e:
            left.broken.append((run.run_id, str(e)))
            continue
        yield Judged(stored, suite, summary)


def _verdicts(j: Judged) -> dict[str, dict[str, tuple[str, str]]]:
    """criterion -> case id -> (fingerprint, verdict): what a comparison pairs."""
    out: dict[str, dict[str, tuple[str, str]]] = {c: {} for c in j.suite.criteria}
    for c in j.summary.cases:
        for criterion, verdict in zip(j.suite.criteria, c.verdicts):
            out[criterion][c.case_id] = (c.fingerprint, verdict[0])
    return out


def _comparable(base: Judged | None, j: Judged) -> Comparison:
    if base is None:
        trials = trials_of(j.run)
        return Comparison(None, note="first run: nothing before it to compare with" if trials == 1 else
                          f"no earlier full run of {trials} trials a case to compare with, trial by trial")
    mine, theirs = _verdicts(j), _verdicts(base)
    pair = pairing({c.case_id: c.fingerprint for c in base.summary.cases},
                   {c.case_id: c.fingerprint for c in j.summary.cases})
    if not pair.paired:
        return Comparison(base.run.run_id, note="no case pairs with the run before (same id and fingerprint)")
    return Comparison(base.run.run_id, {c: flips(theirs[c], mine[c]) for c in j.suite.criteria if c in theirs})


@dataclass
class History:
    """What :func:`history` returns: the system, its sealed runs (oldest first) with their
    criteria and comparisons, every criterion in order of first appearance, the runs left out,
    and the flaky cases among the runs shown (when asked for)."""

    system: str
    runs: list[RunPoint]
    criteria: list[str]
    left_out: LeftOut
    flaky: list[FlakyCase] = field(default_factory=list)

    def trend(self, criterion: str) -> list[float | None]:
        """The criterion's rate in each run (None: a partial run, or not judged/observed)."""
        out: list[float | None] = []
        for p in self.runs:
            r = p.criteria.get(criterion)
            out.append(None if p.partial or r is None else r.rate)
        return out

    def sparkline(self, criterion: str) -> str:
        """One character per run (:func:`spark_char`)."""
        return "".join(spark_char(x) for x in self.trend(criterion))


def history(store: EventStore, system: str | None = None, *, criterion: str | None = None,
            last: int | None = None, with_flaky: bool = False,
            on_run: Callable[[Judged], None] | None = None) -> History:
    """The history of ``system`` (default: the latest run's): its sealed runs, each judged once.

    Args:
        criterion: keep only this criterion (a UsageError with a did-you-mean when no run
            judged it).
        last: only the latest ``last`` sealed runs (the one before them is still judged, when
            the first of them is compared with it).
        with_flaky: also tally the flaky cases among the runs shown.
        on_run: called with each judged run shown (the trend page builds each run's report).
    """
    name = choose_system(store, system)
    shown, left = sealed_runs(store, name, last)
    runs: list[StoredRun] = list(shown)
    if shown and last is not None:  # what the window's first run of each kind is compared with
        firsts: dict[tuple[bool, int], StoredRun] = {}
        for r in shown:
            firsts.setdefault((is_prefix_run(r.started), trials_of(r)), r)
        before = [b for b in (_base_before(store, name, r) for r in firsts.values()) if b is not None]
        # every sealed run outside the window is older than all of it
        runs = sorted({b.run_id: b for b in before}.values(), key=lambda r: (r.started.started_at, r.run_id)) + runs
    ids = {r.run_id for r in shown}
    points: list[RunPoint] = []
    criteria: list[str] = []
    tally = FlakyTally() if with_flaky else None
    # the latest full run of each kind (prefix or not) and number of trials: what the next
    # run of that kind is compared with
    bases: dict[tuple[bool, int], Judged] = {}
    for j in judge_runs(store, runs, left):
        kind = (is_prefix_run(j.run.started), trials_of(j.run))
        partial = bool(j.run.started.selection)
        if j.run.run_id in ids:
            comparison = _comparable(bases.get(kind), j)
            points.append(RunPoint(j.run, partial, dict(j.summary.criteria), comparison, len(j.summary.cases)))
            criteria.extend(c for c in j.suite.criteria if c not in criteria)
            if tally is not None:
                tally.add(j.run, j.suite, j.summary.cases)
            if on_run is not None:
                on_run(j)
        if not partial:
            bases[kind] = j  # only its verdicts are needed next: the previous one is dropped
    if criterion is not None:
        if criterion not in criteria:
            raise UsageError(f"--criterion {criterion!r}: no run of {name} judged it"
                             f"{did_you_mean(criterion, criteria)} (criteria: {', '.join(criteria) or 'none'})")
        criteria = [criterion]
    flaky = tally.flaky(criteria) if tally is not None else []
    if criterion is not None:
        flaky = [f for f in flaky if f.criterion == criterion]
    return History(name, points, criteria, left, flaky)


def _base_before(store: EventStore, system: str, first: StoredRun) -> StoredRun | None:
    """The latest sealed full run of ``system`` before ``first``, of its kind (prefix or not,
    the same trials a case): what the first run of a ``--last`` window is compared with."""
    from oloproof.app.project import stored_trials

    kind = (is_prefix_run(first.started), trials_of(first))
    at = (first.started.started_at, first.run_id)
    for started in reversed(run_headers(store)):
        if started.system_name != system or (started.started_at, started.run_id) >= at:
            continue
        if started.selection or (is_prefix_run(started), stored_trials(started.config)) != kind:
            continue
        run = load_run(store, started.run_id)
        if run.sealed is not None:
            return run
    return None


@dataclass
class FlakyReport:
    """What :func:`flaky_cases` returns: the system, the runs looked at, the flaky cases and
    the runs left out."""

    system: str
    runs: list[str]
    flaky: list[FlakyCase]
    left_out: LeftOut
    criteria: list[str] = field(default_factory=list)


def flaky_cases(store: EventStore, system: str | None = None, *, last: int | None = None) -> FlakyReport:
    """``oloproof flaky``: the flaky cases among the sealed runs of ``system`` (default: the
    latest run's), or its latest ``last`` sealed runs."""
    name = choose_system(store, system)
    runs, left = sealed_runs(store, name, last)
    tally = FlakyTally()
    criteria: list[str] = []
    for j in judge_runs(store, runs, left):
        tally.add(j.run, j.suite, j.summary.cases)
        criteria.extend(c for c in j.suite.criteria if c not in criteria)
    return FlakyReport(name, tally.runs, tally.flaky(criteria), left, criteria)


#: the most other runs ``known_flaky`` judges (the latest ones): enough to know a case flips,
#: and a ``diff`` on a long-lived log stays a bounded cost
KNOWN_FLAKY_RUNS = 20


def known_flaky(store: EventStore, judged: list[Judged],
                also: Iterable[StoredRun] = ()) -> dict[str, dict[tuple[str, str], FlakyCase]]:
    """criterion -> (case id, fingerprint) -> :class:`FlakyCase` (a trial's case id without
    its trial): the cases known to be flaky for ``oloproof diff`` and the gate's comment —
    among the sealed runs of the compared runs' system with the version and code digest of one
    of them (``judged``: those runs, already judged, are not judged again) or of a run ``also``
    names (a baseline); of the other runs, the latest :data:`KNOWN_FLAKY_RUNS`."""
    if not judged:
        return {}
    system = judged[0].run.started.system_name
    same = {(j.run.started.system_version, j.run.started.code_digest) for j in judged}
    same |= {(r.started.system_version, r.started.code_digest) for r in also if r.started.system_name == system}
    have = {j.run.run_id for j in judged}
    others = [load_run(store, s.run_id) for s in run_headers(store)
              if s.system_name == system and s.run_id not in have and (s.system_version, s.code_digest) in same]
    others = [r for r in others if r.sealed is not None][-KNOWN_FLAKY_RUNS:]
    tally = FlakyTally()
    for j in judged:
        tally.add(j.run, j.suite, j.summary.cases)
    for j in judge_runs(store, others, LeftOut()):
        tally.add(j.run, j.suite, j.summary.cases)
    out: dict[str, dict[tuple[str, str], FlakyCase]] = {}
    for f in tally.flaky():  # of two groups (two versions), the one with more observations
        known = out.setdefault(f.criterion, {})
        key = (f.case_id, f.fingerprint)
        if key not in known or f.observations > known[key].observations:
            known[key] = f
    return out

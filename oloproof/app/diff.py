"""Candidate against baseline: two stored runs of one suite compared case by case.

* :func:`resolve_ref` turns ``latest``, ``version:V``, ``pin:NAME`` or a run id into a run id;
* :func:`pin_run` names a run (an event in the stream ``pin/<name>``, audited like any other);
* :func:`diff_runs` judges both runs (each under the rules it ran with, from its events, after
  its audit) and pairs their cases (:mod:`oloproof.evaluate.compare`);
* :func:`regression_evidence` is what a ``no_regression`` gate rule judges: the flips of its
  criterion between the run being gated and its baseline.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from oloproof.app.runs import StoredRun, append_event, load_run, run_headers
from oloproof.errors import CorruptLogError, UsageError
from oloproof.evaluate.compare import Flips, Pairing, RegressionEvidence, flips, pairing
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary
from oloproof.events import RunPinned, decode_stream
from oloproof.stats.intervals import RateInterval
from oloproof.stats.quantiles import QuantileInterval
from oloproof.store.base import EventStore

PIN = "pin/"
PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


# ---- naming runs ----------------------------------------------------------------------------

def pin_run(store: EventStore, run_id: str, name: str, clock: Callable[[], str]) -> RunPinned:
    """``oloproof runs --pin RUN NAME``: the latest pin of a name wins; earlier ones stay."""
    if not PIN_NAME.fullmatch(name):
        raise UsageError(f"pin name {name!r}: use letters, digits, '.', '_' or '-' (at most 64, "
                         "starting with a letter or digit)")
    load_run(store, run_id)  # the run exists
    stream = PIN + name
    event = RunPinned(name, run_id, clock())
    append_event(store, stream, event)  # a pin racing another lands too
    return event


def pinned(store: EventStore, name: str) -> str | None:
    stored = store.read_stream(PIN + name)
    if not stored:
        return None
    last = decode_stream(PIN + name, [stored[-1].payload], stored[-1].seq)[0]
    if not isinstance(last, RunPinned):
        raise CorruptLogError(f"stream {PIN + name!r} #{stored[-1].seq} is not a pin")
    return last.run_id


def pins(store: EventStore) -> dict[str, str]:
    """Every pin name -> the run it names now."""
    out = {}
    for stream in store.stream_names(PIN):
        run_id = pinned(store, stream[len(PIN):])
        if run_id is not None:
            out[stream[len(PIN):]] = run_id
    return out


def resolve_ref(store: EventStore, ref: str, *, system: str | None = None, before: Any = None,
                not_run: str | None = None) -> str | None:
    """A run id for ``latest``, ``version:V`` (the latest finished run of that version),
    ``pin:NAME`` or a run id; None when nothing matches. ``system``/``before``/``not_run``
    narrow ``version:`` to runs of that system started before a run, and never that run."""
    kind, sep, value = ref.partition(":")
    if sep and kind == "pin":
        return pinned(store, value)
    if sep and kind == "version":
        for started in reversed(run_headers(store)):
            if started.system_version != value or started.run_id == not_run:
                continue
            if system is not None and started.system_name != system:
                continue
            if before is not None and (started.started_at, started.run_id) >= before:
                continue
            if started.selection:
                continue  # a partial run (some of the suite's cases) is no baseline
            if load_run(store, started.run_id).sealed is None:
                continue  # an unfinished run is no baseline
            return started.run_id
        return None
    if ref == "latest":
        headers = run_headers(store)
        return headers[-1].run_id if headers else None
    return ref if store.stream_length(ref) and "/" not in ref else None


def require_ref(store: EventStore, ref: str) -> str:
    run_id = resolve_ref(store, ref)
    if run_id is None:
        kind = ref.partition(":")[0]
        if kind == "pin":
            known = ", ".join(sorted(pins(store))) or "none"
            raise UsageError(f"no run is pinned as {ref[4:]!r} (pins: {known}); pin one with "
                             "'oloproof runs --pin RUN NAME'")
        if kind == "version":
            raise UsageError(f"no finished run of version {ref[8:]!r} in the log (see 'oloproof runs')")
        load_run(store, ref)  # raises the usual "no run" error with the known runs
    return run_id  # type: ignore[return-value]


# ---- the gate's evidence -----------------------------------------------------------------------

def regression_evidence(store: EventStore, run: StoredRun, suite: SuiteEvaluation,
                        tracked: Callable[[str], dict[str, tuple[str, str]]]) -> dict[str, RegressionEvidence | None]:
    """For each ``no_regression`` rule of ``suite``: its criterion's flips between ``run`` and
    its baseline (None: no baseline). ``tracked(criterion)`` gives the run's own verdicts."""
    out: dict[str, RegressionEvidence | None] = {}
    if suite.release is None:
        return out
    s = run.started
    judged: dict[str, tuple[StoredRun, dict[str, CaseResult], SuiteEvaluation]] = {}
    for rule in suite.release.rules:
        if rule.no_regression is None:
            continue
        base_id = resolve_ref(store, rule.no_regression.baseline, system=s.system_name,
                              before=(s.started_at, s.run_id), not_run=s.run_id)
        if base_id is None:
            # a version of another system is no baseline either: say so rather than "none"
            other = resolve_ref(store, rule.no_regression.baseline, before=(s.started_at, s.run_id),
                                not_run=s.run_id)
            if other is not None and other != s.run_id:
                base_id = other
        if base_id is None or base_id == s.run_id:
            out[rule.name] = None
            continue
        base_started = load_run(store, base_id).started
        if base_started.selection:
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, "it is a partial run (some of the suite's cases, chosen with "
                "--case/-k/--limit/--last-failed): no baseline", "baseline_partial")
            continue
        if base_started.system_name != s.system_name:
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, f"it is a run of system {base_started.system_name!r}, this run of "
                f"{s.system_name!r}: another system's cases are other questions", "other_system")
            continue
        if base_id not in judged:
            try:
                base_run, base_suite, summary = _judged(store, base_id)
            except CorruptLogError as e:  # a baseline that fails its audit decides nothing
                out[rule.name] = RegressionEvidence(base_id, Flips(), False, str(e))
                continue
            judged[base_id] = (base_run, {c.case_id: c for c in summary.cases}, base_suite)
        base_run, base_cases, base_suite = judged[base_id]
        if trials_of(base_run) != trials_of(run):
            out[rule.name] = RegressionEvidence(
                base_id, Flips(), False, f"it ran {trials_of(base_run)} trial(s) a case, this run "
                f"{trials_of(run)}: its cases cannot be paired trial by trial", "baseline_not_comparable")
            continue
        if rule.criterion not in base_suite.criteria:
            out[rule.name] = None  # the baseline never judged this criterion
            continue
        i = base_suite.criteria.index(rule.criterion)
        base = {c.case_id: (c.fingerprint, c.verdicts[i][0]) for c in base_cases.values()}
        candidate = tracked(rule.criterion)
        out[rule.name] = RegressionEvidence(base_id, flips(base, candidate), base_run.sealed is not None,
                                            candidate_cases=max(len(candidate), s.case_count))
    return out


def trials_of(run: StoredRun) -> int:
    """Trials a case in ``run`` (``trials: k``; 1 for runs without it)."""
    from oloproof.app.project import stored_trials

    return stored_trials(run.started.config)


def _judged(store: EventStore, run_id: str) -> tuple[StoredRun, SuiteEvaluation, Summary]:
    """A run judged under the rules it ran with, every case kept (its own audit first)."""
    from oloproof.app.evidence import evaluate_run
    from oloproof.app.project import suite_from_stored

    run = load_run(store, run_id)
    suite = suite_from_stored(run.started.config)
    # a baseline's own no_regression rules are not judged here: only its verdicts are read
    return run, suite, evaluate_run(store, run_id, suite, keep_cases=True, sealed_only=True, regressions=False)


def _require_pairs(base: StoredRun, candidate: StoredRun, pair: Pairing) -> None:
    b, c = base.started, candidate.started
    if b.system_name != c.system_name:
        raise UsageError(f"{b.run_id} is a run of system {b.system_name!r} and {c.run_id} of "
                         f"{c.system_name!r}: their cases are other questions; compare two runs of one "
                         "system, or pass --allow-unpaired to see them side by side anyway")
    if not pair.paired:
        changed = f", {len(pair.changed)} with the same id but another fingerprint" if pair.changed else ""
        raise UsageError(f"no case of {c.run_id} pairs with {b.run_id} (same id and fingerprint){changed}: "
                         "nothing can be compared case by case; pass --allow-unpaired to see them side "
                         "by side anyway")


# ---- the comparison ------------------------------------------------------------------------------

@dataclass
class CriterionDiff:
    criterion: str
    base: RateInterval
    candidate: RateInterval
    flips: Flips


@dataclass
class MetricDiff:
    id: str
    quantile: float
    unit: str | None
    base: QuantileInterval
    candidate: QuantileInterval
    median_difference: float | None  # of candidate − base over the paired cases with both values
    pairs: int


@dataclass
class SliceDiff:
    slice: str
    criterion: str
    flips: Flips


@dataclass
class RunDiff:
    base: StoredRun
    candidate: StoredRun
    base_summary: Summary
    candidate_summary: Summary
    pairing: Pairing
    criteria: list[CriterionDiff]
    metrics: list[MetricDiff]
    slices: list[SliceDiff]
    only_base_criteria: list[str] = field(default_factory=list)
    only_candidate_criteria: list[str] = field(default_factory=list)


def diff_runs(store: EventStore, base_ref: str, candidate_ref: str, *, allow_unpaired: bool = False) -> RunDiff:
    """Compare two stored runs case by case. Two runs of different systems, or with no case
    that pairs (same id and fingerprint), compare nothing: a UsageError (exit 2) unless
    ``allow_unpaired`` — "0 cases paired, 0 regressions" must never read as "no change"."""
    base_id, cand_id = require_ref(store, base_ref), require_ref(store, candidate_ref)
    if base_id == cand_id:
        raise UsageError(f"{base_ref} and {candidate_ref} are the same run ({base_id}); compare two runs")
    for run_id in (base_id, cand_id):
        load_run(store, run_id)
    if trials_of(load_run(store, base_id)) != trials_of(load_run(store, cand_id)):
        raise UsageError(f"{base_id} ran {trials_of(load_run(store, base_id))} trial(s) a case and {cand_id} "
                         f"{trials_of(load_run(store, cand_id))}: their cases cannot be paired trial by trial; "
                         "compare runs with the same trials")
    base_run, base_suite, base_summary = _judged(store, base_id)
    cand_run, cand_suite, cand_summary = _judged(store, cand_id)
    base_cases = {c.case_id: c for c in base_summary.cases}
    cand_cases = {c.case_id: c for c in cand_summary.cases}
    pair = pairing({k: c.fingerprint for k, c in base_cases.items()}, {k: c.fingerprint for k, c in cand_cases.items()})
    if not allow_unpaired:
        _require_pairs(base_run, cand_run, pair)
    common = [c for c in cand_suite.criteria if c in base_suite.criteria]

    def verdicts(cases: dict[str, CaseResult], suite: SuiteEvaluation, criterion: str,
                 keep: Callable[[CaseResult], bool] = lambda c: True) -> dict[str, tuple[str, str]]:
        i = suite.criteria.index(criterion)
        return {k: (c.fingerprint, c.verdicts[i][0]) for k, c in cases.items() if keep(c)}

    criteria = [CriterionDiff(c, base_summary.criteria[c], cand_summary.criteria[c],
                              flips(verdicts(base_cases, base_suite, c), verdicts(cand_cases, cand_suite, c)))
                for c in common]
    # slices: the candidate's groups, descriptive only
    slices = []
    for j, spec in enumerate(cand_suite.slices):
        labels = sorted({c.groups[j] for c in cand_cases.values() if c.groups[j] is not None}, key=spec.order)
        for label in labels:
            members = {k for k, c in cand_cases.items() if c.groups[j] == label}
            for c in common:
                f = flips(verdicts(base_cases, base_suite, c, lambda r: r.case_id in members),
                          verdicts(cand_cases, cand_suite, c, lambda r: r.case_id in members))
                if f.regressions or f.fixes or f.to_missing or f.from_missing:
                    slices.append(SliceDiff(label, c, f))
    metrics = []
    base_metrics = {m.id: (k, m) for k, m in enumerate(base_summary.metrics)}
    for k, m in enumerate(cand_summary.metrics):
        if m.id not in base_metrics:
            continue
        kb, mb = base_metrics[m.id]
        differences = []
        for case_id in pair.paired:
            a, b = base_cases[case_id].values[kb], cand_cases[case_id].values[k]
            if isinstance(a, (int, float)) and isinstance(b, (int, float)):
                differences.append(b - a)
        metrics.append(MetricDiff(m.id, m.quantile, m.unit, mb.interval, m.interval,
                                  statistics.median(differences) if differences else None, len(differences)))
    return RunDiff(base_run, cand_run, base_summary, cand_summary, pair, criteria, metrics, slices,
                   [c for c in base_suite.criteria if c not in common],
                   [c for c in cand_suite.criteria if c not in base_suite.criteria])

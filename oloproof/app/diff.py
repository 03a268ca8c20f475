"""Candidate against baseline: two stored runs of one suite compared case by case.

:func:`diff_runs` judges both runs (each under the rules it ran with, from its events, after
its audit) and pairs their cases (:mod:`oloproof.evaluate.compare`). Naming runs
(``version:V``, ``pin:NAME``) lives in :mod:`oloproof.app.refs`; what a ``no_regression`` gate
rule judges, in :mod:`oloproof.app.evidence` — both are re-exported here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oloproof.app.evidence import judged_run, regression_evidence
from oloproof.app.refs import PIN, PIN_NAME, pin_run, pinned, pins, require_ref, resolve_ref, trials_of
from oloproof.app.runs import StoredRun, load_run
from oloproof.errors import UsageError
from oloproof.evaluate.compare import Flips, Pairing, flips, pairing
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary
from oloproof.stats.intervals import RateInterval
from oloproof.stats.quantiles import QuantileInterval
from oloproof.store.base import EventStore

__all__ = ["PIN", "PIN_NAME", "CriterionDiff", "MetricDiff", "RunDiff", "SliceDiff", "diff_runs", "judged_run",
           "pin_run", "pinned", "pins", "regression_evidence", "require_ref", "resolve_ref", "trials_of"]


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
    """A criterion both runs judged: each run's rate interval and the case-by-case flips."""

    criterion: str
    base: RateInterval
    candidate: RateInterval
    flips: Flips


@dataclass
class MetricDiff:
    """A quantile metric both runs have: each run's interval and the median paired
    difference (candidate − base) over the ``pairs`` paired cases with a value on both sides."""

    id: str
    quantile: float
    unit: str | None
    base: QuantileInterval
    candidate: QuantileInterval
    median_difference: float | None  # of candidate − base over the paired cases with both values
    pairs: int


@dataclass
class SliceDiff:
    """The flips of one criterion within one of the candidate's slice groups; only groups
    where something moved are listed. Descriptive: slices never gate."""

    slice: str
    criterion: str
    flips: Flips


@dataclass
class RunDiff:
    """What :func:`diff_runs` returns: both runs and their summaries, how their cases
    paired, the per-criterion, per-metric and per-slice differences, and the criteria only
    one side judged."""

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
    #: criterion -> flipped case id -> its :class:`~oloproof.app.history.FlakyCase`: the flipped
    #: cases known to be flaky (their verdict differs between runs of the base's or the
    #: candidate's version and code): such a flip may be noise
    known_flaky: dict[str, dict[str, Any]] = field(default_factory=dict)


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
    base_run, base_suite, base_summary = judged_run(store, base_id)
    cand_run, cand_suite, cand_summary = judged_run(store, cand_id)
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
        labels = sorted({g for g in (c.groups[j] for c in cand_cases.values()) if g is not None}, key=spec.order)
        for label in labels:
            members = {k for k, c in cand_cases.items() if c.groups[j] == label}
            for c in common:
                f = flips(verdicts(base_cases, base_suite, c, lambda r: r.case_id in members),  # noqa: B023 - called within this iteration
                          verdicts(cand_cases, cand_suite, c, lambda r: r.case_id in members))  # noqa: B023 - called within this iteration
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
    known = _known_flaky(store, criteria, (base_run, base_suite, base_summary, base_cases),
                         (cand_run, cand_suite, cand_summary, cand_cases))
    return RunDiff(base_run, cand_run, base_summary, cand_summary, pair, criteria, metrics, slices,
                   [c for c in base_suite.criteria if c not in common],
                   [c for c in cand_suite.criteria if c not in base_suite.criteria], known)


def _known_flaky(store: EventStore, criteria: list[CriterionDiff], *runs: Any) -> dict[str, dict[str, Any]]:
    """The flipped cases known to be flaky (:func:`oloproof.app.history.known_flaky`), by
    criterion and case id; the two runs, judged already, are not judged again."""
    from oloproof.app.history import Judged, known_flaky
    from oloproof.config.limits import split_trial

    flipped = [x for x in criteria
               if x.flips.regressions or x.flips.fixes or x.flips.to_missing or x.flips.from_missing]
    if not flipped:
        return {}
    known = known_flaky(store, [Judged(run, suite, summary) for run, suite, summary, _ in runs])
    out: dict[str, dict[str, Any]] = {}
    for x in flipped:
        f = x.flips
        for case_id in [*f.regressions, *f.fixes, *f.to_missing, *f.from_missing]:
            case = runs[1][3].get(case_id) or runs[0][3].get(case_id)
            found = known.get(x.criterion, {}).get((split_trial(case_id)[0], case.fingerprint)) if case else None
            if found is not None:
                out.setdefault(x.criterion, {})[case_id] = found
    return out

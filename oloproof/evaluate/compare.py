"""Two runs of one suite, case by case. Pure: verdicts in, flips out.

Cases are paired by case id *and* fingerprint (input, initial state, expected): a case whose
fingerprint changed asked a different question, so it is listed apart and never paired. For
one criterion, a paired case moves

* pass → fail: a **regression**; fail → pass: a **fix** (the discordant pairs of McNemar's
  exact test, :func:`oloproof.stats.paired.mcnemar_exact`);
* from pass or fail into missing or excluded: **to_missing**; the other way: **from_missing**.
  Counted on their own and kept out of the test — except that a case that passed in the base
  and is not observed in the candidate (``lost``) counts against the candidate in the gate.

A case of the base that the candidate did not record at all (an incomplete run, or a case
dropped from the suite) is missing in the candidate. A case only in the candidate is new and
listed apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oloproof.stats.paired import METHOD, mcnemar_exact

OBSERVED = ("pass", "fail")

#: case id -> (fingerprint, verdict) for one criterion
Verdicts = Mapping[str, tuple[str, str]]


@dataclass(frozen=True)
class Flips:
    """How one criterion's verdicts moved between a base and a candidate run, case ids per
    kind of move (module docstring); only regressions and fixes enter McNemar's test."""

    regressions: list[str] = field(default_factory=list)  # pass -> fail
    fixes: list[str] = field(default_factory=list)  # fail -> pass
    to_missing: list[str] = field(default_factory=list)  # pass/fail -> missing/excluded/not recorded
    from_missing: list[str] = field(default_factory=list)  # missing/excluded -> pass/fail
    lost: list[str] = field(default_factory=list)  # the to_missing cases that passed in the base
    paired: int = 0
    #: the paired cases observed (pass or fail) on both sides: what a regression can be seen on
    observed_pairs: int = 0

    @property
    def p_value(self) -> float:
        """McNemar's exact test on the regressions and fixes (missing moves kept out)."""
        return mcnemar_exact(len(self.regressions), len(self.fixes))

    method = METHOD


@dataclass(frozen=True)
class Pairing:
    """Which case ids pair, which changed question, which are on one side only."""

    paired: list[str]
    changed: list[str]  # same id, different fingerprint: never paired
    only_base: list[str]
    only_candidate: list[str]


def pairing(base: Mapping[str, str], candidate: Mapping[str, str]) -> Pairing:
    """``base``/``candidate``: case id -> fingerprint."""
    paired, changed, only_base = [], [], []
    for case_id, fingerprint in base.items():
        other = candidate.get(case_id)
        if other is None:
            only_base.append(case_id)
        elif other != fingerprint:
            changed.append(case_id)
        else:
            paired.append(case_id)
    only_candidate = [c for c in candidate if c not in base]
    return Pairing(paired, changed, only_base, only_candidate)


def flips(base: Verdicts, candidate: Verdicts) -> Flips:
    """The moves of one criterion between two runs (see the module docstring)."""
    out = Flips()
    paired = observed = 0
    for case_id, (fingerprint, before) in base.items():
        now = candidate.get(case_id)
        if now is None:  # not recorded by the candidate: missing there
            after = "missing"
        elif now[0] != fingerprint:
            continue  # a different question: never paired
        else:
            after = now[1]
            paired += 1
            observed += before in OBSERVED and after in OBSERVED
        if before == "pass" and after == "fail":
            out.regressions.append(case_id)
        elif before == "fail" and after == "pass":
            out.fixes.append(case_id)
        elif before in OBSERVED and after not in OBSERVED:
            out.to_missing.append(case_id)
            if before == "pass":
                out.lost.append(case_id)
        elif before not in OBSERVED and after in OBSERVED:
            out.from_missing.append(case_id)
    return Flips(out.regressions, out.fixes, out.to_missing, out.from_missing, out.lost, paired, observed)


@dataclass(frozen=True)
class RegressionEvidence:
    """What a ``no_regression`` rule judges: the flips of its criterion against its baseline."""

    baseline_run: str
    flips: Flips
    baseline_complete: bool = True
    #: why the baseline cannot be compared (it fails its audit, or ran another number of
    #: trials): the rule cannot be decided, for ``reason``
    problem: str | None = None
    reason: str = "baseline_fails_audit"
    #: the cases of the run being gated the criterion applies to (not excluded):
    #: ``min_paired`` defaults to half of them, rounded up
    candidate_cases: int = 0

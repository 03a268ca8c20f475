"""A comparison of two runs (:func:`oloproof.app.diff.diff_runs`) as terminal tables and as the
JSON document of ``oloproof diff --json``."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.text import Text

from oloproof.report.terminal import Grid, _num, interval_text, pct, plural
from oloproof.stats.intervals import RateInterval


def _rate(r: RateInterval) -> dict[str, Any]:
    return {"passed": r.passed, "observed": r.observed, "missing": r.missing, "excluded": r.excluded,
            "rate": r.rate, "low": r.low, "high": r.high, "method": r.method,
            **({"clusters": r.clusters} if r.approximate else {})}


def _flips(f: Any) -> dict[str, Any]:
    return {"regressions": f.regressions, "fixes": f.fixes, "to_missing": f.to_missing,
            "from_missing": f.from_missing, "paired": f.paired}


def _run(run: Any) -> dict[str, Any]:
    s = run.started
    return {"run_id": s.run_id, "system": {"name": s.system_name, "version": s.system_version},
            "complete": run.sealed is not None,
            "log_digest": run.sealed.digest if run.sealed is not None else None}


def diff_dict(d: Any) -> dict[str, Any]:
    """The JSON document: runs, pairing, one row per criterion (both rates with their
    intervals, the flips by case id, McNemar's exact p-value), metrics and slices."""
    return {
        "base": _run(d.base),
        "candidate": _run(d.candidate),
        "cases": {"paired": len(d.pairing.paired), "fingerprint_changed": d.pairing.changed,
                  "only_base": d.pairing.only_base, "only_candidate": d.pairing.only_candidate},
        "criteria": [
            {"criterion": c.criterion, "base": _rate(c.base), "candidate": _rate(c.candidate), **_flips(c.flips),
             "p_value": c.flips.p_value, "method": c.flips.method,
             "known_flaky": {case_id: _flaky(f) for case_id, f in d.known_flaky.get(c.criterion, {}).items()}}
            for c in d.criteria
        ],
        "criteria_only_in_base": d.only_base_criteria,
        "criteria_only_in_candidate": d.only_candidate_criteria,
        "metrics": [
            {"id": m.id, "quantile": m.quantile, "unit": m.unit,
             "base": {"value": m.base.value, "low": m.base.low, "high": m.base.high, "observed": m.base.observed,
                      "missing": m.base.missing},
             "candidate": {"value": m.candidate.value, "low": m.candidate.low, "high": m.candidate.high,
                           "observed": m.candidate.observed, "missing": m.candidate.missing},
             "median_difference": m.median_difference, "pairs": m.pairs}
            for m in d.metrics
        ],
        "slices": [{"slice": s.slice, "criterion": s.criterion, **_flips(s.flips)} for s in d.slices],
    }


def _flaky(f: Any) -> dict[str, Any]:
    """A flipped case known to be flaky (a :class:`~oloproof.app.history.FlakyCase`): its
    verdict's counts among the runs of one version and code."""
    return {"version": f.version, "code_digest": f.code_digest, "pass": f.passed, "fail": f.failed,
            "missing": f.missing, "observations": f.observations}


def _ids(ids: list[str], most: int = 8) -> str:
    shown = ", ".join(ids[:most])
    return shown + (f", … {len(ids) - most} more" if len(ids) > most else "")


def diff_view(d: Any) -> Group:
    """The terminal view of a :class:`~oloproof.app.diff.RunDiff`: the pairing, a note for a
    run that is not sealed, the criteria (those with the most regressions first), the flipped
    cases, the metrics' median paired differences and the slices where something moved."""
    b, c = d.base.started, d.candidate.started
    p = d.pairing
    parts: list[Any] = [
        Text(f"base {b.run_id} · {b.system_name} {b.system_version}  →  "
             f"candidate {c.run_id} · {c.system_name} {c.system_version}", style="bold"),
        Text(f"{plural(len(p.paired), 'case')} paired (same id and fingerprint)"
             + (f" · fingerprint changed, not paired: {_ids(p.changed)}" if p.changed else "")
             + (f" · only in base (missing in the candidate): {_ids(p.only_base)}" if p.only_base else "")
             + (f" · only in candidate: {_ids(p.only_candidate)}" if p.only_candidate else "")),
    ]
    for run, label in ((d.base, "base"), (d.candidate, "candidate")):
        if run.sealed is None:
            parts.append(Text(f"note: the {label} run is not sealed (incomplete): its unrecorded cases are missing"))
    # regressions first: the criteria that got worse, then the rest
    ordered = sorted(d.criteria, key=lambda x: (-len(x.flips.regressions) - len(x.flips.lost), x.criterion))
    t = Grid(("criterion", "key"), ("base", "key"), ("candidate", "key"), ("pass→fail", "key"),
             ("fail→pass", "key"), ("missing to/from", "key"), ("p", "key"))
    for x in ordered:
        f = x.flips
        t.add_row(x.criterion, f"{pct(x.base.rate)} {interval_text(x.base)}",
                  f"{pct(x.candidate.rate)} {interval_text(x.candidate)}", str(len(f.regressions)),
                  str(len(f.fixes)), f"{len(f.to_missing)}/{len(f.from_missing)}", f"{f.p_value:.3g}")
    parts.append(t)
    flipped = [x for x in ordered if x.flips.regressions or x.flips.fixes or x.flips.to_missing or x.flips.from_missing]
    if flipped:
        known = d.known_flaky
        cases = Grid(("criterion", "key"), ("move", "key"), ("cases", "text"))
        for x in flipped:
            flaky = known.get(x.criterion, {})
            for move, ids in (("pass → fail", x.flips.regressions), ("fail → pass", x.flips.fixes),
                              ("→ missing", x.flips.to_missing), ("missing →", x.flips.from_missing)):
                if ids:
                    cases.add_row(x.criterion, move, ", ".join(
                        i + (f" (known flaky: {flaky[i].passed} pass, {flaky[i].failed} fail)" if i in flaky else "")
                        for i in ids))
        parts += [Text("flipped cases (regressions first)", style="bold"), cases]
        if any(known.values()):
            parts.append(Text("known flaky: its verdict on the criterion differs between runs with the same "
                              "fingerprint, version and code (pass and fail counted over those runs; see "
                              "'oloproof flaky'): its flip may be noise"))
    else:
        parts.append(Text("no case changed its verdict"))
    if d.metrics:
        m = Grid(("metric", "key"), ("base", "key"), ("candidate", "key"), ("median per-case difference", "key"))
        for x in d.metrics:
            unit = f" {x.unit}" if x.unit else ""
            m.add_row(x.id, f"{_num(x.base.value)} [{_num(x.base.low)}, {_num(x.base.high)}]{unit}",
                      f"{_num(x.candidate.value)} [{_num(x.candidate.low)}, {_num(x.candidate.high)}]{unit}",
                      "–" if x.median_difference is None
                      else f"{x.median_difference:+g}{unit} over {plural(x.pairs, 'pair')}")
        parts.append(m)
    if d.slices:
        s = Grid(("slice", "key"), ("criterion", "key"), ("pass→fail", "key"), ("fail→pass", "key"),
                 ("to missing", "key"), ("from missing", "key"))
        for x in d.slices:
            s.add_row(x.slice, x.criterion, str(len(x.flips.regressions)), str(len(x.flips.fixes)),
                      str(len(x.flips.to_missing)), str(len(x.flips.from_missing)))
        parts += [Text("by slice (descriptive; slices never gate)", style="bold"), s]
    if d.only_base_criteria or d.only_candidate_criteria:
        parts.append(Text("not compared: " + "; ".join(
            part for part in (f"only in base: {', '.join(d.only_base_criteria)}" if d.only_base_criteria else "",
                              f"only in candidate: {', '.join(d.only_candidate_criteria)}"
                              if d.only_candidate_criteria else "") if part)))
    parts.append(Text("p: McNemar's exact test (two-sided) on pass→fail vs fail→pass; moves into or out of "
                      "missing or excluded are counted apart and kept out of the test."))
    return Group(*parts)

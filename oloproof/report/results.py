"""The machine-readable results (SPEC §15): a stable contract CI jobs read."""

from __future__ import annotations

from typing import Any

import msgspec

from oloproof.evaluate.engine import Summary, SuiteEvaluation


def _num(x: float | None) -> float | None:
    return None if x is None else float(x)


def _value(x: Any) -> Any:
    if x is None:
        return None
    return int(x) if float(x).is_integer() else float(x)


def results_dict(run_id: str, system_name: str, system_version: str, suite: SuiteEvaluation,
                 summary: Summary) -> dict[str, Any]:
    criteria = []
    for name, r in summary.criteria.items():
        criteria.append({
            "criterion": name, "passed": r.passed, "observed": r.observed, "missing": r.missing,
            "excluded": r.excluded, "rate": _num(r.rate), "low": _num(r.low), "high": _num(r.high),
            "method": r.method, **({"clusters": r.clusters} if r.approximate else {}),
        })
    metrics = []
    for m in summary.metrics:
        q = m.interval
        metrics.append({
            "id": m.id, "quantile": m.quantile, "unit": m.unit, "value": _value(q.value),
            "low": _value(q.low), "high": _value(q.high), "observed": q.observed,
            "missing": q.missing, "excluded": q.excluded,
        })
    slices = []
    for s in summary.slices:
        r = s.interval
        slices.append({
            "slice": s.slice, "criterion": s.criterion, "passed": r.passed, "observed": r.observed,
            "missing": r.missing, "excluded": r.excluded, "rate": _num(r.rate), "low": _num(r.low),
            "high": _num(r.high), "low_support": s.low_support, "method": r.method,
            **({"clusters": r.clusters} if r.approximate else {}),
        })
    cases = []
    for c in summary.cases:
        verdicts = {}
        for name, (verdict, reason) in zip(suite.criteria, c.verdicts):
            verdicts[name] = {"verdict": verdict} if reason is None else {"verdict": verdict, "reason": reason}
        entry: dict[str, Any] = {"case_id": c.case_id, "verdicts": verdicts}
        if c.paths:
            entry["paths"] = [msgspec.to_builtins(p) for p in c.paths]
        cases.append(entry)
    gate: dict[str, Any] = {"decision": None, "rules": []}
    if summary.gate is not None:
        gate = {
            "decision": summary.gate.decision,
            "rules": [
                {"name": r.name, "criterion": r.criterion, "kind": r.kind, "threshold": r.threshold,
                 "status": r.status, "reason": r.reason}
                for r in summary.gate.rules
            ],
        }
    transforms = [{"transform": t.transform, "pairs": t.pairs, "labelled": t.labelled, "valid": t.valid,
                   "minimum_validity": t.minimum_validity, "checked": t.checked} for t in summary.transforms]
    return {
        "run_id": run_id,
        "system": {"name": system_name, "version": system_version},
        "criteria": criteria,
        "metrics": metrics,
        "slices": slices,
        "cases": cases,
        "gate": gate,
        **({"transforms": transforms} if transforms else {}),
    }

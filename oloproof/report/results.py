"""The machine-readable results (SPEC §15): a stable contract CI jobs read."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from oloproof.evaluate.engine import CaseResult, SuiteEvaluation, Summary


def _num(x: float | None) -> float | None:
    return None if x is None else float(x)


def _value(x: Any) -> Any:
    if x is None:
        return None
    return int(x) if float(x).is_integer() else float(x)


def case_entry(criteria: list[str], c: CaseResult) -> dict[str, Any]:
    """One case of the results: its verdicts (and compared state paths)."""
    verdicts = {}
    for name, (verdict, reason) in zip(criteria, c.verdicts):
        verdicts[name] = {"verdict": verdict} if reason is None else {"verdict": verdict, "reason": reason}
    entry: dict[str, Any] = {"case_id": c.case_id, "verdicts": verdicts}
    if c.trial is not None:  # trials: k > 1 (the case id is then ``<case>/<trial>``)
        entry["trial"] = c.trial
    if c.paths:
        entry["paths"] = [msgspec.to_builtins(p) for p in c.paths]
    return entry


def _pass_hat_k(ph: Any) -> dict[str, Any]:
    """A criterion's pass^k (runs with trials > 1; see oloproof.stats.passk): the point value
    over the cases with all k trials observed, its interval (missing trials as failures / as
    passes), the cases behind it and the cases by number of passing trials (0…k)."""
    return {
        "k": ph.k, "pass_hat_k": _num(ph.value), "pass_hat_k_low": _num(ph.low), "pass_hat_k_high": _num(ph.high),
        "pass_hat_k_method": ph.method, "pass_hat_k_cases": ph.cases, "pass_hat_k_missing": ph.missing,
        "pass_hat_k_short": ph.short, "pass_hat_k_excluded": ph.excluded,
        "passing_trials": list(ph.passing_trials),
    }


def _judge(j: Any) -> dict[str, Any]:
    """A model judge criterion's ``judge`` (its calibration) and ``corrected`` (SPEC §18.6)."""
    from oloproof.report.judge import judge_dict

    return judge_dict(j)


def results_dict(run_id: str, system_name: str, system_version: str, suite: SuiteEvaluation,
                 summary: Summary, log_digest: str | None = None) -> dict[str, Any]:
    """The results document. ``complete`` is false for a run that is not sealed (its gate
    cannot pass); ``log_digest`` is the run's seal digest (``audit verify --expect``)."""
    criteria = []
    for name, r in summary.criteria.items():
        criteria.append({
            "criterion": name, "passed": r.passed, "observed": r.observed, "missing": r.missing,
            "excluded": r.excluded, "rate": _num(r.rate), "low": _num(r.low), "high": _num(r.high),
            "method": r.method, **({"clusters": r.clusters} if r.approximate else {}),
            **(_pass_hat_k(summary.pass_hat_k[name]) if name in summary.pass_hat_k else {}),
            **(_judge(summary.judges[name]) if name in summary.judges else {}),
        })
    metrics = []
    for m in summary.metrics:
        q = m.interval
        metrics.append({
            "id": m.id, "quantile": m.quantile, "unit": m.unit, "value": _value(q.value),
            "low": _value(q.low), "high": _value(q.high), "observed": q.observed,
            "missing": q.missing, "excluded": q.excluded,
        })
    for e in suite.evaluators:  # a count kept apart from every rate (critical forbidden actions)
        count_id = getattr(e, "count_metric", None)
        if count_id and e.criterion in summary.criteria:
            r = summary.criteria[e.criterion]
            failures = r.observed - r.passed
            metrics.append({"id": count_id, "kind": "count", "of": e.criterion, "value": failures,
                            "low": failures, "high": None if r.missing else failures,
                            "observed": r.observed, "missing": r.missing, "excluded": r.excluded})
    slices = []
    for s in summary.slices:
        r = s.interval
        slices.append({
            "slice": s.slice, "criterion": s.criterion, "passed": r.passed, "observed": r.observed,
            "missing": r.missing, "excluded": r.excluded, "rate": _num(r.rate), "low": _num(r.low),
            "high": _num(r.high), "low_support": s.low_support, "method": r.method,
            **({"clusters": r.clusters} if r.approximate else {}),
        })
    cases = [case_entry(suite.criteria, c) for c in summary.cases]
    gate = gate_dict(summary)
    transforms = [{"transform": t.transform, "pairs": t.pairs, "labelled": t.labelled, "valid": t.valid,
                   "minimum_validity": t.minimum_validity, "checked": t.checked} for t in summary.transforms]
    return {
        "run_id": run_id,
        "system": {"name": system_name, "version": system_version},
        "complete": summary.complete,
        "cases_committed": summary.cases_committed,
        "cases_expected": summary.cases_expected,
        "log_digest": log_digest,
        "criteria": criteria,
        "metrics": metrics,
        "slices": slices,
        "cases": cases,
        "gate": gate,
        **({"transforms": transforms} if transforms else {}),
        **({"release": _release(summary)} if summary.release_classes is not None else {}),
        # the suite's kind when oloproof.yaml declares one: regression | capability
        **({"kind": summary.kind} if summary.kind is not None else {}),
    }


def gate_dict(summary: Summary) -> dict[str, Any]:
    """The gate of the results document: the decision and every rule with what decided it."""
    if summary.gate is None:
        return {"decision": None, "rules": []}
    return {
        "decision": summary.gate.decision,
        "rules": [
            {"name": r.name, "criterion": r.criterion, "kind": r.kind, "threshold": r.threshold,
             "status": r.status, "reason": r.reason, "detail": r.detail}
            for r in summary.gate.rules
        ],
    }


def _release(summary: Summary) -> dict[str, Any]:
    """The trials per release class, the response-only false passes, and the repair hint of
    every failing class present."""
    from oloproof.evaluate.release import REPAIR_HINTS

    classes = summary.release_classes or {}
    return {"classes": classes, "response_only_false_passes": summary.response_only_false_passes,
            "repair_hints": {c: REPAIR_HINTS[c] for c in classes if c in REPAIR_HINTS}}


_MARK = "\x00cases\x00"


class ResultsFile:
    """The ``--json`` results file of a run written without holding its cases: each case's
    entry is spooled to a temporary file as it arrives, and :meth:`write` assembles the
    document with the cases in suite order (32 bytes of index a case in memory)."""

    def __init__(self, path: str, criteria: list[str]):
        self.path = path
        self.criteria = criteria
        self._spool = tempfile.TemporaryFile(mode="w+b")
        self._index: list[tuple[int, int, int, int]] = []  # (position, trial, offset, length): 32 bytes a case

    def add(self, result: CaseResult) -> None:
        """Spool one case's entry (in any order: :meth:`write` sorts by position and trial)."""
        data = json.dumps(case_entry(self.criteria, result), indent=2, ensure_ascii=False).encode()
        offset = self._spool.tell()
        self._spool.write(data)
        self._index.append((result.position, result.trial or 0, offset, len(data)))

    def write(self, document: dict[str, Any]) -> None:
        """Write the document; its ``cases`` are the entries added, in suite order."""
        document = {**document, "cases": _MARK}
        head, _, tail = json.dumps(document, indent=2, ensure_ascii=False).partition(json.dumps(_MARK))
        self._index.sort()
        if self.path == "-":
            self._emit(sys.stdout.buffer, head, tail)
            sys.stdout.flush()
            return
        target = Path(self.path)
        from oloproof.errors import UsageError
        from oloproof.store.sqlite import is_event_log

        if is_event_log(target):  # the run's own new log (`run --json .oloproof/log.db`): never replaced
            raise UsageError(f"--json {self.path}: is an Oloproof event log (the run is stored there); the results "
                             "were not written. Name another file")
        if target.exists() and not target.is_file():  # a device or a pipe: written in place, never replaced
            with open(target, "wb") as out:
                self._emit(out, head, tail)
            return
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent or ".")
        try:
            with os.fdopen(fd, "wb") as out:
                self._emit(out, head, tail)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _emit(self, out: Any, head: str, tail: str) -> None:
        out.write(head.encode())
        out.write(b"[")
        for i, (_, _, offset, length) in enumerate(self._index):
            self._spool.seek(offset)
            entry = self._spool.read(length)
            out.write(b"\n    " if i == 0 else b",\n    ")
            out.write(entry.replace(b"\n", b"\n    "))
        out.write(b"\n  ]" if self._index else b"]")
        out.write(tail.encode() + b"\n")

    def close(self) -> None:
        """Discard the spool (its temporary file)."""
        self._spool.close()

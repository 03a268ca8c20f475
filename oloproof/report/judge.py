"""How the reports show a model judge (SPEC §18.6): its calibration beside its criterion's row,
and a case's judgements. Pure rendering of :class:`~oloproof.evaluate.judge.JudgeCalibration`
and :class:`~oloproof.events.JudgementRecorded`."""

from __future__ import annotations

from typing import Any

from oloproof.stats.intervals import round_outward


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "no observations"
    lo, hi = round_outward(low, high)
    return f"[{lo:.1f}%, {hi:.1f}%]"


def _measure(name: str, value: float | None, low: float | None, high: float | None, k: int, n: int) -> str:
    return f"{name} {_pct(value)} {_interval(low, high)} ({k}/{n})" if n else f"{name} – (no label)"


def calibration_text(j: Any) -> str:
    """The labels behind a judge and what they measured: agreement, sensitivity, specificity
    (each with its exact interval and counts), and the labels left out (stale, not judged)."""
    n = j.true_pass + j.false_fail + j.true_fail + j.false_pass
    parts = [f"{j.labels} label{'s' if j.labels != 1 else ''} compared",
             _measure("agreement", j.agreement, j.agreement_low, j.agreement_high, j.true_pass + j.true_fail, n),
             _measure("sensitivity", j.sensitivity, j.sensitivity_low, j.sensitivity_high, j.true_pass,
                      j.true_pass + j.false_fail),
             _measure("specificity", j.specificity, j.specificity_low, j.specificity_high, j.true_fail,
                      j.true_fail + j.false_pass)]
    left = []
    if j.stale:
        left.append(f"{j.stale} stale (labelled for another output)")
    if j.unjudged:
        left.append(f"{j.unjudged} not judged pass or fail")
    if left:
        parts.append("left out: " + ", ".join(left))
    return " · ".join(parts)


def judge_row(j: Any) -> tuple[str, str, str, str]:
    """The criteria table's row under a judge criterion: the judge-corrected rate and interval
    when the judge is calibrated, else why it is not; then the calibration."""
    if j.calibrated and j.corrected is not None:
        c = j.corrected
        return ("  judge-corrected", _pct(c.rate), _interval(c.low, c.high),
                f"{c.method} · {calibration_text(j)}")
    return ("  judge", "", "not calibrated", f"{j.problem} · {calibration_text(j)}")


def judge_dict(j: Any) -> dict[str, Any]:
    """The JSON of a judge criterion's calibration (``judge``) and corrected rate (``corrected``)."""
    out: dict[str, Any] = {
        "judge": {
            "labels": j.labels, "labels_given": j.labels_given, "stale": j.stale, "unjudged": j.unjudged,
            "agreement": j.agreement, "agreement_low": j.agreement_low, "agreement_high": j.agreement_high,
            "sensitivity": j.sensitivity, "sensitivity_low": j.sensitivity_low,
            "sensitivity_high": j.sensitivity_high, "specificity": j.specificity,
            "specificity_low": j.specificity_low, "specificity_high": j.specificity_high,
            "true_pass": j.true_pass, "false_fail": j.false_fail, "true_fail": j.true_fail,
            "false_pass": j.false_pass, "min_labels": j.min_labels, "min_agreement": j.min_agreement,
            "calibrated": j.calibrated, "problem": j.problem,
        },
    }
    c = j.corrected
    out["corrected"] = None if c is None else {"rate": c.rate, "low": c.low, "high": c.high, "method": c.method}
    return out


def judgement_lines(view: Any) -> list[str]:
    """A case's judgements, one line each: criterion, verdict, judge and model, explanation or
    error (on one line: a recorded text cannot fake a line of the report), cached or not."""
    out = []
    for j in view.judgements:
        why = j.error if j.verdict == "error" else j.explanation
        why = " ".join(str(why or "").split())
        cached = " (from the cache)" if j.cached else ""
        out.append(f"{j.criterion}: {j.verdict} by {j.judge} ({j.model}){cached}: {why}")
    return out


__all__ = ["calibration_text", "judge_dict", "judge_row", "judgement_details", "judgement_lines"]


def judgement_details(view: Any, suite: Any) -> list[dict[str, Any]]:
    """The case panel's model judges (HTML): for each judgement, its rubric (from the suite's
    evaluator of that criterion), the prompt, the raw response, the verdict and explanation,
    and the person's label of the case, if any (and whether it was given for another output)."""
    judges = {e.criterion: e for _, e in getattr(suite, "judges", [])}
    out = []
    for j in view.judgements:
        e = judges.get(j.criterion)
        label = e.judge_labels.get(view.case_id) if e is not None else None
        out.append({
            "criterion": j.criterion, "judge": j.judge, "model": j.model, "verdict": j.verdict,
            "explanation": j.explanation, "error": j.error, "cached": j.cached,
            "rubric": e.rubric if e is not None else "", "prompt": j.prompt, "raw_response": j.raw_response,
            "label": label[0] if label else None,
            "label_stale": bool(label and label[1] is not None and label[1] != j.prompt_digest),
        })
    return out

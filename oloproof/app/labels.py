"""Labelling a model judge's cases (``oloproof label RUN --criterion C``, SPEC §18.6): which
cases of a stored run a person is shown, and appending their labels to the criterion's
``calibration:`` file.

The cases are those the judge judged in the run and nobody labelled yet, in an order fixed by
their ids' digests — a shuffle, so that labelling the first N of them labels a random sample
(calibration measures the judge on the labelled cases and assumes they stand for the rest).
Each label is appended as one whole line (one ``write`` on a file opened for appending, then
``fsync``): a labeller who stops, or is stopped, leaves every label given so far and never half
a line. The line carries the ``prompt_digest`` of what the judge was shown, so the label counts
only for that output (:mod:`oloproof.config.judge_labels`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oloproof.app.project import Project
from oloproof.app.runs import case_view, iter_case_views
from oloproof.config.judge_labels import Labels, read_labels
from oloproof.config.locate import did_you_mean
from oloproof.errors import UsageError
from oloproof.evaluate.judge import ModelJudge
from oloproof.events import JudgementRecorded
from oloproof.store.base import EventStore
from oloproof.views import CaseView


@dataclass(frozen=True)
class LabelItem:
    """One case to label: the case, the judge's judgement of it (None: not judged) and the
    prompt digest a label of it carries."""

    view: CaseView
    judgement: JudgementRecorded | None
    prompt_digest: str


@dataclass
class Labelling:
    """A criterion's labelling: its judge, its labels file and the labels already in it."""

    judge: ModelJudge
    path: Path
    labels: Labels
    lines: dict[str, int]


def labelling(project: Project, criterion: str) -> Labelling:
    """The judge of ``criterion`` in ``project`` and its labels file (read if it exists).

    Raises:
        UsageError: no model judge produces ``criterion`` (did-you-mean), or it has no
            ``calibration:`` file to write to.
    """
    judges = {e.criterion: e for e in project.suite.evaluators if isinstance(e, ModelJudge)}
    judge = judges.get(criterion)
    if judge is None:
        raise UsageError(f"no model_judge evaluator produces criterion {criterion!r}"
                         f"{did_you_mean(criterion, judges)} (model judges: {', '.join(judges) or 'none'})")
    if judge.config.calibration is None:
        raise UsageError(f"criterion {criterion!r} has no calibration: file to write labels to; add "
                         f"'calibration: labels/{criterion}.jsonl' to its evaluator in oloproof.yaml")
    path = project.root / judge.config.calibration
    labels: Labels = {}
    lines: dict[str, int] = {}
    if path.exists():
        labels, lines = read_labels(path, None, f"{criterion}: calibration")
    return Labelling(judge, path, labels, lines)


def _item(judge: ModelJudge, view: CaseView) -> LabelItem:
    j = judge.judgement_of(view)
    return LabelItem(view, j, j.prompt_digest if j is not None else judge.request(view).prompt_digest)


def _order(case_id: str) -> str:
    return hashlib.sha256(case_id.encode()).hexdigest()


def to_label(store: EventStore, run_id: str, work: Labelling) -> Iterator[LabelItem]:
    """The run's cases the judge judged and nobody labelled yet, in the fixed shuffled order
    (module docstring)."""
    heads = sorted((_order(v.case_id), v.case_id) for v in iter_case_views(store, run_id)
                   if v.case_id not in work.labels and work.judge.judgement_of(v) is not None)
    for _, case_id in heads:
        yield _item(work.judge, case_view(store, run_id, case_id))


def one_case(store: EventStore, run_id: str, work: Labelling, case_id: str) -> LabelItem:
    """The case ``case_id`` of the run, to label (``--case``).

    Raises:
        UsageError: no such case, or it is labelled already (the line it is on).
    """
    if case_id in work.labels:
        raise UsageError(f"case {case_id!r} is labelled already ({work.path.name} line {work.lines[case_id]}); "
                         "edit the file to change its label")
    return _item(work.judge, case_view(store, run_id, case_id))


def append_label(work: Labelling, item: LabelItem, label: str) -> None:
    """Append one label as one whole line (module docstring) and remember it."""
    if label not in ("pass", "fail"):
        raise UsageError(f"a label is pass or fail, not {label!r}")
    line = json.dumps({"case_id": item.view.case_id, "label": label, "prompt_digest": item.prompt_digest})
    work.path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(work.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size:  # a file whose last line has no newline (written by hand): start a new line
            with open(work.path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = "\n" + line
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    work.labels[item.view.case_id] = (label, item.prompt_digest)
    work.lines[item.view.case_id] = len(work.lines) + 1


def shown(value: Any, width: int = 600) -> str:
    """A value as the prompt shows it: JSON, cut at ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[:width] + "…"


__all__ = ["LabelItem", "Labelling", "append_label", "labelling", "one_case", "shown", "to_label"]

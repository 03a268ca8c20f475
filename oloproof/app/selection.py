"""Run selection (SPEC §18.2): ``oloproof run --case ID…``, ``-k EXPR``, ``--limit N``,
``--last-failed`` — iterate on a few cases without running the whole suite.

A run restricted by any of them is a **partial run**: recorded, sealed and shown like any
other, its choice kept in ``RunStarted.selection`` (the flags and the source case ids chosen,
so a resume takes up the same cases), but its gate never passes — every rule ends
``INSUFFICIENT_EVIDENCE`` (``partial_run``) — and it is never a baseline (``version:V`` skips
it, a ``pin:`` or run id naming one decides nothing). Selection is by *source* case id: a
case's metamorphic derivatives and its trials come with it.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from oloproof.config.locate import did_you_mean
from oloproof.errors import UsageError
from oloproof.store.base import EventStore

GLOB = set("*?[")


@dataclass(frozen=True)
class Selection:
    """What the command line asked for; empty: the whole suite."""

    case_ids: tuple[str, ...] = ()
    keyword: str | None = None
    limit: int | None = None
    last_failed: bool = False
    flags: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """No ``--case``, ``-k``, ``--limit`` or ``--last-failed``: a run of the whole suite."""
        return not self.case_ids and self.keyword is None and self.limit is None and not self.last_failed


def matches(keyword: str, case_id: str) -> bool:
    """``-k``: a glob (``*``, ``?``, ``[…]``) matches the whole id; other text is a substring."""
    if GLOB & set(keyword):
        return fnmatch.fnmatchcase(case_id, keyword)
    return keyword in case_id


def choose(project: Any, store: EventStore | None, selection: Selection) -> dict[str, Any] | None:
    """The partial run's ``selection`` record (flags and chosen source ids), or None for the
    whole suite. Unknown ids, a ``-k`` that matches nothing and a ``--last-failed`` with no
    run to read are usage errors (exit 2), before anything is written."""
    if selection.empty:
        return None
    if selection.limit is not None and selection.limit < 1:
        raise UsageError(f"--limit {selection.limit}: must be a whole number >= 1")
    ids = [case.id for case in project.cases]
    known = set(ids)
    flags: dict[str, Any] = {}
    chosen = ids
    if selection.case_ids:
        for cid in selection.case_ids:
            if cid not in known:
                raise UsageError(f"--case {cid!r}: {project.cases_label} has no such case"
                                 f"{did_you_mean(cid, known)}")
        wanted = set(selection.case_ids)
        chosen = [c for c in chosen if c in wanted]
        flags["case"] = list(dict.fromkeys(selection.case_ids))
    if selection.keyword is not None:
        if not selection.keyword:
            raise UsageError("-k '': give a substring or a glob of case ids, e.g. -k refund or -k 'ord-00*'")
        chosen = [c for c in chosen if matches(selection.keyword, c)]
        flags["k"] = selection.keyword
        if not chosen:
            among = "none of the --case ids" if selection.case_ids else f"no case id of {project.cases_label}"
            raise UsageError(f"-k {selection.keyword!r}: {among} matches it (a substring, or a glob with * ? [...])")
    if selection.last_failed:
        run_id, bad = last_failed(project, store)
        flags["last_failed"] = run_id
        narrowed = selection.case_ids or selection.keyword is not None
        chosen = [c for c in chosen if c in bad]
        if not chosen:
            which = (f"none of the cases chosen by {'--case' if selection.case_ids else '-k'} failed or was missing"
                     if narrowed and bad else "no case failed or was missing")
            raise NothingToRun(f"{which} in run {run_id} (the latest complete run of {project.cases_label}); "
                               "nothing to run again")
    if selection.limit is not None:
        chosen = chosen[:selection.limit]
        flags["limit"] = selection.limit
    if not chosen:
        raise UsageError("the selection chose no case")
    return {**flags, "ids": chosen}


class NothingToRun(Exception):
    """``--last-failed`` when the last run failed nothing: said, and the command ends (exit 0)."""


def last_failed(project: Any, store: EventStore | None) -> tuple[str, set[str]]:
    """The latest complete, whole-suite run of this system and case file, and its source cases
    that failed or were missing on any criterion (or errored), judged under its own rules."""
    from oloproof.app.evidence import evaluate_run
    from oloproof.app.project import suite_from_stored
    from oloproof.app.runs import load_run, run_headers

    name = project.config.system.name
    if store is not None:
        for started in reversed(run_headers(store)):
            if started.system_name != name or started.cases_path != project.cases_label or started.selection:
                continue
            run = load_run(store, started.run_id)
            if run.sealed is None:
                continue
            summary = evaluate_run(store, started.run_id, suite_from_stored(started.config), keep_cases=True,
                                   sealed_only=True, regressions=False)
            bad = {source_of(c.case_id) for c in summary.cases if any(v[0] in ("fail", "missing") for v in c.verdicts)}
            recorded = {source_of(c.case_id) for c in summary.cases}
            # a case the run never recorded is missing too
            return started.run_id, bad | {c.id for c in project.cases if c.id not in recorded}
    raise UsageError(f"--last-failed: the log holds no complete run of {name} over {project.cases_label} "
                     "to take its failed cases from; run the whole suite first")


def source_of(case_id: str) -> str:
    """The source case of a case id: ``c`` of ``c``, ``c/2`` (a trial), ``c~upper`` and
    ``c/2~upper`` (derived cases)."""
    from oloproof.config.limits import split_trial

    return split_trial(case_id)[0].partition("~")[0]

"""``oloproof view``: a self-contained HTML report of a stored run (SPEC §10).

The bundle is a folder: ``index.html`` (styles and script inlined, no CDN) and ``data/``:
``summary.js`` (criteria, metrics, slices, gate), ``index.js`` (one compact row per case for
the filterable list), ``cases-N.js`` (the case panels, CHUNK cases a file, loaded only
when a case is opened) and ``search.js`` (each step's text, for the search box: loaded when
a search is made, matched in the page, offline; :func:`search_rows`). Data files are scripts,
so the folder also works from ``file://``.

``summary.js`` may carry the run's ``complete`` (bool), ``cases_committed`` and
``cases_expected``: with ``complete`` false the page opens with the banner "Incomplete run:
N of M cases recorded; the gate cannot pass"; without the field, no banner.

A comparison bundle (``oloproof view CANDIDATE --compare BASE``, :func:`build_compare_bundle`)
holds both runs' data, each in its own folder (``data/base/`` and ``data/candidate/``, the same
three kinds of file, each call naming its run: ``OLOPROOF.chunk(0, [...], "base")``), and
``data/diff.js``: the document of ``oloproof diff --json`` with what the page adds to it (the
flipped cases grouped by move and criterion, regressions first). The page opens on the
comparison; ``#view=base`` and ``#view=candidate`` are each run's ordinary report, and
``#case=ID`` opens the case's two panels side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.events import canonical_json
from oloproof.views import NO_STATE, CaseView

CHUNK = 100


def _js(call: str, *args: Any) -> str:
    return f"OLOPROOF.{call}({', '.join(_literal(a) for a in args)});\n"


def _literal(value: Any) -> str:
    """A value as JavaScript. JSON is a JS literal, except that in an object literal the key
    ``__proto__`` sets the prototype instead of making a property: recorded data holding that
    key would vanish from the report. Such data is shipped as ``JSON.parse("…")``, which keeps
    every key as it was."""
    import json

    text = canonical_json(value).decode()
    if "__proto__" in text:
        return f"JSON.parse({json.dumps(text)})"
    return text


def _steps(view: CaseView) -> Any:
    t = view.trajectory
    if t is None:
        return None
    return {
        "steps": [msgspec.to_builtins(s) for s in t.steps],
        "terminal_status": t.terminal_status, "truncated": t.truncated, "step_limit": t.step_limit,
        "constraints": [msgspec.to_builtins(c) for c in t.constraints],
        "checkpoints": [{"step_index": c.step_index, "id": c.id} for c in t.checkpoints],
    }


def case_detail(view: CaseView, result: CaseResult, suite: SuiteEvaluation, replays: list[dict[str, Any]],
                pairs: list[Any]) -> dict[str, Any]:
    """A case panel's data; ``replays`` are :func:`~oloproof.report.panel.replay_rows`."""
    from oloproof.evaluate.multiagent import route
    from oloproof.evaluate.tool_calls import call_criteria
    from oloproof.report.panel import pair_rows

    calls = call_criteria(suite.evaluators)  # their checks: expected calls beside recorded ones
    detail: dict[str, Any] = {
        "case_id": view.case_id, "input": view.input, "expected": view.expected,
        "output": view.output, "error": view.error, "traceback": view.traceback,
        "verdicts": dict(zip(suite.criteria, result.verdicts)),
        "paths": [msgspec.to_builtins(p) for p in result.paths if p.criterion not in calls],
        "tool_calls": [msgspec.to_builtins(p) for p in result.paths if p.criterion in calls],
        "trajectory": _steps(view),
        "route": route(view.trajectory) if view.trajectory is not None else None,
        "replays": [{**r, "detail": "\n".join(r["detail"])} for r in replays],
        "pairs": [{"transform": p.transform.name, "source": p.source.case_id, "derived": p.derived.case_id,
                   "rows": pair_rows(p)} for p in pairs],
    }
    if view.state is not NO_STATE:
        detail["state"] = view.state
    if view.judgements:  # model judges: what each was shown and answered, beside the person's label
        from oloproof.report.judge import judgement_details

        detail["judgements"] = judgement_details(view, suite)
    if view.attempts:  # retries: how the earlier attempts of a case run again ended
        detail["attempts"] = [{"attempt": i, "error_kind": a.error_kind, "error": a.error}
                              for i, a in enumerate(view.attempts, start=1)]
    from oloproof.report.panel import fault_line

    if fault_line(view):
        detail["fault"] = fault_line(view)
    if view.effects or view.evidence:
        from oloproof.report.panel import release_panel

        detail["release"] = release_panel(view, dict(zip(suite.criteria, result.verdicts)).get("release_class"))
    from oloproof.report.panel import cost_of

    cost = cost_of(view)
    if cost:  # reported by the agent, observed by the driver: kept apart
        detail["cost"] = cost
    return detail


def write_page(out: Path, *, compare: bool = False) -> None:
    """``index.html``: the styles and the script inlined (no CDN); the data load from ``data/``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    assets = resources.files("oloproof.report") / "assets"
    css = (assets / "view.css").read_text(encoding="utf-8")
    js = (assets / "view.js").read_text(encoding="utf-8")
    title = "Oloproof comparison report" if compare else "Oloproof run report"
    body = "<body data-mode=\"compare\">" if compare else "<body>"
    html = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title>\n<style>\n" + css + "</style></head>\n"
            + body + "<header><h1 id=\"title\">Oloproof</h1></header><main id=\"root\">"
            "<p>Loading…</p></main>\n<script>\n" + js + "</script></body></html>\n")
    (out / "index.html").write_text(html, encoding="utf-8")


def write_run_data(data: Path, summary_data: dict[str, Any], details: Iterable[dict[str, Any]],
                   criteria: list[str], run: str | None = None) -> int:
    """One run's data files in the folder ``data``: ``summary.js``, ``cases-N.js`` (CHUNK case
    panels a file), ``index.js`` and ``search.js``; each call names ``run`` (a comparison's
    ``base`` or ``candidate``) when given. Returns the number of cases.

    Nothing of the run is held whole: a chunk of panels at a time, and the index's and the
    search's rows written to their files as each case comes (the index's ``position`` map
    goes to a file beside it, joined at the end), so writing the report of a 50,000-case run
    takes the memory of a 500-case one."""
    data = Path(data)
    data.mkdir(parents=True, exist_ok=True)
    tag = () if run is None else (run,)
    summary = {k: v for k, v in summary_data.items() if k != "cases"}
    (data / "summary.js").write_text(_js("summary", summary, *tag), encoding="utf-8")
    chunk: list[dict[str, Any]] = []
    cases = chunks = steps = 0
    index = _Streamed(data / "index.js", "index", tag)
    positions = _Streamed(data / "index.position", "", ())  # the index's position map, joined at the end
    searched = _Streamed(data / "search.js", "search", tag)
    try:
        index.write('{"cases":[')
        searched.write("[")
        for d in details:
            comma = "," if cases else ""
            index.write(comma + _text([d["case_id"], cases, [d["verdicts"][c][0] for c in criteria]]))
            positions.write(comma + _text(d["case_id"]) + ":" + str(cases))
            cases += 1
            for row in search_rows(d):
                searched.write(("," if steps else "") + _text(row))
                steps += 1
            chunk.append(d)
            if len(chunk) == CHUNK:
                (data / f"cases-{chunks}.js").write_text(_js("chunk", chunks, chunk, *tag), encoding="utf-8")
                chunk, chunks = [], chunks + 1
        if chunk:
            (data / f"cases-{chunks}.js").write_text(_js("chunk", chunks, chunk, *tag), encoding="utf-8")
        searched.write("]")
        # an object's keys in canonical order: cases, chunk_size, criteria, position
        index.write(f'],"chunk_size":{CHUNK},"criteria":{_text(criteria)},"position":{{')
        positions.close_into(index)
        index.write("}}")
    except BaseException:
        for f in (index, positions, searched):
            f.discard()
        raise
    positions.discard()
    index.close()
    searched.close()
    return cases


def _text(value: Any) -> str:
    return canonical_json(value).decode()


class _Streamed:
    """A data file ``OLOPROOF.<call>(<value>, <tag…>);`` whose value's JSON is written piece by
    piece (:meth:`write`). As :func:`_literal` does for a whole value, JSON holding the key
    ``__proto__`` is shipped as ``JSON.parse("…")``: the file is then written again that way
    when it is closed (the value streamed back from it, never held)."""

    _PIECE = 1 << 20

    def __init__(self, path: Path, call: str, tag: tuple[str, ...]):
        self.path, self.tag = path, tag
        self.prefix = f"OLOPROOF.{call}(" if call else ""
        self.file = open(path, "w", encoding="utf-8")  # closed by close() or discard()
        self.file.write(self.prefix)
        self.proto = False

    def write(self, text: str) -> None:
        """The next piece of the value's JSON."""
        self.proto = self.proto or "__proto__" in text
        self.file.write(text)

    def close_into(self, other: _Streamed) -> None:
        """Append what was written here to ``other`` (a piece at a time)."""
        self.file.close()
        with open(self.path, encoding="utf-8") as f:
            while piece := f.read(self._PIECE):
                other.write(piece)
        other.proto = other.proto or self.proto  # "__proto__" may straddle two pieces

    def discard(self) -> None:
        """Remove this file (a part of another)."""
        if not self.file.closed:
            self.file.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        """End the call (the tag, if any) and close the file."""
        if self.file.closed:
            return
        suffix = "".join(", " + _literal(t) for t in self.tag) + ");\n"
        self.file.write(suffix)
        self.file.close()
        if self.proto:
            self._as_json_parse(suffix)

    def _as_json_parse(self, suffix: str) -> None:
        import json

        wrapped = self.path.with_name(self.path.name + ".tmp")
        with open(self.path, encoding="utf-8") as src, open(wrapped, "w", encoding="utf-8") as out:
            src.read(len(self.prefix))
            out.write(self.prefix + 'JSON.parse("')
            pending = ""
            while piece := src.read(self._PIECE):
                pending += piece
                keep = len(suffix)  # held back: the value ends where the suffix begins
                if len(pending) > keep:
                    out.write(json.dumps(pending[:-keep])[1:-1])
                    pending = pending[-keep:]
            assert pending.endswith(suffix), pending
            out.write(json.dumps(pending[:-len(suffix)])[1:-1] + '")' + suffix)
        wrapped.replace(self.path)


#: characters of a step's text the report's search box looks through (and shows)
SEARCH_TEXT = 400


def search_rows(detail: dict[str, Any]) -> list[list[Any]]:
    """The rows of ``data/search.js`` for one case panel: ``[case_id, step, kind, tool, text]``
    for every step (its tool, agents, arguments and result as JSON text, cut to
    SEARCH_TEXT characters) and for the error that ended the case (step ``null``, kind
    ``error``) — what the search box matches, without loading the case panels."""
    case_id = detail["case_id"]
    out: list[list[Any]] = []
    for step in (detail.get("trajectory") or {}).get("steps", []):
        parts = [x for x in (step.get("tool_name"), step.get("agent"), step.get("to_agent")) if x]
        parts.extend(canonical_json(step[k]).decode() for k in ("arguments", "result") if step.get(k) is not None)
        out.append([case_id, step.get("index"), step.get("kind"), step.get("tool_name"), " ".join(parts)[:SEARCH_TEXT]])
    if detail.get("error"):
        out.append([case_id, None, "error", None, str(detail["error"])[:SEARCH_TEXT]])
    for j in detail.get("judgements") or ():  # a judge's explanation (or error) is searchable too
        text = " ".join(str(x) for x in (j["criterion"], j["verdict"], j.get("explanation"), j.get("error")) if x)
        out.append([case_id, None, "judgement", None, text[:SEARCH_TEXT]])
    return out


def write_bundle(out: Path, summary_data: dict[str, Any], details: Iterable[dict[str, Any]],
                 criteria: list[str]) -> int:
    """Write the report folder; returns the number of cases."""
    out = Path(out)
    write_page(out)
    return write_run_data(out / "data", summary_data, details, criteria)


def run_bundle_data(store: Any, run_id: str) -> tuple[dict[str, Any], Iterator[dict[str, Any]], list[str]]:
    """A stored run's summary, its case panels (lazily, in suite order) and its criteria."""
    from oloproof.app.reports import case_panels, run_report
    from oloproof.report.panel import replay_rows
    from oloproof.report.results import results_dict

    report = run_report(store, run_id)
    s = report.run.started
    sealed = report.run.sealed
    summary_data = results_dict(run_id, s.system_name, s.system_version, report.suite, report.summary,
                                sealed.digest if sealed else None)
    details = (case_detail(p.view, p.result, report.suite, replay_rows(p.view, p.replays), p.pairs)
               for p in case_panels(store, report))
    return summary_data, details, report.suite.criteria


def build_run_bundle(store: Any, run_id: str, out: Path) -> int:
    """The HTML report of a stored run, written to ``out`` (nothing runs)."""
    summary_data, details, criteria = run_bundle_data(store, run_id)
    return write_bundle(out, summary_data, details, criteria)


#: the moves of a flipped case, in the order the comparison page lists them (regressions first)
MOVES = (("regressions", "pass → fail"), ("to_missing", "→ missing"), ("fixes", "fail → pass"),
         ("from_missing", "missing →"))


def compare_page_data(d: Any) -> dict[str, Any]:
    """What the comparison page shows beyond ``diff_dict(d)``: the criteria in the terminal's
    order (the most regressions first), the flipped cases grouped by move and criterion —
    every pass → fail group first, then into missing, fail → pass, out of missing — and how
    many cases each run recorded."""
    ordered = sorted(d.criteria, key=lambda x: (-len(x.flips.regressions) - len(x.flips.lost), x.criterion))
    groups = [{"criterion": x.criterion, "move": move, "label": label, "cases": list(getattr(x.flips, move))}
              for move, label in MOVES for x in ordered if getattr(x.flips, move)]
    runs = {role: {"complete": summary.complete, "cases_committed": summary.cases_committed,
                   "cases_expected": summary.cases_expected}
            for role, summary in (("base", d.base_summary), ("candidate", d.candidate_summary))}
    return {"criteria_order": [x.criterion for x in ordered], "flipped": groups, "runs": runs}


@dataclass
class CompareBundle:
    """A comparison report written by :func:`build_compare_bundle`: both run ids, the cases
    each run's data holds and how many cases paired."""

    base_id: str
    candidate_id: str
    base_cases: int
    candidate_cases: int
    paired: int = 0


def build_compare_bundle(store: Any, base_ref: str, candidate_ref: str, out: Path, *,
                         allow_unpaired: bool = False) -> CompareBundle:
    """The comparison report of two stored runs, written to ``out``. The references are
    resolved and the runs compared (:func:`~oloproof.app.diff.diff_runs`: an unknown reference
    or the same run twice is a UsageError) before anything is written."""
    from oloproof.app.diff import diff_runs
    from oloproof.report.compare import diff_dict

    d = diff_runs(store, base_ref, candidate_ref, allow_unpaired=allow_unpaired)
    document, page = diff_dict(d), compare_page_data(d)
    out = Path(out)
    counts = {}
    for role, run in (("base", d.base), ("candidate", d.candidate)):
        summary_data, details, criteria = run_bundle_data(store, run.started.run_id)
        counts[role] = write_run_data(out / "data" / role, summary_data, details, criteria, role)
    (out / "data" / "diff.js").write_text(_js("diff", document, page), encoding="utf-8")
    write_page(out, compare=True)
    return CompareBundle(d.base.started.run_id, d.candidate.started.run_id, counts["base"], counts["candidate"],
                         len(d.pairing.paired))

"""``oloproof view``: a self-contained HTML report of a stored run (SPEC §10).

The bundle is a folder: ``index.html`` (styles and script inlined, no CDN) and ``data/``:
``summary.js`` (criteria, metrics, slices, gate), ``index.js`` (one compact row per case for
the filterable list) and ``cases-N.js`` (the case panels, CHUNK cases a file, loaded only
when a case is opened). Data files are scripts, so the folder also works from ``file://``.

``summary.js`` may carry the run's ``complete`` (bool), ``cases_committed`` and
``cases_expected``: with ``complete`` false the page opens with the banner "Incomplete run:
N of M cases recorded; the gate cannot pass"; without the field, no banner.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.events import canonical_json
from oloproof.views import NO_STATE, CaseView

CHUNK = 100


def _js(call: str, *args: Any) -> str:
    return f"OLOPROOF.{call}({', '.join(canonical_json(a).decode() for a in args)});\n"


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
    from oloproof.report.panel import pair_rows

    detail: dict[str, Any] = {
        "case_id": view.case_id, "input": view.input, "expected": view.expected,
        "output": view.output, "error": view.error,
        "verdicts": dict(zip(suite.criteria, result.verdicts)),
        "paths": [msgspec.to_builtins(p) for p in result.paths],
        "trajectory": _steps(view),
        "route": route(view.trajectory) if view.trajectory is not None else None,
        "replays": [{**r, "detail": "\n".join(r["detail"])} for r in replays],
        "pairs": [{"transform": p.transform.name, "source": p.source.case_id, "derived": p.derived.case_id,
                   "rows": pair_rows(p)} for p in pairs],
    }
    if view.state is not NO_STATE:
        detail["state"] = view.state
    return detail


def write_bundle(out: Path, summary_data: dict[str, Any], details: Iterable[dict[str, Any]],
                 criteria: list[str]) -> int:
    """Write the report folder; returns the number of cases."""
    out = Path(out)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    assets = resources.files("oloproof.report") / "assets"
    css = (assets / "view.css").read_text(encoding="utf-8")
    js = (assets / "view.js").read_text(encoding="utf-8")
    html = ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>Oloproof run report</title>\n<style>\n" + css + "</style></head>\n"
            "<body><header><h1 id=\"title\">Oloproof</h1></header><main id=\"root\">"
            "<p>Loading…</p></main>\n<script>\n" + js + "</script></body></html>\n")
    (out / "index.html").write_text(html, encoding="utf-8")
    summary = {k: v for k, v in summary_data.items() if k != "cases"}
    (data / "summary.js").write_text(_js("summary", summary), encoding="utf-8")
    rows, chunk, n = [], [], 0
    for i, d in enumerate(details):
        rows.append([d["case_id"], i, [d["verdicts"][c][0] for c in criteria]])
        chunk.append(d)
        if len(chunk) == CHUNK:
            (data / f"cases-{n}.js").write_text(_js("chunk", n, chunk), encoding="utf-8")
            chunk, n = [], n + 1
    if chunk:
        (data / f"cases-{n}.js").write_text(_js("chunk", n, chunk), encoding="utf-8")
    index = {"criteria": criteria, "cases": rows, "chunk_size": CHUNK,
             "position": {r[0]: r[1] for r in rows}}
    (data / "index.js").write_text(_js("index", index), encoding="utf-8")
    return len(rows)


def build_run_bundle(store: Any, run_id: str, out: Path) -> int:
    """The HTML report of a stored run, written to ``out`` (nothing runs)."""
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
    return write_bundle(out, summary_data, details, report.suite.criteria)

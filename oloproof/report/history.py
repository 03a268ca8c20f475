"""A system's runs over time, rendered: ``oloproof history`` and ``oloproof flaky`` as terminal
tables and JSON documents, and the trend page of ``oloproof view --history`` (offline HTML,
inline SVG, no script).

Terminal: a trend table (one sparkline per criterion: one block per run on a fixed 0–100 %
scale, ``·`` for a partial run or a run with nothing observed; on a terminal a block is red or
green where the run's paired test against the run before is significant at 5 % — the block
and the numbers say it without colour), then one row per run with each criterion's rate,
interval and test. Recorded text (case ids, criterion names) is literal text, never markup.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text

from oloproof.app.history import FlakyCase, FlakyReport, History, LeftOut, RunPoint, spark_char
from oloproof.evaluate.compare import Flips
from oloproof.report.terminal import Grid, interval_text, one_line, pct, plural
from oloproof.stats.intervals import RateInterval, round_outward

#: a test this significant colours its run's block of the sparkline (on a terminal)
SIGNIFICANT = 0.05


# ---- JSON ------------------------------------------------------------------------------------

def _rate(r: RateInterval) -> dict[str, Any]:
    return {"passed": r.passed, "observed": r.observed, "missing": r.missing, "excluded": r.excluded,
            "rate": r.rate, "low": r.low, "high": r.high, "method": r.method,
            **({"clusters": r.clusters} if r.approximate else {})}


def _test(f: Flips, base: str | None) -> dict[str, Any]:
    return {"base": base, "regressions": f.regressions, "fixes": f.fixes, "to_missing": f.to_missing,
            "from_missing": f.from_missing, "paired": f.paired, "p_value": f.p_value, "method": f.method}


def _left_out(left: LeftOut) -> dict[str, Any]:
    return {"unsealed": left.unsealed, "broken": [{"run_id": r, "problem": p} for r, p in left.broken]}


def _run(p: RunPoint, criteria: list[str]) -> dict[str, Any]:
    s = p.run.started
    from oloproof.app.runs import selection_text

    rows = []
    for c in criteria:
        r = p.criteria.get(c)
        if r is None:
            continue
        f = p.comparison.flips.get(c)
        rows.append({"criterion": c, **_rate(r), "test": None if f is None else _test(f, p.comparison.base)})
    return {"run_id": p.run_id, "started": s.started_at, "version": s.system_version, "code_digest": s.code_digest,
            "log_digest": p.run.sealed.digest if p.run.sealed is not None else None,
            "partial": p.partial, "selection": selection_text(s.selection), "cases": p.cases,
            "compared_with": p.comparison.base if p.comparison.flips else None,
            "comparison_note": p.comparison.note, "criteria": rows}


def flaky_entry(f: FlakyCase) -> dict[str, Any]:
    """One flaky case as JSON."""
    return {"case_id": f.case_id, "criterion": f.criterion, "fingerprint": f.fingerprint, "version": f.version,
            "code_digest": f.code_digest, "observations": f.observations, "pass": f.passed, "fail": f.failed,
            "missing": f.missing, "excluded": f.excluded, "passed_in": f.passed_in, "failed_in": f.failed_in}


def history_dict(h: History, *, flaky: bool = False) -> dict[str, Any]:
    """``oloproof history --json``: the system, its criteria, each sealed run (oldest first)
    with its criteria rows and each row's paired test against the run before (``test``: None
    for the first run, a run compared with nothing, or a criterion the run before did not
    judge), the sparkline and rates of each criterion, and the runs left out."""
    out = {
        "system": h.system,
        "criteria": h.criteria,
        "runs": [_run(p, h.criteria) for p in h.runs],
        "trend": [{"criterion": c, "sparkline": h.sparkline(c), "rates": h.trend(c)} for c in h.criteria],
        "left_out": _left_out(h.left_out),
    }
    if flaky:
        out["flaky"] = [flaky_entry(f) for f in h.flaky]
    return out


def flaky_dict(r: FlakyReport) -> dict[str, Any]:
    """``oloproof flaky --json``: the system, the runs looked at, the flaky cases with their
    counts, and the runs left out."""
    return {"system": r.system, "runs": r.runs, "flaky": [flaky_entry(f) for f in r.flaky],
            "left_out": _left_out(r.left_out)}


# ---- terminal -------------------------------------------------------------------------------

def test_text(f: Flips | None) -> str:
    """``↓2 ↑0 p=0.5``: pass→fail and fail→pass against the run before, with McNemar's exact
    p-value; ``–`` without a test."""
    if f is None:
        return "–"
    return f"↓{len(f.regressions)} ↑{len(f.fixes)} p={f.p_value:.3g}"


def _style(f: Flips | None) -> str:
    if f is None or f.p_value >= SIGNIFICANT:
        return ""
    return "red" if len(f.regressions) > len(f.fixes) else "green"


def sparkline_text(h: History, criterion: str) -> Text:
    """The criterion's sparkline, a block per run; on a terminal a block whose run's test
    against the run before is significant is red (more pass→fail) or green (more fail→pass)."""
    out = Text()
    for p, rate in zip(h.runs, h.trend(criterion)):
        out.append(spark_char(rate), style=_style(p.comparison.flips.get(criterion)))
    return out


def _number(h: History) -> dict[str, int]:
    return {p.run_id: i for i, p in enumerate(h.runs, start=1)}


def _against(h: History, p: RunPoint) -> str:
    if not p.comparison.flips:
        return p.comparison.note or "–"
    base = p.comparison.base
    n = _number(h).get(base or "")
    return f"#{n}" if n is not None else f"{base} (before these runs)"


def _left_note(left: LeftOut) -> list[Text]:
    out = []
    if left.unsealed:
        out.append(Text(f"left out: {plural(len(left.unsealed), 'run')} not sealed (unfinished or stopped): "
                        + ", ".join(left.unsealed[:5]) + (" …" if len(left.unsealed) > 5 else "")))
    for run_id, problem in left.broken:
        out.append(Text(f"left out: run {run_id} cannot be judged ({one_line(problem)})"))
    return out


def history_view(h: History) -> Group:
    """``oloproof history``: the trend of each criterion, then each run with its criteria and
    its paired tests against the run before."""
    parts: list[Any] = [Text(f"history of {h.system}: {plural(len(h.runs), 'sealed run')}, oldest first",
                             style="bold")]
    parts += _left_note(h.left_out)
    if not h.runs:
        parts.append(Text("no sealed run to show"))
        return Group(*parts)
    trend = Grid(("criterion", "key"), ("trend", "key"), ("first", "key"), ("latest", "key"),
                 ("latest interval", "key"), ("latest against the run before", "text"))
    for c in h.criteria:
        rates = [(p, p.criteria[c]) for p in h.runs if c in p.criteria and not p.partial]
        first = rates[0][1] if rates else None
        last_point, last = rates[-1] if rates else (None, None)
        f = last_point.comparison.flips.get(c) if last_point is not None else None
        trend.add_row(c, sparkline_text(h, c), pct(first.rate if first else None), pct(last.rate if last else None),
                      interval_text(last) if last is not None else "–", test_text(f))
    parts.append(trend)
    columns: list[tuple[str, str]] = [("#", "key"), ("run", "key"), ("version", "key"), ("code", "key"),
                                      ("cases", "key"), ("against", "text")]
    columns += [(c, "text") for c in h.criteria]
    runs = Grid(*columns)
    for i, p in enumerate(h.runs, start=1):
        s = p.run.started
        cells: list[Any] = [str(i), p.run_id + (" (partial)" if p.partial else ""), s.system_version,
                            (s.code_digest or "–")[:12], str(p.cases), _against(h, p)]
        for c in h.criteria:
            r = p.criteria.get(c)
            if r is None:
                cells.append("not judged")
                continue
            f = p.comparison.flips.get(c)
            cell = Text(f"{pct(r.rate)} {interval_text(r)}\n")
            cell.append(test_text(f), style=_style(f))
            cells.append(cell)
        runs.add_row(*cells)
    parts.append(runs)
    parts.append(Text("trend: one block per run on a 0–100 % scale, · a partial run or nothing observed. "
                      "↓ pass→fail, ↑ fail→pass on the cases paired with the run before ('against': "
                      "the latest earlier sealed run that is not partial); p: McNemar's exact test (two-sided), "
                      "as 'oloproof diff'. Moves into or out of missing are kept out of the test."))
    return Group(*parts)


def flaky_table(cases: list[FlakyCase]) -> Grid:
    """One row per flaky case and criterion: version, code, the counts and where it failed."""
    t = Grid(("case", "key"), ("criterion", "key"), ("version", "key"), ("code", "key"), ("pass", "key"),
             ("fail", "key"), ("missing", "key"), ("failed in", "text"))
    for f in cases:
        t.add_row(f.case_id, f.criterion, f.version, (f.code_digest or "–")[:12], str(f.passed), str(f.failed),
                  str(f.missing), ", ".join(f.failed_in[:4]) + (f" … ({len(f.failed_in)} runs)"
                                                                if len(f.failed_in) > 4 else ""))
    return t


def flaky_view(r: FlakyReport) -> Group:
    """``oloproof flaky``: the flaky cases among the runs looked at, with their counts."""
    parts: list[Any] = [Text(f"flaky cases of {r.system} across {plural(len(r.runs), 'sealed run')}: a verdict "
                             "that differs between runs (or trials) with the same fingerprint, version, code and "
                             "criterion configuration", style="bold")]
    parts += _left_note(r.left_out)
    if r.flaky:
        parts.append(flaky_table(r.flaky))
        cases = len({f.case_id for f in r.flaky})
        criteria = len({f.criterion for f in r.flaky})
        parts.append(Text(f"{plural(cases, 'case')} flaky on {plural(criteria, 'criterion', 'criteria')} "
                          f"({plural(len(r.flaky), 'row')}): a pass→fail of one of them between two runs may be "
                          "noise ('oloproof diff' marks it)"))
    else:
        parts.append(Text("no flaky case: every case kept its verdict across these runs"
                          + (" (one run: run the suite again, or with trials: k, to see)" if len(r.runs) < 2 else "")))
    return Group(*parts)


# ---- the trend page (view --history) ----------------------------------------------------------

WIDTH, HEIGHT, PAD = 640, 180, 36


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}%"


def _interval(r: RateInterval) -> str:
    if r.low is None or r.high is None:
        return "no observations"
    lo, hi = round_outward(r.low, r.high)
    return f"[{lo:.1f}%, {hi:.1f}%]"


def trend_svg(h: History, criterion: str, links: dict[str, str]) -> str:
    """One criterion across the runs as inline SVG: the interval as a band, the rate as a line
    with a point per run (a partial run as a hollow point, off the line), each point linking
    to its run's report, with a title for a tooltip."""
    n = len(h.runs)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD

    def x(i: int) -> float:
        return PAD + (inner_w * i / (n - 1) if n > 1 else inner_w / 2)

    def y(v: float) -> float:
        return PAD + inner_h * (1 - v)

    parts = [f'<svg class="trend" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             f'data-criterion="{_e(criterion)}">',
             f"<title>{_e(criterion)}: rate and 95 % interval per run</title>"]
    for v in (0.0, 0.5, 1.0):
        parts.append(f'<line class="grid" x1="{PAD}" x2="{WIDTH - PAD}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                     f'<text class="axis" x="{PAD - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{int(v * 100)}%</text>')
    full = [(i, p.criteria[criterion]) for i, p in enumerate(h.runs)
            if criterion in p.criteria and not p.partial and p.criteria[criterion].low is not None]
    if full:  # the band: each full run's interval, joined
        top = " ".join(f"{x(i):.1f},{y(r.high or 0):.1f}" for i, r in full)
        bottom = " ".join(f"{x(i):.1f},{y(r.low or 0):.1f}" for i, r in reversed(full))
        parts.append(f'<polygon class="band" points="{top} {bottom}"/>')
        line = " ".join(f"{x(i):.1f},{y(r.rate):.1f}" for i, r in full if r.rate is not None)
        if line:
            parts.append(f'<polyline class="rate" points="{line}"/>')
    for i, p in enumerate(h.runs):
        r = p.criteria.get(criterion)
        if r is None or r.rate is None:
            continue
        f = p.comparison.flips.get(criterion)
        test = "" if f is None else f"; against the run before: {test_text(f)}"
        tip = (f"run {p.run_id}{' (partial)' if p.partial else ''} · {p.run.started.system_version}: "
               f"{_pct(r.rate)} {_interval(r)}{test}")
        cls = "point partial" if p.partial else f"point {_style(f) or 'plain'}"
        circle = (f'<circle class="{cls}" cx="{x(i):.1f}" cy="{y(r.rate):.1f}" r="4" data-run="{_e(p.run_id)}">'
                  f"<title>{_e(tip)}</title></circle>")
        href = links.get(p.run_id)
        parts.append(f'<a href="{_e(href)}">{circle}</a>' if href else circle)
        parts.append(f'<text class="axis" x="{x(i):.1f}" y="{HEIGHT - PAD + 16}" text-anchor="middle">#{i + 1}</text>')
    parts.append("</svg>")
    return "".join(parts)


def history_page(h: History, links: dict[str, str]) -> str:
    """The trend page: per criterion its trend as inline SVG (no script, no external file) and
    a table of each run's rate, interval and test; the runs with links into their reports; the
    flaky cases. Everything recorded is escaped."""
    css = (Path(__file__).parent / "assets" / "history.css").read_text(encoding="utf-8")
    number = _number(h)
    out = ["<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
           f"<title>Oloproof history: {_e(h.system)}</title>\n<style>\n{css}</style></head>\n<body>",
           f'<header><h1 id="title">History of {_e(h.system)}</h1>'
           f'<p id="summary">{plural(len(h.runs), "sealed run")}, oldest first; each run judged under the '
           "rules it ran with, from its events</p></header><main>"]
    left = []
    if h.left_out.unsealed:
        left.append(f"{plural(len(h.left_out.unsealed), 'run')} not sealed left out: "
                    + ", ".join(h.left_out.unsealed))
    left += [f"run {r} cannot be judged: {p}" for r, p in h.left_out.broken]
    if left:
        out.append('<p id="left-out">' + "<br>".join(_e(x) for x in left) + "</p>")
    rows = []
    for i, p in enumerate(h.runs, start=1):
        s = p.run.started
        href = links.get(p.run_id)
        name = f'<a class="run" href="{_e(href)}">{_e(p.run_id)}</a>' if href else _e(p.run_id)
        against = _e(_against(h, p))
        rows.append(f'<tr data-run="{_e(p.run_id)}"><td>#{i}</td><td>{name}'
                    f'{" <span class=partial>partial</span>" if p.partial else ""}</td><td>{_e(s.started_at)}</td>'
                    f"<td>{_e(s.system_version)}</td><td><code>{_e((s.code_digest or '–')[:12])}</code></td>"
                    f"<td>{p.cases}</td><td>{against}</td></tr>")
    out.append('<section id="runs"><h2>Runs</h2><table><thead><tr><th>#</th><th>run</th><th>started</th>'
               "<th>version</th><th>code</th><th>cases</th><th>compared with</th></tr></thead><tbody>"
               + "".join(rows) + "</tbody></table></section>")
    for c in h.criteria:
        body = []
        for p in h.runs:
            r = p.criteria.get(c)
            if r is None:
                continue
            f = p.comparison.flips.get(c)
            moved = ""
            if f is not None and (f.regressions or f.fixes):
                moved = _e(", ".join([*(f"{x} ↓" for x in f.regressions[:8]), *(f"{x} ↑" for x in f.fixes[:8])]))
            body.append(f'<tr data-run="{_e(p.run_id)}"><td>#{number[p.run_id]}</td><td>{_pct(r.rate)}</td>'
                        f"<td>{_interval(r)}</td><td>{r.passed} / {r.observed} observed · {r.missing} missing · "
                        f"{r.excluded} excluded</td><td class=\"test\">{_e(test_text(f))}</td>"
                        f'<td class="moved">{moved}</td></tr>')
        out.append(f'<section class="criterion" data-criterion="{_e(c)}"><h2>{_e(c)}</h2>'
                   + trend_svg(h, c, links)
                   + "<table><thead><tr><th>run</th><th>rate</th><th>interval</th><th>evidence</th>"
                   "<th>against the run before</th><th>cases that moved</th></tr></thead><tbody>"
                   + "".join(body) + "</tbody></table></section>")
    flaky_rows = []
    from oloproof.app.refs import trials_of

    trials = {p.run_id: trials_of(p.run) for p in h.runs}
    for fc in h.flaky:
        failed = ", ".join(f"<a href=\"{_e(links[r] + _case_anchor(fc, trials.get(r, 1)))}\">{_e(r)}</a>"
                           if r in links else _e(r) for r in fc.failed_in)
        flaky_rows.append(f'<tr data-case="{_e(fc.case_id)}"><td>{_e(fc.case_id)}</td><td>{_e(fc.criterion)}</td>'
                          f"<td>{_e(fc.version)}</td><td><code>{_e((fc.code_digest or '–')[:12])}</code></td>"
                          f"<td>{fc.passed}</td><td>{fc.failed}</td><td>{fc.missing}</td><td>{failed}</td></tr>")
    out.append('<section id="flaky"><h2>Flaky cases</h2><p>A verdict that differs between runs (or trials) '
               "with the same fingerprint, version, code and criterion configuration: a pass→fail of one of "
               "these between two runs may be noise.</p>"
               + ("<table><thead><tr><th>case</th><th>criterion</th><th>version</th><th>code</th><th>pass</th>"
                  "<th>fail</th><th>missing</th><th>failed in</th></tr></thead><tbody>"
                  + "".join(flaky_rows) + "</tbody></table>" if flaky_rows
                  else '<p id="no-flaky">no flaky case among these runs</p>')
               + "</section>")
    out.append('<footer><p>Rates over observed cases; intervals are exact 95 % intervals with missing cases '
               "in the denominator; the band joins each full run's interval, a hollow point is a partial run. "
               "Tests: McNemar's exact test on the cases paired with the run before (↓ pass→fail, ↑ fail→pass). "
               "They say what changed, not why.</p></footer></main></body></html>\n")
    return "".join(out)


def _case_anchor(f: FlakyCase, trials: int) -> str:
    """Where a flaky case is in a run's report: its panel, or — its trials being several
    cases there — the list of the criterion's failing cases."""
    from urllib.parse import quote

    if trials > 1:
        return f"#criterion={quote(f.criterion, safe='')}&verdict=fail"
    return "#case=" + quote(f.case_id, safe="")


@dataclass
class HistoryBundle:
    """A trend page written by :func:`build_history_bundle`: the system, the runs shown and the
    flaky cases found."""

    system: str
    runs: int
    flaky: int


def build_history_bundle(store: Any, run_ref: str, out: Path, *, last: int | None = None) -> HistoryBundle:
    """``oloproof view RUN --history``: the trend page of RUN's system (``index.html``) and the
    report of each of its sealed runs (``runs/<n>/``, as ``oloproof view`` writes one), linked
    from the page. Nothing loads from the network; the page has no script."""
    from oloproof.app.history import history
    from oloproof.app.runs import load_run, resolve_run
    from oloproof.report.bundle import build_run_bundle

    system = load_run(store, resolve_run(store, run_ref)).started.system_name
    out = Path(out)
    links: dict[str, str] = {}

    def report(j: Any) -> None:
        n = len(links) + 1
        build_run_bundle(store, j.run.run_id, out / "runs" / str(n))
        links[j.run.run_id] = f"runs/{n}/index.html"

    h = history(store, system, last=last, with_flaky=True, on_run=report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text(history_page(h, links), encoding="utf-8")
    return HistoryBundle(h.system, len(h.runs), len(h.flaky))

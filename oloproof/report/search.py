"""The terminal view of ``oloproof search``: hits grouped by run and case, each case with the
``oloproof show`` command that reads it from the events; matched terms highlighted with a
style, never through markup (recorded text is shown literally, controls escaped)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from rich.console import Group
from rich.text import Text

from oloproof.report.terminal import one_line, plural, printable
from oloproof.store.search import MARK_OFF, MARK_ON

_SPACES = re.compile(r"[ \t]{2,}")


def _line(value: Any, width: int = 60) -> str:
    """Recorded text on one short line: a newline, a tab or a run of spaces in a tool's name
    cannot push text onto a line of its own and fake a hit or a run below it."""
    text = _SPACES.sub(" ", one_line(value))
    return text if len(text) <= width else text[:width - 1] + "…"


def _one_line(text: Text) -> Text:
    # never wrapped: a long line is cut at the terminal's width, so wrapping cannot start a
    # line with recorded text either
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


def _snippet(snippet: str) -> Text:
    out = Text()
    on = False
    for part in snippet.replace(MARK_OFF, MARK_ON).split(MARK_ON):
        out.append(_SPACES.sub(" ", printable(part).replace("\n", " ").replace("\t", " ")),
                   style="bold reverse" if on else None)
        on = not on
    return out


def search_view(result: Any) -> Group:
    """``result``: an :class:`oloproof.app.search.SearchResult`."""
    parts: list[Any] = []
    cases = result.cases()
    query = _line(result.query)
    if not result.hits:
        parts.append(Text(f"no step matches {query!r}"))
    else:
        more = f" (the newest {result.limit}: --limit shows more)" if result.truncated else ""
        parts.append(Text(f"{plural(len(result.hits), 'step')} in {plural(len(cases), 'case')} match {query!r}, "
                          f"newest runs first{more}"))
    run = case = None
    for hit in result.hits:
        if hit.run_id != run:
            run, case = hit.run_id, None
            system, version = result.systems.get(run, ("?", "?"))
            parts.append(Text(""))
            parts.append(Text(f"run {_line(run, 300)}  {_line(system)} {_line(version)}", style="bold"))
        if hit.case_id != case:
            case = hit.case_id
            from oloproof.report.terminal import case_argument

            command = f"oloproof show {shlex.quote(hit.run_id)} {case_argument(case)}"  # (run is hit.run_id)
            parts.append(Text.assemble("  case ", (_line(case, 300), "bold"), f"   {_line(command, 700)}"))
        where = f"step {hit.step}" if hit.step is not None else "judge" if hit.kind == "judgement" else "end"
        if hit.replay:
            where = f"replay {_line(hit.replay)[:12]} {where}"
        line = Text(f"    {where:<10} {_line(hit.kind or '?'):<11} {_line(hit.tool_name or '-'):<18} ")
        line.append_text(_snippet(hit.snippet))
        parts.append(line)
    if result.lag:
        parts.append(Text(""))
        parts.append(Text(f"note: {plural(result.lag, 'event')} not indexed yet (a run is writing, or the log is "
                          "from an older version: 'oloproof audit rebuild' indexes everything)"))
    return Group(*(_one_line(p) for p in parts))

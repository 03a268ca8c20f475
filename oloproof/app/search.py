"""``oloproof search``: full-text search over every stored step (issue 16).

The search projection (:mod:`oloproof.store.search`) is a cache of the events: it answers
*where* something was recorded — which runs called ``delete_customer``, which cases mention an
order id — and never decides anything; each hit names the ``oloproof show`` command that reads
the case from the events themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any

from oloproof.errors import UsageError
from oloproof.records import STEP_KINDS
from oloproof.store.base import EventStore
from oloproof.store.search import MARK_OFF, MARK_ON, SearchFilter

#: the kinds a hit can have: the step kinds, and ``error`` (a case or replay that ended in one)
KINDS = tuple(sorted(STEP_KINDS | {"error"}))
VERDICTS = ("pass", "fail", "missing", "excluded")
MAX_QUERY = 1000
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class SearchHit:
    """One matching step (or case error): where it was recorded and a snippet with the
    matched terms marked. A pointer into the log, never evidence by itself."""

    run_id: str
    case_id: str
    step: int | None
    kind: str
    tool_name: str | None
    snippet: str  # the matched terms between MARK_ON and MARK_OFF
    replay: str | None  # the replay's cache key, when the step is one of a replay's

    def json(self) -> dict[str, Any]:
        """The hit as ``--json`` writes it: the matched terms between « and »."""
        return {"run_id": self.run_id, "case_id": self.case_id, "step": self.step, "kind": self.kind,
                "tool_name": self.tool_name, "snippet": self.snippet.replace(MARK_ON, "«").replace(MARK_OFF, "»"),
                "replay": self.replay}


@dataclass
class SearchResult:
    """The hits of one search, run by run, with the ``lag`` of the index behind the log and
    the system of each run hit."""

    query: str
    hits: list[SearchHit]
    limit: int
    lag: int  # searchable events the index does not hold yet
    systems: dict[str, tuple[str, str]] = field(default_factory=dict)  # run id → (system, version)
    #: what was searched instead of the query as typed (a query FTS5 cannot parse, as a phrase)
    note: str | None = None

    @property
    def truncated(self) -> bool:
        """The search hit its limit: more steps may match than are shown."""
        return len(self.hits) >= self.limit

    def cases(self) -> list[tuple[str, str]]:
        """The (run, case) pairs hit, in the order shown."""
        return list(dict.fromkeys((h.run_id, h.case_id) for h in self.hits))


def _choice(value: str | None, choices: tuple[str, ...], option: str) -> str | None:
    if value is None or value in choices:
        return value
    near = get_close_matches(value, choices, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise UsageError(f"{option} {value!r} is not one of {', '.join(choices)}{hint}")


def parse_verdict(text: str | None) -> tuple[str, str] | None:
    """``CRITERION=VERDICT`` (``answer_correct=fail``)."""
    if text is None:
        return None
    criterion, sep, verdict = text.partition("=")
    if not sep or not criterion.strip():
        raise UsageError(f"--verdict {text!r}: expected CRITERION=VERDICT, e.g. answer_correct=fail")
    verdict = verdict.strip().lower()
    if verdict not in VERDICTS:
        near = get_close_matches(verdict, VERDICTS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UsageError(f"--verdict {text!r}: the verdict must be one of {', '.join(VERDICTS)}{hint}")
    return criterion.strip(), verdict


def search_log(store: EventStore, query: str, *, run: str | None = None, system: str | None = None,
               tool: str | None = None, kind: str | None = None, verdict: str | None = None,
               limit: int = 50) -> SearchResult:
    """The newest ``limit`` steps matching ``query`` (FTS5 syntax) and the filters, grouped
    newest run first, then in recorded order within a run."""
    from oloproof.app.runs import resolve_run, run_headers

    if not query.strip():
        raise UsageError("the search query is empty: give words to look for, e.g. oloproof search delete_customer")
    if len(query) > MAX_QUERY:
        raise UsageError(f"the search query is {len(query):,} characters long; at most {MAX_QUERY:,}")
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit {limit}: between 1 and {MAX_LIMIT:,}")
    run_ids: tuple[str, ...] = ()
    if run is not None:
        run_ids = (resolve_run(store, run),)
        if store.first_event(run_ids[0]) is None:
            raise UsageError(f"--run {run!r}: no such run in the log ('oloproof runs' lists them)")
    where = SearchFilter(run_ids=run_ids, system=system,
                         tool=tool, kind=_choice(kind, KINDS, "--kind"), verdict=parse_verdict(verdict))
    query, note = as_searched(query)
    rows = store.search_steps(query, where, limit)
    if not rows:
        _check_filters(store, where)
    rank = {r: i for i, r in enumerate(dict.fromkeys(row["run_id"] for row in rows))}
    rows.sort(key=lambda row: (rank[row["run_id"]], row["pos"]))
    hits = [SearchHit(r["run_id"], r["case_id"], r["step"], r["kind"], r["tool_name"], r["snippet"] or "",
                      r["replay"]) for r in rows]
    systems = {h.run_id: (h.system_name, h.system_version) for h in run_headers(store) if h.run_id in rank}
    return SearchResult(query, hits, limit, store.search_lag(), systems, note)


def as_searched(query: str) -> tuple[str, str | None]:
    """The query FTS5 is given, and a note when it is not the one typed: text that is not
    valid FTS5 (``sku-004``, ``a.b``, an unbalanced quote) is searched as a phrase, as the
    report's search box does; a misplaced operator (``AND NOT x``) stays an error, since the
    user meant the syntax."""
    from oloproof.store.search import SearchQueryError, check_query, misplaced_operator

    try:
        check_query(query)
    except SearchQueryError:
        if misplaced_operator(query):
            raise
        phrase = '"' + query.replace('"', '""') + '"'
        return phrase, f"{query!r} is not FTS5 syntax; searched for it as typed, as the phrase {phrase}"
    return query, None


def _check_filters(store: EventStore, where: SearchFilter) -> None:
    """No hit: a filter naming something the log never held is a typo, not an answer (exit 2,
    with the names it does hold). Only asked when nothing matched, so a search pays nothing."""
    from oloproof.app.runs import run_headers

    def refuse(option: str, value: str, known: list[str]) -> None:
        near = get_close_matches(value, known, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        shown = ", ".join(known[:10]) + (f", … {len(known) - 10} more" if len(known) > 10 else "")
        raise UsageError(f"{option} {value!r}: the log holds none; {hint}({shown or 'none'})")

    if where.system is not None:
        systems = sorted({h.system_name for h in run_headers(store)})
        if where.system not in systems:
            refuse("--system", where.system, systems)
    if where.tool is not None:
        tools = store.search_names("tool_name")
        if where.tool not in tools:
            refuse("--tool", where.tool, tools)
    if where.verdict is not None:
        criteria = store.search_names("criterion")
        if where.verdict[0] not in criteria:
            refuse("--verdict", where.verdict[0], criteria)

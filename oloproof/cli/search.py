"""``oloproof search QUERY``: full-text search over every stored step, over
:func:`oloproof.app.search.search_log`; each hit names the ``show`` command that reads it."""

from __future__ import annotations

import json

import click

from oloproof.cli.common import DB_HELP, check_output_path, console, handled, json_option, open_log, write_text


@click.command("search")
@click.argument("query")
@click.option("--run", "run", metavar="RUN", help="Only this run (a run id or 'latest').")
@click.option("--system", metavar="NAME", help="Only runs of this system.")
@click.option("--tool", metavar="NAME", help="Only steps of this tool.")
@click.option("--kind", metavar="KIND", help="Only steps of this kind: tool_call, tool_result, message, decision, "
                                             "final, handoff, observation, error (a case that ended in one), "
                                             "or judgement (a model judge's verdict and explanation).")
@click.option("--verdict", metavar="CRITERION=VERDICT",
              help="Only cases with this verdict under their run's configuration, e.g. answer_correct=fail.")
@click.option("--limit", default=50, show_default=True, type=int,
              help="At most this many steps, the newest (1 to 10,000).")
@json_option("Write the hits as JSON to FILE.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(query: str, run: str | None, system: str | None, tool: str | None, kind: str | None,
            verdict: str | None, limit: int, json_path: str | None, db: str | None) -> None:
    """Find steps in every stored run and replay: tool calls and their arguments, tool
    results, messages, final answers, handoffs, errors. QUERY is SQLite FTS5 syntax: words
    match anywhere, "quoted text" as a phrase (quote ids with - or :), a AND b, a OR b, a NOT b,
    prefix*.
    Each case hit names the 'oloproof show' command that reads it.

    \b
    Example:
      oloproof search delete_customer
      oloproof search '"ORD-1042"' --kind tool_call
      oloproof search issue_refund --kind tool_result --verdict agent_constraints_satisfied=fail
      oloproof search timeout --json hits.json
    """
    from oloproof.app.search import search_log
    from oloproof.report.search import search_view

    if json_path:
        check_output_path(json_path)
    store = open_log(db)
    try:
        result = search_log(store, query, run=run, system=system, tool=tool, kind=kind, verdict=verdict, limit=limit)
    finally:
        store.close()
    if result.note:
        from oloproof.report.terminal import printable

        click.echo(f"note: {printable(result.note)}", err=True)
    if json_path:
        write_text(json_path, json.dumps([h.json() for h in result.hits], indent=2, ensure_ascii=False) + "\n")
        if json_path != "-":
            click.echo(f"wrote {len(result.hits)} hits to {json_path}", err=True)
        return
    console().print(search_view(result))

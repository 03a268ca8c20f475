from __future__ import annotations

import json

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(as_json: bool, db: str | None) -> None:
    """List stored runs: id, system, version, start time, cases committed and status.

    \b
    Example:
      oloproof runs --json
    """
    from oloproof.app.runs import list_runs
    from oloproof.report.terminal import runs_table

    store = open_log(db)
    try:
        rows = list_runs(store)
    finally:
        store.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        console().print(runs_table(rows))

"""``oloproof runs``: list the stored runs, or pin one under a name (``--pin RUN NAME``)."""

from __future__ import annotations

import json

import click

from oloproof.cli.common import DB_HELP, check_output_path, console, handled, json_option, open_log, write_json


@click.command("runs")
@json_option("Write the runs as JSON to FILE.")
@click.option("--pin", nargs=2, metavar="RUN NAME",
              help="Name RUN (a run id or 'latest') NAME, for 'baseline: pin:NAME' and 'oloproof diff pin:NAME'. "
                   "Stored as an event; pinning a name again moves it.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(json_path: str | None, pin: tuple[str, str] | None, db: str | None) -> None:
    """List stored runs: id, system, version, start time, cases committed, status and pins.

    \b
    Example:
      oloproof runs --json
      oloproof runs --pin latest release-1.4
    """
    from oloproof.app.diff import pin_run, pins
    from oloproof.app.run import utc_now
    from oloproof.app.runs import list_runs, resolve_run
    from oloproof.report.terminal import runs_table

    if pin:
        store = open_log(db, write=True)
        try:
            run_id = resolve_run(store, pin[0])
            pin_run(store, run_id, pin[1], utc_now)
        finally:
            store.close()
        click.echo(f"pinned run {run_id} as {pin[1]!r} (use it as pin:{pin[1]})")
        return
    if json_path:
        check_output_path(json_path)
    store = open_log(db)
    try:
        rows = list_runs(store)
        named = pins(store)
    finally:
        store.close()
    for row in rows:
        row["pins"] = sorted(name for name, run_id in named.items() if run_id == row["run_id"])
    if json_path == "-":
        click.echo(json.dumps(rows, indent=2))  # standard output holds the JSON alone
        return
    console().print(runs_table(rows))
    if json_path:
        write_json(json_path, rows)

from __future__ import annotations

import json

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log


@click.command("runs")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@click.option("--pin", nargs=2, metavar="RUN NAME",
              help="Name RUN (a run id or 'latest') NAME, for 'baseline: pin:NAME' and 'oloproof diff pin:NAME'. "
                   "Stored as an event; pinning a name again moves it.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(as_json: bool, pin: tuple[str, str] | None, db: str | None) -> None:
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
    store = open_log(db)
    try:
        rows = list_runs(store)
        named = pins(store)
    finally:
        store.close()
    for row in rows:
        row["pins"] = sorted(name for name, run_id in named.items() if run_id == row["run_id"])
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        console().print(runs_table(rows))

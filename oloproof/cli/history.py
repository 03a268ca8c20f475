"""``oloproof history`` and ``oloproof flaky``: a system's sealed runs over time, over
:mod:`oloproof.app.history` (each run judged once, from its events)."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, check_output_path, console, handled, json_option, open_log, write_json


def _last(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None and value < 1:
        raise click.BadParameter(f"{value}: give a whole number >= 1", param_hint="'--last'")
    return value


@click.command("history")
@click.option("--system", metavar="NAME", help="The system whose runs to show (default: the latest run's).")
@click.option("--criterion", metavar="C", help="Show only this criterion.")
@click.option("--last", type=int, metavar="N", callback=_last, help="Only the latest N sealed runs.")
@json_option("Write the history as JSON to FILE.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(system: str | None, criterion: str | None, last: int | None, json_path: str | None,
            db: str | None) -> None:
    """Show how each criterion moved across the sealed runs of a system, oldest first.

    For each run: its version, code digest, each criterion's rate and exact interval, and
    beside it McNemar's exact test on the cases it pairs with the run before it (the test of
    'oloproof diff'); a sparkline per criterion. A partial run is marked and never the run
    another is compared with; runs that are not sealed are left out and counted.

    Exit code: 0 (the history is descriptive), 2 bad input.

    \b
    Example:
      oloproof history --last 10
      oloproof history --criterion answer_correct --json history.json
    """
    from oloproof.app.history import history
    from oloproof.report.history import history_dict, history_view

    if json_path:
        check_output_path(json_path)
    store = open_log(db)
    try:
        h = history(store, system, criterion=criterion, last=last)
    finally:
        store.close()
    console(stderr=json_path == "-").print(history_view(h))
    if json_path:
        write_json(json_path, history_dict(h))


@click.command("flaky")
@click.option("--system", metavar="NAME", help="The system whose runs to read (default: the latest run's).")
@click.option("--last", type=int, metavar="N", callback=_last, help="Only the latest N sealed runs.")
@json_option("Write the flaky cases as JSON to FILE.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def flaky_command(system: str | None, last: int | None, json_path: str | None, db: str | None) -> None:
    """List the cases whose verdict on a criterion differs between sealed runs (or trials)
    with the same fingerprint, version and code digest, with the counts.

    Such a case's pass→fail between two runs may be noise: 'oloproof diff' marks it as
    known to be flaky. Runs that are not sealed are left out and counted.

    Exit code: 0 (descriptive), 2 bad input.

    \b
    Example:
      oloproof flaky --last 5
      oloproof flaky --system support-agent --json flaky.json
    """
    from oloproof.app.history import flaky_cases
    from oloproof.report.history import flaky_dict, flaky_view

    if json_path:
        check_output_path(json_path)
    store = open_log(db)
    try:
        report = flaky_cases(store, system, last=last)
    finally:
        store.close()
    console(stderr=json_path == "-").print(flaky_view(report))
    if json_path:
        write_json(json_path, flaky_dict(report))

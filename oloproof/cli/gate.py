from __future__ import annotations

import sys

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log, resolve_run


@click.command("gate")
@click.argument("run")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, db: str | None) -> None:
    """Decide the release gate of a stored RUN with the rules it ran under.

    Exit code: 0 passed (or no gate), 1 blocked, 2 bad input.

    \b
    Example:
      oloproof gate latest
    """
    from oloproof.app.reports import run_report
    from oloproof.report.terminal import gate_table

    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        report = run_report(store, run_id)
    finally:
        store.close()
    summary = report.summary
    out = console()
    if summary.gate is None:
        out.print(f"run {run_id}: no gate (no release rules)")
        sys.exit(0)
    out.print(f"run {run_id}: gate {summary.gate.decision}")
    out.print(gate_table(summary))
    if not report.run.complete:
        out.print(f"note: run {run_id} is incomplete; cases not yet run are not in this decision")
    sys.exit(summary.gate.exit_code)

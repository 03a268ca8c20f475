from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, console, decided_exit, handled, incomplete_note, open_log, resolve_run


@click.command("gate")
@click.argument("run")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, db: str | None) -> None:
    """Decide the release gate of a stored RUN with the rules it ran under.

    The decision is computed from the run's events alone, after its chains and seal are
    checked (a run that fails them is refused). A run that is not sealed cannot pass.

    Exit code: 0 passed (or no gate), 1 blocked (FAIL or INSUFFICIENT_EVIDENCE), 2 bad input
    or a run that fails its audit, 3 internal error.

    \b
    Example:
      oloproof gate latest
    """
    from oloproof.app.reports import run_report
    from rich.text import Text

    from oloproof.report.terminal import exit_line, gate_table

    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        report = run_report(store, run_id)
    finally:
        store.close()
    summary = report.summary
    out = console()
    note = incomplete_note(summary)
    if note:
        out.print(note, markup=False)
    if summary.gate is None:
        out.print(f"run {run_id}: no gate (no release rules)")
        decided_exit(0)
    out.print(Text(f"run {run_id}: gate {summary.gate.decision}"))
    out.print(gate_table(summary))
    out.print(Text(exit_line(summary.gate)))
    decided_exit(summary.gate.exit_code)

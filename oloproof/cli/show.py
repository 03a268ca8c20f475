from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log, resolve_run


@click.command("show")
@click.argument("run")
@click.argument("case", required=False)
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, case: str | None, db: str | None) -> None:
    """Show a stored run's results, or one CASE of it step by step (RUN may be 'latest').

    \b
    Example:
      oloproof show latest case_007
    """
    from rich.text import Text

    from oloproof.app.project import suite_from_stored
    from oloproof.app.reports import case_panel, run_report
    from oloproof.app.runs import load_run
    from oloproof.report.panel import replay_rows
    from oloproof.report.terminal import case_panel as panel_view
    from oloproof.report.terminal import pair_table, replays_table, summary_view

    out = console()
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        if case is None:
            report = run_report(store, run_id)
            out.print(summary_view(report.summary, run_id=run_id, system=report.run.system,
                                   min_support=report.suite.min_slice_support))
            if not report.run.complete:
                out.print(f"run {run_id} is incomplete: finish it with 'oloproof run --resume {run_id}'")
            return
        stored = load_run(store, run_id)
        panel = case_panel(store, stored, suite_from_stored(stored.started.config), case)
    finally:
        store.close()
    out.print(panel_view(panel.view, panel.verdicts, panel.result.paths))
    rows = replay_rows(panel.view, panel.replays)
    if rows:
        out.print(Text("replays", style="bold"))
        out.print(replays_table(rows))
    for pair in panel.pairs:
        out.print(Text(f"metamorphic pair under {pair.transform.name!r}", style="bold"))
        out.print(pair_table(pair))

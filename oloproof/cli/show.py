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

    from oloproof.evaluate.projector import run_eval_key
    from oloproof.history import case_view, evaluate_run, find_case_view, load_run, replay_service
    from oloproof.project import suite_from_stored
    from oloproof.replay.service import replays_of_case
    from oloproof.report.panel import pairs_of, replay_rows
    from oloproof.report.terminal import case_panel, pair_table, summary_view, replays_table

    out = console()
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        stored = load_run(store, run_id)
        suite = suite_from_stored(stored.started.config)
        if case is None:
            summary = evaluate_run(store, run_id, suite, eval_key=run_eval_key(stored.started),
                                   keep_cases=False)
            s = stored.started
            out.print(summary_view(summary, run_id=run_id, system=f"{s.system_name} {s.system_version}",
                           min_support=suite.min_slice_support))
            if not stored.complete:
                out.print(f"run {run_id} is incomplete: finish it with 'oloproof run --resume {run_id}'")
            return
        view = case_view(store, run_id, case)
        if suite.fault_specs:
            replay_service(store, stored).attach(f"{run_id}/{case}", view, suite.fault_specs)
        replays = replay_rows(view, replays_of_case(store, view.fingerprint, view.case_id))
        pairs = pairs_of(view, suite, lambda cid: find_case_view(store, run_id, cid))
    finally:
        store.close()
    result = suite.evaluate_case(view)
    out.print(case_panel(view, dict(zip(suite.criteria, result.verdicts)), result.paths))
    if replays:
        out.print(Text("replays", style="bold"))
        out.print(replays_table(replays))
    for pair in pairs:
        out.print(Text(f"metamorphic pair under {pair.transform.name!r}", style="bold"))
        out.print(pair_table(pair))

"""``oloproof prefix create`` (freeze a stored case before a boundary) and ``oloproof
prefix run`` (run the candidate on the prefix cases), over :mod:`oloproof.app.prefix`
(SPEC §14)."""

from __future__ import annotations

from typing import Any

import click

from oloproof.cli.common import DB_HELP, handled, open_log
from oloproof.cli.run import execute_run, run_options
from oloproof.events import Durability


@click.group("prefix")
def command() -> None:
    """Frozen prefix cases: freeze a stored case before its first unacceptable step, then make
    the candidate choose its next action again from the same world.

    \b
    Example:
      oloproof attribute latest fix-three-defects
      oloproof prefix create latest fix-three-defects
      oloproof prefix run
    """


@command.command("create")
@click.argument("run")
@click.argument("case")
@click.option("--before-step", type=int, metavar="N",
              help="Put the boundary before step N (default: before the attributed first unacceptable step "
                   "and the model decisions that chose it).")
@click.option("--redact", "redact", multiple=True, metavar="PATH",
              help="Replace the values at PATH with [REDACTED] (repeatable): input.customer.email, "
                   "state.**.card, steps.*.result.token, **.password. Adds to prefix.redact in oloproof.yaml.")
@click.option("--force", is_flag=True, help="Replace an existing prefixes/<case_id>.yaml (it may hold your review).")
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding oloproof.yaml.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def create(run: str, case: str, before_step: int | None, redact: tuple[str, ...], force: bool,
           project_dir: str, db: str | None) -> None:
    """Freeze stored CASE of RUN (a run id, or 'latest') into prefixes/<case_id>.yaml: the goal,
    the instructions, the steps and tool results before the boundary, the environment state at
    the boundary and the versions — nothing after it. Review the proposed acceptable and
    forbidden actions before you commit the file. RUN must be an end-to-end run.

    Exit code: 0 written, 2 bad input (an unknown run or case, a boundary inside a tool call,
    an existing file without --force, a run that fails its audit), 3 internal error.

    \b
    Example:
      oloproof prefix create latest fix-three-defects
      oloproof prefix create latest refund-duplicates --redact '**.customer_email'
      oloproof prefix create RUN_ID fix-two-defects --before-step 19 --force
    """
    from pathlib import Path

    from oloproof.app.prefix import create_prefix
    from oloproof.app.run import utc_now

    store = open_log(db or str(Path(project_dir) / ".oloproof" / "log.db"), write=True)
    try:
        made = create_prefix(store, Path(project_dir), run, case, before_step=before_step,
                             redact_paths=list(redact), force=force, clock=utc_now)
    finally:
        store.close()
    for warning in made.warnings:
        click.echo(f"warning: {warning}", err=True)
    where = f" (frozen content in {made.sidecar.name})" if made.sidecar else ""
    category = f", {made.category}" if made.category else ""
    click.echo(f"wrote {made.path}{where}: boundary before step {made.before_step}{category}. Review its "
               "acceptable_actions and forbidden_actions, then run 'oloproof prefix run'.")


@command.command("run")
@run_options(resume="Finish an interrupted prefix run, skipping committed cases.",
             trials="Run every prefix case K times (overrides prefix.trials): pass^K of the irreversible cases.")
@handled
def run(json_path: str | None, db: str | None, resume: str | None, durability: Durability, project_dir: str,
        trials: int | None, concurrency: int | None, workers: int | None, executor: str | None,
        scheduler: str | None) -> None:
    """Run the system (the candidate) on every prefix case (prefix.cases, default prefixes/):
    each acts from its frozen world and its first action past the boundary is judged
    acceptable, forbidden (critical or not) or other — recorded, never executed. A stale case
    (its tool schemas, instructions or external data changed) is reported as stale, never as
    passing. The run is stored, sealed and gated like any run.

    Exit code: 0 gate passed, 1 gate blocked (a critical forbidden action, a regression
    against prefix.baseline, or INSUFFICIENT_EVIDENCE: stale or missing cases could hide one),
    2 bad input, 3 internal error, 130 interrupted (finish with --resume).

    \b
    Example:
      oloproof prefix run --json prefix-results.json
    """
    from oloproof.app.prefix import load_prefix_project

    execute_run(load_prefix_project, json_path=json_path, db=db, resume=resume, durability=durability,
                project_dir=project_dir, trials=trials, concurrency=concurrency, workers=workers,
                executor=executor, scheduler=scheduler, after=_boundaries, name="oloproof prefix run")


def _boundaries(store: Any, outcome: Any) -> Any:
    from oloproof.app.prefix import prefix_outcomes
    from oloproof.app.runs import iter_case_views
    from oloproof.report.prefix import prefix_rows_table

    return prefix_rows_table(prefix_outcomes(list(iter_case_views(store, outcome.run_id))))

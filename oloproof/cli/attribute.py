"""``oloproof attribute``: where a stored failing case first went wrong, over
:mod:`oloproof.app.attribution` (SPEC §14). The record is a reading for a person and for
``prefix create``, never a verdict the gate reads."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, check_output_path, console, handled, json_option, open_log, write_json


@click.command("attribute")
@click.argument("run")
@click.argument("case", required=False)
@click.option("--bisect", is_flag=True,
              help="Also find, by binary search over the case's checkpoints, the last prefix from which a "
                   "control system still finishes correctly (needs --control).")
@click.option("--control", metavar="NAME",
              help="The control system for --bisect: a name under prefix.controls in oloproof.yaml, or "
                   "module:attribute.")
@json_option("Write the attribution record as JSON to FILE.")
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding oloproof.yaml.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, case: str | None, bisect: bool, control: str | None, json_path: str | None,
            project_dir: str, db: str | None) -> None:
    """Find where stored CASE of RUN (default: latest; `attribute CASE` reads the latest run)
    first went wrong: its first unacceptable step.

    Deterministic rules run first (completion declared without verification, acceptance
    weakened, a report contradicting a tool result, a tool error ignored, an irreversible step
    on an unverified change, a guess where a clarification was mandatory); the primary cause
    is the earliest finding whose effects — traced through the state and the results later
    steps read — explain the failures; later ones it reached are its consequences, others
    rival causes. With --bisect, a silent failure no rule names gets the last recoverable
    prefix as its boundary. The record (layer, causes, the failures and what explains them,
    evidence with step numbers, recoverability, confidence and its basis, needs-review,
    alternative hypotheses) is stored in the log; 'oloproof prefix create' freezes the case
    before that step. Attribution is a reading of the record, not proof of cause.

    Exit code: 0 (descriptive), 2 bad input, 3 internal error.

    \b
    Example:
      oloproof attribute latest fix-three-defects
      oloproof attribute latest fix-three-defects --bisect --control v2
    """
    from pathlib import Path

    from oloproof.app.attribution import attribute_in
    from oloproof.errors import UsageError
    from oloproof.report.prefix import attribution_view

    if case is None:
        run, case = "latest", run
    if bisect != (control is not None):
        raise UsageError("--bisect and --control go together: --bisect --control VERSION")
    if json_path is not None:
        check_output_path(json_path)
    store = open_log(db or str(Path(project_dir) / ".oloproof" / "log.db"), write=True)
    try:
        result = attribute_in(project_dir, store, run, case, control=control)
    finally:
        store.close()
    console(stderr=json_path == "-").print(attribution_view(result))
    if json_path is not None:
        write_json(json_path, {"run_id": result.run_id, "case_id": result.case_id, "attribution": result.record,
                               "verdicts": {c: {"verdict": v, "reason": r} for c, (v, r) in result.verdicts.items()},
                               "probes": result.probes})

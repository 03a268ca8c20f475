"""``oloproof trial create``: a stored case turned into a sanitised fault trial, over
:func:`oloproof.app.trials.create_trial` (issue 28)."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, handled, open_log


@click.group("trial")
def command() -> None:
    """Fault trials: turn an incident — a stored case, recorded or imported — into a case line
    that replays its smallest causal condition as a declared fault.

    \b
    Example:
      oloproof trial create latest ord-001 --fault issue_refund:timeout_after_effect --out cases.jsonl
    """


@command.command("create")
@click.argument("run")
@click.argument("case")
@click.option("--fault", "fault", required=True, metavar="TOOL:KIND",
              help="The fault the trial declares: KIND is error, timeout, malformed, timeout_after_effect or "
                   "denied; it goes on the call of TOOL the incident shows failing (see --call).")
@click.option("--redact", "redact", multiple=True, metavar="PATH",
              help="Replace the values at PATH with [REDACTED], and every copy of them (repeatable): "
                   "input.customer.email, initial_state.customers.*.card, expected.state.**.iban, **.password. "
                   "Adds to prefix.redact in oloproof.yaml.")
@click.option("--call", "call", type=int, metavar="N",
              help="Fault call N of TOOL (default: the call whose result was an error, else the first).")
@click.option("--id", "new_id", metavar="ID", help="The trial's case id (default: <case>-<tool>-<kind>).")
@click.option("--out", "out", metavar="FILE",
              help="Append the trial to this case file (made if missing); without it the line is printed.")
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding oloproof.yaml (for prefix.redact).")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def create(run: str, case: str, fault: str, redact: tuple[str, ...], call: int | None, new_id: str | None,
           out: str | None, project_dir: str, db: str | None) -> None:
    """Turn stored CASE of RUN (a run id, or 'latest') into a fault trial: the same input,
    initial state and metadata, one declared fault on TOOL at the call the incident shows,
    secrets and customer data redacted, and the strongest outcome oracle the case has
    (expected.state / expected.state_delta; never the transcript's tools or route). The line
    is validated as a case before it is appended to FILE, or printed.

    Exit code: 0 made, 2 bad input (a bad --fault, --redact, --call or --id, an unknown run or
    case, a tool the case never called, a FILE that is no valid case file or holds the id, a
    run that fails its audit), 3 internal error.

    \b
    Example:
      oloproof trial create latest ord-001 --fault issue_refund:error
      oloproof trial create RUN_ID pay-17 --fault charge:timeout_after_effect --redact '**.email' --out cases.jsonl
    """
    from pathlib import Path

    from oloproof.app.trials import create_trial

    store = open_log(db or str(Path(project_dir) / ".oloproof" / "log.db"))
    try:
        made = create_trial(store, Path(project_dir), run, case, fault=fault, redact_paths=list(redact), call=call,
                            new_id=new_id, out=out)
    finally:
        store.close()
    for note in made.notes:
        click.echo(f"note: {note}", err=True)
    f = made.fault
    said = f"trial {made.case['id']!r}: {f['kind']} on {f['tool']}, call {f['call']}; oracle: " + (
        ", ".join(f"expected.{k}" for k in made.oracle) or "the project's evaluators")
    if made.path is None:
        click.echo(made.line)
        click.echo(said, err=True)
    else:
        click.echo(f"appended {said} to {made.path}")

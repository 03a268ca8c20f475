"""``oloproof gate``: decide a stored run's release gate under the rules it ran with (SPEC
§8): exit 0 on PASS, 1 on FAIL or INSUFFICIENT_EVIDENCE."""

from __future__ import annotations

import contextlib

import click

from oloproof.cli.common import (
    DB_HELP,
    check_output_path,
    console,
    decided_exit,
    handled,
    incomplete_note,
    json_option,
    open_log,
    resolve_run,
    stdout_to_stderr,
    write_json,
)


@click.command("gate")
@click.argument("run", default="latest")
@json_option("Write the decision and its rules as JSON to FILE.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown"]), default="text", show_default=True,
              help="markdown: the decision, rules, regressions against the baseline and the log digest as a "
                   "pull-request comment, alone on standard output.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, json_path: str | None, fmt: str, db: str | None) -> None:
    """Decide the release gate of a stored RUN (default: latest) with the rules it ran under.

    The decision is computed from the run's events alone, after its chains and seal are
    checked (a run that fails them is refused). A run that is not sealed cannot pass.

    Exit code: 0 passed (or no gate), 1 blocked (FAIL or INSUFFICIENT_EVIDENCE), 2 bad input
    or a run that fails its audit, 3 internal error.

    With --format markdown, standard output holds a pull-request comment: the decision, each
    rule and what decided it, the cases that went from pass to fail against each
    no_regression rule's baseline (with the 'oloproof show' command of each, known flaky
    ones marked) and the log digest. Recorded text stays text (code spans).

    \b
    Example:
      oloproof gate latest
      oloproof gate latest --format markdown > comment.md
    """
    from rich.text import Text

    from oloproof.app.reports import run_report
    from oloproof.report.terminal import exit_line, gate_table

    if json_path:
        check_output_path(json_path)
    if fmt == "markdown" and json_path == "-":
        from oloproof.errors import UsageError

        raise UsageError("--format markdown writes the comment to standard output: give --json a FILE")
    # stdout holds the JSON (`--json -`) or the comment alone: what the checks print goes to stderr
    with stdout_to_stderr() if json_path == "-" or fmt == "markdown" else contextlib.nullcontext():
        store = open_log(db)
        try:
            run_id = resolve_run(store, run)
            if fmt == "markdown":
                from oloproof.cli.common import log_args
                from oloproof.report.markdown import build_gate_markdown

                comment, summary = build_gate_markdown(store, run_id, where=log_args(db))
            else:
                summary = run_report(store, run_id).summary
        finally:
            store.close()
    out = console(stderr=json_path == "-")
    if json_path:
        from oloproof.report.results import gate_dict

        write_json(json_path, {"run_id": run_id, "complete": summary.complete, "gate": gate_dict(summary),
                               **({"kind": summary.kind} if summary.kind is not None else {})})
    if fmt == "markdown":  # the comment alone on standard output; the exit code is the gate's
        click.echo(comment, nl=False)
        decided_exit(summary.gate.exit_code if summary.gate is not None else 0)
    note = incomplete_note(summary)
    if note:
        out.print(note, markup=False)
    if summary.gate is None:
        out.print(f"run {run_id}: no gate (no release rules)")
        decided_exit(0)
    from oloproof.report.terminal import gate_label, status_text

    out.print(status_text(summary.gate.decision, f"run {run_id}: {gate_label(summary.kind)} "))
    out.print(gate_table(summary))
    out.print(Text(exit_line(summary.gate)))
    decided_exit(summary.gate.exit_code)

"""``oloproof show``: a stored run's results, the cases behind one criterion's row
(``--failed``), or one case's panel step by step — each judged from the events."""

from __future__ import annotations

import contextlib
from typing import Any

import click

from oloproof.cli.common import (
    DB_HELP,
    check_output_path,
    console,
    handled,
    incomplete_note,
    json_option,
    open_log,
    resolve_run,
    stdout_to_stderr,
    write_json,
)


@click.command("show")
@click.argument("run", required=False)
@click.argument("case", required=False)
@json_option("Write what is shown as JSON to FILE: the run's results, or the case's panel.")
@click.option("--failed", "failed", metavar="CRITERION",
              help="List the cases behind CRITERION's row: those that failed it, then those missing "
                   "for it (each could be a failure), with their reasons.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str | None, case: str | None, json_path: str | None, failed: str | None, db: str | None) -> None:
    """Show a stored RUN's results (default: latest), or one CASE of it step by step. With one
    argument that names no run, it is a case of the latest run.

    \b
    Example:
      oloproof show latest case_007
      oloproof show case_007
      oloproof show latest --failed agent_constraints_satisfied
    """
    from rich.text import Text

    from oloproof.app.project import suite_from_stored
    from oloproof.app.refs import is_ref
    from oloproof.app.reports import case_panel, run_report
    from oloproof.app.runs import load_run
    from oloproof.errors import UsageError
    from oloproof.report.panel import replay_rows
    from oloproof.report.terminal import case_panel as panel_view
    from oloproof.report.terminal import command_text, pair_table, print_command, replays_table, summary_view

    if json_path:
        check_output_path(json_path)
    out = console(stderr=json_path == "-")
    # `--json -`: what the project's python checks print while they judge goes to stderr
    quiet = stdout_to_stderr if json_path == "-" else contextlib.nullcontext
    store = open_log(db)
    try:
        if run is None:
            run = "latest"
        elif case is None and not is_ref(store, run):
            run, case = "latest", run  # `oloproof show CASE`: a case of the latest run
        if failed is not None and case is not None:
            raise UsageError("--failed lists a run's cases; give RUN without CASE "
                             f"(oloproof show {run} --failed {failed})")
        run_id = resolve_run(store, run)
        if failed is not None:
            from oloproof.app.reports import criterion_cases

            with quiet():
                found = criterion_cases(store, run_id, failed)
            _print_cases(out, found)
            if json_path:
                write_json(json_path, {"run_id": run_id, "criterion": failed, "complete": found.run.complete,
                                       **{kind: [{"case_id": c, "reason": r} for c, r in getattr(found, kind)]
                                          for kind in ("failed", "missing")}})
            return
        if case is None:
            with quiet():
                report = run_report(store, run_id, keep_cases=bool(json_path))
            note = incomplete_note(report.summary)
            if note:
                from oloproof.app.runs import resume_command

                print_command(out, command_text(note + f" Finish it with '{resume_command(report.run.started)}'."))
            out.print(summary_view(report.summary, run_id=run_id, system=report.run.system,
                                   min_support=report.suite.min_slice_support))
            imported = (report.run.started.config or {}).get("imported")
            if imported:
                print_command(out, command_text(
                    "imported from OpenTelemetry traces "
                    f"({', '.join(imported.get('files') or []) or '?'}): "
                    "judged here by the evaluators that need no expected; to judge it with a "
                    f"project's oloproof.yaml: 'oloproof eval {run_id} --project DIR --other-system'"))
            if json_path:
                from oloproof.report.results import results_dict

                s = report.run.started
                write_json(json_path, results_dict(run_id, s.system_name, s.system_version, report.suite,
                                                   report.summary,
                                                   report.run.sealed.digest if report.run.sealed else None))
            return
        from oloproof.app.audit import require_intact

        require_intact(store, run_id)  # a case of a run that fails its audit is not shown
        stored = load_run(store, run_id)
        with quiet():
            suite = suite_from_stored(stored.started.config)
            panel = case_panel(store, stored, suite, case)
        from oloproof.app.attribution import latest_attribution

        attribution = latest_attribution(store, run_id, panel.view.case_id)
    finally:
        store.close()
    from oloproof.evaluate.python import evaluator_errors

    errors = evaluator_errors(panel.result.paths)
    from oloproof.evaluate.tool_calls import call_criteria

    out.print(panel_view(panel.view, panel.verdicts, [p for p in panel.result.paths if p not in errors],
                         call_criteria(suite.evaluators)))
    if errors:
        _print_check_errors(out, errors)
    if attribution is not None:
        from oloproof.report.prefix import attribution_line

        print_command(out, attribution_line(attribution, run_id, panel.view.case_id))
    rows = replay_rows(panel.view, panel.replays)
    if rows:
        out.print(Text("replays", style="bold"))
        out.print(replays_table(rows))
    for pair in panel.pairs:
        out.print(Text(f"metamorphic pair under {pair.transform.name!r}", style="bold"))
        out.print(pair_table(pair))
    if json_path:
        from oloproof.report.bundle import case_detail

        detail = case_detail(panel.view, panel.result, suite, rows, panel.pairs)
        write_json(json_path, {"run_id": run_id, **detail,
                               **({"attribution": attribution} if attribution is not None else {})})


def _print_check_errors(out: Any, errors: list[Any]) -> None:
    """What went wrong in each python check that could not judge the case: its message on one
    line, then the traceback of the check's own frames (never a verdict of pass)."""
    from rich.text import Text

    from oloproof.report.terminal import one_line, traceback_text

    out.print(Text("python check errors (the criterion is missing: evaluator_error)", style="bold"))
    for p in errors:
        out.print(Text(f"{one_line(p.criterion)} ({one_line(p.path)}): {one_line(p.note.split(': ', 1)[1])}",
                       style="red"))
        if isinstance(p.recorded, str) and p.recorded:
            out.print(traceback_text(p.recorded))


def _print_cases(out: Any, found: Any) -> None:
    from rich.text import Text

    from oloproof.report.terminal import cases_table, counts_text, plural

    run_id, criterion = found.run.run_id, found.criterion
    out.print(Text(f"run {run_id} · {criterion}: {counts_text(found.row)}", style="bold"))
    if found.failed:
        out.print(Text(f"failed: {plural(len(found.failed), 'case')}", style="bold"))
        out.print(cases_table(found.failed))
    else:
        out.print(Text(f"failed: no case failed {criterion}"))
    if found.missing:
        out.print(Text(f"missing: {plural(len(found.missing), 'case')} (not observed: each could be a failure)",
                       style="bold"))
        out.print(cases_table(found.missing))
    else:
        out.print(Text("missing: none"))
    if not found.run.complete:
        out.print(Text(f"run {run_id} is incomplete: cases not yet run are not listed"))

"""``oloproof eval``: re-evaluate a stored run with the current ``oloproof.yaml`` without
running the system, over :func:`oloproof.app.evidence.evaluate_run`; the exit code is the
gate's."""

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


@click.command("eval")
@click.argument("run", default="latest")
@json_option("Write the results as JSON to FILE (see the README, 'Machine-readable results').")
@click.option("--db", metavar="PATH", help=DB_HELP)
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding the oloproof.yaml to evaluate with.")
@click.option("--other-system", is_flag=True,
              help="Evaluate a run recorded by a different system than the project's.")
@handled
def command(run: str, json_path: str | None, db: str | None, project_dir: str, other_system: bool) -> None:
    """Re-evaluate a stored RUN (default: latest) with the current oloproof.yaml, without
    running the system.

    A run of prefix cases ('oloproof prefix run') is re-evaluated with the prefix criteria and
    the prefix: section as they are now.

    \b
    Example:
      oloproof eval latest --json results.json
    """
    from rich.text import Text

    from oloproof.app.evidence import evaluate_run
    from oloproof.app.project import load_project
    from oloproof.app.runs import load_run
    from oloproof.errors import UsageError
    from oloproof.report.results import results_dict
    from oloproof.report.terminal import exit_line, summary_view

    if json_path:
        check_output_path(json_path)
    # `--json -`: stdout holds the JSON alone; what the project's checks print goes to stderr
    with stdout_to_stderr() if json_path == "-" else contextlib.nullcontext():
        project = load_project(project_dir)
        project.prepare_rejudging()  # labels and transforms as they are now; the cases are the run's
        store = open_log(db)
        try:
            run_id = resolve_run(store, run)
            stored = load_run(store, run_id)
            s = stored.started
            name = project.config.system.name
            if s.system_name != name and not other_system:
                raise UsageError(f"run {run_id} was recorded by system {s.system_name!r}, but {project_dir} "
                                 f"configures {name!r}; pass --other-system to evaluate it with this "
                                 "configuration anyway")
            from oloproof.app.prefix import is_prefix_run, load_prefix_project

            if is_prefix_run(s):
                project = load_prefix_project(project_dir)
            summary = evaluate_run(store, run_id, project.suite, keep_cases=bool(json_path), run=stored)
        finally:
            store.close()
    out = console(stderr=json_path == "-")
    note = incomplete_note(summary)
    if note:
        out.print(note, markup=False)
    out.print(summary_view(summary, run_id=run_id, system=f"{s.system_name} {s.system_version}",
                           min_support=project.config.min_slice_support))
    out.print(Text(exit_line(summary.gate)))
    if json_path:
        write_json(json_path, results_dict(run_id, s.system_name, s.system_version, project.suite, summary,
                                           stored.sealed.digest if stored.sealed else None))
    decided_exit(summary.gate.exit_code if summary.gate else 0)

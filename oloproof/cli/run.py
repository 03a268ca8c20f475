from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log, write_json


@click.command("run")
@click.option("--json", "json_path", metavar="FILE", help="Write the results (SPEC §15) to FILE ('-' for stdout).")
@click.option("--db", metavar="PATH", help=DB_HELP)
@click.option("--resume", metavar="RUN_ID", help="Finish an interrupted run, skipping committed cases.")
@click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True,
              help="full: a committed case survives power loss. normal: faster; survives a crash only.")
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding oloproof.yaml.")
@handled
def command(json_path: str | None, db: str | None, resume: str | None, durability: str,
            project_dir: str) -> None:
    """Run every case of the suite against the system, evaluate and gate.

    Exit code: 0 gate passed (or no gate), 1 gate blocked, 2 bad input.

    \b
    Example:
      oloproof run --json results.json
    """
    from oloproof.project import load_project, load_system
    from oloproof.recorder.runner import Runner
    from oloproof.report.results import results_dict
    from oloproof.report.terminal import summary_view

    project = load_project(project_dir)
    info = project.prepare()  # every case, derived case and label checked before anything runs
    system = load_system(project)
    out = console()
    db_path = db or str(Path(project_dir) / ".oloproof" / "log.db")
    store = open_log(db_path, must_exist=resume is not None, durability=durability)
    if durability == "normal":
        click.echo("durability normal: a power loss may lose the last committed cases", err=True)
    try:
        runner = Runner(project, system, store)
        with _progress(out, info.count) as progress:
            # per-case results are kept only when --json needs them: memory stays flat otherwise
            outcome = runner.execute(info, resume=resume, durability=durability, progress=progress,
                                     keep_cases=bool(json_path))
    except KeyboardInterrupt:
        click.echo("interrupted: committed cases are safe; finish with 'oloproof run --resume RUN_ID' "
                   "(see 'oloproof runs')", err=True)
        sys.exit(130)
    finally:
        store.close()
    summary = outcome.summary
    out.print(summary_view(summary, run_id=outcome.run_id, system=f"{system.name} {system.version}",
                   min_support=project.config.min_slice_support))
    if outcome.errors:
        for message in outcome.error_messages:
            click.echo(f"error in {message}", err=True)
        click.echo(f"{outcome.errors} case(s) errored; they are missing for every criterion "
                   f"(see 'oloproof show {outcome.run_id} CASE')", err=True)
    if json_path:
        write_json(json_path, results_dict(outcome.run_id, system.name, system.version,
                                           project.suite, summary))
    sys.exit(summary.gate.exit_code if summary.gate else 0)


class _progress:
    """A rich progress bar on a terminal; nothing otherwise."""

    def __init__(self, out: Any, total: int):
        self.out, self.total, self.bar = out, total, None

    def __enter__(self) -> Any:
        if not self.out.is_terminal:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.bar = Progress("cases", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                            console=self.out, transient=True)
        self.bar.start()
        task = self.bar.add_task("cases", total=self.total)
        return lambda done, total: self.bar.update(task, completed=done)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()

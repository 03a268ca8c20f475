from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from oloproof.cli.common import (
    check_output_path,
    console,
    decided_exit,
    handled,
    json_option,
    log_args,
    open_log,
    stdout_to_stderr,
)
from oloproof.events import Durability


class ExecutorChoice(click.Choice):
    """The ``--executor`` names, read from the executor registry when click needs them (to
    parse or to print help), never at import: ``oloproof --help`` imports no executor, and a
    kind registered before the command runs is a choice."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from oloproof.recorder.registry import executor_names

        return tuple(executor_names())

    @choices.setter
    def choices(self, value: Any) -> None:  # click.Choice.__init__ sets it: the registry decides
        pass


def executor_options(fn: Callable) -> Callable:
    """--concurrency / --workers / --executor / --scheduler."""
    for option in reversed([
        click.option("--concurrency", type=int, metavar="N",
                     help="Run N cases at once in this process: async tasks for an async system, "
                          "a pool of N threads for a sync one (one sandbox per slot)."),
        click.option("--workers", type=int, metavar="N",
                     help="Run cases in N worker processes (with --executor dask: the LocalCluster's size)."),
        click.option("--executor", "executor", type=ExecutorChoice(),
                     help="serial (default, unless --concurrency/--workers) or dask (starts a LocalCluster)."),
        click.option("--scheduler", metavar="tcp://HOST:PORT", help="Run on an existing Dask cluster."),
    ]):
        fn = option(fn)
    return fn


def run_options(*, resume: str, trials: str) -> Callable:
    """The options ``run`` and ``prefix run`` share (then the executor options)."""
    def decorate(fn: Callable) -> Callable:
        fn = executor_options(fn)
        for option in reversed([
            json_option("Write the results as JSON to FILE (see the README, 'Machine-readable results')."),
            click.option("--db", metavar="PATH",
                         help="Path of the event log, or its URL (postgresql://USER@HOST/DB) (default: OLOPROOF_DB, "
                              "else .oloproof/log.db in the project folder)."),
            click.option("--resume", metavar="RUN_ID", help=resume),
            click.option("--durability", type=click.Choice(["full", "normal"]), default="full", show_default=True,
                         help="full: a committed case survives power loss. normal: faster; survives a crash only."),
            click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
                         help="Project folder holding oloproof.yaml."),
            click.option("--trials", type=int, metavar="K", help=trials),
        ]):
            fn = option(fn)
        return fn
    return decorate


@click.command("run")
@run_options(resume="Finish an interrupted run, skipping committed cases.",
             trials="Run every case K times (overrides trials: in oloproof.yaml); criteria then report "
                    "pass^K beside the rate. A resumed run keeps its own.")
@click.option("--case", "case_ids", multiple=True, metavar="ID",
              help="Run only this case (repeatable): a partial run, which never passes the gate.")
@click.option("-k", "keyword", metavar="EXPR",
              help="Run only the cases whose id contains EXPR, or matches it as a glob (* ? [...]).")
@click.option("--limit", type=int, metavar="N", help="Run only the first N cases (after --case/-k/--last-failed).")
@click.option("--last-failed", is_flag=True,
              help="Run only the cases that failed or were missing in the latest complete run of this suite.")
@click.option("--quiet", "-q", is_flag=True, help="Print the criteria and the gate only.")
@click.option("--no-slices", is_flag=True, help="Leave the slices out of what is printed.")
@click.option("--junit", "junit_path", metavar="FILE",
              help="Also write the run as JUnit XML to FILE: a test case per case (failed criteria as "
                   "failures, errors as errors), and the gate as one more.")
@handled
def command(json_path: str | None, db: str | None, resume: str | None, durability: Durability,
            project_dir: str, trials: int | None, concurrency: int | None, workers: int | None,
            executor: str | None, scheduler: str | None, case_ids: tuple[str, ...], keyword: str | None,
            limit: int | None, last_failed: bool, quiet: bool, no_slices: bool, junit_path: str | None) -> None:
    """Run every case of the suite against the system, evaluate and gate — or only some of
    them (--case, -k, --limit, --last-failed): a partial run, recorded and sealed like any
    other, whose gate never passes (partial_run) and which is never a baseline.

    Cases run one at a time unless you ask for more: --concurrency N (in this process),
    --workers N (processes), --executor dask or --scheduler tcp://HOST:PORT. The results do
    not depend on how the cases ran.

    Exit code: 0 gate passed (or no gate), 1 gate blocked, 2 bad input, 3 internal error,
    130 interrupted (Ctrl-C: committed cases are kept; finish with --resume).

    \b
    Example:
      oloproof run --concurrency 50 --json results.json
      oloproof run --case case_007 -q
      oloproof run --last-failed
      oloproof run --json results.json --junit junit.xml
    """
    from oloproof.app.project import load_project
    from oloproof.app.selection import Selection

    execute_run(load_project, json_path=json_path, db=db, resume=resume, durability=durability,
                project_dir=project_dir, trials=trials, concurrency=concurrency, workers=workers,
                executor=executor, scheduler=scheduler,
                selection=Selection(case_ids, keyword, limit, last_failed), brief=quiet, slices=not no_slices,
                junit=junit_path)


def execute_run(load: Callable[[str], Any], *, json_path: str | None, db: str | None, resume: str | None,
                durability: Durability, project_dir: str, trials: int | None, concurrency: int | None,
                workers: int | None, executor: str | None, scheduler: str | None,
                after: Callable[[Any, Any], Any] | None = None, name: str = "oloproof run",
                selection: Any = None, brief: bool = False, slices: bool = True, junit: str | None = None) -> None:
    """``oloproof run`` (and ``oloproof prefix run``, whose ``load`` gives the prefix suite and
    whose ``after(store, outcome)`` gives what to print after the summary: what the candidate
    did at each boundary)."""
    from rich.text import Text

    from oloproof.app.project import load_system
    from oloproof.app.run import interruptible, make_executor, run_suite
    from oloproof.errors import Interrupted, UsageError
    from oloproof.report.results import ResultsFile, results_dict
    from oloproof.report.terminal import exit_line, one_line, plural, summary_view

    # `--json -`: stdout holds the JSON alone; what the system prints goes to stderr
    quiet = stdout_to_stderr() if json_path == "-" else contextlib.nullcontext()
    with quiet:
        with interruptible():  # Ctrl-C stops the command, whatever it is doing (an import included)
            pool = make_executor(concurrency=concurrency, workers=workers, executor=executor, scheduler=scheduler)
            if trials is not None:
                from oloproof.config.models import MAX_TRIALS
                from oloproof.errors import UsageError

                if not 1 <= trials <= MAX_TRIALS:
                    raise UsageError(f"--trials {trials}: must be between 1 and {MAX_TRIALS}")
            if json_path:
                check_output_path(json_path)
            if junit:
                check_output_path(junit, "--junit")
            project = load(project_dir)
            info = project.prepare()  # every case, derived case and label checked before anything runs
            system = load_system(project)
            system.factory.check_slots(pool.slots_per_process)
            out = console(stderr=json_path == "-")  # `--json -`: stdout holds the JSON alone
            db_path = db or str(Path(project_dir) / ".oloproof" / "log.db")
            if selection is not None and not selection.empty and resume is not None:
                raise UsageError("--resume takes up the cases its run chose: give no --case, -k, --limit or "
                                 "--last-failed with it")
            store = open_log(db_path, must_exist=resume is not None, durability=durability, write=True)
            if selection is not None and not selection.empty:
                from oloproof.app.selection import NothingToRun, choose

                try:
                    project.selection = choose(project, store, selection)
                except NothingToRun as e:
                    store.close()
                    click.echo(str(e), err=True)
                    sys.exit(0)
                except BaseException:
                    store.close()
                    raise
            if durability == "normal":
                click.echo("durability normal: a power loss may lose the last committed cases", err=True)
            results = ResultsFile(json_path, project.suite.criteria) if json_path else None
            try:
                with _progress(out, info.count) as progress:
                    outcome = run_suite(project, system, store, info, executor=pool, resume=resume,
                                        durability=durability, progress=progress, keep_cases=False,
                                        on_case=results.add if results else None, trials=trials,
                                        outputs=[json_path] if json_path else [])
                extra = after(store, outcome) if after is not None else None
                if junit:  # the sealed run as JUnit XML, read back from its events
                    from oloproof.report.junit import build_junit

                    junit_text = build_junit(store, outcome.run_id, outcome.summary.gate)
            except (Interrupted, KeyboardInterrupt) as e:
                run_id = getattr(e, "run_id", "") or ""
                if run_id:
                    where = log_args(db_path) + _project_args(project_dir)
                    click.echo(f"interrupted: committed cases are safe; finish with '{name} --resume {run_id}{where}'",
                               err=True)
                else:
                    click.echo("interrupted before the run started; nothing was recorded", err=True)
                sys.exit(130)
            finally:
                store.close()
    summary = outcome.summary
    for note in outcome.notes:
        click.echo(f"note: {note}", err=True)
    for warning in outcome.warnings:
        click.echo(f"warning: {one_line(warning)}", err=True)
    out.print(summary_view(summary, run_id=outcome.run_id, system=f"{outcome.system_name} {outcome.system_version}",
                           min_support=project.config.min_slice_support, quiet=brief, slices=slices))
    if project.selection:
        from oloproof.app.runs import selection_text
        from oloproof.report.terminal import command_text, print_command

        print_command(out, command_text(f"partial run: {selection_text(project.selection)}; "
                                        "its gate cannot pass and it is "
                                        "no baseline — run the whole suite to decide a release"))
    if extra is not None:
        out.print(extra)
    if outcome.errors:
        for message in outcome.error_messages:
            click.echo("error in " + one_line(message), err=True)  # one line each
        click.echo(f"{plural(outcome.errors, 'case')} errored; missing for every criterion "
                   f"(see 'oloproof show {outcome.run_id} CASE{log_args(db_path)}' for where each raised)", err=True)
    if outcome.retried:  # a flaky environment shows: never hidden by the pass it got to
        from oloproof.report.terminal import retried_table

        out.print(Text(f"{plural(len(outcome.retried), 'case')} ran again after an infrastructure error "
                       "(retries:); each verdict is its last attempt's", style="yellow"))
        out.print(retried_table(outcome.retried))
    out.print(Text(exit_line(summary.gate)))
    click.echo(f"run {outcome.run_id} sealed. Its log digest, to check it later with\n"
               f"'oloproof audit verify --expect DIGEST{log_args(db_path)}':\n{outcome.log_digest}",
               err=json_path == "-")
    if results is not None:
        document = results_dict(outcome.run_id, outcome.system_name, outcome.system_version,
                                project.suite, summary, outcome.log_digest)
        if project.config.retries is not None:
            document["retried"] = [r.as_dict() for r in outcome.retried]
        results.write(document)
        results.close()
    if junit:
        from oloproof.cli.common import write_text

        write_text(junit, junit_text)
    decided_exit(summary.gate.exit_code if summary.gate else 0)




class _progress:
    """A rich progress bar (done / total, rate, time left) on a terminal; nothing otherwise."""

    def __init__(self, out: Any, total: int):
        self.out, self.total = out, total
        self.bar: Any = None  # a rich Progress, made when the run starts

    def __enter__(self) -> Any:
        if not self.out.is_terminal:
            return None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(TextColumn("cases"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                            TextColumn("[progress.data.speed]{task.fields[rate]}"),
                            TimeElapsedColumn(), TimeRemainingColumn(), console=self.out, transient=True)
        self.bar.start()
        task = self.bar.add_task("cases", total=self.total, rate="")

        def update(done: int, total: int) -> None:
            speed = self.bar.tasks[0].speed
            self.bar.update(task, completed=done, total=total,
                            rate=f"{speed:,.0f} cases/s" if speed else "")

        return update

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


def _project_args(project_dir: str) -> str:
    """`` --project DIR`` when the project is not the current folder (a hint must run here)."""
    import shlex

    if Path(project_dir).resolve() == Path.cwd().resolve():
        return ""
    return f" --project {shlex.quote(project_dir)}"

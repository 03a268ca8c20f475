"""``oloproof label RUN --criterion C``: a person labels a model judge's cases, over
:mod:`oloproof.app.labels`; the labels calibrate the judge (SPEC §18.6)."""

from __future__ import annotations

import sys

import click

from oloproof.cli.common import DB_HELP, console, handled, open_log, resolve_run


def _has_tty() -> bool:
    """Whether a person can be asked: standard input and output are a terminal."""
    return sys.stdin.isatty() and sys.stdout.isatty()


@click.command("label")
@click.argument("run", default="latest")
@click.option("--criterion", required=True, metavar="C", help="The model judge's criterion to label.")
@click.option("--case", "case_id", metavar="ID", help="Label this one case (with --label), without a prompt.")
@click.option("--label", "label", type=click.Choice(["pass", "fail"]), help="The label of --case.")
@click.option("--project", "project_dir", default=".", type=click.Path(file_okay=False, exists=True),
              help="Project folder holding the oloproof.yaml that names the labels file.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, criterion: str, case_id: str | None, label: str | None, project_dir: str,
            db: str | None) -> None:
    """Label the cases a model judge judged in RUN (default: latest), one at a time: each case's
    input and output, the judge's verdict and explanation, then pass, fail, skip or quit. Each
    label is appended to the criterion's calibration: file as you give it (stopping keeps
    them all). Cases come in a fixed shuffled order, so the first ones you label are a random
    sample. Needs a terminal; for scripts, --case ID --label pass|fail labels one case.

    \b
    Example:
      oloproof label latest --criterion polite
      oloproof label latest --criterion polite --case msg_007 --label fail
    """
    from oloproof.app.labels import append_label, labelling, one_case, shown, to_label
    from oloproof.app.project import load_project
    from oloproof.errors import UsageError

    if (case_id is None) != (label is None):
        raise UsageError("--case and --label go together: --case ID --label pass|fail")
    if case_id is None and not _has_tty():
        raise UsageError("oloproof label asks a person, and needs a terminal for it; without one, label one "
                         "case at a time: --case ID --label pass|fail")
    project = load_project(project_dir)
    work = labelling(project, criterion)
    store = open_log(db)
    out = console()
    try:
        run_id = resolve_run(store, run)
        if case_id is not None:
            assert label is not None
            append_label(work, one_case(store, run_id, work, case_id), label)
            out.print(f"{case_id}: {label} → {work.path}", markup=False, highlight=False)
            return
        given = 0
        for item in to_label(store, run_id, work):
            view, j = item.view, item.judgement
            out.rule(f"case {view.case_id}", characters="─")
            out.print(f"input:  {shown(view.input)}", markup=False, highlight=False)
            out.print(f"output: {shown(view.output)}", markup=False, highlight=False)
            if j is not None:
                why = " ".join(str(j.error if j.verdict == "error" else j.explanation).split())
                out.print(f"judge:  {j.verdict} — {why}", markup=False, highlight=False)
            answer = click.prompt("label: [p]ass, [f]ail, [s]kip, [q]uit",
                                  type=click.Choice(["p", "f", "s", "q", "pass", "fail", "skip", "quit"]),
                                  show_choices=False)
            if answer in ("q", "quit"):
                break
            if answer in ("s", "skip"):
                continue
            append_label(work, item, "pass" if answer in ("p", "pass") else "fail")
            given += 1
        from oloproof.report.terminal import plural  # not at import: `oloproof --help` stays light

        out.print(f"{plural(given, 'label')} written to {work.path} ({len(work.labels)} in all)", markup=False,
                  highlight=False)
    finally:
        store.close()

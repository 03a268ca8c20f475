"""``oloproof export``: a stored run's cases as JSONL records with verdicts, OTLP JSON spans
or an SQLite analysis database."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, check_output_path, handled, open_log, printable_path, resolve_run, write_text


@click.command("export")
@click.argument("run", required=False)
@click.argument("file", required=False)
@click.option("--format", "fmt", type=click.Choice(["jsonl", "otlp-json", "sqlite"]), default="jsonl",
              show_default=True,
              help="jsonl: the records with verdicts; otlp-json: OpenTelemetry GenAI spans, one trace per case "
                   "(the Collector's file exporter format; 'oloproof import otel' reads it back); sqlite: an "
                   "analysis database (tables runs, cases, steps, verdicts, states, replays, pairs; docs/search.md).")
@click.option("--out", "out", default=None, help="File to write ('-' for stdout, the default; FILE says the same).")
@click.option("--force", is_flag=True, help="With --format sqlite: replace FILE if it exists.")
@click.option("--case-attribute", "case_attributes", multiple=True, metavar="NAME",
              help="With --format otlp-json: one more attribute of each agent span to hold its case's id "
                   "(besides oloproof.case.id), e.g. agentevals.eval.case.id; repeatable.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str | None, file: str | None, fmt: str, out: str | None, force: bool,
            case_attributes: tuple[str, ...], db: str | None) -> None:
    """Export every case of a stored RUN (default: latest; one argument that names no run and
    looks like a file — a '.' or a '/' in it — is FILE): its agent_trajectory/v1 and environment_state/v1
    records and its verdicts, one JSON object a line — or, with --format otlp-json, as
    OpenTelemetry spans for Jaeger, Phoenix or Langfuse (docs/otel.md) — or, with --format
    sqlite, as an analysis database FILE for Datasette, pandas or any SQL client.

    \b
    Example:
      oloproof export latest --format jsonl --out run.jsonl
      oloproof export latest --format otlp-json --out traces.jsonl
      oloproof export latest --format sqlite run.db
    """
    from oloproof.errors import UsageError
    from oloproof.report.export import export_lines
    from oloproof.report.otlp import export_otlp_lines

    if case_attributes and fmt != "otlp-json":
        raise UsageError(f"--case-attribute names an attribute of the exported spans: it goes with --format "
                         f"otlp-json, not {fmt}")
    for name in case_attributes:
        if not name or any(c.isspace() or not c.isprintable() for c in name) \
                or name.startswith(("oloproof.", "gen_ai.")):
            raise UsageError(f"--case-attribute {name!r}: give an attribute name of your own or of the consumer "
                             "(e.g. agentevals.eval.case.id), without spaces; oloproof.* and gen_ai.* are the "
                             "export's own")

    looks_like_a_file = run is not None and ("." in run or "/" in run or run == "-")  # no run id has either
    if file is None and run is not None and looks_like_a_file:
        store = open_log(db)
        try:
            from oloproof.app.refs import is_ref

            if not is_ref(store, run):
                run, file = "latest", run  # `oloproof export run.jsonl`: the latest run, to that file
        finally:
            store.close()
    run = run or "latest"
    if file is not None and out is not None and file != out:
        raise UsageError(f"give the output file once: FILE {file!r} or --out {out!r}")
    out = file or out or "-"
    if out != "-" and out.endswith((".py", ".pyw")):  # a typo of the order of arguments, never a target
        raise UsageError(f"{out}: refusing to write an export over a Python file; name a .jsonl or .db file")
    if fmt == "sqlite":
        _export_sqlite(run, out, db, force)
        return
    if out != "-":
        check_output_path(out, "--out")
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        lines = list(export_otlp_lines(store, run_id, tuple(dict.fromkeys(case_attributes))) if fmt == "otlp-json"
                     else export_lines(store, run_id))
    finally:
        store.close()
    text = "".join(line + "\n" for line in lines)
    if out == "-":
        click.echo(text, nl=False)
    else:
        write_text(out, text)
        from oloproof.report.terminal import plural

        click.echo(f"wrote {plural(len(lines), 'record')} of run {run_id} to {out}", err=True)


def _export_sqlite(run: str, out: str, db: str | None, force: bool = False) -> None:
    from pathlib import Path

    from oloproof.app.analysis import export_analysis
    from oloproof.errors import UsageError
    from oloproof.report.terminal import plural

    if out == "-":
        raise UsageError("--format sqlite writes a database file: give its path, e.g. oloproof export latest "
                         "--format sqlite run.db")
    check_output_path(out, "FILE")
    target = Path(out)
    if target.exists() and not target.is_file():
        raise UsageError(f"FILE {out}: exists and is not a regular file")
    if target.exists() and not force:
        raise UsageError(f"FILE {out}: exists; pass --force to replace it (as 'oloproof view --out' never "
                         "writes over a report either)")
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        counts = export_analysis(store, run_id, target)
    finally:
        store.close()
    shown = ", ".join(f"{name} {n}" for name, n in counts.items())
    click.echo(f"wrote the analysis database of run {run_id} to {printable_path(out)} "
               f"({plural(sum(counts.values()), 'row')}: {shown})", err=True)

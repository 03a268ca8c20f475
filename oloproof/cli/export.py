from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, check_output_path, handled, open_log, resolve_run, write_text


@click.command("export")
@click.argument("run")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "otlp-json"]), default="jsonl", show_default=True,
              help="jsonl: the records with verdicts; otlp-json: OpenTelemetry GenAI spans, one trace per case "
                   "(the Collector's file exporter format; 'oloproof import otel' reads it back).")
@click.option("--out", "out", default="-", show_default=True, help="File to write ('-' for stdout).")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, fmt: str, out: str, db: str | None) -> None:
    """Export every case of a stored RUN: its agent_trajectory/v1 and environment_state/v1
    records and its verdicts, one JSON object a line — or, with --format otlp-json, as
    OpenTelemetry spans for Jaeger, Phoenix or Langfuse (docs/otel.md).

    \b
    Example:
      oloproof export latest --format jsonl --out run.jsonl
      oloproof export latest --format otlp-json --out traces.jsonl
    """
    from oloproof.report.export import export_lines
    from oloproof.report.otlp import export_otlp_lines

    if out != "-":
        check_output_path(out, "--out")
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        lines = list(export_otlp_lines(store, run_id) if fmt == "otlp-json" else export_lines(store, run_id))
    finally:
        store.close()
    text = "".join(line + "\n" for line in lines)
    if out == "-":
        click.echo(text, nl=False)
    else:
        write_text(out, text)
        from oloproof.report.terminal import plural

        click.echo(f"wrote {plural(len(lines), 'record')} of run {run_id} to {out}", err=True)

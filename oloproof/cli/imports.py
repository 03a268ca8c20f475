"""``oloproof import otel``: OpenTelemetry traces stored as a sealed run of the log, over
:func:`oloproof.app.otel.import_traces`."""

from __future__ import annotations

import click

from oloproof.cli.common import DB_HELP, handled, open_log


@click.group("import")
def command() -> None:
    """Store trajectories recorded elsewhere as a run of the log.

    \b
    Example:
      oloproof import otel traces.jsonl --system support-agent
    """


@command.command("otel")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--system", metavar="NAME", help="The system's name in the run (default: the traces' service.name).")
@click.option("--version", "version", metavar="V",
              help="The system's version (default: service.version, or 'imported').")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def otel(files: tuple[str, ...], system: str | None, version: str | None, db: str | None) -> None:
    """Import OpenTelemetry traces (OTLP JSON: the Collector's file exporter, one
    ExportTraceServiceRequest per line) as one sealed run: a case per agent invocation, its
    GenAI (or OpenInference) spans as steps. See docs/otel.md for the mapping.

    Every file is checked before anything is written: a malformed one is a located error,
    exit 2, and the log is unchanged.

    \b
    Example:
      oloproof import otel traces.jsonl
      oloproof show latest
    """
    from pathlib import Path

    from oloproof.app.otel import import_traces
    from oloproof.app.run import utc_now
    from oloproof.errors import UsageError

    if "-" in files and not Path("-").exists():
        raise UsageError("import otel -: standard input cannot be imported: the importer reads each file twice "
                         "(first where each trace ends, then the traces), so memory stays flat; save it to a "
                         "file first, e.g. 'cat > traces.jsonl', and import that")
    store = open_log(db, must_exist=False, write=True)
    try:
        out = import_traces(store, [Path(f) for f in files], system=system, version=version, clock=utc_now)
    finally:
        store.close()
    from oloproof.report.terminal import one_line as inline
    from oloproof.report.terminal import plural

    unmapped = (f"; {plural(out.unmapped, 'span')} outside the GenAI mapping kept in the cases' metadata"
                if out.unmapped else "")
    click.echo(f"imported {plural(out.spans, 'span')} as run {out.run_id} "
               f"({inline(out.system)} {inline(out.version)}): "
               f"{plural(out.cases, 'case')}{unmapped}. Its log digest:\n{out.digest}")

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
      oloproof import otel traces.jsonl --cases cases.jsonl --case-key session.id
    """


@command.command("otel")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--system", metavar="NAME", help="The system's name in the run (default: the traces' service.name).")
@click.option("--version", "version", metavar="V",
              help="The system's version (default: service.version, or 'imported').")
@click.option("--cases", "cases", metavar="FILE", type=click.Path(dir_okay=False),
              help="A cases file (a suite's JSONL) whose expected, initial_state, metadata and tags each "
                   "imported case takes from the line of its id (or of --case-key's value).")
@click.option("--case-key", "case_key", metavar="ATTRIBUTE",
              help="With --cases: join by the value of this span attribute (on the agent span, else the "
                   "trace's first span that has it, else the resource), e.g. session.id or oloproof.case.id; "
                   "default: the imported case's id.")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def otel(files: tuple[str, ...], system: str | None, version: str | None, cases: str | None,
         case_key: str | None, db: str | None) -> None:
    """Import OpenTelemetry traces (OTLP JSON: the Collector's file exporter, one
    ExportTraceServiceRequest per line) as one sealed run: a case per agent invocation, its
    GenAI (or OpenInference) spans as steps. See docs/otel.md for the mapping.

    Every file is checked before anything is written: a malformed one is a located error,
    exit 2, and the log is unchanged.

    With --cases, the expected answers of a cases file are joined to the imported cases, so
    that 'oloproof eval' judges them with the checks that need expected (agent_tool_sequence,
    agent_route, state_matches …); the summary counts the cases no line matched and the lines
    no case matched.

    \b
    Example:
      oloproof import otel traces.jsonl
      oloproof import otel traces.jsonl --cases cases.jsonl --case-key session.id
      oloproof show latest
    """
    from pathlib import Path

    from oloproof.app.otel import import_traces, read_cases
    from oloproof.app.run import utc_now
    from oloproof.errors import UsageError

    if "-" in files and not Path("-").exists():
        raise UsageError("import otel -: standard input cannot be imported: the importer reads each file twice "
                         "(first where each trace ends, then the traces), so memory stays flat; save it to a "
                         "file first, e.g. 'cat > traces.jsonl', and import that")
    if case_key is not None and cases is None:
        raise UsageError("--case-key names the attribute that joins a trace to a line of --cases: give "
                         "--cases FILE too")
    if case_key is not None and (not case_key or any(c.isspace() or not c.isprintable() for c in case_key)):
        raise UsageError(f"--case-key {case_key!r}: give the name of a span attribute, e.g. session.id")
    join = read_cases(Path(cases), case_key) if cases is not None else None  # checked before the log is opened
    store = open_log(db, must_exist=False, write=True)
    try:
        out = import_traces(store, [Path(f) for f in files], system=system, version=version, clock=utc_now,
                            join=join)
    finally:
        store.close()
    from oloproof.report.terminal import one_line as inline
    from oloproof.report.terminal import plural

    unmapped = (f"; {plural(out.unmapped, 'span')} outside the GenAI mapping kept in the cases' metadata"
                if out.unmapped else "")
    click.echo(f"imported {plural(out.spans, 'span')} as run {out.run_id} "
               f"({inline(out.system)} {inline(out.version)}): "
               f"{plural(out.cases, 'case')}{unmapped}. Its log digest:\n{out.digest}")
    if join is not None:
        by = f"by {inline(case_key)}" if case_key is not None else "by case id"
        unused = ", ".join(inline(i) for i in out.unused[:5]) + (", …" if len(out.unused) > 5 else "")
        click.echo(f"joined {out.joined} of {plural(out.cases, 'case')} to {inline(join.path)} ({by}); "
                   f"{plural(out.unjoined, 'case')} matched no case line (kept without expected); "
                   f"{plural(len(out.unused), 'case line')} matched no trace" + (f" ({unused})" if unused else ""))

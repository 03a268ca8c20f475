from __future__ import annotations

import sys

import click

from oloproof.cli.common import DB_HELP, handled, open_log


@click.group("audit")
def command() -> None:
    """Check and repair the event log.

    \b
    Example:
      oloproof audit verify
    """


@command.command("verify")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def verify(db: str | None) -> None:
    """Check every stream's hash chain; report the first broken event of each.

    Exit code 0 when every chain holds, 1 otherwise.

    \b
    Example:
      oloproof audit verify --db .oloproof/log.db
    """
    store = open_log(db)
    try:
        report = store.verify()
        integrity = store.integrity_check()
    finally:
        store.close()
    if integrity != "ok":
        click.echo(f"sqlite integrity_check: {integrity}")
    for p in report.problems:
        click.echo(f"BROKEN {p.stream} #{p.seq}: {p.problem}")
    status = "ok" if report.ok and integrity == "ok" else "FAILED"
    click.echo(f"{status}: {report.streams} streams, {report.events} events, "
               f"{len(report.problems)} broken")
    sys.exit(0 if status == "ok" else 1)


@command.command("rebuild")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def rebuild(db: str | None) -> None:
    """Drop the projection tables (runs, cases with their verdicts) and rebuild them from the events.

    \b
    Example:
      oloproof audit rebuild
    """
    from oloproof.app.evidence import rebuild_projections

    store = open_log(db)
    try:
        rebuild_projections(store)
        n = len(store.projection("cases"))
    finally:
        store.close()
    click.echo(f"rebuilt projections from events ({n} cases)")

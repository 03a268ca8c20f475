"""``oloproof push RUN… --to URL`` (or ``--from URL``): sealed runs copied between logs, each
verified against its seal on arrival, over :mod:`oloproof.app.push`."""

from __future__ import annotations

import click

from oloproof.cli.common import handled, open_log


@click.command("push")
@click.argument("runs", nargs=-1, required=True, metavar="RUN…")
@click.option("--to", "to", metavar="URL",
              help="The log to copy the runs into (postgresql://USER@HOST/DB, a path, sqlite:///PATH); it is "
                   "created if it does not exist.")
@click.option("--from", "from_", metavar="URL",
              help="Copy the runs the other way: from this log into --db (a developer pulling main's baseline).")
@click.option("--db", metavar="PATH",
              help="This side's log (default: OLOPROOF_DB, else .oloproof/log.db here or in the nearest parent "
                   "folder that has one).")
@handled
def command(runs: tuple[str, ...], to: str | None, from_: str | None, db: str | None) -> None:
    """Copy sealed runs, with every stream their seals cover (cases, replays), into another log.

    RUN is a run id, 'latest', 'pin:NAME' or 'version:V', read in the log the runs come from.
    Each run is copied in one transaction and its seal checked on arrival: the digest
    recomputed in the target must be the one the source sealed (printed for each run; the
    digest 'oloproof run' printed in CI). Pushing again copies nothing. An unsealed run is
    refused (exit 2), and so is a run whose id the target holds with other content (exit 2:
    another run under that id, or a tampered log); nothing of a refused run is copied.

    The CI pattern: each job runs its suite against a local SQLite log, then pushes its sealed
    run to the team's log (docs/team-log.md).

    \b
    Example:
      oloproof push latest --to postgresql://ci@db.internal/oloproof
      oloproof push pin:main --from postgresql://reader@db.internal/oloproof
    """
    from oloproof.app.push import prepare, push_runs
    from oloproof.cli.common import find_log, log_label, same_log
    from oloproof.errors import UsageError
    from oloproof.store import DEFAULT_LOG

    if (to is None) == (from_ is None):
        raise UsageError("give the log to copy into with --to URL, or the log to copy from with --from URL "
                         "(one of them)")
    here = db if db is not None else str(find_log() or DEFAULT_LOG)
    source_url, target_url = (here, to) if to is not None else (from_, here)
    assert source_url is not None and target_url is not None
    if same_log(source_url, target_url):
        raise UsageError(f"{log_label(source_url)} is both the log the runs come from and the one they go to")
    source = open_log(source_url)
    try:
        ready = prepare(source, list(runs))  # every run checked before the target is opened (or made)
        target = open_log(target_url, must_exist=False, write=True)
        try:
            pushed = push_runs(source, target, ready)
        finally:
            target.close()
    finally:
        source.close()
    where = log_label(target_url)
    for p in pushed:
        if p.copied:
            click.echo(f"pushed run {p.run_id} to {where}: {p.cases} cases, {p.streams} streams, {p.events} events; "
                       "seal verified on arrival, digest:")
        else:
            click.echo(f"run {p.run_id}: already in {where}, nothing copied; seal verified there, digest:")
        click.echo(p.digest)
        for note in p.notes:
            click.echo(f"note: {note}", err=True)


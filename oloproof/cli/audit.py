"""``oloproof audit verify`` (every run against its seal, every chain: exit 1 when anything
is broken) and ``oloproof audit rebuild`` (the derived tables rebuilt from the events, in
one step), over :mod:`oloproof.app.audit` and :mod:`oloproof.app.projections`."""

from __future__ import annotations

import sys

import click

from oloproof.cli.common import DB_HELP, handled, open_log


@click.group("audit")
def command() -> None:
    """Check and repair the event log.

    \b
    Example:
      oloproof audit verify --expect sha256:4f1c…
    """


@command.command("verify")
@click.option("--db", metavar="PATH", help=DB_HELP)
@click.option("--expect", "expect", metavar="DIGEST", multiple=True,
              help="A run's log digest, as 'oloproof run' printed it (and its JSON results hold as "
                   "log_digest): fail unless the run it seals is still exactly in the log. Repeatable.")
@handled
def verify(db: str | None, expect: tuple[str, ...]) -> None:
    """Check the log: every stream's hash chain, every payload's type, and every run against its
    seal, in one read of the log.

    Names what is wrong: an altered event, a missing or truncated case or replay stream, a
    stream added after the seal, an unsealed (crashed, killed or running) run, case streams
    of a run that no longer exists. Without a key or an anchor this proves the log was not
    damaged or edited carelessly; with --expect, that each expected run is exactly what was
    sealed; with OLOPROOF_LOG_KEY, that nobody without the key rewrote it.

    Exit code 0 when everything holds, 1 otherwise.

    \b
    Example:
      oloproof audit verify --expect "$(jq -r .log_digest results.json)"
    """
    import re

    from rich.markup import escape

    from oloproof.app.audit import audit_log, current_digest
    from oloproof.cli.common import console
    from oloproof.errors import UsageError

    for digest in expect:
        if not re.fullmatch(r"(sha256|hmac-sha256):[0-9a-f]{64}", digest):
            raise UsageError(f"--expect {digest[:80]!r}: not a log digest (sha256:… or hmac-sha256:… "
                             "followed by 64 hex digits, as 'oloproof run' prints it)")
    from oloproof.report.terminal import plural

    out = console()
    store = open_log(db)
    try:
        log = audit_log(store)
        integrity = log.integrity
        anchored: list[tuple[str, str | None, str | None]] = []  # (digest, run id, problem)
        for digest in expect:
            run = next((r for r in log.runs if r.digest == digest), None)
            if run is None:
                anchored.append((digest, None, "no run in the log is sealed with this digest "
                                               "(the run was removed, or rewritten and sealed again)"))
            elif run.problems:
                anchored.append((digest, run.run_id, "the run it seals fails its audit (above)"))
            else:
                now = current_digest(store, run)
                anchored.append((digest, run.run_id, None if now == digest else
                                 "the run's streams no longer match this digest (rewritten)"))
    finally:
        store.close()
    failed = False
    if integrity != "ok":
        out.print(f"backend integrity check: {escape(integrity)}")
        failed = True
    for problem in log.problems:
        out.print(f"BROKEN {escape(problem)}")
        failed = True
    for run in log.runs:
        for problem in run.problems:
            out.print(f"BROKEN run {escape(run.run_id)}: {escape(problem)}")
            failed = True
        if not run.problems and not run.complete:
            from oloproof.app.runs import resume_command

            finish = resume_command(run.started) if run.started is not None else f"oloproof run --resume {run.run_id}"
            out.print(f"INCOMPLETE run {escape(run.run_id)}: unsealed, {run.committed} of {run.expected} cases "
                      f"committed (crashed, killed or still running; finish it with '{escape(finish)}')")
            failed = True
        elif not run.problems and run.sealed is None:
            out.print(f"note: run {escape(run.run_id)} finished before seals existed: a deleted case stream "
                      "is caught, a truncated one is not")
    for digest, run_id, mismatch in anchored:
        if mismatch:
            out.print(f"BROKEN --expect {escape(digest)}: {escape(mismatch)}")
            failed = True
        else:
            out.print(f"ok: run {escape(run_id or '')} matches {escape(digest)}")
    sealed = sum(1 for r in log.runs if r.sealed is not None)
    key = "keyed (HMAC-SHA256)" if store.scheme == "hmac-sha256" else "unkeyed (SHA-256)"
    out.print(f"{'FAILED' if failed else 'ok'}: {plural(log.streams, 'stream')}, {plural(log.events, 'event')}, "
              f"{plural(len(log.runs), 'run')} ({sealed} sealed), chain {key}")
    sys.exit(1 if failed else 0)


@command.command("rebuild")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def rebuild(db: str | None) -> None:
    """Rebuild the derived tables (runs, cases, evaluations) from the events, in one step.

    The tables only serve browsing and SQL; no decision reads them. A kill or an unreadable
    event leaves the previous tables as they were, and the error names the event.

    \b
    Example:
      oloproof audit rebuild
    """
    from oloproof.app.projections import rebuild_projections

    store = open_log(db, write=True)
    try:
        rebuild_projections(store)
        n = store.count("cases")
    finally:
        store.close()
    from oloproof.report.terminal import plural

    click.echo(f"rebuilt projections from events ({plural(n, 'case')})")

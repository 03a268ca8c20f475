"""``oloproof view``: a stored run (or a comparison, ``--compare``) as an offline HTML
report, served on localhost or written as a static folder (``--out``)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from oloproof.cli.common import (
    DB_HELP,
    check_output_folder,
    handled,
    open_log,
    resolve_run,
)


@click.command("view")
@click.argument("run", default="latest")
@click.option("--compare", "base", metavar="BASE",
              help="Compare RUN (the candidate) with BASE: a run id, 'latest', 'version:V' or 'pin:NAME'.")
@click.option("--allow-unpaired", is_flag=True,
              help="With --compare: compare runs of different systems, or with no case in common.")
@click.option("--history", is_flag=True,
              help="A trend page of RUN's system instead: each criterion across its sealed runs (with --last N, "
                   "the latest N), the flaky cases, and each run's own report.")
@click.option("--last", type=int, metavar="N", help="With --history: only the latest N sealed runs.")
@click.option("--out", "out_dir", type=click.Path(), help="Write a static report folder (new or empty) and exit.")
@click.option("--port", type=int, default=8765, show_default=True,
              help="Serve the report on localhost:PORT (0: any free port).")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, base: str | None, allow_unpaired: bool, history: bool, last: int | None,
            out_dir: str | None, port: int, db: str | None) -> None:
    """Open a stored RUN (default: latest) as an HTML report: criteria, slices, gate, and a
    case panel per case. Works offline: nothing is loaded from the network.

    With --compare BASE, the report compares BASE with RUN (the candidate), as 'oloproof diff
    BASE RUN' does: both runs, the pairing, the criteria with their flips and p-values, and
    the flipped cases (regressions first), each opening the base and candidate case panels
    side by side; each run's own report is a tab away. RUN and BASE are each a run id,
    'latest', 'version:V' or 'pin:NAME'; two references to one run exit 2.

    With --history, the page is the trend of RUN's system: per criterion, the rate and its
    interval band across the sealed runs (inline SVG), each run's paired test against the run
    before, the flaky cases, and links into each run's own report (written beside it).

    The output folder (--out) and the port (--port) are checked before anything is read:
    a folder that is a file, not empty or under a missing folder, or a port in use, exit 2.

    \b
    Example:
      oloproof view latest --out report && chromium report/index.html
      oloproof view version:v2 --compare version:v1
      oloproof view --history --last 10 --out trend
    """
    from oloproof.errors import UsageError
    from oloproof.report.bundle import build_compare_bundle, build_run_bundle

    if not 0 <= port < 65536:
        raise UsageError(f"--port {port}: not a port number (0 to 65535; 0: any free port)")
    if history and base is not None:
        raise UsageError("--history and --compare make different pages; give one of them")
    if last is not None and (not history or last < 1):
        raise UsageError(f"--last {last}: " + ("give a whole number >= 1" if history else "goes with --history"))
    server, target, created = None, None, False
    if out_dir is not None:
        check_output_folder(out_dir, "--out")
        target, created = Path(out_dir), not Path(out_dir).exists()
    else:
        server = bind(port)  # the port is taken now, before the report is computed
    try:
        if server is not None:
            target, created = Path(tempfile.mkdtemp(prefix="oloproof-view-")), True
            server.folder = target
        if target is None:  # --out named it, or the temporary folder is
            raise RuntimeError("oloproof view: no folder to write the report to")
        store = open_log(db)
        try:
            if base is not None:
                compared = build_compare_bundle(store, base, run, target, allow_unpaired=allow_unpaired)
            elif history:
                from oloproof.report.history import build_history_bundle

                trend = build_history_bundle(store, run, target, last=last)
            else:
                run_id = resolve_run(store, run)
                n = build_run_bundle(store, run_id, target)
        finally:
            store.close()
    except BaseException:
        if server is not None:
            server.server_close()
        if target is not None:
            _remove(target, created)  # no half-written report left behind
        raise
    if server is None:
        from oloproof.report.terminal import plural

        if history:
            click.echo(f"wrote the history of {trend.system} ({plural(trend.runs, 'sealed run')}, "
                       f"{plural(trend.flaky, 'flaky case row')}) to {target / 'index.html'}")
        elif base is not None:
            click.echo(f"wrote the comparison of base {compared.base_id} ({plural(compared.base_cases, 'case')}) "
                       f"and candidate {compared.candidate_id} ({plural(compared.candidate_cases, 'case')}, "
                       f"{compared.paired} paired) "
                       f"to {target / 'index.html'}")
        else:
            click.echo(f"wrote the report of run {run_id} ({plural(n, 'case')}) to {target / 'index.html'}")
        return
    try:
        serve(server, target)
    finally:
        _remove(target, created)


def _remove(target: Path, created: bool) -> None:
    if created:
        shutil.rmtree(target, ignore_errors=True)
    else:  # an empty folder the operator named: empty it again
        for child in target.iterdir() if target.is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def bind(port: int) -> Any:
    """A server bound to 127.0.0.1:PORT that serves the folder named by its ``folder``
    attribute; a port out of range, in use or not allowed is a UsageError (exit 2)."""
    import errno
    import http.server

    from oloproof.errors import UsageError

    if not 0 <= port < 65536:
        raise UsageError(f"--port {port}: not a port number (0 to 65535; 0: any free port)")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, request: Any, client_address: Any, server: Any) -> None:
            super().__init__(request, client_address, server, directory=str(server.folder))

    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--port {port}: port {port} is already in use on 127.0.0.1; "
                             "choose another (or --port 0 for any free port)") from e
        if e.errno in (errno.EACCES, errno.EPERM):
            raise UsageError(f"--port {port}: not allowed to listen on port {port} ({e.strerror}); "
                             "choose a port above 1023") from e
        raise UsageError(f"--port {port}: cannot listen on 127.0.0.1:{port} ({e.strerror or e})") from e
    server.folder = None  # type: ignore[attr-defined]
    return server


def serve(server: Any, folder: Path) -> None:
    """Serve ``folder`` with a server from :func:`bind`, printing its address, until Ctrl-C;
    the server is closed however it stops."""
    import sys

    server.folder = folder
    click.echo(f"serving the report on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()

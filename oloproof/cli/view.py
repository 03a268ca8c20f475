from __future__ import annotations

import tempfile
from pathlib import Path

import click

from oloproof.cli.common import DB_HELP, handled, open_log, resolve_run


@click.command("view")
@click.argument("run", default="latest")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Write a static report folder and exit.")
@click.option("--port", type=int, default=8765, show_default=True,
              help="Serve the report on localhost:PORT (0: any free port).")
@click.option("--db", metavar="PATH", help=DB_HELP)
@handled
def command(run: str, out_dir: str | None, port: int, db: str | None) -> None:
    """Open a stored RUN (default: latest) as an HTML report: criteria, slices, gate, and a
    case panel per case. Works offline: nothing is loaded from the network.

    \b
    Example:
      oloproof view latest --out report && chromium report/index.html
    """
    from oloproof.errors import UsageError
    from oloproof.report.bundle import build_run_bundle

    if not 0 <= port < 65536:
        raise UsageError(f"--port {port}: not a port number")
    store = open_log(db)
    try:
        run_id = resolve_run(store, run)
        target = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="oloproof-view-"))
        if out_dir and target.exists() and any(target.iterdir()):
            raise UsageError(f"{target} is not empty; choose a new folder for the report")
        n = build_run_bundle(store, run_id, target)
    finally:
        store.close()
    if out_dir:
        click.echo(f"wrote the report of run {run_id} ({n} cases) to {target / 'index.html'}")
        return
    serve(target, port)


def serve(folder: Path, port: int) -> None:
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    click.echo(f"serving the report on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)",
               err=False)
    import sys

    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()

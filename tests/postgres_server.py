"""A throwaway PostgreSQL cluster on 127.0.0.1 for the tests (and the benchmark).

``cluster()`` runs Debian's ``initdb`` into a fresh temporary folder and ``pg_ctl start`` on a
free port, as the ``postgres`` user when the tests run as root (PostgreSQL refuses to run as
root; CI runs as root), and stops it and deletes the folder at the end. No mock: the server is
the distribution's own. ``find_bin()`` says where the server programs are, or None.

Each test gets its own database (:meth:`Server.new_database`, ``CREATE DATABASE`` from an
empty template), so one cluster serves a whole test session.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REQUIRE = "OLOPROOF_REQUIRE_POSTGRES"

#: the tests' settings: nothing is flushed to disk (a throwaway cluster need not survive a power
#: loss; the tests check what transactions do, not the disk), synchronous commit stays on
FAST = {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "on"}
#: a benchmark's settings: the server's defaults, durable (fsync and synchronous commit on)
DURABLE = {"fsync": "on", "synchronous_commit": "on"}


def find_bin() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: Debian's ``/usr/lib/postgresql/<version>/bin``
    (the newest), else wherever ``pg_ctl`` is on the PATH; None when PostgreSQL is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: [int(x) for x in Path(p).parent.parent.name.split(".") if x.isdigit()])
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    return None


def required() -> bool:
    """``OLOPROOF_REQUIRE_POSTGRES=1`` (CI): a missing server fails the tests instead of skipping them."""
    return os.environ.get(REQUIRE, "").strip().lower() not in ("", "0", "false", "no", "off")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running cluster: ``url(db)`` connects to database ``db`` as the superuser ``postgres``
    (trust authentication on 127.0.0.1 only)."""

    port: int
    folder: Path
    bindir: Path
    made: list[str] = field(default_factory=list)

    def url(self, database: str = "postgres", user: str = "postgres", password: str | None = None) -> str:
        """The URL of ``database`` on this server."""
        auth = user if password is None else f"{user}:{password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> list[tuple]:
        """Run one statement as the superuser, outside any transaction; its rows."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]  # the tests' own SQL
            return cur.fetchall() if cur.description else []

    def new_database(self, prefix: str = "t") -> str:
        """A new empty database (``CREATE DATABASE … TEMPLATE template0``, copied as files:
        the fast way on a cluster without fsync); returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        try:
            self.sql(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY")
        except psycopg.errors.SyntaxError:  # before PostgreSQL 15: file copy is the only strategy
            self.sql(f"CREATE DATABASE {name} TEMPLATE template0")
        self.made.append(name)
        return self.url(name)


def _as_postgres() -> dict:
    """subprocess options that run a server program as ``postgres`` when we are root."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root and there is no 'postgres' user to run the server as "
                           "(Debian's postgresql package makes one)") from None
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@contextlib.contextmanager
def cluster(settings: dict[str, str] | None = None) -> Iterator[Server]:
    """Start a throwaway cluster on a free port of 127.0.0.1; stop it and delete it after."""
    bindir = find_bin()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL is not installed (no initdb in /usr/lib/postgresql/*/bin or on the "
                                "PATH): apt-get install postgresql")
    run_as = _as_postgres()
    folder = Path(tempfile.mkdtemp(prefix="oloproof-pg-"))
    data = folder / "data"
    if run_as:
        os.chown(folder, run_as["user"], run_as["group"])
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    try:
        subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                        "--locale=C", "--no-sync"], check=True, capture_output=True, env=env, **run_as)
        options = {"listen_addresses": "127.0.0.1", "unix_socket_directories": str(folder),
                   "max_connections": "100", "shared_buffers": "64MB", **FAST, **(settings or {})}
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("".join(f"{k} = '{v}'\n" for k, v in options.items()))
        for attempt in range(5):  # a free port can be taken by someone else before we bind it
            port = _free_port()
            started = subprocess.run(
                [str(bindir / "pg_ctl"), "start", "-D", str(data), "-w", "-t", "60", "-l", str(folder / "log"),
                 "-o", f"-p {port}"], capture_output=True, env=env, **run_as)
            if started.returncode == 0:
                break
            if attempt == 4:
                log = (folder / "log").read_text(errors="replace") if (folder / "log").exists() else ""
                raise RuntimeError(f"pg_ctl start failed: {started.stderr.decode(errors='replace')}\n{log[-2000:]}")
        server = Server(port, folder, bindir)
        try:
            yield server
        finally:
            subprocess.run([str(bindir / "pg_ctl"), "stop", "-D", str(data), "-m", "immediate", "-w"],
                           capture_output=True, env=env, **run_as)
    finally:
        for _ in range(3):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                break
            time.sleep(0.2)

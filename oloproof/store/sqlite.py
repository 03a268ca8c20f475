"""The SQLite backend of the event log: one file in WAL mode.

Every write is one ``BEGIN IMMEDIATE`` transaction (a second writer waits on the busy
timeout rather than failing). Events are append-only: triggers refuse UPDATE and DELETE on
the ``events`` table, and each event carries a hash-chain digest per stream.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from itertools import count, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from oloproof.errors import CorruptLogError, DuplicateEventError, RunBusyError, StoreError, UsageError
from oloproof.events import HMAC_SHA256, SHA256, chain_digests, scheme_of
from oloproof.store import search
from oloproof.store.base import (
    PROJECTIONS,
    PROJECTIONS_VERSION,
    EventStore,
    Rows,
    StoredEvent,
    StreamAppend,
    wrong_key,
)

if TYPE_CHECKING:
    import sqlite_utils

    from oloproof.store.judged import JudgementCache

SCHEMA_VERSION = "1"  # of the events table; projections have their own version
DURABILITY = {"full": "FULL", "normal": "NORMAL"}

#: the only triggers an Oloproof log may hold (name -> definition)
_TRIGGERS = {
    "events_append_only_update": "CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events\n"
                                 "BEGIN SELECT RAISE(ABORT, 'oloproof events are append-only'); END;",
    "events_append_only_delete": "CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events\n"
                                 "BEGIN SELECT RAISE(ABORT, 'oloproof events are append-only'); END;",
}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    pos INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload BLOB NOT NULL,
    digest TEXT NOT NULL,
    UNIQUE (stream, seq)
);
CREATE INDEX IF NOT EXISTS events_roots ON events (stream) WHERE seq = 0 AND instr(stream, '/') = 0;
""" + "\n".join(sql.replace("CREATE TRIGGER", "CREATE TRIGGER IF NOT EXISTS") for sql in _TRIGGERS.values())


#: a log file with none (or only some) of the tables a log is created with, and nothing else: its
#: creation (one transaction, after the file itself) was interrupted; a writer finishes it
INTERRUPTED = ("an Oloproof log whose creation was interrupted (it holds no events yet); delete it, or run "
               "'oloproof run' to finish creating it")


def _ours(table: str) -> bool:
    """A table an Oloproof log is created with (SQLite's own ``sqlite_*`` tables included)."""
    return (table in ("meta", "events") or table in PROJECTIONS or table.startswith(search.TABLE)
            or table.startswith("sqlite_"))


#: how long a writer waits for another one's transaction (a long import holds the lock throughout)
BUSY_SECONDS = 60.0
#: how long a search waits for the write lock to catch the index up before it answers from what
#: is indexed (a run commits case by case, so the lock is free between two of its cases)
SEARCH_WAIT = 2.0

_VERDICTS_VIEW = """
CREATE VIEW IF NOT EXISTS verdicts AS
SELECT e.run_id, e.case_id, j.key AS criterion, json_extract(j.value, '$[0]') AS verdict,
       json_extract(j.value, '$[1]') AS reason
FROM evaluations AS e
JOIN runs AS r ON r.run_id = e.run_id AND r.eval_key = e.eval_key,
     json_each(e.result, '$.verdicts') AS j
"""


class SQLiteStore(EventStore):
    """Event log in one SQLite file (default ``.oloproof/log.db``).

    ``readonly``: open for reading only (``mode=ro``): nothing is created, migrated or
    switched to WAL, and a file on read-only storage is read as it is (``immutable``). The
    read commands use it; they never write, so they never wait on or block a writer.

    A log holding triggers that Oloproof did not create is refused: a trigger can rewrite what
    is stored behind Oloproof's back.
    """

    def __init__(self, path: str | Path, *, durability: str = "full", create: bool = True,
                 readonly: bool = False, key: bytes | None = None):
        self.path = Path(path)
        self.projections_stale = False
        self.readonly = readonly
        self._outer = False  # inside transaction()
        self.key = key
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"no event log at {self.path}")
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"{self.path}: is not a file")
        if create and not readonly:
            parent = self.path.parent
            if parent.exists() and not parent.is_dir():
                raise StoreError(f"cannot create the log at {self.path}: {parent} is a file, not a folder")
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create the folder {parent} for the log: {e.strerror or e}") from e
        try:
            if readonly:
                self._conn = _connect_readonly(self.path)
            else:
                self._conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=BUSY_SECONDS)
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_SECONDS * 1000)}")
            self._check()  # before anything could change the file (a foreign one stays as it was)
            if not readonly:
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                self._conn.execute(f"PRAGMA synchronous = {DURABILITY[durability]}")
                self._prepare()
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                self._conn.close()
                raise StoreError(f"{self.path}: the log is locked by another writer (a run or an import) for "
                                 f"more than {BUSY_SECONDS:g} s; try again when it has finished") from e
            raise CorruptLogError(f"{self.path}: not a readable Oloproof log ({e})") from e
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: not a readable Oloproof log ({e})") from e
        except StoreError:
            self._conn.close()
            raise
        if not readonly and mode.lower() != "wal":
            raise StoreError(f"{self.path}: could not switch the log to WAL mode (got {mode})")
        if self.key_problem and not readonly:
            self._conn.close()
            raise StoreError(f"{self.path}: {self.key_problem}")

    @property
    def db(self) -> sqlite_utils.Database:
        """The log as a :mod:`sqlite_utils` database, for ad-hoc inspection of projections."""
        import sqlite_utils

        return sqlite_utils.Database(self._conn)

    def _check(self) -> None:
        """What every opening checks, without writing: an Oloproof log of a version this
        code reads, with no foreign triggers, chained the way the key says."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        unfinished = "events" not in tables and all(_ours(t) for t in tables)
        if "events" not in tables and not unfinished:
            raise CorruptLogError(f"{self.path}: not an Oloproof log (no events table)")
        if unfinished and self.readonly:  # a writer (run) finishes it: every statement below is IF NOT EXISTS
            raise CorruptLogError(f"{self.path}: {INTERRUPTED}")
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if (row is None and not unfinished) or (row is not None and row[0] != SCHEMA_VERSION):
                raise CorruptLogError(
                    f"{self.path}: log schema version {row[0] if row else 'unknown'!r}; "
                    f"this Oloproof reads version {SCHEMA_VERSION}"
                )
        if "events" in tables:
            cols = {r[1] for r in self._conn.execute("PRAGMA table_info(events)")}
            if not {"stream", "seq", "type", "payload", "digest"} <= cols:
                raise CorruptLogError(f"{self.path}: events table is missing columns")
        ours = {name: _normal(sql) for name, sql in _TRIGGERS.items()}
        foreign = [
            f"{name} (on {table})"
            for name, table, sql in self._conn.execute(
                "SELECT name, tbl_name, sql FROM sqlite_master WHERE type='trigger'")
            if ours.get(name) != _normal(sql or "")
        ]
        if foreign:
            raise CorruptLogError(
                f"{self.path}: the log holds triggers that Oloproof did not create: {', '.join(sorted(foreign))}. "
                "A trigger can rewrite what is stored, so this log is refused; if you trust the file, "
                "remove them with DROP TRIGGER"
            )
        stored = None
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='chain'").fetchone()
            stored = row[0] if row else None
        has_events = "events" in tables and self._conn.execute("SELECT 1 FROM events LIMIT 1").fetchone()
        if stored is None and not has_events:
            self.scheme = scheme_of(self.key)  # a new log: chained as the key says
        else:
            self.scheme = stored or SHA256
        if self.scheme not in (SHA256, HMAC_SHA256):
            raise CorruptLogError(f"{self.path}: unknown chain scheme {self.scheme!r}")
        if self.scheme == HMAC_SHA256 and self.key is None:
            self.key_problem = ("this log's chain is keyed (HMAC-SHA256): set OLOPROOF_LOG_KEY to the key "
                                "it was written with")
        elif self.scheme == SHA256 and self.key is not None:
            self.key_problem = ("OLOPROOF_LOG_KEY is set, but this log's chain is not keyed: it was written "
                                "without the key, or rewritten without it")
        elif self.scheme == HMAC_SHA256 and has_events and self.key is not None:
            # a wrong key is not tampering: say which
            self.key_problem = wrong_key(self.key, self._first_events())
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='projections_version'").fetchone()
            self.projections_stale = bool(has_events) and (row is None or row[0] != PROJECTIONS_VERSION)

    def _first_events(self) -> list[tuple[str, bytes, str]]:
        """(stream, payload, digest) of a few first events: of the first runs (the partial
        index holds them) and of the streams that start among the log's first rows (a bounded
        read, whatever the size of the log)."""
        sql = "SELECT stream, CAST(payload AS BLOB), digest FROM events WHERE "
        runs = self._conn.execute(sql + "seq = 0 AND instr(stream, '/') = 0 ORDER BY pos LIMIT 8").fetchall()
        early = self._conn.execute(sql + "pos IN (SELECT pos FROM (SELECT pos, seq FROM events ORDER BY pos "
                                   "LIMIT 2000) WHERE seq = 0 LIMIT 16)").fetchall()
        return [(r[0], r[1] if isinstance(r[1], bytes) else r[1].encode(), r[2]) for r in runs + early]

    def _prepare(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(_SCHEMA):
                self._conn.execute(statement)
            for statement in search.SCHEMA:
                self._conn.execute(statement)
            self._conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,)
            )
            if self.key_problem is None:
                self._conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('chain', ?)", (self.scheme,))
            row = self._conn.execute("SELECT value FROM meta WHERE key='projections_version'").fetchone()
            if row is None or row[0] != PROJECTIONS_VERSION:
                # derived tables of another shape: drop them; they are rebuilt from the events
                self._conn.execute("DROP VIEW IF EXISTS verdicts")
                for name in PROJECTIONS:
                    self._conn.execute(f"DROP TABLE IF EXISTS {name}")
                self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('projections_version', ?)",
                                   (PROJECTIONS_VERSION,))
                self.projections_stale = bool(self._conn.execute("SELECT 1 FROM events LIMIT 1").fetchone())
            for name, (cols, key) in PROJECTIONS.items():
                self._conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {name} ({', '.join(cols)}, PRIMARY KEY ({', '.join(key)}))"
                    " WITHOUT ROWID"
                )
            self._conn.execute(_VERDICTS_VIEW)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    # ---- writing -----------------------------------------------------------------------

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.path}: opened read-only")
        if self.key_problem:
            raise StoreError(f"{self.path}: {self.key_problem}")

    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        self._writable()
        if self._outer:  # part of transaction(): its owner commits or rolls back
            self._write(appends, rows)
            return
        # what _immediate does, without a generator's frames: a run commits each case here
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot start a write transaction ({e})") from e
        try:
            self._write(appends, rows)
            conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: cannot write the log ({_reason(e)}); the batch rolled back, "
                             "nothing of it was written") from e
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._writable()
        if self._outer:
            raise StoreError(f"{self.path}: a transaction is already open")
        with self._immediate("cannot write the log ({}); the transaction rolled back, nothing of it was written"):
            self._outer = True
            try:
                yield
            finally:
                self._outer = False

    @contextmanager
    def _immediate(self, failed: str) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: committed when the block ends, rolled back if
        it raises; SQLite's operational errors (a full disk, a lock held too long) become a
        :class:`StoreError` (``failed`` with the reason in its ``{}``)."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path}: cannot start a write transaction ({e})") from e
        try:
            yield
            conn.execute("COMMIT")
        except sqlite3.OperationalError as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"{self.path}: " + failed.format(_reason(e))) from e
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _write(self, appends: Sequence[StreamAppend], rows: Rows | None) -> None:
        conn = self._conn
        key = self.key
        rows_out: list[tuple] = []
        largest = 0
        for ap in appends:
            if ap.payloads:
                largest = max(largest, max(map(len, ap.payloads)))
            if ap.start == 0:
                previous = ""
            else:
                row = conn.execute(
                    "SELECT seq, digest FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                    (ap.stream,),
                ).fetchone()
                if row is None or row[0] != ap.start - 1:
                    raise DuplicateEventError(
                        f"stream {ap.stream!r} does not end at sequence {ap.start - 1}; "
                        "batch rolled back"
                    )
                previous = row[1]
            stream = ap.stream
            digests = chain_digests(previous, stream, ap.start, ap.payloads, key)
            rows_out.extend(zip(repeat(stream), count(ap.start), ap.types, ap.payloads, digests))
        try:
            if rows_out:  # every stream of the batch in one statement
                if largest < _LARGE:
                    conn.executemany(_INSERT, rows_out)
                else:
                    _insert_large(conn, rows_out)
        except sqlite3.IntegrityError as e:
            raise DuplicateEventError(f"duplicate (stream, sequence): {e}; batch rolled back") from e
        if not rows:
            return
        for table, table_rows in rows.items():
            cols, _ = PROJECTIONS[table]
            conn.executemany(
                f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(cols))})", table_rows
            )

    @contextmanager
    def claim_run(self, run_id: str, doing: str) -> Iterator[None]:
        """Hold ``run_id`` while this process writes it: an OS lock (``flock``) on a file beside
        the log, ``<log>-run-<hash>.lock``, holding the pid. The lock ends with the process
        however it ends (SIGKILL included), so a killed run can be resumed at once; a second
        writer of the same run is refused with :class:`RunBusyError` before it writes anything
        (rather than meet the first one's events as a UNIQUE constraint). Without ``fcntl``
        (Windows) nothing is held: the chain's (stream, sequence) still refuses the second."""
        try:
            import fcntl
        except ImportError:
            yield
            return
        name = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        lock = self.path.with_name(f"{self.path.name}-run-{name}.lock")
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as e:
                raise StoreError(f"cannot create {lock} to hold run {run_id!r}: {e.strerror or e}") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise RunBusyError(f"run {run_id!r} is being {holder[1] or 'written'} by another process"
                                   f"{f' (pid {holder[0]})' if holder[0] else ''}; wait for it to end (or stop "
                                   "it), then resume the run if it is still incomplete") from None
            try:  # the holder removes the file as it lets go: hold the file that is still there
                same = os.fstat(fd).st_ino == os.stat(lock).st_ino
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {doing}\n".encode())
            yield
        finally:
            with suppress(OSError):
                os.unlink(lock)
            os.close(fd)  # lets go of the lock

    # ---- reading -----------------------------------------------------------------------

    def stream_length(self, stream: str) -> int:
        row = self._conn.execute("SELECT MAX(seq) FROM events WHERE stream = ?", (stream,)).fetchone()
        return 0 if row[0] is None else row[0] + 1

    def heads(self, prefix: str) -> dict[str, tuple[int, str]]:
        # SQLite returns the bare columns of the row holding MAX(seq)
        cur = self._conn.execute(
            "SELECT stream, MAX(seq), digest FROM events WHERE stream >= ? AND stream < ? GROUP BY stream",
            (prefix, prefix + "\U0010ffff"),
        )
        return {s: (n + 1, d) for s, n, d in cur}

    def iter_heads(self, prefix: str) -> Iterator[tuple[str, int, str]]:
        # the index on (stream, seq) gives the groups in name order: nothing is sorted or held
        cur = self._conn.execute(
            "SELECT stream, MAX(seq) + 1, digest FROM events WHERE stream >= ? AND stream < ? GROUP BY stream "
            "ORDER BY stream", (prefix, prefix + "\U0010ffff"),
        )
        try:
            yield from cur
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e

    def _chain_rows(self, prefix: str, streams: Sequence[str] | None) -> Iterator[tuple[str, int, bytes, str]]:
        return self._ordered_rows("stream, seq, CAST(payload AS BLOB), digest", prefix, streams)

    def _check_rows(self, prefix: str, streams: Sequence[str] | None,
                    types: bool) -> Iterator[tuple[str, int, str, bytes, str]]:
        kind = "type" if types else "''"
        return self._ordered_rows(f"stream, seq, {kind}, CAST(payload AS BLOB), digest", prefix, streams)

    def _ordered_rows(self, columns: str, prefix: str, streams: Sequence[str] | None) -> Iterator[Any]:
        """Rows of ``columns`` of the events under ``prefix`` (or of each of ``streams``), in
        (stream, seq) order."""
        sql = f"SELECT {columns} FROM events "
        try:
            if streams is not None:
                for stream in streams:
                    yield from self._conn.execute(sql + "WHERE stream = ? ORDER BY seq", (stream,))
            elif prefix:
                yield from self._conn.execute(sql + "WHERE stream >= ? AND stream < ? ORDER BY stream, seq",
                                              (prefix, prefix + "\U0010ffff"))
            else:
                yield from self._conn.execute(sql + "ORDER BY stream, seq")
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e

    def head(self, stream: str) -> tuple[int, str] | None:
        row = self._conn.execute("SELECT seq, digest FROM events WHERE stream = ? ORDER BY seq DESC LIMIT 1",
                                 (stream,)).fetchone()
        return None if row is None else (row[0] + 1, row[1])

    def root_streams(self) -> list[str]:
        # the partial index events_roots holds exactly these rows (one per run)
        cur = self._conn.execute("SELECT stream FROM events WHERE seq = 0 AND instr(stream, '/') = 0 ORDER BY stream")
        return [r[0] for r in cur]

    def first_event(self, stream: str) -> StoredEvent | None:
        row = self._conn.execute("SELECT stream, seq, type, payload, digest FROM events WHERE stream = ? AND seq = 0",
                                 (stream,)).fetchone()
        return None if row is None else StoredEvent(*_bytes_row(row))

    def stream_names_ordered(self, prefix: str, fields: Sequence[str]) -> Iterator[str]:
        # SQLite sorts (spilling to its temporary files past its cache): nothing held here
        if not all(f.isidentifier() for f in fields):
            raise ValueError(f"not field names: {list(fields)!r}")
        order = "".join(f"COALESCE(json_extract(CAST(payload AS TEXT), '$.{f}'), 0), " for f in fields)
        cur = self._conn.execute(
            f"SELECT stream FROM events WHERE seq = 0 AND stream >= ? AND stream < ? ORDER BY {order}stream",
            (prefix, prefix + "\U0010ffff"))
        try:
            for (stream,) in cur:
                yield stream
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e

    def stream_names(self, prefix: str) -> list[str]:
        cur = self._conn.execute(
            "SELECT stream FROM events WHERE seq = 0 AND stream >= ? AND stream < ? ORDER BY stream",
            (prefix, prefix + "\U0010ffff"),
        )
        return [r[0] for r in cur]

    def read_stream(self, stream: str) -> list[StoredEvent]:
        # a payload past _LARGE (a 50,000-case run's seal is 1.9 MB) is left out of the row and
        # read piece by piece into one buffer: read whole, SQLite would assemble it in a buffer
        # of its own and Python copy it again — a reader's peak memory grew with its run by that
        conn = self._conn
        cur = conn.execute(
            "SELECT stream, seq, type, CASE WHEN typeof(payload) = 'blob' AND length(payload) >= ? THEN NULL "
            "ELSE payload END, digest, pos, length(payload) FROM events WHERE stream = ? ORDER BY seq",
            (_LARGE, stream),
        )
        out = []
        for r in cur.fetchall():
            if r[3] is None:
                out.append(StoredEvent(r[0], r[1], r[2], _read_large(conn, r[5], r[6]), r[4]))
            else:
                out.append(StoredEvent(*_bytes_row(r)))
        return out

    def read_prefix(self, prefix: str) -> Iterator[StoredEvent]:
        if prefix:
            cur = self._conn.execute(
                "SELECT stream, seq, type, payload, digest FROM events "
                "WHERE stream >= ? AND stream < ? ORDER BY stream, seq",
                (prefix, prefix + "\U0010ffff"),
            )
        else:
            cur = self._conn.execute(
                "SELECT stream, seq, type, payload, digest FROM events ORDER BY stream, seq"
            )
        try:
            for r in cur:
                yield StoredEvent(*_bytes_row(r))
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e

    def iter_streams(self, prefix: str) -> Iterator[tuple[str, list[bytes]]]:
        cur = self._conn.execute(
            "SELECT stream, payload FROM events WHERE stream >= ? AND stream < ? ORDER BY stream, seq",
            (prefix, prefix + "\U0010ffff"),
        )
        stream = ""  # the first row opens a group whatever its stream (group is empty)
        group: list[bytes] = []
        try:
            for s, payload in cur:
                if s != stream:
                    if group:
                        yield stream, group
                    stream, group = s, []
                group.append(payload if isinstance(payload, bytes) else payload.encode())
        except sqlite3.DatabaseError as e:
            raise CorruptLogError(f"{self.path}: cannot read events ({e})") from e
        if group:
            yield stream, group

    def stream_heads(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        cur = self._conn.execute(
            "SELECT stream, payload FROM events WHERE seq = 0 AND stream >= ? AND stream < ? ORDER BY stream",
            (prefix, prefix + "\U0010ffff"),
        )
        for s, payload in cur:
            yield s, payload if isinstance(payload, bytes) else payload.encode()

    def projection(self, table: str, **where: object) -> list[dict]:
        return list(self.iter_projection(table, **where))

    def iter_projection(self, table: str, **where: object) -> Iterator[dict]:
        cols, key = PROJECTIONS[table]
        sql = f"SELECT {', '.join(cols)} FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        sql += f" ORDER BY {', '.join(key)}"
        for r in self._conn.execute(sql, tuple(where.values())):
            yield dict(zip(cols, r))

    def count_streams(self, prefix: str) -> int:
        return self._conn.execute(
            "SELECT COUNT(*) FROM events WHERE seq = 0 AND stream >= ? AND stream < ?",
            (prefix, prefix + "\U0010ffff"),
        ).fetchone()[0]

    def count(self, table: str, **where: object) -> int:
        sql = f"SELECT COUNT(*) FROM {table}"
        if where:
            sql += " WHERE " + " AND ".join(f"{k} = ?" for k in where)
        return self._conn.execute(sql, tuple(where.values())).fetchone()[0]

    def replace_projections(self, batches: Iterable[Rows]) -> None:
        """One transaction: the write lock is held from the first row dropped to the last row
        inserted, so a writer waits (busy timeout) and the rows match the events exactly; an
        error (or a kill) leaves the previous rows."""
        self._writable()
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            for name in PROJECTIONS:
                conn.execute(f"DELETE FROM {name}")
            for rows in batches:
                for table, table_rows in rows.items():
                    cols, _ = PROJECTIONS[table]
                    conn.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(cols))})",
                                     table_rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def delete_projection_rows(self, table: str, **where: object) -> None:
        self._writable()
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            f"DELETE FROM {table} WHERE " + " AND ".join(f"{k} = ?" for k in where), tuple(where.values())
        )
        self._conn.execute("COMMIT")

    def integrity_check(self) -> str:
        """The first line of SQLite's ``PRAGMA integrity_check`` (``"ok"`` for a sound file);
        ``oloproof audit`` fails on anything else, beside the hash chains."""
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    def integrity_check_started(self) -> Callable[[], str]:
        """:meth:`integrity_check` started now on a connection of its own, in a thread (SQLite
        runs it without holding Python's lock: it takes another core while ``audit verify``
        hashes the chains); the returned function waits for it and gives its answer."""
        import threading

        answer: list[Any] = []

        def check() -> None:
            try:
                conn = _connect_readonly(self.path)
                try:
                    answer.append(conn.execute("PRAGMA integrity_check").fetchone()[0])
                finally:
                    conn.close()
            except BaseException as e:  # noqa: BLE001 - handed to the caller, who raises it
                answer.append(e)

        thread = threading.Thread(target=check, name="oloproof-integrity", daemon=True)
        thread.start()

        def result() -> str:
            thread.join()
            if isinstance(answer[0], BaseException):
                if isinstance(answer[0], sqlite3.DatabaseError):
                    raise CorruptLogError(f"{self.path}: not a readable Oloproof log ({answer[0]})") from answer[0]
                raise answer[0]
            return str(answer[0])

        return result

    def judgement_cache(self) -> JudgementCache:
        """``<log>-judged`` beside the log (:mod:`oloproof.store.judged`)."""
        from oloproof.store.judged import JudgementCache

        return JudgementCache(Path(str(self.path) + "-judged"))

    # ---- the search projection (oloproof.store.search) ------------------------------------

    def index_search(self) -> int:
        self._writable()
        if self._outer:
            return search.catch_up(self._conn)
        return self._in_transaction(search.catch_up)

    def rebuild_search(self) -> int:
        self._writable()
        return self._in_transaction(search.rebuild)

    def _in_transaction(self, fn: Callable[[sqlite3.Connection], int]) -> int:
        try:
            with self._immediate("cannot update the search index ({}); nothing of it was written"):
                return fn(self._conn)
        except sqlite3.DatabaseError as e:  # a damaged index: rolled back, and said so
            raise StoreError(f"{self.path}: cannot update the search index ({e}); 'oloproof audit rebuild' "
                             "rebuilds it") from e

    def search_steps(self, query: str, where: search.SearchFilter, limit: int) -> list[dict]:
        if not search.exists(self._conn):
            raise StoreError(f"{self.path}: this log has no search index yet; any command that writes to it "
                             "builds one (or run 'oloproof audit rebuild')")
        self._catch_up_search()
        return search.search(self._conn, query, where, limit)

    def _catch_up_search(self) -> None:
        """Index what was written since the index's cursor, before a search reads it: writers
        leave the index behind (a run's cases cost none of it), the first search after them
        pays once. On a store opened read-only the catch-up is a short write transaction of
        its own, touching only the index and its cursor; when it cannot be had — another
        writer holds the log longer than :data:`SEARCH_WAIT`, read-only storage, a damaged
        index, a key problem — the search answers from what is indexed and says how much it
        lags (:meth:`search_lag`)."""
        if self.key_problem or not search.behind(self._conn):
            return
        if not self.readonly:
            with suppress(StoreError):
                self.index_search()
            return
        try:
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=SEARCH_WAIT)
        except sqlite3.Error:
            return
        try:
            conn.execute("PRAGMA synchronous = NORMAL")  # a cache: a power loss costs a catch-up, never an event
            conn.execute("BEGIN IMMEDIATE")
            try:
                search.catch_up(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except (sqlite3.Error, MemoryError):  # MemoryError: SQLITE_NOMEM from damaged index pages
            pass
        finally:
            conn.close()

    def search_names(self, what: str) -> list[str]:
        return search.names(self._conn, what) if search.exists(self._conn) else []

    def search_lag(self) -> int:
        return search.lag(self._conn) if search.exists(self._conn) else 0

    def close(self) -> None:
        self._conn.close()


_INSERT = "INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, ?, ?, ?, ?)"
#: a payload this large (a 50,000-case run's seal, a big sandbox state) is written into its row
#: in pieces: bound whole, SQLite would copy it twice more (the bound value, the row's record)
_LARGE = 1 << 20
_PIECE = 1 << 18


def _insert_large(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    """Insert ``rows`` in order: the small ones together, each large payload as a zero-filled
    blob of its size, then written through an incremental blob handle, piece by piece (within
    the caller's transaction: readers see the row whole or not at all)."""
    small: list[tuple] = []
    for row in rows:
        payload = row[3]
        if len(payload) < _LARGE:
            small.append(row)
            continue
        if small:
            conn.executemany(_INSERT, small)
            small = []
        cur = conn.execute("INSERT INTO events (stream, seq, type, payload, digest) VALUES (?, ?, ?, zeroblob(?), ?)",
                           (row[0], row[1], row[2], len(payload), row[4]))
        view = memoryview(payload)
        with conn.blobopen("events", "payload", cast(int, cur.lastrowid)) as blob:
            for start in range(0, len(view), _PIECE):
                blob.write(view[start:start + _PIECE])
    if small:
        conn.executemany(_INSERT, small)


def is_event_log(path: Path) -> bool:
    """Whether ``path`` is (or links to) an Oloproof event log, or one of its ``-wal``,
    ``-shm`` or ``-journal`` files, or an SQLite database that cannot be read: an output must
    never replace one (``--json .oloproof/log.db``)."""
    try:
        target = Path(path).resolve()
        for suffix in ("-wal", "-shm", "-journal"):  # a log's companion files are the log too
            if target.name.endswith(suffix) and is_event_log(target.with_name(target.name[:-len(suffix)])):
                return True
        if not target.is_file():
            return False
        with target.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return False
    except OSError:
        return False
    try:
        conn = sqlite3.connect("file:" + quote(str(target)) + "?mode=ro", uri=True)
        try:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error:
        return True  # a database that cannot be read (a damaged log?) is not replaced either
    return {"events", "meta"} <= names


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection; on read-only storage (no ``-shm`` can be made beside a WAL
    log), the file is opened as immutable: nobody can be writing it there."""
    uri = "file:" + quote(str(path.resolve()))
    conn = sqlite3.connect(uri + "?mode=ro", uri=True, isolation_level=None, timeout=60.0)
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite3.OperationalError as e:
        conn.close()
        if "unable to open" not in str(e) and "readonly" not in str(e):
            raise
    return sqlite3.connect(uri + "?mode=ro&immutable=1", uri=True, isolation_level=None)


def _lock_holder(fd: int) -> tuple[str, str]:
    """(pid, what it does) written in a run's lock file by its holder ("" where unknown)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        words = os.read(fd, 200).decode("ascii", "replace").split()
    except OSError:
        words = []
    pid = words[0] if words and words[0].isdigit() else ""
    doing = words[1] if len(words) > 1 and words[1].isalpha() else ""
    return pid, doing


def _normal(sql: str) -> str:
    return " ".join(sql.replace("IF NOT EXISTS ", "").split()).rstrip(";").strip()


def _reason(e: sqlite3.Error) -> str:
    text = str(e)
    if "full" in text:
        return "the disk is full"
    return text


def _read_large(conn: sqlite3.Connection, pos: int, size: int) -> bytes:
    """The payload of event ``pos`` (``size`` bytes), read through an incremental blob handle
    into one buffer (the events are append-only: the row cannot change meanwhile). A
    ``bytearray``, used as the payload's bytes are (decoded, hashed, sliced), never copied."""
    buf = bytearray(size)
    view = memoryview(buf)
    at = 0
    with conn.blobopen("events", "payload", pos, readonly=True) as blob:
        while at < size:
            piece = blob.read(_PIECE)
            if not piece:
                break
            view[at:at + len(piece)] = piece
            at += len(piece)
    if at != size:
        raise CorruptLogError(f"event at position {pos}: its payload ended after {at} of its {size} bytes")
    return cast(bytes, buf)


def _bytes_row(r: tuple) -> tuple:
    payload = r[3]
    if isinstance(payload, str):
        payload = payload.encode()
    return (r[0], r[1], r[2], payload, r[4])


def _split(script: str) -> list[str]:
    out, buf = [], []
    for line in script.strip().splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and (not joined.upper().startswith("CREATE TRIGGER") or joined.endswith("END;")):
            out.append(joined)
            buf = []
    return out


def open_url(url: str | Path, **options: Any) -> SQLiteStore:
    """The SQLite backend's opener (``oloproof.store.BACKENDS``): a path, or
    ``sqlite:///relative.db`` / ``sqlite:////absolute.db`` as SQLAlchemy reads them."""
    if isinstance(url, Path):
        return SQLiteStore(url, **options)
    scheme, sep, rest = url.partition("://")
    if not sep:
        return SQLiteStore(Path(url), **options)
    if not rest.startswith("/"):
        raise UsageError(f"{url}: an SQLite URL is sqlite:///PATH (three slashes, then the path)")
    return SQLiteStore(Path(rest[1:]), **options)

"""The PostgreSQL backend of the event log (SPEC §18.7): a team's log on a database server.

``open_store("postgresql://USER@HOST/DB")`` (or ``--db``, or ``OLOPROOF_DB``) keeps the same
events, per-stream hash chains (HMAC-SHA256 under ``OLOPROOF_LOG_KEY``), seals, digests and
projections as the SQLite log, in one database (psycopg 3, the ``oloproof[postgres]`` extra):

* **Append-only in the database.** Triggers refuse UPDATE, DELETE and TRUNCATE on ``events``
  (even for its owner); a role that holds only INSERT and SELECT on it cannot drop them
  (docs/team-log.md gives the roles). A log whose ``events`` table carries a trigger or a rule
  Oloproof did not make is refused, as the SQLite backend refuses foreign triggers.
* **Many writers at once**, from many processes and machines: every :meth:`commit` is one
  transaction; the unique (stream, sequence) key makes a second writer of one stream fail
  whole (:class:`~oloproof.errors.DuplicateEventError`) rather than fork its chain. The
  single-writer-per-run rule (:meth:`PostgresStore.claim_run`) is a session-level advisory
  lock per run, which the server lets go when the holder's connection ends, however it ends.
* **Readers never blocked**: read commands use a read-only session; MVCC gives each statement
  the committed rows, never a writer's open transaction.
* **Schema creation and version checks** like SQLite's: the tables are created in one
  transaction under an advisory lock (two processes opening a new log at once: one creates
  it, the other waits and uses it), ``meta`` holds the schema version and the chain scheme.
* **Search** on PostgreSQL full text: each step's text is tokenized here, the way SQLite's
  FTS5 ``unicode61 remove_diacritics 2`` tokenizer does (letters and digits, case and
  diacritics folded), and stored as a ``tsvector`` with positions. A commit marks its streams
  in ``search_pending`` (in its own transaction); the writer indexes what it wrote in one go
  at the end (:meth:`PostgresStore.index_search`), and a writer killed before that leaves its
  streams to the next one. The FTS5 query syntax the ``search`` command takes is translated
  into a ``tsquery`` (:func:`parse_query`, :func:`to_tsquery`; docs/team-log.md says what
  differs).

Backend errors are translated once, here (:meth:`PostgresStore._translated`): a lost
connection, a refused privilege or a server that is gone is a :class:`~oloproof.errors.StoreError`
naming the log by its URL without the password.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, cast

import msgspec

from oloproof.errors import CorruptLogError, DuplicateEventError, RunBusyError, StoreError
from oloproof.events import (
    HMAC_SHA256,
    JUDGEMENT_CACHE,
    SEARCHED_TYPES,
    SHA256,
    replayed_stream,
    scheme_of,
    search_fields,
)
from oloproof.store.base import (
    PROJECTIONS,
    PROJECTIONS_VERSION,
    EventStore,
    Rows,
    StoredEvent,
    StreamAppend,
    chain,
    wrong_key,
)

if TYPE_CHECKING:
    import psycopg

    from oloproof.store.search import SearchFilter

SCHEMA_VERSION = "1"  # of the events table and the search table; projections have their own version
#: synchronous_commit per ``--durability``: full waits for the server's WAL flush (a committed
#: case survives a power loss of the server); normal does not (a crash of the server may lose
#: the last commits, never half of one)
DURABILITY = {"full": "on", "normal": "off"}
#: how long a writer waits for a lock (the schema lock while another process creates the log)
LOCK_SECONDS = 60
CONNECT_SECONDS = 10
#: a search stops after this long (as the SQLite search does): exit 2
SEARCH_SECONDS = 10
#: the first key of every advisory lock Oloproof takes ('olop'); the second is 0 for the
#: schema lock, a run id's hash for a run's claim
LOCK_CLASS = 0x6F6C6F70
_SCHEMA_LOCK = 0
_CHUNK = 5_000  # rows per read of a long stream of events (keyset pages)
_ROWS_PER_STATEMENT = 2_000  # projection rows per INSERT (PostgreSQL binds at most 65,535 parameters)

_TRIGGERS = {"events_append_only": "oloproof_append_only", "events_no_truncate": "oloproof_append_only"}

_SCHEMA = (
    'CREATE TABLE IF NOT EXISTS meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL)',
    # stream names compare as code points (COLLATE "C"), as SQLite's BINARY does: prefix ranges
    # and (stream, seq) order are the same on both backends
    'CREATE TABLE IF NOT EXISTS events (pos BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, '
    'stream TEXT COLLATE "C" NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, payload BYTEA NOT NULL, '
    'digest TEXT NOT NULL, CONSTRAINT events_stream_seq UNIQUE (stream, seq))',
    "CREATE INDEX IF NOT EXISTS events_roots ON events (stream) WHERE seq = 0 AND strpos(stream, '/') = 0",
    "CREATE OR REPLACE FUNCTION oloproof_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "RAISE EXCEPTION 'oloproof events are append-only: % refused', TG_OP USING ERRCODE = '42501'; END $$",
    "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events FOR EACH ROW "
    "EXECUTE FUNCTION oloproof_append_only()",
    "CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT "
    "EXECUTE FUNCTION oloproof_append_only()",
    # the search projection: one row per step (or error) event, keyed by the event's position
    'CREATE TABLE IF NOT EXISTS search_steps (pos BIGINT PRIMARY KEY, run_id TEXT COLLATE "C", '
    'case_id TEXT COLLATE "C", step INTEGER, kind TEXT, tool_name TEXT COLLATE "C", replay TEXT, '
    "tsv TSVECTOR NOT NULL)",
    "CREATE INDEX IF NOT EXISTS search_steps_tsv ON search_steps USING GIN (tsv)",
    # streams whose searchable events are not indexed yet: written in the transaction of the
    # events, taken off (FOR UPDATE SKIP LOCKED) by whoever indexes them
    'CREATE TABLE IF NOT EXISTS search_pending (stream TEXT COLLATE "C" PRIMARY KEY)',
)

#: search rows of events, sent as one JSON array (msgspec writes it in C; psycopg would dump
#: ten arrays in Python), joined to the events' positions; the step's text is not stored:
#: a hit's snippet is cut from its event (``search_fields``), which the log holds anyway
_SEARCH_INSERT = (
    "INSERT INTO search_steps (pos, run_id, case_id, step, kind, tool_name, replay, tsv) "
    "SELECT e.pos, s.r, s.c, s.n, s.k, s.t, s.p, s.v::tsvector "
    "FROM json_to_recordset(%s::json) AS s(s text, q int, r text, c text, n int, k text, t text, p text, v text) "
    "JOIN events AS e ON e.stream = s.s AND e.seq = s.q ON CONFLICT (pos) DO NOTHING"
)
#: events a writer keeps in memory to index (at the end of its run, at close) before it
#: indexes them at once: a bound on that memory (a long import)
_BUFFERED = 20_000

#: projection columns that hold integers (every other one is text)
_INTEGER = {"case_count", "position", "steps"}

_VERDICTS_VIEW = (
    "CREATE VIEW verdicts AS SELECT e.run_id, e.case_id, j.key AS criterion, j.value ->> 0 AS verdict, "
    "j.value ->> 1 AS reason FROM evaluations AS e "
    "JOIN runs AS r ON r.run_id = e.run_id AND r.eval_key = e.eval_key, "
    "LATERAL jsonb_each(e.result::jsonb -> 'verdicts') AS j"
)


def _projection_ddl() -> list[str]:
    out = []
    for name, (cols, key) in PROJECTIONS.items():
        defs = ", ".join(f"{c} BIGINT" if c in _INTEGER else f'{c} TEXT COLLATE "C"' for c in cols)
        out.append(f"CREATE TABLE {name} ({defs}, PRIMARY KEY ({', '.join(key)}))")
    return out


def _pg() -> Any:
    """The psycopg module, imported when a PostgreSQL log is first opened."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// log needs psycopg 3: pip install 'oloproof[postgres]'") from None
    return psycopg


def printable_url(url: str) -> str:
    """``url`` without its password (``postgresql://ci:secret@db/team`` → ``postgresql://ci@db/team``;
    a ``password=`` query parameter is dropped too): what messages and hints may print."""
    from oloproof.store import printable_url as without_password

    return without_password(url)


class PostgresStore(EventStore):
    """Event log in a PostgreSQL database (``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``).

    Args:
        url: a libpq connection URL (``postgres://`` too); its password is never printed.
        durability: ``full`` (synchronous commit on: the default) or ``normal`` (off).
        create: create the tables when the database holds no log yet (a writer's opening).
        readonly: a read-only session: nothing is created or changed, and nothing waits.
        key: ``OLOPROOF_LOG_KEY``: the chains are HMAC-SHA256 under it.
    """

    def __init__(self, url: str, *, durability: str = "full", create: bool = True, readonly: bool = False,
                 key: bytes | None = None):
        self._url = url
        self.url = printable_url(url)
        self.readonly = readonly
        self.key = key
        self.projections_stale = False
        self._outer = False  # inside transaction()
        self._claims: list[str] = []  # the runs this store holds (claim_run), for the lost-connection hint
        self._replays: dict[str, tuple[str, str] | None] = {}  # replay stream -> (run, case) it replays
        #: searchable events this store committed and has not indexed yet: stream -> [(seq, type,
        #: payload)] (``_held``: those of the open transaction(), kept only if it commits)
        self._unindexed: dict[str, list[tuple[int, str, bytes]]] = {}
        self._held: dict[str, list[tuple[int, str, bytes]]] = {}
        self._count = 0
        if durability not in DURABILITY:
            raise StoreError(f"durability must be one of {', '.join(DURABILITY)}, got {durability!r}")
        pg = _pg()
        self._pg = pg
        options: dict[str, Any] = {"autocommit": True, "application_name": _holder_name("open")}
        if "connect_timeout" not in url:
            options["connect_timeout"] = CONNECT_SECONDS
        try:
            self._conn: psycopg.Connection = pg.connect(url, **options)
        except pg.Error as e:
            raise StoreError(f"cannot connect to the log at {self.url}: {_reason(e)}") from e
        except Exception as e:  # libpq's own URL errors (a bad port, an unknown option)
            raise StoreError(f"cannot connect to the log at {self.url}: {_reason(e)}") from e
        try:
            with self._translated("cannot open the log ({})"):
                self._session(durability)
                self._open(create and not readonly)
        except BaseException:
            self._conn.close()
            raise
        if self.key_problem and not readonly:
            self._conn.close()
            raise StoreError(f"{self.url}: {self.key_problem}")

    # ---- opening -------------------------------------------------------------------------

    def _session(self, durability: str) -> None:
        conn = self._conn
        encoding = conn.execute("SHOW server_encoding").fetchone()
        if encoding is None or encoding[0].upper() not in ("UTF8", "UTF-8"):
            raise StoreError(f"{self.url}: the database's encoding is {encoding[0] if encoding else '?'}; an "
                             "Oloproof log needs UTF8 (CREATE DATABASE … ENCODING 'UTF8')")
        conn.execute(f"SET synchronous_commit = {DURABILITY[durability]}")
        conn.execute(f"SET lock_timeout = '{LOCK_SECONDS}s'")
        if self.readonly:
            conn.execute("SET default_transaction_read_only = on")

    def _open(self, create: bool) -> None:
        state = self._inspect()
        if state is None:
            if not create:
                raise StoreError(f"no Oloproof log in {self.url}; run 'oloproof run --db URL' (or any command "
                                 "that writes) to create it")
            with self._schema_lock(), self._conn.transaction():
                if self._inspect() is None:  # another process may have made it while this one waited
                    self._create()
            state = self._inspect()
            assert state is not None
        self._check(state)
        if state.get("projections_version") != PROJECTIONS_VERSION:
            if self.readonly:
                self.projections_stale = state["has_events"]
            else:
                self._upgrade_projections()

    @contextmanager
    def _schema_lock(self) -> Iterator[None]:
        """Two processes creating (or upgrading) one log at once: the second waits here, then
        finds what the first one made. A session lock taken before the transaction, so that
        the transaction starts after the wait and reads the catalog as it is then (a
        transaction that waited inside could keep seeing "no such table" in its caches)."""
        self._conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _SCHEMA_LOCK))
        try:
            yield
        finally:
            if not (self._conn.closed or self._conn.broken):
                self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _SCHEMA_LOCK))

    def _inspect(self) -> dict[str, Any] | None:
        """The log's meta rows (with ``has_events``), or None when the database holds no log."""
        conn = self._conn
        events, meta = conn.execute("SELECT to_regclass('events') IS NOT NULL, "
                                    "to_regclass('meta') IS NOT NULL").fetchone() or (False, False)
        if not events and not meta:
            return None
        if not meta:
            raise CorruptLogError(f"{self.url}: the database holds an events table that Oloproof did not make "
                                  "(no meta table); use another database (or schema) for the log")
        state: dict[str, Any] = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if "schema_version" not in state:
            raise CorruptLogError(f"{self.url}: not an Oloproof log (its meta table holds no schema version)")
        if not events:
            raise CorruptLogError(f"{self.url}: an Oloproof log without its events table")
        state["has_events"] = conn.execute("SELECT EXISTS (SELECT 1 FROM events)").fetchone() == (True,)
        return state

    def _create(self) -> None:
        conn = self._conn
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', %s), ('chain', %s), "
                     "('backend', 'postgresql')", (SCHEMA_VERSION, scheme_of(self.key)))
        self._make_projections()

    def _make_projections(self) -> None:
        for statement in _projection_ddl():
            self._conn.execute(statement)
        self._conn.execute(_VERDICTS_VIEW)
        self._conn.execute("INSERT INTO meta (key, value) VALUES ('projections_version', %s) "
                           "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (PROJECTIONS_VERSION,))

    def _upgrade_projections(self) -> None:
        """Projection tables of another shape (an older Oloproof): dropped and made again, and
        marked stale so that the command that opened the log rebuilds them from the events."""
        try:
            with self._schema_lock(), self._conn.transaction():
                row = self._conn.execute("SELECT value FROM meta WHERE key = 'projections_version'").fetchone()
                if row is None or row[0] != PROJECTIONS_VERSION:
                    self._conn.execute("DROP VIEW IF EXISTS verdicts")
                    for name in PROJECTIONS:
                        self._conn.execute(f"DROP TABLE IF EXISTS {name}")
                    self._make_projections()
                    self.projections_stale = True
        except self._pg.errors.InsufficientPrivilege as e:
            raise StoreError(f"{self.url}: the log's projection tables were made by another Oloproof version and "
                             f"this role may not make them again ({_reason(e)}); open the log once as the role "
                             "that owns it (e.g. 'oloproof audit rebuild --db URL')") from e

    def _check(self, state: dict[str, Any]) -> None:
        """What every opening checks, without writing (as :meth:`SQLiteStore._check`)."""
        conn = self._conn
        if state["schema_version"] != SCHEMA_VERSION:
            raise CorruptLogError(f"{self.url}: log schema version {state['schema_version']!r}; this Oloproof reads "
                                  f"version {SCHEMA_VERSION} of a PostgreSQL log")
        cols = {r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'events'::regclass "
                                           "AND attnum > 0 AND NOT attisdropped")}
        if not {"pos", "stream", "seq", "type", "payload", "digest"} <= cols:
            raise CorruptLogError(f"{self.url}: events table is missing columns")
        foreign = [f"trigger {name} (calls {function})" for name, function in conn.execute(
            "SELECT t.tgname, p.proname FROM pg_trigger AS t JOIN pg_proc AS p ON p.oid = t.tgfoid "
            "WHERE t.tgrelid = 'events'::regclass AND NOT t.tgisinternal") if _TRIGGERS.get(name) != function]
        foreign += [f"rule {r[0]}" for r in conn.execute(
            "SELECT rulename FROM pg_rewrite WHERE ev_class = 'events'::regclass AND rulename <> '_RETURN'")]
        if foreign:
            raise CorruptLogError(
                f"{self.url}: the events table holds what Oloproof did not create: {', '.join(sorted(foreign))}. "
                "A trigger or a rule can rewrite what is stored, so this log is refused; if you trust the "
                "database, remove them (DROP TRIGGER / DROP RULE)")
        stored = state.get("chain")
        if stored is None and not state["has_events"]:
            self.scheme = scheme_of(self.key)
        else:
            self.scheme = stored or SHA256
        if self.scheme not in (SHA256, HMAC_SHA256):
            raise CorruptLogError(f"{self.url}: unknown chain scheme {self.scheme!r}")
        if self.scheme == HMAC_SHA256 and self.key is None:
            self.key_problem = ("this log's chain is keyed (HMAC-SHA256): set OLOPROOF_LOG_KEY to the key "
                                "it was written with")
        elif self.scheme == SHA256 and self.key is not None:
            self.key_problem = ("OLOPROOF_LOG_KEY is set, but this log's chain is not keyed: it was written "
                                "without the key, or rewritten without it")
        elif self.scheme == HMAC_SHA256 and state["has_events"] and self.key is not None:
            self.key_problem = wrong_key(self.key, self._first_events())

    def _first_events(self) -> list[tuple[str, bytes, str]]:
        """(stream, payload, digest) of a few first events: of the first runs and of the
        streams that start among the log's first rows (bounded, whatever the log's size)."""
        rows = self._conn.execute(
            "(SELECT stream, payload, digest FROM events WHERE seq = 0 AND strpos(stream, '/') = 0 ORDER BY pos "
            "LIMIT 8) UNION ALL (SELECT stream, payload, digest FROM (SELECT stream, seq, payload, digest, pos "
            "FROM events ORDER BY pos LIMIT 2000) AS early WHERE seq = 0 LIMIT 16)").fetchall()
        return [(r[0], bytes(r[1]), r[2]) for r in rows]

    # ---- errors, translated once ----------------------------------------------------------

    @contextmanager
    def _translated(self, failed: str) -> Iterator[None]:
        """psycopg's errors become Oloproof's: a duplicate (stream, sequence) a
        :class:`DuplicateEventError`, anything else a :class:`StoreError` (``failed`` with the
        reason in its ``{}``), a lost connection saying what to do next."""
        pg = self._pg
        try:
            yield
        except pg.errors.UniqueViolation as e:
            raise DuplicateEventError(f"duplicate (stream, sequence): {_reason(e)}; batch rolled back") from e
        except pg.errors.QueryCanceled as e:
            raise StoreError(f"{self.url}: " + failed.format(f"stopped by the server: {_reason(e)}")) from e
        except pg.errors.ReadOnlySqlTransaction as e:
            raise StoreError(f"{self.url}: opened read-only") from e
        except pg.errors.InsufficientPrivilege as e:
            raise StoreError(f"{self.url}: " + failed.format(
                f"{_reason(e)}; docs/team-log.md lists what each role needs")) from e
        except (pg.OperationalError, pg.InterfaceError) as e:
            if self._conn.closed or self._conn.broken:
                raise StoreError(self._lost(e)) from e
            raise StoreError(f"{self.url}: " + failed.format(_reason(e))) from e
        except pg.Error as e:
            raise StoreError(f"{self.url}: " + failed.format(_reason(e))) from e

    def _lost(self, e: BaseException) -> str:
        text = f"{self.url}: lost the connection to the PostgreSQL server ({_reason(e)}); what was being written " \
               "then was rolled back, everything committed before is kept"
        if self._claims:
            run_id = self._claims[-1]
            text += (f". Finish run {run_id} with 'oloproof run --resume {run_id} --db {self.url}' once the server "
                     "is reachable")
        return text

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"{self.url}: opened read-only")
        if self.key_problem:
            raise StoreError(f"{self.url}: {self.key_problem}")

    # ---- writing -----------------------------------------------------------------------

    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        self._writable()
        if self._outer:  # part of transaction(): its owner commits or rolls back
            with self._translated("cannot write the log ({}); the transaction rolled back"):
                statements, searched = self._statements(appends, rows)
                for sql, params in statements:
                    self._conn.execute(sql, params)
            self._remember(self._held, searched)
            return
        with self._translated("cannot write the log ({}); the batch rolled back, nothing of it was written"):
            statements, searched = self._statements(appends, rows)
            if len(statements) == 1:  # a case's commit: its events (and its stream pending), one statement
                self._conn.execute(*statements[0])  # (autocommit: one statement is one transaction)
            elif statements:
                # one round trip for the whole transaction: BEGIN, the statements, COMMIT
                with self._conn.pipeline(), self._conn.transaction():
                    for sql, params in statements:
                        self._conn.execute(sql, params)
        self._remember(self._unindexed, searched)

    def _remember(self, into: dict[str, list[tuple[int, str, bytes]]],
                  searched: list[tuple[str, int, str, bytes]]) -> None:
        for stream, seq, type_, payload in searched:
            into.setdefault(stream, []).append((seq, type_, payload))
        self._count += len(searched)
        if self._count > _BUFFERED:  # a long import: index what is held so far (a cache: never fatal)
            with suppress(StoreError):
                self.index_search()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._writable()
        if self._outer:
            raise StoreError(f"{self.url}: a transaction is already open")
        with self._translated("cannot write the log ({}); the transaction rolled back, nothing of it was written"):
            try:
                with self._conn.transaction():
                    self._outer = True
                    try:
                        yield
                    finally:
                        self._outer = False
            except BaseException:
                self._held.clear()  # rolled back: those events are not in the log
                raise
            for stream, events in self._held.items():
                self._unindexed.setdefault(stream, []).extend(events)
            self._held.clear()

    def _statements(self, appends: Sequence[StreamAppend],
                    rows: Rows | None) -> tuple[list[tuple[str, Sequence[Any]]], list[tuple[str, int, str, bytes]]]:
        """What one commit executes — the events of every append in one statement (which also
        marks their streams ``search_pending``), then the projection upserts — and its
        searchable events. Streams that continue are checked against their heads first (a gap
        or a taken sequence is a :class:`DuplicateEventError`; two writers racing for one
        sequence meet the unique key)."""
        key = self.key
        continued = sorted({ap.stream for ap in appends if ap.start > 0})
        heads: dict[str, tuple[int, str]] = {}
        if continued:
            heads = {s: (n, d) for s, n, d in self._conn.execute(
                "SELECT DISTINCT ON (stream) stream, seq, digest FROM events WHERE stream = ANY(%s) "
                "ORDER BY stream, seq DESC", (continued,))}
        streams: list[str] = []
        seqs: list[int] = []
        types: list[str] = []
        payloads: list[bytes] = []
        digests: list[str] = []
        written: dict[str, tuple[int, str]] = {}  # a stream appended twice in one batch
        for ap in appends:
            if not ap.payloads:
                continue
            if ap.stream in written:
                at, previous = written[ap.stream]
                if at != ap.start - 1:
                    raise DuplicateEventError(f"stream {ap.stream!r} does not end at sequence {ap.start - 1}; "
                                              "batch rolled back")
            elif ap.start == 0:
                previous = ""
            else:
                head = heads.get(ap.stream)
                if head is None or head[0] != ap.start - 1:
                    raise DuplicateEventError(f"stream {ap.stream!r} does not end at sequence {ap.start - 1}; "
                                              "batch rolled back")
                previous = head[1]
            ds, last = chain(previous, ap, key)
            written[ap.stream] = (ap.start + len(ap.payloads) - 1, last)
            streams.extend(repeat(ap.stream, len(ap.payloads)))
            seqs.extend(range(ap.start, ap.start + len(ap.payloads)))
            types.extend(ap.types)
            payloads.extend(bytes(p) for p in ap.payloads)
            digests.extend(ds)
        out: list[tuple[str, Sequence[Any]]] = []
        searched = [(s, q, t, p) for s, q, t, p in zip(streams, seqs, types, payloads) if t in SEARCHED_TYPES]
        if streams:  # every stream of the batch in one statement
            insert = ("INSERT INTO events (stream, seq, type, payload, digest) SELECT * FROM "
                      "unnest(%b::text[], %b::int[], %b::text[], %b::bytea[], %b::text[])")
            pending = sorted({s for s, _, _, _ in searched})
            if not pending:
                out.append((insert, (streams, seqs, types, payloads, digests)))
            else:  # indexed later, in one go (index_search): the search rows cost a tenth there
                out.append((f"WITH ev AS ({insert}) INSERT INTO search_pending (stream) SELECT unnest(%b::text[]) "
                            "ON CONFLICT DO NOTHING", (streams, seqs, types, payloads, digests, pending)))
        for table, table_rows in (rows or {}).items():
            out.extend(self._upserts(table, table_rows))
        return out, searched

    def _upserts(self, table: str, table_rows: Sequence[tuple]) -> list[tuple[str, Sequence[Any]]]:
        """Inserts of ``table_rows``, a row with an existing key replacing it (SQLite's INSERT OR
        REPLACE): within one call the last row of a key wins."""
        cols, key = PROJECTIONS[table]
        index = [cols.index(k) for k in key]
        last = {tuple(row[i] for i in index): tuple(row) for row in table_rows}
        if not last:
            return []
        update = ", ".join(f"{c} = EXCLUDED.{c}" for c in cols if c not in key)
        values = list(last.values())
        one = "(" + ", ".join(["%s"] * len(cols)) + ")"
        out: list[tuple[str, Sequence[Any]]] = []
        for start in range(0, len(values), _ROWS_PER_STATEMENT):
            chunk = values[start:start + _ROWS_PER_STATEMENT]
            out.append((f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join([one] * len(chunk))} "
                        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {update}", [v for row in chunk for v in row]))
        return out

    @contextmanager
    def claim_run(self, run_id: str, doing: str) -> Iterator[None]:
        """Hold ``run_id`` while this process writes it: a session-level advisory lock on the
        server (``pg_try_advisory_lock``), which the server lets go when the connection ends —
        a killed process, a lost network — so a killed run can be resumed at once. A second
        writer of the same run, on any machine, gets :class:`RunBusyError` naming the holder
        (its pid and host, read from the holder's ``application_name``)."""
        pair = (LOCK_CLASS, _run_key(run_id))
        with self._translated("cannot hold run " + repr(run_id) + " ({})"):
            for _ in range(20):  # a holder killed a moment ago: its backend lets go once it has ended
                got = self._conn.execute("SELECT pg_try_advisory_lock(%s, %s)", pair).fetchone()
                if got == (True,):
                    break
                time.sleep(0.05)
            if got != (True,):
                holder = self._holder(pair)
                raise RunBusyError(f"run {run_id!r} is being {holder[0] or 'written'} by another process"
                                   f"{f' ({holder[1]})' if holder[1] else ''}; wait for it to end (or stop it), "
                                   "then resume the run if it is still incomplete")
            self._conn.execute("SELECT set_config('application_name', %s, false)", (_holder_name(doing),))
        self._claims.append(run_id)
        try:
            yield
        finally:
            self._claims.remove(run_id)
            if not (self._conn.closed or self._conn.broken):
                with suppress(Exception):  # a connection that broke meanwhile let go of the lock with it
                    self._conn.execute("SELECT pg_advisory_unlock(%s, %s)", pair)
                    self._conn.execute("SELECT set_config('application_name', %s, false)", (_holder_name("open"),))

    def _holder(self, pair: tuple[int, int]) -> tuple[str, str]:
        """(what the holder of a run's lock does, "pid N on HOST"), "" where unknown."""
        row = self._conn.execute(
            "SELECT a.application_name, host(a.client_addr) FROM pg_locks AS l JOIN pg_stat_activity AS a "
            "ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s "
            "AND l.objsubid = 2 AND l.granted LIMIT 1", pair).fetchone()
        if row is None or not row[0]:
            return "", ""
        m = re.fullmatch(r"oloproof (\w+) pid (\d+) on (.*)", row[0])
        if m is None:
            return "", ""
        return m[1] if m[1] != "open" else "", f"pid {m[2]} on {m[3]}"

    # ---- reading -----------------------------------------------------------------------

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._translated("cannot read the log ({})"):
            return self._conn.execute(sql, params).fetchall()

    def stream_length(self, stream: str) -> int:
        row = self._all("SELECT MAX(seq) FROM events WHERE stream = %s", (stream,))[0]
        return 0 if row[0] is None else row[0] + 1

    def heads(self, prefix: str) -> dict[str, tuple[int, str]]:
        low, high = _range(prefix)
        rows = self._all("SELECT DISTINCT ON (stream) stream, seq, digest FROM events WHERE stream >= %s "
                         "AND stream < %s ORDER BY stream, seq DESC", (low, high))
        return {s: (n + 1, d) for s, n, d in rows}

    def head(self, stream: str) -> tuple[int, str] | None:
        rows = self._all("SELECT seq, digest FROM events WHERE stream = %s ORDER BY seq DESC LIMIT 1", (stream,))
        return None if not rows else (rows[0][0] + 1, rows[0][1])

    def root_streams(self) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT stream FROM events WHERE seq = 0 AND strpos(stream, '/') = 0 ORDER BY stream")]

    def stream_names(self, prefix: str) -> list[str]:
        return [r[0] for r in self._all("SELECT stream FROM events WHERE seq = 0 AND stream >= %s AND stream < %s "
                                        "ORDER BY stream", _range(prefix))]

    def first_event(self, stream: str) -> StoredEvent | None:
        rows = self._all("SELECT stream, seq, type, payload, digest FROM events WHERE stream = %s AND seq = 0",
                         (stream,))
        return None if not rows else _event(rows[0])

    def read_stream(self, stream: str) -> list[StoredEvent]:
        return [_event(r) for r in self._pages("stream, seq, type, payload, digest", "stream = %s", (stream,))]

    def read_prefix(self, prefix: str) -> Iterator[StoredEvent]:
        for r in self._pages("stream, seq, type, payload, digest", "stream >= %s AND stream < %s", _range(prefix)):
            yield _event(r)

    def _chain_rows(self, prefix: str, streams: Sequence[str] | None) -> Iterator[tuple[str, int, bytes, str]]:
        if streams is not None:
            for stream in streams:
                for r in self._pages("stream, seq, payload, digest", "stream = %s", (stream,)):
                    yield r[0], r[1], bytes(r[2]), r[3]
            return
        for r in self._pages("stream, seq, payload, digest", "stream >= %s AND stream < %s", _range(prefix)):
            yield r[0], r[1], bytes(r[2]), r[3]

    def iter_streams(self, prefix: str) -> Iterator[tuple[str, list[bytes]]]:
        stream = ""
        group: list[bytes] = []
        for s, payload in self._pages("stream, payload", "stream >= %s AND stream < %s", _range(prefix)):
            if s != stream:
                if group:
                    yield stream, group
                stream, group = s, []
            group.append(bytes(payload))
        if group:
            yield stream, group

    def stream_heads(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        for s, payload in self._all("SELECT stream, payload FROM events WHERE seq = 0 AND stream >= %s "
                                    "AND stream < %s ORDER BY stream", _range(prefix)):
            yield s, bytes(payload)

    def _pages(self, columns: str, where: str, params: Sequence[Any]) -> Iterator[tuple]:
        """Rows of ``events`` in (stream, seq) order, a page at a time (keyset pagination): the
        connection is free between pages, so a caller may read other things while iterating
        (a projector reads runs while a rebuild reads every stream)."""
        sql = (f"SELECT {columns}, stream, seq FROM events WHERE {where} AND (stream, seq) > (%s, %s) "
               f"ORDER BY stream, seq LIMIT {_CHUNK}")
        after: tuple[str, int] = ("", -1)
        width = len(columns.split(","))
        while True:
            rows = self._all(sql, (*params, *after))
            for r in rows:
                yield r[:width]
            if len(rows) < _CHUNK:
                return
            after = (rows[-1][-2], rows[-1][-1])

    def projection(self, table: str, **where: object) -> list[dict]:
        cols, key = PROJECTIONS[table]
        sql = f"SELECT {', '.join(cols)} FROM {table}" + _where(cols, where) + f" ORDER BY {', '.join(key)}"
        return [dict(zip(cols, r)) for r in self._all(sql, tuple(where.values()))]

    def count_streams(self, prefix: str) -> int:
        return self._all("SELECT COUNT(*) FROM events WHERE seq = 0 AND stream >= %s AND stream < %s",
                         _range(prefix))[0][0]

    def count(self, table: str, **where: object) -> int:
        cols = PROJECTIONS[table][0] if table in PROJECTIONS else _VIEW_COLUMNS[table]
        return self._all(f"SELECT COUNT(*) FROM {table}" + _where(cols, where), tuple(where.values()))[0][0]

    def replace_projections(self, batches: Iterable[Rows]) -> None:
        """One transaction: readers see the old rows until it commits (DELETE, not TRUNCATE,
        which would block them), then every new one; an error leaves the old rows."""
        self._writable()
        with self._translated("cannot rebuild the projections ({}); the previous rows are kept"):
            with self._conn.transaction():
                for name in PROJECTIONS:
                    self._conn.execute(f"DELETE FROM {name}")
                for rows in batches:
                    for table, table_rows in rows.items():
                        for sql, params in self._upserts(table, table_rows):
                            self._conn.execute(sql, params)

    def delete_projection_rows(self, table: str, **where: object) -> None:
        self._writable()
        cols = PROJECTIONS[table][0]
        with self._translated("cannot delete projection rows ({})"):
            self._conn.execute(f"DELETE FROM {table}" + _where(cols, where),
                               tuple(where.values()))

    def integrity_check(self) -> str:
        """``"ok"`` when the append-only triggers are in place and enabled; else what is wrong
        (``oloproof audit verify`` fails on anything but ``ok``, beside the hash chains)."""
        rows = self._all("SELECT t.tgname, t.tgenabled FROM pg_trigger AS t WHERE t.tgrelid = 'events'::regclass "
                         "AND NOT t.tgisinternal")
        enabled = {name for name, state in rows if state in ("O", "A")}
        missing = sorted(set(_TRIGGERS) - enabled)
        if missing:
            return (f"the append-only triggers of the events table are missing or disabled: {', '.join(missing)} "
                    "(anyone with UPDATE or DELETE on it can now change the log; the hash chains still show it)")
        return "ok"

    # ---- the search projection --------------------------------------------------------

    def _search_rows(self, events: Sequence[tuple[str, int, str, bytes]]) -> tuple[str, int]:
        """The search rows of ``events`` (stream, seq, type, payload) as :data:`_SEARCH_INSERT`
        takes them, and how many there are."""
        rows = []
        firsts = {s: p for s, q, _, p in events if q == 0 and s.startswith("replay/")}
        for stream, seq, type_, payload in events:
            if type_ not in SEARCHED_TYPES:
                continue
            row = self._search_row(stream, type_, payload, firsts)
            if row is None:
                continue
            run_id, case_id, step, kind, tool_name, replay, text = row
            rows.append({"s": stream, "q": seq, "r": run_id, "c": case_id, "n": step, "k": kind, "t": tool_name,
                         "p": replay, "v": tsvector(text)})
        return _JSON(rows).decode(), len(rows)

    def _search_row(self, stream: str, type_: str, payload: bytes,
                    firsts: dict[str, bytes]) -> tuple[str, str, int | None, str, str | None, str | None, str] | None:
        if stream.startswith(JUDGEMENT_CACHE):  # the cache's copy: its case holds the judgement
            return None
        try:
            fields = search_fields(type_, payload)
        except Exception:  # noqa: BLE001 - a payload that does not decode: `audit verify` reports it
            return None
        if fields is None:
            return None
        replay = None
        if stream.startswith("replay/"):
            if stream not in self._replays:
                first = firsts.get(stream)
                if first is None:
                    event = self.first_event(stream)
                    first = event.payload if event is not None else None
                self._replays[stream] = _replayed(first)
            owner = self._replays[stream]
            if owner is None:
                return None
            run_id, case_id = owner
            replay = stream[len("replay/"):]
        else:
            run_id, sep, case_id = stream.partition("/")
            if not sep:
                return None
        step, kind, tool_name, text = fields
        return run_id, case_id, step, kind, tool_name, replay, text

    def index_search(self) -> int:
        """Index every stream marked ``search_pending``: the ones this store wrote from what it
        holds in memory, any other (a writer killed before it indexed its own) read from the
        log; returns how many rows it added. Each pending stream is taken by one indexer
        (``FOR UPDATE SKIP LOCKED``), so writers catching up at once neither wait nor
        index twice."""
        self._writable()
        if self._outer:
            with self._translated("cannot update the search index ({}); nothing of it was written"):
                return self._catch_up()
        with self._translated("cannot update the search index ({}); nothing of it was written; the next writer "
                              "catches up"):
            with self._conn.transaction():
                added = self._catch_up()
        return added

    def _catch_up(self) -> int:
        conn = self._conn
        claimed = [r[0] for r in conn.execute(
            "DELETE FROM search_pending WHERE stream IN (SELECT stream FROM search_pending ORDER BY stream "
            "FOR UPDATE SKIP LOCKED) RETURNING stream")]
        held = {stream: list(events) for stream, events in self._unindexed.items()}
        if self._outer:
            for stream, events in self._held.items():
                held.setdefault(stream, []).extend(events)
        mine = [(s, q, t, p) for s in claimed if s in held for q, t, p in held[s]]
        others = [s for s in claimed if s not in held]
        added = self._insert_search(mine)
        for start in range(0, len(others), 1000):
            rows = conn.execute("SELECT stream, seq, type, payload FROM events WHERE stream = ANY(%s) "
                                "AND type = ANY(%s) ORDER BY pos", (others[start:start + 1000],
                                                                    list(SEARCHED_TYPES))).fetchall()
            added += self._insert_search([(r[0], r[1], r[2], bytes(r[3])) for r in rows])
        # what is not claimed was indexed by another writer meanwhile
        self._unindexed.clear()
        if self._outer:
            self._held.clear()
        self._count = 0
        return added

    def _insert_search(self, events: list[tuple[str, int, str, bytes]]) -> int:
        added = 0
        for start in range(0, len(events), _CHUNK):
            rows, n = self._search_rows(events[start:start + _CHUNK])
            if n:
                self._conn.execute(_SEARCH_INSERT, (rows,))
                added += n
        return added

    def rebuild_search(self) -> int:
        """Drop every search row and index every event again, in one transaction."""
        self._writable()
        added = 0
        with self._translated("cannot rebuild the search index ({}); the previous one is kept"):
            with self._conn.transaction():
                self._conn.execute("DELETE FROM search_steps")
                self._conn.execute("DELETE FROM search_pending")
                self._replays.clear()
                after = 0
                while True:
                    rows = self._conn.execute(
                        "SELECT pos, stream, seq, type, payload FROM events WHERE pos > %s AND type = ANY(%s) "
                        f"ORDER BY pos LIMIT {_CHUNK}", (after, list(SEARCHED_TYPES))).fetchall()
                    if not rows:
                        break
                    added += self._insert_search([(r[1], r[2], r[3], bytes(r[4])) for r in rows])
                    after = rows[-1][0]
        self._unindexed.clear()
        self._count = 0
        return added

    def search_steps(self, query: str, where: SearchFilter, limit: int) -> list[dict]:
        from oloproof.store.search import SearchQueryError

        parsed = parse_query(query)
        if parsed is None:
            return []
        sql = ["SELECT s.pos, s.run_id, s.case_id, s.step, s.kind, s.tool_name, s.replay, e.type, e.payload "
               "FROM search_steps AS s JOIN events AS e ON e.pos = s.pos WHERE s.tsv @@ %s::tsquery"]
        args: list[Any] = [to_tsquery(parsed)]
        if where.run_ids:
            sql.append("AND s.run_id = ANY(%s)")
            args.append(list(where.run_ids))
        if where.system is not None:
            sql.append("AND s.run_id IN (SELECT run_id FROM runs WHERE system = %s)")
            args.append(where.system)
        if where.tool is not None:
            sql.append("AND s.tool_name = %s")
            args.append(where.tool)
        if where.kind is not None:
            sql.append("AND s.kind = %s")
            args.append(where.kind)
        if where.verdict is not None:
            sql.append("AND EXISTS (SELECT 1 FROM verdicts AS v WHERE v.run_id = s.run_id AND v.case_id = s.case_id "
                       "AND v.criterion = %s AND v.verdict = %s)")
            args.extend(where.verdict)
        sql.append("ORDER BY s.pos DESC LIMIT %s")
        args.append(limit)
        pg = self._pg
        try:
            with self._translated("the search index cannot be read ({}); 'oloproof audit rebuild' rebuilds it"):
                with self._conn.transaction():
                    self._conn.execute(f"SET LOCAL statement_timeout = '{SEARCH_SECONDS}s'")
                    rows = self._conn.execute(" ".join(sql), args).fetchall()
        except StoreError as e:
            if isinstance(e.__cause__, pg.errors.QueryCanceled):
                raise SearchQueryError(f"search query {query!r} took longer than {SEARCH_SECONDS} s and was stopped; "
                                       "narrow it (fewer prefix* terms, a phrase, --run, --tool or --kind)") from None
            raise
        terms = _positive_terms(parsed)
        keys = ("pos", "run_id", "case_id", "step", "kind", "tool_name", "replay")
        return [{**dict(zip(keys, r[:7])), "snippet": snippet(_step_text(r[7], bytes(r[8])), terms)} for r in rows]

    def search_names(self, what: str) -> list[str]:
        sql = {"tool_name": "SELECT DISTINCT tool_name FROM search_steps WHERE tool_name IS NOT NULL",
               "criterion": "SELECT DISTINCT criterion FROM verdicts"}[what]
        return sorted(r[0] for r in self._all(sql))

    def search_lag(self) -> int:
        """Searchable events of the streams still pending (written, not indexed yet)."""
        return self._all("SELECT count(*) FROM events AS e WHERE e.stream IN (SELECT stream FROM search_pending) "
                         "AND e.type = ANY(%s) AND NOT EXISTS (SELECT 1 FROM search_steps AS s WHERE s.pos = e.pos)",
                         (list(SEARCHED_TYPES),))[0][0]

    def close(self) -> None:
        if self._unindexed and not self._outer and not self.readonly and not self._conn.broken:
            # what this connection wrote becomes searchable; the index is a cache, so a failure
            # here loses nothing: the streams stay pending for the next writer
            with suppress(Exception):
                self.index_search()
        with suppress(Exception):
            self._conn.close()


# ---- helpers --------------------------------------------------------------------------------

_VIEW_COLUMNS = {"verdicts": ("run_id", "case_id", "criterion", "verdict", "reason")}


def _where(cols: Sequence[str], where: dict[str, object]) -> str:
    for name in where:
        if name not in cols:  # the names become SQL: only the table's own columns
            raise StoreError(f"no column {name!r} (columns: {', '.join(cols)})")
    return (" WHERE " + " AND ".join(f"{k} = %s" for k in where)) if where else ""


def _range(prefix: str) -> tuple[str, str]:
    return prefix, prefix + "\U0010ffff"


def _event(r: tuple) -> StoredEvent:
    return StoredEvent(r[0], r[1], r[2], bytes(r[3]), r[4])


def _run_key(run_id: str) -> int:
    """The second key of a run's advisory lock: 31 bits of the run id's SHA-256."""
    return int.from_bytes(hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()[:4], "big") & 0x7FFFFFFF


def _holder_name(doing: str) -> str:
    """The session's ``application_name`` (at most 63 bytes): what it does, its pid and host."""
    return f"oloproof {doing} pid {os.getpid()} on {socket.gethostname()}"[:63]


def _reason(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:299] + "…"


def _replayed(first: bytes | None) -> tuple[str, str] | None:
    if first is None:
        return None
    try:
        run_id, sep, case_id = replayed_stream(first).partition("/")
    except Exception:  # noqa: BLE001 - not a replay_started: nothing to attach its steps to
        return None
    return (run_id, case_id) if sep else None


def _step_text(type_: str, payload: bytes) -> str:
    """The text the index read of an event (its tool, agents, arguments and result)."""
    try:
        fields = search_fields(type_, payload)
    except Exception:  # noqa: BLE001 - indexed, so it decoded then; a snippet is never worth an error
        return ""
    return "" if fields is None else fields[3]


_JSON = msgspec.json.Encoder().encode


# ---- tokens, tsvectors and the FTS5 query language ------------------------------------------

#: a token as FTS5's unicode61 tokenizer reads one: letters and digits (and the combining marks
#: of a decomposed letter); everything else, the underscore included, separates tokens
_TOKEN = re.compile(r"(?:[^\W_]|[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f])+")
_MAX_LEXEME = 2046  # bytes: PostgreSQL refuses a longer word
_MAX_POSITION = 16383  # positions past it are stored as 16383
_MAX_VECTOR = 900_000  # bytes of one tsvector (PostgreSQL's limit is 1 MB): the rest of a huge text is left out


def fold(token: str) -> str:
    """A token as the index holds it: lower case, diacritics removed (``Café`` → ``cafe``)."""
    if token.isascii():
        return token.lower()
    return "".join(c for c in unicodedata.normalize("NFKD", token) if not unicodedata.combining(c)).lower()


def tokens(text: str) -> list[str]:
    """The folded tokens of ``text``, in order."""
    return [fold(m.group()) for m in _TOKEN.finditer(text)]


def _quote(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


_ASCII_TOKEN = re.compile(r"[a-z0-9]+")


def tsvector(text: str) -> str:
    """``text`` as a tsvector literal: each folded token at its position (1-based). A word
    seen again is written again: PostgreSQL merges a word's positions (and keeps 256 of them)."""
    words = _ASCII_TOKEN.findall(text.lower()) if text.isascii() else tokens(text)
    if len(text) > _MAX_LEXEME // 4 and (len(text) > _MAX_VECTOR // 4
                                         or max(map(len, words), default=0) * 4 > _MAX_LEXEME):
        return _bounded_tsvector(words)
    if text.isascii():  # letters and digits only: nothing to quote
        return " ".join([f"{w}:{n}" for n, w in enumerate(words, start=1)])
    return " ".join([f"{_quote(w)}:{n}" for n, w in enumerate(words, start=1)])


def _bounded_tsvector(words: list[str]) -> str:
    """:func:`tsvector` of a very long text, within PostgreSQL's limits (see the module's docs)."""
    positions: dict[str, list[int]] = {}
    size = 0
    for n, lexeme in enumerate(words, start=1):
        if len(lexeme.encode()) > _MAX_LEXEME:
            continue
        seen = positions.get(lexeme)
        if seen is None:
            size += len(lexeme.encode()) + 8
            if size > _MAX_VECTOR:
                break
            positions[lexeme] = [min(n, _MAX_POSITION)]
        elif len(seen) < 256 and seen[-1] < _MAX_POSITION:
            seen.append(min(n, _MAX_POSITION))
    return " ".join(f"{_quote(w)}:{','.join(map(str, p))}" for w, p in positions.items())


@dataclass(frozen=True)
class Phrase:
    """Consecutive folded tokens; ``prefix``: the last one matches as a prefix (``word*``)."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class Op:
    """``AND``, ``OR`` or ``NOT`` (``left NOT right``: left without right) of two queries."""

    op: str
    left: Query
    right: Query


@dataclass(frozen=True)
class Near:
    """``NEAR(a b, N)``: both phrases, at most N tokens apart, in either order."""

    phrases: tuple[Phrase, Phrase]
    distance: int


#: a parsed query; None stands for a part that matches nothing (a phrase of punctuation only)
Query = Phrase | Op | Near

#: FTS5 barewords: ASCII letters, digits and _, any non-ASCII character, and U+001A
_BAREWORD = re.compile(r"[A-Za-z0-9_\x1a\x80-\U0010ffff]+")
_NEAR_MAX = 100  # NEAR is expanded into one alternative per distance and order


def parse_query(query: str) -> Query | None:
    """An FTS5 query (the syntax ``oloproof search`` takes) as a tree, or None when it can
    match nothing. Supported: words, ``"phrases"``, ``word*`` prefixes, ``AND``, ``OR``,
    ``NOT``, parentheses, ``+`` between phrases, ``NEAR(a b[, N])`` of two phrases, and the
    column filter ``text:``. Refused (:class:`~oloproof.store.search.SearchQueryError`):
    ``^`` (start of the text), ``NEAR`` of three or more phrases, other columns."""
    return _Parser(query).parse()


class _Parser:
    def __init__(self, query: str):
        self.query = query
        self.items = self._lex(query)
        self.at = 0

    def fail(self, why: str) -> Any:
        from oloproof.store.search import SearchQueryError

        raise SearchQueryError(f"search query {self.query!r}: {why}")

    def _lex(self, q: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        i = 0
        while i < len(q):
            c = q[i]
            if c.isspace():
                i += 1
            elif c == '"':
                j, text = i + 1, []
                while True:
                    if j >= len(q):
                        self.fail("unterminated string")
                    if q[j] == '"':
                        if q[j + 1:j + 2] == '"':
                            text.append('"')
                            j += 2
                            continue
                        break
                    text.append(q[j])
                    j += 1
                out.append(("str", "".join(text)))
                i = j + 1
            elif c in "()*+:^{},-":
                out.append((c, c))
                i += 1
            else:
                m = _BAREWORD.match(q, i)
                if m is None:
                    self.fail(f"unexpected character {c!r}")
                    raise AssertionError
                word = m.group()
                kind = word if word in ("AND", "OR", "NOT") else ("NEAR" if word == "NEAR" else "word")
                out.append((kind, word))
                i = m.end()
        return out

    def peek(self, offset: int = 0) -> str | None:
        at = self.at + offset
        return self.items[at][0] if at < len(self.items) else None

    def take(self, kind: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.items):
            self.fail("the query ends too early")
        item = self.items[self.at]
        if kind is not None and item[0] != kind:
            self.fail(f"expected {kind!r}, found {item[1]!r}")
        self.at += 1
        return item

    def parse(self) -> Query | None:
        if not self.items:
            self.fail("the query is empty")
        tree = self.or_()
        if self.at < len(self.items):
            self.fail(f"unexpected {self.items[self.at][1]!r}")
        return tree

    def or_(self) -> Query | None:
        left = self.and_()
        while self.peek() == "OR":
            self.take()
            right = self.and_()
            left = right if left is None else left if right is None else Op("OR", left, right)
        return left

    def and_(self) -> Query | None:
        left = self.not_()
        nothing = left is None
        while True:
            if self.peek() == "AND":
                self.take()
            elif self.peek() not in ("str", "word", "(", "NEAR", "^", "{", "-"):
                return None if nothing else left
            right = self.not_()
            nothing = nothing or right is None
            if not nothing:
                left = Op("AND", cast(Query, left), cast(Query, right))

    def not_(self) -> Query | None:
        left = self.primary()
        while self.peek() == "NOT":
            self.take()
            right = self.primary()
            if left is not None and right is not None:  # x NOT (nothing) is x; (nothing) NOT x is nothing
                left = Op("NOT", left, right)
        return left

    def _column_ahead(self) -> bool:
        return self.peek() == "word" and self.peek(1) == ":"

    def primary(self) -> Query | None:
        kind = self.peek()
        if kind == "-" or kind == "{" or self._column_ahead():
            excluded = self._columns()
            inner = self.primary()
            return None if excluded else inner
        if kind == "(":
            self.take()
            inner = self.or_()
            self.take(")")
            return inner
        if kind == "NEAR" and self.peek(1) == "(":
            return self.near()
        if kind == "^":
            self.fail("'^' (a phrase at the start of the text) is not supported on a PostgreSQL log")
        return self.phrase()

    def _columns(self) -> bool:
        """A column filter (``text:``, ``{text}:``, ``-text:``): whether it excludes the text."""
        negated = False
        if self.peek() == "-":
            self.take()
            negated = True
        names = []
        if self.peek() == "{":
            self.take()
            while self.peek() == "word":
                names.append(self.take()[1])
            self.take("}")
        else:
            names.append(self.take("word")[1])
        self.take(":")
        unknown = [n for n in names if n != "text"]
        if unknown:
            self.fail(f"no such column: {unknown[0]} (the search index has one column, text)")
        return negated

    def phrase(self) -> Query | None:
        words: list[str] = []
        prefix = False
        while True:
            kind, value = self.take()
            if kind not in ("str", "word", "NEAR"):  # NEAR without its parenthesis is a word
                self.fail(f"expected a word or a phrase, found {value!r}")
            words.extend(tokens(value))
            prefix = False
            if self.peek() == "*":
                self.take()
                prefix = True
            if self.peek() != "+":
                break
            self.take()
            if prefix:
                self.fail("a prefix (*) may only end a phrase")
        if not words:
            return None
        return Phrase(tuple(words), prefix)

    def near(self) -> Query | None:
        self.take("NEAR")
        self.take("(")
        phrases: list[Phrase | None] = []
        distance = 10
        while self.peek() not in (")", ",", None):
            phrases.append(cast("Phrase | None", self.phrase()))
        if self.peek() == ",":
            self.take()
            value = self.take("word")[1]
            if not value.isdigit():
                self.fail(f"NEAR's distance must be a number, not {value!r}")
            distance = int(value)
        self.take(")")
        if len(phrases) != 2:
            self.fail("NEAR of other than two phrases is not supported on a PostgreSQL log; "
                      "use NEAR(a b) AND NEAR(b c)" if len(phrases) > 2 else "NEAR needs two phrases")
        if distance > _NEAR_MAX:
            self.fail(f"NEAR's distance is at most {_NEAR_MAX} on a PostgreSQL log")
        first, second = phrases
        if first is None or second is None:
            return None
        return Near((first, second), distance)


def to_tsquery(query: Query) -> str:
    """The tsquery text of a parsed query (its lexemes folded already: no configuration applies)."""
    if isinstance(query, Phrase):
        words = [_quote(w) for w in query.words]
        if query.prefix:
            words[-1] += ":*"
        return words[0] if len(words) == 1 else "(" + " <-> ".join(words) + ")"
    if isinstance(query, Op):
        left, right = to_tsquery(query.left), to_tsquery(query.right)
        if query.op == "NOT":
            return f"({left} & !{right})"
        return f"({left} {'&' if query.op == 'AND' else '|'} {right})"
    a, b = (to_tsquery(p) for p in query.phrases)
    # FTS5: at most N tokens between the end of one phrase and the start of the other, either
    # order; tsquery's <d>: the second starts exactly d positions after the first ends
    return "(" + " | ".join(f"{x} <{d}> {y}" for d in range(1, query.distance + 2) for x, y in ((a, b), (b, a))) + ")"


def _positive_terms(query: Query | None) -> list[Phrase]:
    """The phrases a hit's snippet marks (the right side of a NOT is never shown)."""
    if query is None:
        return []
    if isinstance(query, Phrase):
        return [query]
    if isinstance(query, Near):
        return list(query.phrases)
    return _positive_terms(query.left) + ([] if query.op == "NOT" else _positive_terms(query.right))


SNIPPET_TOKENS = 16  # as the SQLite search asks FTS5's snippet() for


def snippet(text: str, terms: Sequence[Phrase], size: int = SNIPPET_TOKENS) -> str:
    """About ``size`` tokens of ``text`` around its best-matching place, each matched phrase
    between the search's marks (one pair for a phrase of several tokens, as FTS5 marks
    ``ord-009``), ``…`` where text was left out (as FTS5's ``snippet()``)."""
    from oloproof.store.search import MARK_OFF, MARK_ON

    spans = [(m.start(), m.end(), fold(m.group())) for m in _TOKEN.finditer(text)]
    if not spans:
        return text[:200]
    words = [w for _, _, w in spans]
    found: list[tuple[int, int]] = []  # (first, last) token of each phrase matched
    for term in terms:
        n = len(term.words)
        for i in range(len(words) - n + 1):
            if all(words[i + k] == term.words[k] or (term.prefix and k == n - 1 and words[i + k].startswith(
                    term.words[k])) for k in range(n)):
                found.append((i, i + n - 1))
    merged: list[list[int]] = []
    for first, last in sorted(found):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    starts = {a for a, _ in merged}
    ends = {b for _, b in merged}
    start = max(0, min(merged[0][0] - 2, len(spans) - size)) if merged else 0
    best = -1
    for first, _ in merged:  # the window holding the most matches
        s = max(0, min(first - 2, len(spans) - size))
        got = sum(1 for a, _ in merged if s <= a < s + size)
        if got > best:
            start, best = s, got
    end = min(len(spans), start + size)
    inside = any(a < start <= b for a, b in merged)  # a phrase cut by the window's start
    out = ["…" if start > 0 else ""]
    cursor = spans[start][0] if start > 0 else 0
    for i in range(start, end):
        a, b, _ = spans[i]
        out.append(text[cursor:a])
        if i in starts or (i == start and inside):
            out.append(MARK_ON)
        out.append(text[a:b])
        if i in ends or (i == end - 1 and any(x <= i < y for x, y in merged)):
            out.append(MARK_OFF)
        cursor = b
    if end < len(spans):
        out.append(text[cursor:spans[end][0]].rstrip() + "…")
    else:
        out.append(text[cursor:])
    return "".join(out)


def open_url(url: str, *, durability: str = "full", create: bool = True, readonly: bool = False,
             key: bytes | None = None, **_options: object) -> PostgresStore:
    """The PostgreSQL backend's opener (``oloproof.store.BACKENDS``): ``postgresql://…`` or
    ``postgres://…``, a libpq URL."""
    return PostgresStore(url, durability=durability, create=create, readonly=readonly, key=key)


__all__ = ["PostgresStore", "open_url", "parse_query", "printable_url", "snippet", "to_tsquery", "tsvector"]

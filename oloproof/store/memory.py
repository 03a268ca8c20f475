"""An in-memory :class:`EventStore`, used by tests and as the contract's second backend."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

from oloproof.errors import DuplicateEventError
from oloproof.events import scheme_of
from oloproof.store.base import (
    PROJECTIONS,
    EventStore,
    Rows,
    StoredEvent,
    StreamAppend,
    chain,
)


class MemoryStore(EventStore):
    """An :class:`EventStore` held in dicts, for tests and the contract's second backend.

    ``commit`` stages every batch and swaps it in only when all fit, so a duplicate
    (stream, seq) rolls back the whole batch; nothing survives the process.
    """

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.scheme = scheme_of(key)
        self._streams: dict[str, list[StoredEvent]] = {}
        self._tables: dict[str, dict[tuple, tuple]] = {name: {} for name in PROJECTIONS}

    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        staged: dict[str, list[StoredEvent]] = {}
        for ap in appends:
            existing = staged.get(ap.stream, self._streams.get(ap.stream, []))
            if ap.start != len(existing):
                raise DuplicateEventError(
                    f"stream {ap.stream!r} already has sequence {ap.start}; batch rolled back"
                )
            previous = existing[-1].digest if existing else ""
            digests, _ = chain(previous, ap, self.key)
            new = [
                StoredEvent(ap.stream, ap.start + i, t, p, d)
                for i, (t, p, d) in enumerate(zip(ap.types, ap.payloads, digests))
            ]
            staged[ap.stream] = existing + new
        tables = copy.copy(self._tables)
        for table, table_rows in (rows or {}).items():
            cols, key = PROJECTIONS[table]
            idx = [cols.index(k) for k in key]
            tables[table] = dict(tables[table])
            for row in table_rows:
                tables[table][tuple(row[i] for i in idx)] = tuple(row)
        self._streams.update(staged)
        self._tables = tables

    @contextmanager
    def transaction(self) -> Iterator[None]:
        streams, tables = dict(self._streams), self._tables
        try:
            yield
        except BaseException:
            self._streams, self._tables = streams, tables  # commit() never mutates in place
            raise

    def stream_length(self, stream: str) -> int:
        return len(self._streams.get(stream, ()))

    def heads(self, prefix: str) -> dict[str, tuple[int, str]]:
        return {s: (len(evs), evs[-1].digest) for s, evs in sorted(self._streams.items()) if s.startswith(prefix)}

    def head(self, stream: str) -> tuple[int, str] | None:
        events = self._streams.get(stream)
        return (len(events), events[-1].digest) if events else None

    def root_streams(self) -> list[str]:
        return sorted(s for s in self._streams if "/" not in s)

    def stream_names(self, prefix: str) -> list[str]:
        return sorted(s for s in self._streams if s.startswith(prefix))

    def read_stream(self, stream: str) -> list[StoredEvent]:
        return list(self._streams.get(stream, ()))

    def read_prefix(self, prefix: str) -> Iterator[StoredEvent]:
        for stream in sorted(self._streams):
            if stream.startswith(prefix):
                yield from self._streams[stream]

    def projection(self, table: str, **where: object) -> list[dict]:
        cols, _ = PROJECTIONS[table]
        out = []
        for key in sorted(self._tables[table], key=_sort_key):
            row = dict(zip(cols, self._tables[table][key]))
            if all(row[k] == v for k, v in where.items()):
                out.append(row)
        return out

    def count_streams(self, prefix: str) -> int:
        return sum(1 for s in self._streams if s.startswith(prefix))

    def count(self, table: str, **where: object) -> int:
        return len(self.projection(table, **where))

    def replace_projections(self, batches: Iterable[Rows]) -> None:
        tables: dict[str, dict[tuple, tuple]] = {name: {} for name in PROJECTIONS}
        for rows in batches:
            for table, table_rows in rows.items():
                cols, key = PROJECTIONS[table]
                idx = [cols.index(k) for k in key]
                for row in table_rows:
                    tables[table][tuple(row[i] for i in idx)] = tuple(row)
        self._tables = tables

    def delete_projection_rows(self, table: str, **where: object) -> None:
        cols, _ = PROJECTIONS[table]
        self._tables[table] = {
            k: r
            for k, r in self._tables[table].items()
            if not all(dict(zip(cols, r))[c] == v for c, v in where.items())
        }

    def close(self) -> None:
        pass


def _sort_key(key: tuple) -> tuple:
    return tuple((0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in key)


def open_url(url: str, *, key: bytes | None = None, **_options: object) -> MemoryStore:
    """The in-memory backend's opener (``memory:``): ``key`` chains it with HMAC; the
    file options (``durability``, ``create``, ``readonly``) mean nothing here."""
    return MemoryStore(key=key if isinstance(key, bytes) else None)

"""A typed event log over any :class:`~oloproof.store.base.EventStore`.

The store speaks bytes (payloads, types, digests); everything above it speaks events. This
is the seam between the two: callers append and read :mod:`oloproof.events` structs, and the
codec (:class:`oloproof.events.Codec`: canonical JSON, upcasting on read) is applied here and
nowhere else in the app layer. An undecodable event is a
:class:`~oloproof.errors.CorruptLogError` naming its stream and sequence.

Workers that record a case away from the log (processes, Dask) send the driver payloads
packed by the same codec; :meth:`EventLog.unpack` reads them back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TypeVar

from oloproof.errors import CorruptLogError, DuplicateEventError
from oloproof.events import CODEC, Codec, Event
from oloproof.store.base import EventStore, Rows, StoredEvent, StreamAppend

E = TypeVar("E", bound=Event)


class EventLog:
    """Typed events over ``store``.

    Args:
        store: the backend (SQLite, in memory, …) that holds the bytes.
        codec: how events are encoded and decoded; the default knows every event of this
            version and upcasts older ones.
    """

    def __init__(self, store: EventStore, codec: Codec = CODEC):
        self.store = store
        self.codec = codec

    # ---- writing ---------------------------------------------------------------------------

    def batch(self, stream: str, start: int, events: Sequence[Event]) -> StreamAppend:
        """A :class:`StreamAppend` of ``events`` at ``start`` of ``stream``, for :meth:`commit`."""
        payloads, types = self.codec.pack(events)
        return StreamAppend(stream, start, payloads, types)

    def append(self, stream: str, start: int, events: Sequence[Event], rows: Rows | None = None) -> None:
        """Append ``events`` to ``stream`` from sequence ``start`` (and upsert ``rows``) in one
        transaction; a taken sequence is a :class:`~oloproof.errors.DuplicateEventError`."""
        self.store.commit([self.batch(stream, start, events)], rows)

    def commit(self, appends: Sequence[StreamAppend], rows: Rows | None = None) -> None:
        """Several batches (from :meth:`batch`, or payloads a worker packed) in one transaction."""
        self.store.commit(appends, rows)

    def append_at_end(self, stream: str, event: Event, attempts: int = 20) -> None:
        """Append one event at the end of ``stream``, whatever another process appended there
        meanwhile (two ``attribute`` or ``runs --pin`` at once: both land, in some order)."""
        for attempt in range(attempts):
            try:
                self.append(stream, self.store.stream_length(stream), [event])
                return
            except DuplicateEventError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.01 * (attempt + 1))

    # ---- reading ---------------------------------------------------------------------------

    def unpack(self, stream: str, payloads: Sequence[bytes], start: int = 0) -> list[Event]:
        """Events of ``payloads`` (stored from sequence ``start`` of ``stream``, or packed by a
        worker)."""
        return self.codec.decode_stream(stream, payloads, start)

    def decoded(self, stored: Sequence[StoredEvent]) -> list[Event]:
        """The events of stored rows of ONE stream, in order."""
        if not stored:
            return []
        return self.codec.decode_stream(stored[0].stream, [e.payload for e in stored], stored[0].seq)

    def read(self, stream: str) -> list[Event]:
        """Every event of ``stream`` (empty when it does not exist)."""
        return self.decoded(self.store.read_stream(stream))

    def first(self, stream: str) -> Event | None:
        """The first event of ``stream``, or None."""
        head = self.store.first_event(stream)
        return None if head is None else self.unpack(stream, [head.payload], head.seq)[0]

    def last(self, stream: str) -> Event | None:
        """The last event of ``stream`` (of a pin, an attribution: the latest wins), or None."""
        stored = self.store.read_stream(stream)
        return None if not stored else self.unpack(stream, [stored[-1].payload], stored[-1].seq)[0]

    def last_of(self, stream: str, kind: type[E], what: str) -> E | None:
        """Like :meth:`last`, and a :class:`~oloproof.errors.CorruptLogError` unless it is a
        ``kind`` (``what`` names it in the message)."""
        stored = self.store.read_stream(stream)
        if not stored:
            return None
        event = self.unpack(stream, [stored[-1].payload], stored[-1].seq)[0]
        if not isinstance(event, kind):
            raise CorruptLogError(f"stream {stream!r} #{stored[-1].seq} is not {what}")
        return event

    def streams(self, prefix: str) -> Iterator[tuple[str, list[Event]]]:
        """(name, events) of every stream under ``prefix``, one stream at a time."""
        for stream, payloads in self.store.iter_streams(prefix):
            yield stream, self.unpack(stream, payloads)

    def heads(self, prefix: str) -> Iterator[tuple[str, Event]]:
        """(name, first event) of every stream under ``prefix``."""
        for stream, payload in self.store.stream_heads(prefix):
            yield stream, self.unpack(stream, [payload])[0]


__all__ = ["EventLog"]

"""A run's own stream decoded for its readers, with the seal's stream lists left as the JSON
they are stored as.

A seal (:class:`~oloproof.events.RunSealed`) lists every stream of its run — 50,000 entries
for a 50,000-case run, 1.9 MB of JSON — and a reader needs them once, in name order, to
compare with the streams it reads (:mod:`oloproof.app.audit`). Decoded into a dict they would
be the largest thing a reader holds, and what made its memory grow with the run. So the run
stream's seal is decoded with its ``cases`` and ``replays`` as :class:`SealEntries`: a
read-only mapping over the stored JSON that is checked once (shape, types and name order) and
then read entry by entry. Every other field is decoded by the one codec, as any event is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec

from oloproof.events import CODEC, Event

#: one entry of a seal's map as canonical JSON writes it: "name":[length,"head"]
_ENTRY = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)":\[(0|[1-9][0-9]*),"([0-9a-f]*)"\]')
_PAIR = rb'"[^"\\]*(?:\\.[^"\\]*)*":\[(?:0|[1-9][0-9]*),"[0-9a-f]*"\]'
#: entries separated by commas, and nothing else (no spaces)
_PAIRS = re.compile(_PAIR + rb"(?:," + _PAIR + rb")*")
#: how much of a seal's map one regular-expression match checks (the engine keeps state per
#: repetition: a whole 50,000-entry map at once would cost 20 MB)
_PIECE = 1 << 16
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_SEALED = "run_sealed.v1"
_LAZY = ("cases", "replays")


class SealEntries(Mapping[str, list]):
    """A seal's ``cases`` (or ``replays``) map, read from its stored JSON entry by entry, in
    name order: name -> ``[events, first 16 hex digits of the head]``. Looking one name up
    reads the entries up to it; iterating is what readers do."""

    def __init__(self, raw: bytes, count: int):
        self._raw = raw
        self._count = count

    @classmethod
    def parse(cls, raw: bytes) -> Mapping[str, list]:
        """The entries of ``raw`` (a JSON object): a :class:`SealEntries` when it has exactly
        the shape a seal writes (checked here at C speed, nothing kept), else — a seal written
        otherwise — the object decoded whole, its names sorted. Names out of order are found
        as the entries are read (:func:`entries_of` readers compare them)."""
        if raw == b"{}":
            return cls(raw, 0)
        if _shaped(raw):
            # '"],"' is only ever between two entries: inside a name a quote is escaped
            return cls(raw, raw.count(b'"],"') + 1)
        entries = msgspec.json.decode(raw, type=dict[str, list[Any]])
        return dict(sorted(entries.items()))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for name, _, _ in _scan(self._raw):
            yield name

    def __getitem__(self, name: str) -> list:
        for key, length, head in _scan(self._raw):
            if key == name:
                return [length, head]
            if key > name:
                break
        raise KeyError(name)

    def entries(self) -> Iterator[tuple[str, int, str]]:
        """(name, events, head) of every entry, in name order."""
        return _scan(self._raw)

    def __repr__(self) -> str:
        return f"SealEntries({self._count} entries)"


def _shaped(raw: bytes) -> bool:
    """``raw`` is a non-empty map of entries exactly as a seal writes them, checked a piece
    at a time (cut between two entries)."""
    if not (raw.startswith(b"{") and raw.endswith(b"}")):
        return False
    pos, end = 1, len(raw) - 1
    while pos < end:
        cut = raw.find(b'"],"', pos + _PIECE, end)
        stop = end if cut < 0 else cut + 2  # the piece ends with its last entry's '"]'
        if _PAIRS.fullmatch(raw, pos, stop) is None:
            return False
        pos = stop + 1  # past the comma
    return True


def _scan(raw: bytes) -> Iterator[tuple[str, int, str]]:
    """The entries of a seal map's JSON, in the order stored; ValueError when it is not
    exactly a seal's shape (``{}`` or ``{"name":[n,"hex"],…}`` with no spaces)."""
    if raw == b"{}":
        return
    if not raw.startswith(b"{"):
        raise ValueError("not an object")
    pos, end, match = 1, len(raw), _ENTRY.match
    while True:
        m = match(raw, pos)
        if m is None:
            raise ValueError(f"unexpected entry at byte {pos}")
        key = m.group(1)
        name = msgspec.json.decode(b'"' + key + b'"') if b"\\" in key else key.decode()
        yield name, int(m.group(2)), m.group(3).decode()
        pos = m.end()
        if pos < end and raw[pos] == 0x2C:  # ,
            pos += 1
            continue
        if pos == end - 1 and raw[pos] == 0x7D:  # }
            return
        raise ValueError(f"unexpected byte at {pos}")


def entries_of(mapping: Mapping[str, list]) -> Iterator[tuple[str, int, str]]:
    """(name, events, head) of a seal map (a :class:`SealEntries` or a dict), in name order."""
    if isinstance(mapping, SealEntries):
        return mapping.entries()
    return ((name, entry[0], entry[1]) for name, entry in sorted(mapping.items()))


def decode_run_event(payload: bytes, stored_type: str | None = None) -> Event:
    """One event of a run's own stream, decoded as :meth:`~oloproof.events.Codec.decode` does,
    a seal's stream lists as :class:`SealEntries`. ``stored_type``: its type column, so only a
    seal is tried as one (None: try)."""
    event = _seal(payload) if stored_type in (None, _SEALED) else None
    return event if event is not None else CODEC.decode(payload)


def decode_run_events(stream: str, payloads: Sequence[bytes], types: Sequence[str] | None = None) -> list[Event]:
    """The events of a run's own stream (see :func:`decode_run_event`); an undecodable one is
    a :class:`~oloproof.errors.CorruptLogError` naming the stream and the sequence, as
    :meth:`~oloproof.events.Codec.decode_stream` says it."""
    events = []
    for i, payload in enumerate(payloads):
        event = _seal(payload) if types is None or types[i] == _SEALED else None
        events.append(event if event is not None else CODEC.decode_stream(stream, [payload], i)[0])
    return events


def _seal(payload: bytes) -> Event | None:
    """A ``run_sealed`` payload decoded with its maps lazy, or None when ``payload`` is not
    one (or not one this can read: the codec then decodes it, and says what is wrong)."""
    try:
        top = _TOP.decode(payload)
    except msgspec.DecodeError:
        return None
    if not all(name in top for name in _LAZY) or bytes(top.get("type", b"")) != b'"' + _SEALED.encode() + b'"':
        return None
    lazy = {name: bytes(top[name]) for name in _LAZY}
    rest = b"{" + b",".join(msgspec.json.encode(k) + b":" + (b"{}" if k in lazy else bytes(v))
                            for k, v in top.items()) + b"}"
    try:
        event = CODEC.decode(rest)
        maps = {name: SealEntries.parse(raw) for name, raw in lazy.items()}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return msgspec.structs.replace(event, **maps)

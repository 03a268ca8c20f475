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

from oloproof.events import CODEC, Event, canonical_json

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
    name order: name -> ``[events, first 16 hex digits of the head]``. The JSON is the slice
    ``[start, end)`` of ``buf`` (the stored payload itself: nothing is copied). Looking one name
    up reads the entries up to it; iterating is what readers do."""

    def __init__(self, buf: bytes, start: int, end: int, count: int):
        self._buf, self._start, self._end = buf, start, end
        self._count = count

    @classmethod
    def parse(cls, raw: bytes, start: int = 0, end: int | None = None) -> Mapping[str, list]:
        """The entries of the JSON object ``raw[start:end]``: a :class:`SealEntries` when it has
        exactly the shape a seal writes (checked here at C speed, nothing kept), else — a seal
        written otherwise — the object decoded whole, its names sorted. Names out of order are
        found as the entries are read (:func:`entries_of` readers compare them)."""
        end = len(raw) if end is None else end
        if end - start == 2 and raw.startswith(b"{}", start):
            return cls(raw, start, end, 0)
        if _shaped(raw, start, end):
            # '"],"' is only ever between two entries: inside a name a quote is escaped
            return cls(raw, start, end, raw.count(b'"],"', start, end) + 1)
        entries = msgspec.json.decode(memoryview(raw)[start:end], type=dict[str, list[Any]])
        return dict(sorted(entries.items()))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        for name, _, _ in self.entries():
            yield name

    def __getitem__(self, name: str) -> list:
        for key, length, head in self.entries():
            if key == name:
                return [length, head]
            if key > name:
                break
        raise KeyError(name)

    def entries(self) -> Iterator[tuple[str, int, str]]:
        """(name, events, head) of every entry, in the order stored (a seal's: by name)."""
        return _scan(self._buf, self._start + 1, self._end)

    def cursor(self) -> SealCursor:
        """A :class:`SealCursor` at the first entry."""
        return SealCursor(self._buf, self._start + 1, self._end)

    def __repr__(self) -> str:
        return f"SealEntries({self._count} entries)"


def _shaped(raw: bytes, start: int, end: int) -> bool:
    """``raw[start:end]`` is a non-empty map of entries exactly as a seal writes them, checked
    a piece at a time (cut between two entries)."""
    if end - start < 2 or raw[start] != 0x7B or raw[end - 1] != 0x7D:  # { … }
        return False
    pos, last = start + 1, end - 1
    while pos < last:
        cut = raw.find(b'"],"', pos + _PIECE, last)
        stop = last if cut < 0 else cut + 2  # the piece ends with its last entry's '"]'
        if _PAIRS.fullmatch(raw, pos, stop) is None:
            return False
        pos = stop + 1  # past the comma
    return True


def _scan(raw: bytes, pos: int, end: int) -> Iterator[tuple[str, int, str]]:
    """The entries of the seal map ``raw[…:end]`` from byte ``pos`` (an entry's first byte, or
    the closing brace's), in the order stored; ValueError where it is not exactly a seal's
    shape (``{"name":[n,"hex"],…}``, no spaces)."""
    match = _ENTRY.match
    if pos == end - 1 and raw[pos] == 0x7D:  # }: no (more) entries
        return
    while True:
        m = match(raw, pos, end)
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


class SealCursor:
    """Walks a :class:`SealEntries` from its first entry, matching each against the entry a
    reader expects as the bytes a seal writes (:func:`entry_bytes`): one comparison per stream,
    nothing decoded — until one differs, and :meth:`rest` reads on entry by entry."""

    def __init__(self, raw: bytes, pos: int, end: int):
        self._raw, self._pos, self._end = raw, pos, end

    def take(self, entry: bytes) -> bool:
        """Whether the next entry is exactly ``entry`` (then it is passed)."""
        raw, pos = self._raw, self._pos
        if not raw.startswith(entry, pos, self._end):
            return False
        pos += len(entry)
        if raw[pos] == 0x2C:  # ,
            pos += 1
        elif raw[pos] != 0x7D:  # }
            return False
        self._pos = pos
        return True

    def rest(self) -> Iterator[tuple[str, int, str]]:
        """The entries not passed yet, read one by one."""
        return _scan(self._raw, self._pos, self._end)


#: a name canonical JSON writes as it is, between quotes (printable ASCII but " and \)
_PLAIN = re.compile(r'[ !#-\[\]-~]*').fullmatch


def entry_bytes(name: str, length: int, head: str) -> bytes:
    """A seal map's entry as canonical JSON writes it: ``"name":[length,"head"]``."""
    if _PLAIN(name) is not None and _PLAIN(head) is not None:
        return f'"{name}":[{length},"{head}"]'.encode()
    return canonical_json(name) + b":" + canonical_json([length, head])


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
    rest = b"{" + b",".join(msgspec.json.encode(k) + b":" + (b"{}" if k in _LAZY else bytes(v))
                            for k, v in top.items()) + b"}"
    try:
        event = CODEC.decode(rest)
        maps = {name: SealEntries.parse(*_within(payload, name, top[name])) for name in _LAZY}
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return msgspec.structs.replace(event, **maps)


#: the key that follows each lazy map in a seal's canonical JSON (keys sorted)
_AFTER = {"cases": b'},"cases_committed":', "replays": b'},"run_id":'}


def _within(payload: bytes, name: str, value: msgspec.Raw) -> tuple[bytes, int, int]:
    """Where the map ``name`` (decoded as ``value``) lies in ``payload``: (payload, start, end)
    when found as canonical JSON lays it out — then no copy is made — else (a copy, 0, its
    length). The slice found is checked to be the very bytes of ``value``."""
    start = payload.find(b',"' + name.encode() + b'":{')
    if start >= 0:
        start += len(name) + 4
        # inside a name a quote is escaped: the map ends where the next key is
        end = payload.find(_AFTER[name], start)
        if end >= 0 and memoryview(payload)[start:end + 1] == memoryview(value):
            return payload, start, end + 1
    copy = bytes(value)
    return copy, 0, len(copy)

"""Writing a run's seal: every stream the run wrote or relied on, with its length and the
head of its chain, and the digest over them all (:class:`~oloproof.events.RunSealed`).

A seal lists every case of its run — 50,000 entries for a 50,000-case run, 1.9 MB of JSON —
so it is written the way a large thing is: the heads are read from the log once, in name
order (:meth:`~oloproof.store.base.EventStore.iter_heads`), and each goes at once into the
digest (:class:`~oloproof.events.SealDigest`) and into the event's payload, assembled in one
buffer. Nothing holds every stream at once, nor the seal twice: the run's memory stays what
its cases needed. The payload is byte for byte the canonical JSON of the event with its maps
as dicts (a test holds the two to it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import msgspec

from oloproof.errors import CorruptLogError
from oloproof.events import CODEC, RunSealed, SealDigest, canonical_json
from oloproof.replay.engine import PREFIX
from oloproof.store.base import EventStore, StreamAppend

HEAD = 16  # hex digits of a stream's head kept in the seal, to name a rewritten stream
_EMPTY = msgspec.Raw(b"{}")


def seal(store: EventStore, run_id: str, *, case_count: int, replay_streams: Iterable[str],
         clock: Callable[[], str]) -> RunSealed:
    """Append the seal of ``run_id``: its case streams and ``replay_streams`` as they are now.

    Returns the event appended; its ``cases`` and ``replays`` are their stored JSON
    (``msgspec.Raw``) rather than dicts — read the run back (``load_run``) for those.

    Raises:
        CorruptLogError: the run's own stream is missing.
    """
    run_head = store.head(run_id)
    if run_head is None:
        raise CorruptLogError(f"run stream {run_id!r} is missing")
    replays = sorted((s, *h) for s in set(replay_streams) if (h := store.head(s)) is not None)
    event, payload = seal_event(run_id, run_head, heapq.merge(store.iter_heads(run_id + "/"), replays),
                                finished_at=clock(), case_count=case_count, scheme=store.scheme, key=store.key)
    store.commit([StreamAppend(run_id, run_head[0], [cast(bytes, payload)], [CODEC.tag_of(event)])])
    return event


def seal_event(run_id: str, run_head: tuple[int, str], heads: Iterator[tuple[str, int, str]], *,
               finished_at: str, case_count: int, scheme: Any, key: bytes | None) -> tuple[RunSealed, bytearray]:
    """The ``run_sealed`` event over ``heads`` — (stream, length, last digest) in name order:
    the run's case streams (``<run_id>/<case>``) and the replay streams (``replay/<key>``) —
    and its payload. The event's maps are views into the payload (no second copy)."""
    def template(committed: int, digest: str, replays: Any) -> bytes:
        # the event's canonical JSON with its case map empty: what comes before and after it
        return CODEC.encode(RunSealed(run_id=run_id, finished_at=finished_at, case_count=case_count,
                                      cases_committed=committed, cases=cast(Any, _EMPTY), replays=replays,
                                      scheme=scheme, digest=digest))

    mark = b'"cases":{}'
    head = template(0, "", _EMPTY)
    payload = bytearray(head[:head.index(mark) + len(mark) - 1])  # up to the case map's "{"
    cases_at = len(payload) - 1
    sealing = SealDigest(run_id, run_head, key)
    replays = _Entries(bytearray(b"{"))
    cases = _Entries(payload)
    cut = len(run_id) + 1
    for stream, length, last in heads:
        sealing.add(stream, length, last)
        if stream.startswith(PREFIX):
            replays.add(stream[len(PREFIX):], length, last)
        else:
            cases.add(stream[cut:], length, last)
    payload += b"}"
    cases_end = len(payload)
    replays.json += b"}"
    digest = sealing.hexdigest()
    tail = template(cases.count, digest, msgspec.Raw(bytes(replays.json)))
    payload += tail[tail.index(mark) + len(mark):]
    view = memoryview(payload)
    found = bytes(replays.json)
    at = payload.index(b'"replays":' + found, cases_end) + len(b'"replays":')
    event = RunSealed(run_id=run_id, finished_at=finished_at, case_count=case_count, cases_committed=cases.count,
                      cases=cast(Any, msgspec.Raw(view[cases_at:cases_end])),
                      replays=cast(Any, msgspec.Raw(view[at:at + len(found)])), scheme=scheme, digest=digest)
    return event, payload


class _Entries:
    """A seal's map ``name -> [length, head prefix]`` written as canonical JSON into ``json``
    (after its ``{``), names in order."""

    def __init__(self, json: bytearray):
        self.json = json
        self.count = 0

    def add(self, name: str, length: int, head: str) -> None:
        if self.count:
            self.json += b","
        self.json += canonical_json(name)
        self.json += b":"
        self.json += canonical_json([length, head[:HEAD]])
        self.count += 1

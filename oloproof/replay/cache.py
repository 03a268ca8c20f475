"""Stored replays: one stream ``replay/<cache key>`` each, read through the store interface.

Nothing is kept in memory across cases: a lookup reads one stream by its key (an indexed
read), so a run's memory does not grow with the replays it made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from oloproof.events import ReplayStarted
from oloproof.replay.engine import PREFIX
from oloproof.replay.plan import FaultSpec, Needed, collect, keyed_version
from oloproof.store.base import EventStore
from oloproof.store.log import EventLog
from oloproof.views import CaseView, FaultReplays, ReplayView, fold_replay


class ReplayCache:
    """Replays keyed by system version and code digest, read from the log. ``extra`` holds
    replays that are known but not stored yet (a run's, between a replay job and its commit)."""

    def __init__(self, store: EventStore, system_name: str, version: str, code_digest: str = "",
                 only: set[str] | None = None):
        self.store = store
        self.log = EventLog(store)
        self.system_name = system_name
        self.version = keyed_version(version, code_digest)
        #: the replay streams that may be used (a sealed run's own), or None for any stored one
        self.only = only

    def payloads(self, key: str) -> list[bytes] | None:
        """The stored payloads of the replay ``replay/<key>``, or None when it is not stored
        or is not one of the streams ``only`` allows."""
        if self.only is not None and PREFIX + key not in self.only:
            return None
        stored = self.store.read_stream(PREFIX + key)
        return [e.payload for e in stored] if stored else None

    def read(self, key: str) -> ReplayView | None:
        """The stored replay under ``key``, decoded and folded, or None (see :meth:`payloads`)."""
        payloads = self.payloads(key)
        if payloads is None:
            return None
        return fold_replay(self.log.unpack(PREFIX + key, payloads), PREFIX + key)

    def collect(self, case: CaseView, specs: Iterable[FaultSpec],
                extra: dict[str, ReplayView] | None = None, missing: list[Needed] | None = None,
                found: dict[str, list[bytes]] | None = None) -> dict[tuple[str, str], FaultReplays]:
        """The case's replays as stored (nothing runs). ``missing`` receives what is not;
        ``found``, the stored streams that were read (what a replay job is given)."""
        def lookup(key: str) -> ReplayView | None:
            if extra and key in extra:
                return extra[key]
            payloads = self.payloads(key)
            if payloads is None:
                return None
            if found is not None:
                found[key] = payloads
            return fold_replay(self.log.unpack(PREFIX + key, payloads), PREFIX + key)

        return collect(case, specs, self.system_name, self.version, lookup, missing)


def replays_of_case(store: EventStore, fingerprint: str, case_id: str) -> list[ReplayView]:
    """Every stored replay of a case (any system version), for the case panel."""
    out = []
    log = EventLog(store)
    for stream, head in log.heads(PREFIX):
        if isinstance(head, ReplayStarted) and head.fingerprint == fingerprint and head.case_id == case_id:
            out.append(fold_replay(log.read(stream), stream))
    return out


def all_replays(store: EventStore) -> Iterator[ReplayView]:
    """Every stored replay, one stream at a time."""
    for stream, events in EventLog(store).streams(PREFIX):
        yield fold_replay(events, stream)

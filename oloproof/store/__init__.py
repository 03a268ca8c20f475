"""The event log and its projections. Nothing outside this package touches SQL."""

from oloproof.store.base import (
    PROJECTIONS,
    ChainProblem,
    EventStore,
    StoredEvent,
    StreamAppend,
    VerifyReport,
)
from oloproof.store.memory import MemoryStore
from oloproof.store.sqlite import SQLiteStore

DEFAULT_LOG = ".oloproof/log.db"

__all__ = [
    "DEFAULT_LOG",
    "PROJECTIONS",
    "ChainProblem",
    "EventStore",
    "MemoryStore",
    "SQLiteStore",
    "StoredEvent",
    "StreamAppend",
    "VerifyReport",
]

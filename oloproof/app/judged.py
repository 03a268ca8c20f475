"""The judgement cache: what judging a sealed run produced, kept so that judging it again
(a second ``gate``, ``eval``, ``view``, ``history``) costs its audit and no more.

**What is kept.** Every case result of the run (verdicts, metric values, slice groups,
compared paths …: :class:`~oloproof.evaluate.engine.CaseResult`), in the order the run's
streams are read, in the file beside the log (:mod:`oloproof.store.judged`). The summary is
not kept: it is folded again from the results (as it is from fresh ones), so the baselines
of ``no_regression`` rules, labels and partial-run rules are judged as they are now.

**What it is keyed by.** The run's seal digest — which covers the head of every stream the
run wrote or relied on — and an evaluation key: the configuration the suite was built from
(as a run stores it: evaluators, metrics, slices, labels, the model judges and their code
digests), whether the seal's replays alone are read, and a digest of Oloproof's own code. A
suite with a ``python`` check, or with an evaluator family from outside Oloproof, is never
cached: such code may read anything (a helper module, a data file), so its verdicts are
judged from the events every time.

**Why a tampered cache cannot change a decision.**

* A reader audits the run every time, cache or not (its chains and its seal: the same read
  a reader without a cache makes, minus the decoding), and is refused when the audit fails.
  An altered event, a stream deleted or cut, a case added: the run is refused as before.
* The cache is looked up by the seal digest the audit recomputes from the log, so an entry
  speaks only for exactly the streams it was made from.
* Every entry carries a MAC over its seal digest, its key, its case count and every byte of
  its parts, under a key the log does not hold: derived from ``OLOPROOF_LOG_KEY`` when the
  log is keyed, else a random 32-byte key in the user's cache folder
  (``$XDG_CACHE_HOME/oloproof/judgement.key``, by default ``~/.cache/oloproof/``, made
  readable by its owner only). An entry whose MAC does not verify — edited, moved to another
  run or another key, made on another machine — is not read: the run is judged from its
  events and the entry written again. Someone who can write the log but not that key cannot
  make an entry a reader accepts; with the seal digest kept outside the log (``audit verify
  --expect``) or ``OLOPROOF_LOG_KEY``, the decision is as anchored as the log is.

Without a writable cache folder (or key), nothing is cached and every reader judges from the
events, as it would with an empty cache.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from oloproof.app.runs import StoredRun
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.evaluate.state import PathCheck
from oloproof.events import canonical_json
from oloproof.store.base import EventStore
from oloproof.store.judged import CacheWriter, JudgementCache

#: bump when what an entry holds changes
FORMAT = 1
#: case results per part of an entry
PART = 1000
_PACKAGE = Path(__file__).resolve().parents[1]


class _Cached(msgspec.Struct, array_like=True):
    """A :class:`~oloproof.evaluate.engine.CaseResult` as an entry's part holds it."""

    case_id: str
    position: int
    verdicts: list[tuple[str, str | None]]
    values: list[Any]
    groups: list[str | None]
    paths: list[PathCheck]
    cluster: str | None
    fingerprint: str
    claimed: bool
    trial: int | None
    judged: list[str]


_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(list[_Cached]).decode


def judgement_key(run: StoredRun, suite: SuiteEvaluation, sealed_only: bool) -> str | None:
    """The evaluation key of judging ``run`` with ``suite`` (see the module docstring), or
    None when such a judgement is not cached: the run is not sealed, the suite was not built
    from a stored configuration, it holds a python check or an evaluator from outside
    Oloproof, or it judges fault replays from any replay stored (not the seal's alone)."""
    definition = suite.definition
    if run.sealed is None or definition is None:
        return None
    if suite.fault_specs and not sealed_only:
        return None  # a replay stored after the seal could change a verdict
    for e in suite.evaluators:
        if getattr(e, "type_name", "") == "python" or not type(e).__module__.startswith("oloproof."):
            return None
    judges = {e.criterion: [e.judge_id, e.digest] for _, e in suite.judges}
    body = canonical_json({"format": FORMAT, "definition": definition, "judges": judges,
                           "sealed_only": bool(suite.fault_specs) and sealed_only, "code": code_digest()})
    return hashlib.sha256(body).hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 over Oloproof's own Python files (path and bytes): a cached judgement is one
    of this code's."""
    h = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        try:
            data = path.read_bytes()
        except OSError:
            data = b"\x00unreadable"
        h.update(path.relative_to(_PACKAGE).as_posix().encode() + b"\x00" + hashlib.sha256(data).digest())
    return h.hexdigest()


def secret(store: EventStore) -> bytes | None:
    """The key an entry's MAC is made with (see the module docstring), or None (no cache)."""
    if store.key is not None:
        return hmac.new(store.key, b"oloproof judgement cache", hashlib.sha256).digest()
    return _local_secret(str(_secret_path()))


def _secret_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "oloproof" / "judgement.key"


@functools.lru_cache(maxsize=4)
def _local_secret(path: str) -> bytes | None:
    """The 32 random bytes in ``path``, made (owner-only) the first time; None when the
    file cannot be read or made."""
    file = Path(path)
    for _ in range(2):
        try:
            data = file.read_bytes()
            return data if len(data) == 32 else None
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue  # made by another process just now: read it
        except OSError:
            return None
        try:
            os.write(fd, os.urandom(32))
        finally:
            os.close(fd)
    return None


class _Mac:
    """The MAC of one entry, fed its parts in order."""

    def __init__(self, key: bytes, seal: str, evaluation: str):
        self._h = hmac.new(key, b"oloproof judgement cache %d\x00" % FORMAT + seal.encode() + b"\x00"
                           + evaluation.encode() + b"\x00", hashlib.sha256)

    def part(self, body: bytes) -> None:
        self._h.update(b"%d\x00" % len(body) + body)

    def hexdigest(self, cases: int) -> str:
        h = self._h.copy()
        h.update(b"cases %d" % cases)
        return h.hexdigest()


def cached_results(store: EventStore, run: StoredRun, key: str | None) -> Iterator[CaseResult] | None:
    """The case results cached for ``run`` under ``key`` — an entry whose MAC verifies —
    or None. The caller audits the run before it uses them (the entry is keyed by the seal
    digest the audit holds the log to)."""
    cache, mac_key = _cache(store, key)
    if cache is None or mac_key is None or key is None or run.sealed is None:
        return None
    seal = run.sealed.digest
    entry = cache.entry(seal, key)
    if entry is None:
        return None
    cases, mac = entry
    check = _Mac(mac_key, seal, key)
    for body in cache.parts(seal, key):
        check.part(body)
    if not hmac.compare_digest(check.hexdigest(cases), mac):
        return None
    return _results(cache, seal, key, cases)


def _results(cache: JudgementCache, seal: str, key: str, cases: int) -> Iterator[CaseResult]:
    n = 0
    for body in cache.parts(seal, key):
        results = decode_results(body)
        n += len(results)
        yield from results
    if n != cases:  # the MAC holds, so only a change of the file between two reads does this
        raise _Changed()


def encode_results(results: list[CaseResult]) -> bytes:
    """Case results as an entry's part holds them (msgpack).

    Raises:
        TypeError: a result holds what a part cannot (a value msgpack cannot carry, a path
            that is not a compared path); so do ValueError and OverflowError.
    """
    if not all(type(p) is PathCheck for r in results for p in r.paths):
        raise TypeError("a result's paths are not all compared paths")
    return _ENCODE([_Cached(r.case_id, r.position, list(r.verdicts), list(r.values), list(r.groups), list(r.paths),
                            r.cluster, r.fingerprint, r.claimed, r.trial, list(r.judged)) for r in results])


def decode_results(body: bytes) -> list[CaseResult]:
    """The case results of a part (:func:`encode_results`), as they were."""
    return [CaseResult(c.case_id, c.position, tuple(c.verdicts),
                       tuple(tuple(v) if isinstance(v, list) else v for v in c.values), tuple(c.groups),
                       tuple(c.paths), c.cluster, c.fingerprint, c.claimed, c.trial, tuple(c.judged))
            for c in _DECODE(body)]


class _Changed(Exception):
    """The cache file changed while it was read."""


def is_changed(e: BaseException) -> bool:
    """``e`` says the cache changed while it was read (the caller judges from the events)."""
    return isinstance(e, _Changed)


class Keeper:
    """Writes the case results of a fresh judgement of a sealed run as they come, and keeps
    them once the run's audit holds (:meth:`keep`); any result it cannot hold (a value
    msgpack cannot carry, a path that is not a compared path) and it keeps nothing."""

    def __init__(self, writer: CacheWriter, mac_key: bytes, seal: str, key: str):
        self._writer: CacheWriter | None = writer
        self._mac = _Mac(mac_key, seal, key)
        self._buffer: list[CaseResult] = []
        self._cases = 0

    @classmethod
    def start(cls, store: EventStore, run: StoredRun, key: str | None) -> Keeper | None:
        """A keeper for ``run`` under ``key``, or None (not cached, or the cache cannot be
        written now)."""
        cache, mac_key = _cache(store, key)
        if cache is None or mac_key is None or key is None or run.sealed is None:
            return None
        writer = cache.writer(run.sealed.digest, key)
        return None if writer is None else cls(writer, mac_key, run.sealed.digest, key)

    def add(self, r: CaseResult) -> None:
        """The next case result, in the order the run's streams are read."""
        if self._writer is None:
            return
        self._buffer.append(r)
        if len(self._buffer) >= PART:
            self._flush()

    def add_part(self, body: bytes, count: int) -> None:
        """The next ``count`` case results, already encoded (:func:`encode_results`)."""
        self._flush()
        if self._writer is None:
            return
        self._cases += count
        self._mac.part(body)
        self._writer.add(body)

    def _flush(self) -> None:
        if self._writer is None or not self._buffer:
            return
        try:
            body = encode_results(self._buffer)
        except (TypeError, ValueError, OverflowError):
            self.abort()
            return
        self._cases += len(self._buffer)
        self._buffer = []
        self._mac.part(body)
        self._writer.add(body)

    def keep(self) -> None:
        """The run's audit held: keep the entry."""
        self._flush()
        if self._writer is not None:
            self._writer.commit(self._cases, self._mac.hexdigest(self._cases))
            self._writer = None

    def abort(self) -> None:
        """Keep nothing."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        self._buffer = []


def _cache(store: EventStore, key: str | None) -> tuple[JudgementCache | None, bytes | None]:
    if key is None:
        return None, None
    cache = store.judgement_cache()
    if cache is None:
        return None, None
    return cache, secret(store)


def drop(store: EventStore) -> None:
    """Delete the log's judgement cache (``oloproof audit rebuild``)."""
    cache = store.judgement_cache()
    if cache is not None:
        cache.drop()


__all__ = ["Keeper", "cached_results", "code_digest", "decode_results", "drop", "encode_results", "is_changed",
           "judgement_key", "secret"]

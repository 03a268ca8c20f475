"""A large run judged on two cores: this process reads the log and audits it, a forked one
judges the cases it is handed.

The one read of a reader (:func:`oloproof.app.evidence.evaluate_run`) does two kinds of work
for each case stream: recompute its hash chain (the audit), and decode, fold and judge its
events. On a machine with a second core, the second half goes to a child forked for the read:
each case stream whose chain holds is sent to it, exactly as read (the payloads the audit
hashed: it judges nothing else), and the results come back in the order sent — the order
the serial read judges them in — to be folded into the summary here. Nothing else changes:
the audit is this process's, and a run that fails it is refused whatever the child said.

It is used only where it cannot change what a reader sees: Linux (a fork), at least two
CPUs, a run of :data:`MIN_CASES` cases or more, an SQLite log (the child opens its own
read-only connection, for the replays and metamorphic sources it reads), no thread but this
one (forking beside threads can deadlock), and a suite of Oloproof's own evaluators (a
``python`` check or a plugin runs user code, whose output and state belong to this
process). An error in the child is raised here once the audit holds, as a serial read
raises it; a child killed before it said why (or that judged fewer cases than it was sent)
leaves the judging to this process, from the events again.
"""

from __future__ import annotations

import os
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from oloproof.app.runs import StoredRun
from oloproof.errors import CorruptLogError, OloproofError
from oloproof.evaluate.engine import CaseResult, SuiteEvaluation
from oloproof.store.base import CheckedStream, EventStore

#: the smallest run judged on two cores: below it, forking costs more than it saves
MIN_CASES = 4000
#: case streams sent to the child at a time
BATCH = 128
_FRAME = struct.Struct("<I")
_encode = msgspec.msgpack.Encoder().encode
_streams = msgspec.msgpack.Decoder(list[tuple[str, list[bytes]]]).decode


def usable(store: EventStore, run: StoredRun, suite: SuiteEvaluation) -> bool:
    """Whether ``run`` is judged in a forked child (the conditions in the module docstring)."""
    if not sys.platform.startswith("linux") or (os.cpu_count() or 1) < 2 or run.started.case_count < MIN_CASES:
        return False  # (macOS has fork, but system frameworks a project loads may not survive one)
    if not isinstance(getattr(store, "path", None), Path) or not _alone():
        return False
    return all(getattr(e, "type_name", "") != "python" and type(e).__module__.startswith("oloproof.")
               for e in suite.evaluators)


def _alone() -> bool:
    """Whether this process runs no thread but this one (a fork copies only the caller's)."""
    return threading.active_count() == 1


class ForkedJudge:
    """The child judging the case streams handed to it (:meth:`send`), and the thread here
    that takes its results, in order, to ``on_results``. ``judge`` is called in the child
    with the child's own read-only store and gives the function that judges one folded case
    (the caller's closure, inherited by the fork: nothing is pickled). :meth:`finish` waits
    for the last result; :meth:`abort` stops the child."""

    def __init__(self, store: Any, judge: Callable[[EventStore], Callable[[Any], CaseResult]],
                 on_results: Callable[[bytes, list[CaseResult]], None]):
        self.error: BaseException | None = None
        self._batch: list[tuple[str, list[bytes]]] = []
        self._on_results = on_results
        self._gone = False  # the child stopped reading (it said why, or died)
        self._sent = self._received = 0  # case streams sent, results taken
        to_child, from_parent = os.pipe()[::-1]
        from_child, to_parent = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                os.close(to_child)
                os.close(from_child)
                _child(os.fdopen(from_parent, "rb"), os.fdopen(to_parent, "wb"), store.path, store.key, judge)
                code = 0
            finally:
                os._exit(code)
        self._pid = pid
        os.close(from_parent)
        os.close(to_parent)
        self._out: IO[bytes] = os.fdopen(to_child, "wb")
        self._thread = threading.Thread(target=self._collect, args=(os.fdopen(from_child, "rb"),),
                                        name="oloproof-judged", daemon=True)
        self._thread.start()

    def send(self, stream: CheckedStream) -> None:
        """A case stream whose chain holds, to be judged."""
        self._batch.append((stream.stream, stream.payloads))
        self._sent += 1
        if len(self._batch) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        if self._batch and not self._gone and self.error is None:
            try:
                _write(self._out, _encode(self._batch))
            except OSError:  # the child has gone: what it said (or its end) is the error
                self._gone = True
        self._batch = []

    def finish(self) -> None:
        """Send what is left, wait for every result; raise the child's error, if any."""
        self._flush()
        self._close()
        self._thread.join()
        _, status = os.waitpid(self._pid, 0)
        if self.error is None and os.waitstatus_to_exitcode(status) != 0:
            # killed (the OOM killer, a signal) before it said why: nothing wrong with the run
            self.error = Lost(f"the process judging the run's cases ended with {os.waitstatus_to_exitcode(status)}")
        if self.error is None and self._received != self._sent:
            self.error = Lost(f"the process judging the run's cases judged {self._received} of {self._sent}")
        if self.error is not None:
            raise self.error

    def abort(self) -> None:
        """Stop the child (the read failed or was interrupted)."""
        import signal

        self._close()
        try:
            os.kill(self._pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(self._pid, 0)
        self._thread.join()

    def _close(self) -> None:
        try:
            self._out.close()
        except OSError:
            pass

    def _collect(self, source: IO[bytes]) -> None:
        from oloproof.app.judged import decode_results

        try:
            while (frame := _read(source)) is not None:
                if frame[:1] == b"!":  # the child's error
                    self.error = _error(msgspec.msgpack.decode(frame[1:]))
                    return
                if self.error is None:
                    results = decode_results(frame)
                    self._received += len(results)
                    self._on_results(frame, results)
        except BaseException as e:  # noqa: BLE001 - raised by finish(), in the reading thread
            self.error = self.error or e
        finally:
            source.close()


def _child(source: IO[bytes], sink: IO[bytes], path: Path, key: bytes | None,
           judge_with: Callable[[EventStore], Callable[[Any], CaseResult]]) -> None:
    import signal

    from oloproof.app.judged import encode_results
    from oloproof.events import CODEC
    from oloproof.store.sqlite import SQLiteStore
    from oloproof.views import fold_case

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops this process itself
    try:
        store = SQLiteStore(path, readonly=True, key=key)
        judge = judge_with(store)
        while (frame := _read(source)) is not None:
            results = [judge(fold_case(CODEC.decode_stream(name, payloads), name))
                       for name, payloads in _streams(frame)]
            try:
                body = encode_results(results)
            except (TypeError, ValueError, OverflowError) as e:
                raise Unencodable(str(e)) from e
            _write(sink, body)
    except BaseException as e:  # noqa: BLE001 - told to the parent, which raises it
        kind = ("unencodable" if isinstance(e, Unencodable) else "corrupt" if isinstance(e, CorruptLogError)
                else "oloproof" if isinstance(e, OloproofError) else "")
        _write(sink, b"!" + msgspec.msgpack.encode([kind, type(e).__name__, str(e)]))
    finally:
        sink.close()


class Lost(Exception):
    """The child ended without saying why (killed): the caller judges the run in this process
    instead."""


class Unencodable(Exception):
    """A case result the child cannot send (a value msgpack cannot carry): the caller judges
    the run in this process instead."""


def _error(said: list[str]) -> BaseException:
    kind, name, message = said
    if kind == "unencodable":
        return Unencodable(message)
    if kind == "corrupt":
        return CorruptLogError(message)
    if kind == "oloproof":
        return OloproofError(message)
    return RuntimeError(f"judging a case failed: {name}: {message}")


def _write(sink: IO[bytes], frame: bytes) -> None:
    sink.write(_FRAME.pack(len(frame)))
    sink.write(frame)
    sink.flush()


def _read(source: IO[bytes]) -> bytes | None:
    head = source.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    body = source.read(size)
    if len(body) < size:
        return None
    return body

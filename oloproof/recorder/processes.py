"""``--workers N``: N worker processes, one slot (one system object, one sandbox) each.

The system factory travels to each worker once, with cloudpickle (the project folder is put
on the worker's ``sys.path`` first, so the user's modules import by name); jobs and results
travel as msgpack bytes over a pipe. A worker runs the jobs of a batch one after another and
sends each result back as soon as it has it, so the driver commits cases as they finish.

A worker that dies (``os._exit``, a segfault, the OOM killer) takes only the job it was
running: that case is recorded with the error ``worker_died``, the rest of its batch goes back
to the queue, and a fresh worker takes its place. A job still running ``GRACE`` seconds past
its timeout (native code that ignores the timer signal) gets its worker killed the same way,
and is recorded as ``case_timeout``.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from oloproof.errors import UsageError
from oloproof.recorder.executors import GRACE, Executor
from oloproof.recorder.jobs import Done, Job, job_kind
from oloproof.system import SystemFactory, SystemSlot

MAX_BATCH = 16
STARTUP = 120.0  # seconds a new worker may take to import the project and make its slot


def _worker_main(  # pragma: no cover - child
        conn: Any, root: str | None, blob: bytes, inherited: tuple[int, ...] = ()) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver handles Ctrl-C and stops us
    for fd in inherited:  # a forked worker's copies of the driver's pipe ends: without them, the
        try:              # worker sees its pipe close when the driver dies, however it dies
            os.close(fd)
        except OSError:
            pass
    if root and root not in sys.path:
        sys.path.insert(0, root)
    import cloudpickle

    try:
        factory: SystemFactory = cloudpickle.loads(blob)
        slot = factory.make_slot()
    except BaseException as e:  # noqa: BLE001 - user code may raise anything: reported as a failed start
        conn.send_bytes(msgspec.msgpack.encode([-1, False, f"cannot start a worker: {type(e).__name__}: {e}"]))
        return
    encode = msgspec.msgpack.encode
    conn.send_bytes(encode([0, True, b"ready"]))
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            os._exit(0)  # nothing inherited from the driver is finalized here
        batch = msgspec.msgpack.decode(data)
        if batch is None:  # the driver is done: leave (a forked worker may hold copies of the
            os._exit(0)    # driver's pipe ends, so it would never see the pipe close)
        for ref, job_id, timeout, arg in batch:
            kind = job_kind(ref)
            try:
                message = [job_id, True, kind.encode_result(kind.run(slot, kind.decode_arg(arg), timeout))]
            except BaseException as e:  # noqa: BLE001 - reported to the driver, never the end of this worker
                message = [job_id, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"]
            try:
                conn.send_bytes(encode(message))
            except OSError:  # the driver has gone (it stopped the run)
                os._exit(0)
            if slot.dead:
                slot = factory.make_slot()


@dataclass(eq=False)
class _Worker:
    process: Any
    conn: Any
    batch: deque = field(default_factory=deque)  # jobs sent, in the order it runs them
    started: float = 0.0  # when the job at the head of the batch started


class ProcessExecutor(Executor):
    """N worker processes (``multiprocessing``: forked where that is safe, spawned
    otherwise; see :func:`_start_method`)."""

    remote = True

    def __init__(self, workers: int, batch: int = MAX_BATCH):
        super().__init__()
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.n = workers
        self.max_batch = max(1, batch)
        self._ctx: Any = None
        self._workers: list[_Worker] = []
        self._pending: deque[Job] = deque()
        self._ready: list[Done] = []
        self._blob = b""
        self._root: str | None = None

    @property
    def capacity(self) -> int:
        return self.n * self.max_batch * 2

    def start(self, factory: SystemFactory, first_slot: SystemSlot | None = None) -> None:
        self._ctx = multiprocessing.get_context(_start_method())
        self._blob = factory.pickled()
        self._root = factory.root
        self._workers = []
        for _ in range(self.n):
            self._workers.append(self._launch())  # in the list at once: close() stops them if one fails
        for w in list(self._workers):
            self._await_ready(w)

    def _launch(self) -> _Worker:
        parent, child = self._ctx.Pipe(duplex=True)
        inherited: tuple[int, ...] = ()
        if self._ctx.get_start_method() == "fork":
            inherited = tuple(w.conn.fileno() for w in self._workers if not w.conn.closed) + (parent.fileno(),)
        process = self._ctx.Process(target=_worker_main, args=(child, self._root, self._blob, inherited),
                                    name="oloproof-worker", daemon=True)
        process.start()
        child.close()
        return _Worker(process, parent)

    def _await_ready(self, w: _Worker) -> None:
        """Wait for a new worker to say it has its system object; one that cannot start (the
        system does not unpickle, the main module cannot be imported) stops the run."""
        ready = multiprocessing.connection.wait([w.conn, w.process.sentinel], timeout=STARTUP)
        message = None
        if w.conn in ready or w.conn.poll():
            try:
                message = msgspec.msgpack.decode(w.conn.recv_bytes())
            except (EOFError, OSError):
                message = None
        if message is not None and message[0] == 0:
            return
        if message is not None:
            detail = message[2]
        elif w.process.sentinel in ready or not w.process.is_alive():
            w.process.join(timeout=5)
            detail = f"it exited at start-up (exit code {w.process.exitcode})"
        else:
            detail = f"no answer in {STARTUP:g} s"
        raise UsageError(f"--workers: a worker process could not start: {detail}. Worker processes import "
                         "the project and the program that started oloproof: run it from the command line "
                         "or a file, not from stdin")

    def _spawn(self) -> _Worker:
        w = self._launch()
        self._await_ready(w)
        return w

    def _submit(self, job: Job) -> None:
        self._pending.append(job)  # sent when the driver polls: it submits jobs in bursts

    def _dispatch(self) -> None:
        for w in self._workers:
            if w.batch or not self._pending:
                continue
            size = max(1, min(self.max_batch, len(self._pending) // (2 * self.n)))
            jobs = [self._pending.popleft() for _ in range(min(size, len(self._pending)))]
            w.batch.extend(jobs)
            w.started = time.monotonic()
            w.conn.send_bytes(msgspec.msgpack.encode(
                [[j.kind.ref, j.id, j.timeout, j.kind.encode_arg(j.arg)] for j in jobs]))

    def _poll(self, timeout: float | None) -> list[Done]:
        self._dispatch()
        if not self._ready:
            self._wait(timeout)
        out, self._ready = self._ready, []
        return out

    def _wait(self, timeout: float | None) -> None:
        busy = [w for w in self._workers if w.batch]
        if not busy:
            return
        now = time.monotonic()
        limits = [w.started + w.batch[0].limit(GRACE) for w in busy if w.batch[0].timeout is not None]
        wait_for = timeout
        if limits:
            wait_for = max(0.0, min(limits) - now) if wait_for is None else min(wait_for, max(0.0, min(limits) - now))
        handles = {}
        for w in busy:
            handles[w.conn] = w
            handles[w.process.sentinel] = w
        ready = multiprocessing.connection.wait(list(handles), timeout=wait_for)
        for w in {handles[h] for h in ready}:
            self._read(w)
        now = time.monotonic()
        for w in list(self._workers):
            if w.batch and not w.process.is_alive():
                self._read(w)  # what it sent before it died is a result, not a loss
                if w.batch:
                    self._lost(w, "worker_died", self._death(w))
            elif w.batch and w.batch[0].timeout is not None and now > w.started + w.batch[0].limit(GRACE):
                w.process.kill()
                w.process.join()
                self._lost(w, "case_timeout", f"the case overran its timeout of {w.batch[0].timeout:g} s "
                                              "and did not stop; its worker was killed")
        self._dispatch()

    def _read(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                job_id, ok, payload = msgspec.msgpack.decode(w.conn.recv_bytes())
                if job_id == -1:
                    raise RuntimeError(payload)
                job = w.batch.popleft()
                assert job.id == job_id, (job.id, job_id)
                w.started = time.monotonic()
                if ok:
                    self._ready.append(Done(job, job.kind.decode_result(payload)))
                else:
                    self._ready.append(Done(job, error=RuntimeError(f"in a worker process: {payload}")))
        except (EOFError, OSError):
            pass  # the worker died; its sentinel tells

    @staticmethod
    def _death(w: _Worker) -> str:
        w.process.join(timeout=1.0)
        code = w.process.exitcode
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"signal {-code}"
        return f"the worker process running this case died ({how}); a new worker took its place"

    def _lost(self, w: _Worker, kind: str, message: str) -> None:
        job = w.batch.popleft()
        self._ready.append(Done(job, job.kind.failed(job.arg, message, kind)))
        self._pending.extendleft(reversed(w.batch))  # the rest of its batch runs elsewhere
        w.batch.clear()
        try:
            w.conn.close()
        except OSError:
            pass
        self._workers[self._workers.index(w)] = self._spawn()

    def close(self, cancel: bool = False) -> None:
        for w in self._workers:
            try:
                if not w.batch:
                    w.conn.send_bytes(msgspec.msgpack.encode(None))
                w.conn.close()
            except OSError:
                pass
        deadline = time.monotonic() + (0.5 if cancel else 5.0)
        for w in self._workers:
            w.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        self._workers = []

    def describe(self) -> str:
        """``N worker processes``, one slot each."""
        return f"{self.n} worker processes"


def _start_method() -> str:
    """``fork`` where it is safe — Linux, and no other thread in the driver — so that workers
    start in milliseconds with the modules the driver already imported; ``spawn`` otherwise.
    (A forked worker never touches the driver's open log: it only runs jobs, and leaves with
    ``os._exit``, running no finalizer on what it inherited.)"""
    import threading

    if sys.platform.startswith("linux") and threading.active_count() == 1 and \
            "fork" in multiprocessing.get_all_start_methods():
        return "fork"
    return "spawn"


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity set where the OS has one, else every
    CPU, at least 1)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

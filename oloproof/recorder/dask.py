"""``--executor dask``: the same jobs on Dask ``distributed`` (SPEC §9). Optional: install
``oloproof[dask]``.

``--executor dask`` starts a ``LocalCluster`` of worker processes; ``--scheduler
tcp://HOST:PORT`` joins an existing cluster. The system factory travels as cloudpickle bytes
with each task, and is unpickled once per worker; each Dask task runs a batch of jobs on the
worker thread's own slot and returns their results as msgpack bytes. The driver stays the
only writer of the log.

A task that Dask retries (a worker lost for an unrelated reason) still returns each of its
cases once, and the driver commits a case once whatever it receives. A batch whose worker
died (``KilledWorker``) is split and its jobs run one per task, one such at a time; a job
whose own task loses its worker twice is the one that kills it and is recorded with ``worker_died`` (a job that
was only queued on a dying worker succeeds on a retry), and the others run normally. Remote workers must be
able to import the project's modules (same folder, or ``client.upload_file``).

Start-up is bounded: a scheduler that accepts the connection but never answers, or a
LocalCluster whose worker processes all die while they start, is an exit-2 error after at most
``OLOPROOF_DASK_TIMEOUT`` seconds (default 30); a LocalCluster that lost only some of its workers
while starting runs on the others.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import traceback
from collections import deque
from typing import Any

import msgspec

from oloproof.errors import ExecutorError, UsageError
from oloproof.recorder.executors import Executor
from oloproof.recorder.jobs import Done, Job, job_kind
from oloproof.system import SystemFactory, SystemSlot

MAX_BATCH = 128  # cases a Dask task: its scheduling costs milliseconds, a case microseconds
DEATHS = 2  # a job alone on its task (one such at a time) that loses its worker twice killed it
WORKERS_WAIT = 30.0  # seconds to wait for the scheduler's answer, for workers at start, and when all are gone
CONNECT_WAIT = 5.0  # seconds to retry a refused connection to the scheduler
TIMEOUT_VAR = "OLOPROOF_DASK_TIMEOUT"  # overrides WORKERS_WAIT
RESULT_WAIT = 600.0  # seconds to wait for a finished task's result (recomputed if its worker died)

_SLOTS = threading.local()
_ROOT: list[str | None] = [None]  # the project whose modules this worker process has loaded


def _use_project(root: str | None) -> None:
    """Make ``root``'s modules, as they are now on disk, the ones ``import`` finds: a
    long-lived worker may have run another project whose modules have the same names (every
    example has an ``app.py``), or this project's code before it was edited."""
    import sys
    from pathlib import Path

    previous = _ROOT[0]
    if previous:
        old = Path(previous).resolve()
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and not name.startswith("oloproof") and old in Path(file).resolve().parents:
                del sys.modules[name]
        if previous in sys.path:
            sys.path.remove(previous)
    if root:
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    _ROOT[0] = root


def _slot(root: str | None, digest: str, blob: bytes) -> list[Any]:  # on a worker
    cache = getattr(_SLOTS, "cache", None)
    if cache is None or getattr(_SLOTS, "root", None) != root:
        cache = _SLOTS.cache = {}
        _SLOTS.root = root
    if digest not in cache:
        import cloudpickle

        cache.clear()  # one system at a time per worker thread: the last one's slot goes
        _use_project(root)  # a new system (its code, its version): fresh modules
        factory = cloudpickle.loads(blob)
        cache[digest] = [factory, factory.make_slot()]
    return cache[digest]


def probe(root: str | None, blob: bytes) -> str | None:  # on every worker, before the run
    """Can this worker make the system? None, or what went wrong."""
    import cloudpickle

    try:
        _use_project(root)
        cloudpickle.loads(blob).make_slot()
    except BaseException as e:  # noqa: BLE001 - sys.exit() at import included: a message, not a dead worker
        return f"{type(e).__name__}: {e}"
    return None


def run_batch(root: str | None, digest: str, blob: bytes, batch: bytes) -> bytes:  # on a worker
    """Run a batch of jobs on this worker thread's slot; their results, msgpack-encoded."""
    entry = _slot(root, digest, blob)
    out = []
    for ref, job_id, timeout, arg in msgspec.msgpack.decode(batch):
        kind = job_kind(ref)
        factory, slot = entry
        try:
            out.append([job_id, True, kind.encode_result(kind.run(slot, kind.decode_arg(arg), timeout))])
        except BaseException as e:  # noqa: BLE001 - reported to the driver, never the end of the task
            out.append([job_id, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"])
        if slot.dead:
            entry[1] = factory.make_slot()
    return msgspec.msgpack.encode(out)


def wait_setting() -> float:
    """``WORKERS_WAIT``, or the seconds ``OLOPROOF_DASK_TIMEOUT`` sets."""
    raw = os.environ.get(TIMEOUT_VAR)
    if raw is None or not raw.strip():
        return WORKERS_WAIT
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # NaN included
        raise UsageError(f"{TIMEOUT_VAR}={raw!r}: a number of seconds, more than 0 and at most 3600")
    return value


def check_answers(address: str, wait: float) -> None:
    """Raise unless the scheduler at ``address`` completes Dask's handshake within ``wait``
    seconds. ``distributed``'s ``connect`` bounds the TCP connection but then waits for the
    handshake without a limit, so a port that accepts and never answers would hang the run."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect
    from distributed.security import Security

    async def hello() -> None:
        args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=min(CONNECT_WAIT, wait), **args), wait)
        await comm.close()

    with ThreadPoolExecutor(1) as pool:  # an event loop of its own: the caller may run one
        try:
            pool.submit(asyncio.run, hello()).result()
        except TimeoutError as e:  # asyncio's wait_for: connected, but no handshake
            raise TimeoutError(f"no answer within {wait:g} s; is it a Dask scheduler? "
                               f"{TIMEOUT_VAR} sets how long to wait") from e


class DaskExecutor(Executor):
    """``--executor dask`` (SPEC §9): batches of jobs as Dask tasks on a LocalCluster, or on
    the cluster at ``scheduler``. A batch whose worker died is split and its jobs rerun one
    per task; a job whose own task loses its worker twice is recorded as ``worker_died``."""

    remote = True

    def __init__(self, workers: int | None = None, scheduler: str | None = None, batch: int = MAX_BATCH):
        super().__init__()
        try:
            import distributed  # noqa: F401
        except ImportError as e:
            raise UsageError("--executor dask needs Dask distributed: pip install 'oloproof[dask]'") from e
        self.workers = workers
        self.scheduler = scheduler
        self.max_batch = max(1, batch)
        self.wait = wait_setting()
        self._pending: deque[tuple[Job, bool]] = deque()  # (job, must run alone)
        self._deaths: dict[int, int] = {}  # job id -> times its own task lost its worker
        self._suspect: Any = None  # the future of the one suspect job in flight
        self._solo: set[int] = set()  # jobs that run alone
        self._no_workers: float | None = None  # since when the cluster has had no worker
        self._futures: dict[Any, list[Job]] = {}
        self._ready: list[Done] = []
        self._client: Any = None
        self._cluster: Any = None
        self._n = workers or 1

    @property
    def capacity(self) -> int:
        return self._n * self.max_batch * 2

    def start(self, factory: SystemFactory, first_slot: SystemSlot | None = None) -> None:
        import dask
        from distributed import Client

        blob = factory.pickled()
        self._digest = hashlib.sha256(blob).hexdigest()
        self._root = factory.root
        # Dask's low-level message log keeps the last thousand messages — our batches of cases
        # among them — in the driver: off, so that a run's memory stays flat
        quiet = {"distributed.admin.low-level-log-length": 0,
                 # tasks wait at the scheduler rather than queue on a worker, so a worker that
                 # dies takes only the task it was running
                 "distributed.scheduler.worker-saturation": 1.0}
        if self.scheduler:
            try:
                with dask.config.set(quiet):
                    check_answers(self.scheduler, self.wait)
                    self._client = Client(self.scheduler, timeout=f"{self.wait}s")
            except Exception as e:  # refused, unresolvable, silent, a TLS address without certificates…
                raise UsageError(f"--scheduler {self.scheduler}: cannot reach a Dask scheduler ({e})") from e
        else:
            self._start_cluster(quiet)
        try:
            self._client.wait_for_workers(1, timeout=self.wait)
        except TimeoutError as e:
            raise UsageError(f"the Dask cluster at {self.scheduler or 'the LocalCluster'} has no worker "
                             f"(waited {self.wait:g} s)") from e
        # a worker that died since it joined answers with an exception: the others go on
        answers = self._client.run(probe, factory.root, blob, on_error="return")
        problems = {w: p for w, p in answers.items() if isinstance(p, str)}
        if problems:
            where, what = next(iter(problems.items()))
            raise UsageError(f"Dask worker {where} cannot make the system: {what} (the workers must be able "
                             "to import the project's modules: same folder, or client.upload_file)")
        info = self._client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()) or 1
        self._n = threads
        per_process = max((w.get("nthreads", 1) for w in info.get("workers", {}).values()), default=1)
        factory.check_slots(per_process)
        # sent with every task (a batch), not scattered: scattered data dies with the workers
        # that hold it, and surviving a dying worker is the point
        self._blob = blob

    def _start_cluster(self, quiet: dict[str, Any]) -> None:
        """A LocalCluster of ``--workers`` processes, started empty and then scaled: with
        ``n_workers=N`` one worker that dies while starting fails the whole cluster ("Nanny
        failed to start"), while scaled workers that die are only missing. The run goes on
        with the workers that started, and is refused (exit 2) when none did."""
        import time

        import dask
        from distributed import Client, LocalCluster
        from distributed.core import Status

        n = self.workers or 2
        try:
            # a worker that dies fails its task at once: the case it ran is recorded as
            # worker_died instead of killing three more workers on retries
            with dask.config.set({**quiet, "distributed.scheduler.allowed-failures": 0}):
                self._cluster = LocalCluster(n_workers=0, threads_per_worker=1, processes=True,
                                             dashboard_address=":0",
                                             silence_logs=logging.CRITICAL)  # we report dead workers ourselves
                self._client = Client(self._cluster, timeout=f"{self.wait}s")
                self._cluster.scale(n)
        except Exception as e:  # no free port, no scheduler, a worker spec Dask rejects…
            raise UsageError(f"could not start a Dask cluster: {type(e).__name__}: {e}") from e
        deadline = time.monotonic() + self.wait
        while True:
            up = len(self._client.scheduler_info().get("workers", {}))
            failed = sum(w.status == Status.failed for w in self._cluster.workers.values())
            if up + failed >= n or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if up == 0 and failed:
            raise UsageError(f"could not start a Dask cluster: {failed} of its {n} worker processes died while "
                             "starting (a worker preload, or the memory or processes this machine allows?)")

    def _submit(self, job: Job) -> None:
        self._pending.append((job, False))
        if len(self._pending) >= self.max_batch:
            self._flush(partial=False)

    def _flush(self, partial: bool = True) -> None:
        """Send the pending jobs as batches: full ones always, a partial one only while the
        workers would otherwise run short of work (a task costs milliseconds to schedule)."""
        while self._pending:
            if len(self._pending) < self.max_batch and not self._pending[0][1] and \
                    (not partial or len(self._futures) >= 2 * self._n):
                return
            if self._pending[0][1]:
                # a job whose batch lost its worker runs alone, and one such at a time: if its
                # worker dies, it is the one that killed it, not a bystander of another suspect
                if self._suspect is not None:
                    return
                jobs = [self._pending.popleft()[0]]
            else:
                size = max(1, min(self.max_batch, len(self._pending) // self._n))
                jobs = []
                while self._pending and len(jobs) < size and not self._pending[0][1]:
                    jobs.append(self._pending.popleft()[0])
            batch = msgspec.msgpack.encode([[j.kind.ref, j.id, j.timeout, j.kind.encode_arg(j.arg)] for j in jobs])
            future = self._client.submit(run_batch, self._root, self._digest, self._blob, batch, pure=False)
            self._futures[future] = jobs
            if len(jobs) == 1 and jobs[0].id in self._solo:
                self._suspect = future

    def _poll(self, timeout: float | None) -> list[Done]:
        from distributed import wait

        self._watch()
        self._flush()
        if not self._ready and self._futures:
            try:
                done, _ = wait(list(self._futures), timeout=timeout, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for future in done:
                if future is self._suspect:
                    self._suspect = None
                self._collect(future, self._futures.pop(future))
            self._flush()
        out, self._ready = self._ready, []
        return out

    def _collect(self, future: Any, jobs: list[Job]) -> None:
        from distributed.scheduler import KilledWorker

        try:
            # a result held only by a worker that died since is computed again: wait for it
            data = future.result(timeout=RESULT_WAIT)
        except KilledWorker:
            if len(jobs) > 1:  # find the case that kills its worker: each job on its own
                self._solo.update(j.id for j in jobs)
                self._pending.extendleft((j, True) for j in reversed(jobs))
                return
            job = jobs[0]
            deaths = self._deaths[job.id] = self._deaths.get(job.id, 0) + 1
            if deaths < DEATHS:  # it may only have been queued on the worker that died
                self._pending.appendleft((job, True))
                return
            del self._deaths[job.id]
            self._solo.discard(job.id)
            self._ready.append(Done(job, job.kind.failed(
                job.arg, f"the Dask worker running this case died ({deaths} times, on its own); "
                         "new workers took their place", "worker_died")))
            return
        except Exception as e:  # noqa: BLE001 - the cluster failed us (cancelled, unreachable): not a case's fault
            for job in jobs:
                self._ready.append(Done(job, error=e))
            return
        by_id = {j.id: j for j in jobs}
        for job_id, ok, payload in msgspec.msgpack.decode(data):
            job = by_id.pop(job_id)
            self._deaths.pop(job.id, None)
            self._solo.discard(job.id)
            if ok:
                self._ready.append(Done(job, job.kind.decode_result(payload)))
            else:
                self._ready.append(Done(job, error=RuntimeError(f"on a Dask worker: {payload}")))

    def _watch(self) -> None:
        """A cluster whose workers are all gone (they crash at start, the machines left)
        would leave the run waiting forever: stop it after a while, with a message."""
        if not self._futures:
            return
        import time

        if self._client.scheduler_info().get("workers"):
            self._no_workers = None
        elif self._no_workers is None:
            self._no_workers = time.monotonic()
        elif time.monotonic() - self._no_workers > self.wait:
            raise ExecutorError(f"the Dask cluster has had no worker for {self.wait:g} s; "
                                "the cases in flight were not recorded (resume the run later)")

    def close(self, cancel: bool = False) -> None:
        if self._client is not None:
            if cancel and self._futures:
                self._client.cancel(list(self._futures))
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def describe(self) -> str:
        """``dask (N worker threads on SCHEDULER)``, or ``… on a LocalCluster``."""
        where = self.scheduler or "a LocalCluster"
        return f"dask ({self._n} worker threads on {where})"

"""Executors: where jobs run. One protocol, four implementations.

======================= =======================================================================
``serial`` (default)    one slot, in the driver's thread, one job at a time
``concurrent`` (``N``)  N slots in the driver's process: ``async def`` systems as tasks on one
                        event loop, sync systems on a pool of N threads
``processes`` (``N``)   N worker processes, one slot each (:mod:`oloproof.recorder.processes`)
``dask``                Dask ``distributed`` workers (:mod:`oloproof.recorder.dask`)
======================= =======================================================================

Each is registered by name, with the command-line flags it takes, in
:mod:`oloproof.recorder.registry` (where a third-party executor registers too).

The driver submits :class:`~oloproof.recorder.jobs.Job` s and polls for
:class:`~oloproof.recorder.jobs.Done` ones, in whatever order they finish; it is the only
writer of the log. Every slot owns its own system object
(:meth:`oloproof.system.SystemFactory.make_slot`), so no two cases share a sandbox, and a slot
whose case overran its timeout is replaced.
"""

from __future__ import annotations

import abc
import queue
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

from oloproof.errors import ConfigError
from oloproof.recorder.case import install_task_factory
from oloproof.recorder.jobs import Done, Job
from oloproof.system import SystemFactory, SystemSlot

if TYPE_CHECKING:
    import asyncio

#: how long past a job's own timeout an executor waits before it gives the job up for lost
GRACE = 5.0


class Executor(abc.ABC):
    """Runs jobs on slots. Lifecycle: ``start(factory)``, then ``submit``/``poll`` while
    ``outstanding``, then ``close()``."""

    #: slots that share one process (a Stateful single object cannot be shared by several)
    slots_per_process = 1
    #: jobs run in other processes: work done there is taken off the driver
    remote = False

    def __init__(self) -> None:
        self.outstanding = 0

    @property
    @abc.abstractmethod
    def capacity(self) -> int:
        """How many jobs the driver keeps outstanding (in flight and queued) at most."""

    @abc.abstractmethod
    def start(self, factory: SystemFactory, first_slot: SystemSlot | None = None) -> None:
        """Make the slots. ``first_slot``, when given, is a slot the driver already made (to
        validate the system): an in-process executor uses it rather than make another."""

    def submit(self, job: Job) -> None:
        """Hand ``job`` to a slot (or queue it) and count it outstanding until :meth:`poll`
        returns it; the driver keeps at most :attr:`capacity` outstanding."""
        self.outstanding += 1
        self._submit(job)

    def poll(self, timeout: float | None = None) -> list[Done]:
        """Finished jobs; blocks up to ``timeout`` seconds (``None``: until one finishes)."""
        done = self._poll(timeout)
        self.outstanding -= len(done)
        return done

    @abc.abstractmethod
    def _submit(self, job: Job) -> None: ...

    @abc.abstractmethod
    def _poll(self, timeout: float | None) -> list[Done]: ...

    def close(self, cancel: bool = False) -> None:  # noqa: B027 - optional hook, does nothing by default
        """Release workers; ``cancel``: do not wait for jobs in flight (the run stops)."""

    def describe(self) -> str:
        """Where the run's jobs ran, as the run's summary names it (``serial``, ``4 worker
        processes``)."""
        return type(self).__name__


def run_job(slot: SystemSlot, job: Job) -> Any:
    """Run one job synchronously on ``slot`` (an ``async def`` system on this thread's loop)."""
    return job.kind.run(slot, job.arg, job.timeout)


class SerialExecutor(Executor):
    """One slot, the driver's own thread: a job runs when the driver polls for it."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[Job] = deque()
        self._slot: SystemSlot | None = None
        self._factory: SystemFactory | None = None

    @property
    def capacity(self) -> int:
        return 1

    def start(self, factory: SystemFactory, first_slot: SystemSlot | None = None) -> None:
        self._factory = factory
        self._slot = first_slot or factory.make_slot()

    def _submit(self, job: Job) -> None:
        self._queue.append(job)

    def _poll(self, timeout: float | None) -> list[Done]:
        if not self._queue:
            return []
        job = self._queue.popleft()
        slot = self._slot
        assert slot is not None and self._factory is not None
        try:
            result = run_job(slot, job)
        except Exception as e:  # noqa: BLE001 - Oloproof's own failure: the driver reports it
            return [Done(job, error=e)]
        if slot.dead:
            self._slot = self._factory.make_slot()
        return [Done(job, result)]

    def describe(self) -> str:
        """``serial``: one slot, in the driver's thread."""
        return "serial"


class ConcurrentExecutor(Executor):
    """N slots in this process. The jobs of an ``async def`` system are tasks on one event
    loop (in a background thread); a sync system's jobs run on a pool of N threads. Either
    way at most N jobs run at once, each on a slot of its own."""

    def __init__(self, concurrency: int):
        super().__init__()
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.n = concurrency
        self.slots_per_process = concurrency
        self._done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: _DaemonPool | None = None
        self._slots: asyncio.Queue[SystemSlot] | None = None
        self._factory: SystemFactory | None = None
        self._async = False

    @property
    def capacity(self) -> int:
        return self.n * 2

    def start(self, factory: SystemFactory, first_slot: SystemSlot | None = None) -> None:
        import asyncio

        self._factory = factory
        slots = [first_slot or factory.make_slot()]  # the others are made when first needed
        self._made = 1
        self._targets: set[int] = {id(slots[0].target)}
        self._keep: list[Any] = [slots[0].target]
        self._async = slots[0].is_async
        loop = self._loop = asyncio.new_event_loop()
        install_task_factory(loop)
        if not self._async:
            self._pool = _DaemonPool(self.n)
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            self._slots = asyncio.Queue()
            for s in slots:
                self._slots.put_nowait(s)
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=serve, name="oloproof-loop", daemon=True)
        self._thread.start()
        ready.wait()

    def _submit(self, job: Job) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._spawn, job)

    def _spawn(self, job: Job) -> None:
        import asyncio

        task = asyncio.ensure_future(self._run(job))  # no case is current here: not a branch
        def failed(t: asyncio.Future[None]) -> None:
            if not t.cancelled() and t.exception() is not None:
                self._done.put(Done(job, error=t.exception()))

        task.add_done_callback(failed)

    async def _run(self, job: Job) -> None:
        import asyncio

        assert self._slots is not None and self._factory is not None
        if self._slots.empty() and self._made < self.n:
            self._made += 1
            slot = self._new_slot()
        else:
            slot = await self._slots.get()
        try:
            if self._async:
                inner = asyncio.ensure_future(job.kind.arun(slot, job.arg, job.timeout))
            else:
                assert self._pool is not None  # made with the slots, for a sync system
                inner = self._pool.submit(asyncio.get_running_loop(), run_job, slot, job)
            finished, _ = await asyncio.wait({inner}, timeout=job.limit(GRACE))
            if not finished:  # the case ignored its cancellation: give it and its sandbox up
                slot.discard()
                self._done.put(Done(job, job.kind.failed(job.arg, f"the case overran its timeout of "
                                                         f"{job.timeout:g} s and did not stop", "case_timeout")))
                return
            try:
                self._done.put(Done(job, inner.result()))
            except Exception as e:  # noqa: BLE001 - worker boundary: handed to the driver, which reports it
                self._done.put(Done(job, error=e))
        finally:
            if slot.dead:
                slot = self._new_slot()
            self._slots.put_nowait(slot)

    def _new_slot(self) -> SystemSlot:
        """A slot with an object no other slot holds: a factory that hands out one object
        twice would let concurrent cases share a sandbox."""
        assert self._factory is not None
        slot = self._factory.make_slot()
        if self._factory.factory is not None and id(slot.target) in self._targets:
            raise ConfigError(f"system.factory {self._factory.factory_label or self._factory.label!r} returned an "
                              "object it had returned before; it must return a fresh object each call "
                              "(concurrent cases would share one sandbox)")
        self._targets.add(id(slot.target))
        self._keep.append(slot.target)  # alive, so that an id is never reused while compared
        return slot

    def _poll(self, timeout: float | None) -> list[Done]:
        if self.outstanding == 0:
            return []
        try:
            out = [self._done.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, cancel: bool = False) -> None:
        loop = self._loop
        if loop is None:
            return
        if cancel:
            import asyncio

            async def stop_all() -> None:  # cancel what runs, and let it unwind (briefly)
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                if tasks:
                    await asyncio.wait(tasks, timeout=2.0)

            try:
                asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout=3.0)
            except Exception:  # noqa: BLE001 - best-effort cancellation while closing
                pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=None if not cancel else 2.0)
        if self._pool is not None:
            self._pool.shutdown()
        if not loop.is_running():
            loop.close()
        self._loop = None

    def describe(self) -> str:
        """``concurrent (N tasks)`` for an ``async def`` system, ``concurrent (N threads)`` else."""
        return f"concurrent ({self.n} {'tasks' if self._async else 'threads'})"


class _DaemonPool:
    """N daemon threads running sync jobs for the event loop. Daemon threads, unlike a
    ``ThreadPoolExecutor``'s, do not hold the process at exit: a run that stops (Ctrl-C) does
    not wait for the cases still running in them."""

    def __init__(self, n: int):
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"oloproof-slot-{i}", daemon=True)
                         for i in range(n)]
        self._started = 0

    def submit(self, loop: Any, fn: Any, *args: Any) -> Any:
        if self._started < len(self._threads):  # threads start as work comes
            self._threads[self._started].start()
            self._started += 1
        future = loop.create_future()
        self._queue.put((loop, future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            loop, future, fn, args = item
            try:
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the loop's future
                result, error = None, e
            try:
                loop.call_soon_threadsafe(_settle_future, future, result, error)
            except RuntimeError:  # the loop is closed: the run stopped while this case ran
                return

    def shutdown(self) -> None:
        for _ in range(self._started):
            self._queue.put(None)


def _settle_future(future: Any, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

"""The main-process side of ``DataLoader(num_workers > 0)``: start workers, hand out work, yield batches in order.

Work goes out as ``(epoch, task, index)`` round-robin over the workers, at most
``prefetch_factor * num_workers`` ahead; answers come back on one queue, possibly out
of order, and wait in a buffer until their turn. An error in a worker is raised here,
naming the worker; a worker that dies, or a `timeout` that passes, raises RuntimeError.
Workers stop when the iterator is exhausted or garbage collected (kept across epochs
with ``persistent_workers=True``).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ...random import Generator, default_generator, philox_bits
from .worker import POLL_SECONDS, ExceptionWrapper, IterableStop, ResumeIteration, worker_loop

if TYPE_CHECKING:
    from .dataloader import DataLoader

JOIN_SECONDS = 1.0  # how long shutdown waits for workers to exit before terminating them


def draw_seed(generator: Generator | None) -> int:
    """A 63-bit seed for the workers, drawn from `generator` (or kiln's global stream)."""
    gen = generator if generator is not None else default_generator
    seed, offset = gen.take(2)
    hi, lo = (int(b) for b in philox_bits(np, seed, offset, 2))
    return ((hi << 32) | lo) & (2 ** 63 - 1)


class WorkerPool:
    """The worker processes and their queues; `shutdown` is safe to call more than once."""

    def __init__(self, loader: DataLoader, context: Any, base_seed: int):
        self.result_queue = context.Queue()
        self.done_event = context.Event()
        self.index_queues: list[Any] = []
        self.workers: list[Any] = []
        self.closed = False
        for worker_id in range(loader.num_workers):
            index_queue = context.Queue()
            index_queue.cancel_join_thread()
            worker = context.Process(
                target=worker_loop, daemon=True, name=f"kiln DataLoader worker {worker_id}",
                args=(loader._is_iterable, loader.dataset, index_queue, self.result_queue, self.done_event,
                      loader._auto_collation, loader.collate_fn, loader.batch_size, loader.drop_last,
                      base_seed, loader.worker_init_fn, worker_id, loader.num_workers, os.getpid()))
            worker.start()
            self.index_queues.append(index_queue)
            self.workers.append(worker)

    def dead_workers(self) -> list[str]:
        """A description of each worker that has exited."""
        out = []
        for worker_id, worker in enumerate(self.workers):
            if not worker.is_alive():
                code = worker.exitcode
                how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                       else f"exit code {code}")
                out.append(f"worker {worker_id} (pid {worker.pid}, {how})")
        return out

    def shutdown(self) -> None:
        """Tell every worker to stop, wait for it (terminating stragglers), and close the queues."""
        if self.closed:
            return
        self.closed = True
        self.done_event.set()
        for index_queue in self.index_queues:
            try:
                index_queue.put(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + JOIN_SECONDS
        for worker in self.workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.is_alive():
                worker.terminate()
                worker.join()
        for q in [*self.index_queues, self.result_queue]:
            q.cancel_join_thread()
            q.close()


class MultiProcessIterator:
    """One pass over a DataLoader with worker processes; `reset` starts the next epoch on the same workers."""

    def __init__(self, loader: DataLoader):
        self._num_workers = loader.num_workers
        self._prefetch = loader.prefetch_factor * loader.num_workers
        self._timeout = loader.timeout
        self._persistent = loader.persistent_workers
        self._is_iterable = loader._is_iterable
        self._pool = WorkerPool(loader, loader._mp_context(), draw_seed(loader.generator))
        weakref.finalize(self, self._pool.shutdown)
        self._epoch = -1
        self.reset(loader, first=True)

    def reset(self, loader: DataLoader, first: bool = False) -> None:
        """Start an epoch: a fresh pass over the sampler; answers to older requests are dropped."""
        if not first:
            draw_seed(loader.generator)  # as a new iterator would: the shuffle order matches num_workers=0
        self._epoch += 1
        self._sampler_iter = iter(loader._index_sampler)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._tasks: dict[int, list[Any]] = {}  # task -> [worker] or [worker, data]
        self._outstanding = 0
        self._active = [True] * self._num_workers
        self._next_worker = 0
        if not first and self._is_iterable:
            for index_queue in self._pool.index_queues:
                index_queue.put(ResumeIteration(self._epoch))
        for _ in range(self._prefetch):
            self._send_next()

    def __iter__(self) -> MultiProcessIterator:
        return self

    def _send_next(self) -> None:
        if self._outstanding >= self._prefetch or not any(self._active) or self._pool.closed:
            return
        try:
            index = next(self._sampler_iter)
        except StopIteration:
            return
        while not self._active[self._next_worker]:
            self._next_worker = (self._next_worker + 1) % self._num_workers
        worker_id = self._next_worker
        self._next_worker = (worker_id + 1) % self._num_workers
        self._pool.index_queues[worker_id].put((self._epoch, self._send_idx, index))
        self._tasks[self._send_idx] = [worker_id]
        self._outstanding += 1
        self._send_idx += 1

    def __next__(self) -> Any:
        while True:
            while self._rcvd_idx < self._send_idx:
                entry = self._tasks[self._rcvd_idx]
                if len(entry) == 2 or self._active[entry[0]]:
                    break
                del self._tasks[self._rcvd_idx]  # sent to a worker whose stream ended: no answer comes
                self._rcvd_idx += 1
            else:
                if not self._persistent:
                    self._pool.shutdown()
                raise StopIteration
            entry = self._tasks[self._rcvd_idx]
            if len(entry) == 2:
                del self._tasks[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._deliver(entry[1])
            epoch, task, payload = self._receive()
            if epoch != self._epoch:
                continue
            self._outstanding -= 1
            data = pickle.loads(payload)
            if isinstance(data, IterableStop):
                self._retire(data.worker_id, task)
                self._send_next()
                continue
            if task == self._rcvd_idx:
                del self._tasks[task]
                self._rcvd_idx += 1
                return self._deliver(data)
            self._tasks[task].append(data)

    def _retire(self, worker_id: int, stop_task: int) -> None:
        """A worker's stream ended: the requests it still holds will not be answered."""
        self._active[worker_id] = False
        self._outstanding -= sum(1 for t, entry in self._tasks.items()
                                 if t != stop_task and len(entry) == 1 and entry[0] == worker_id)

    def _deliver(self, data: Any) -> Any:
        self._send_next()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    def _receive(self) -> tuple[int, int, bytes]:
        deadline = time.monotonic() + self._timeout if self._timeout > 0 else None
        while True:
            wait = POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - time.monotonic()))
            try:
                return self._pool.result_queue.get(timeout=wait)
            except queue.Empty:
                pass
            dead = self._pool.dead_workers()
            if dead:
                self._pool.shutdown()
                raise RuntimeError(f"DataLoader {', '.join(dead)} exited unexpectedly. A worker killed by "
                                   "SIGKILL often ran out of memory: try fewer num_workers or a smaller "
                                   "batch_size; run with num_workers=0 to see the error in this process")
            if deadline is not None and time.monotonic() >= deadline:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds waiting for a batch from "
                                   "its workers; raise timeout= (or 0 to wait forever) or make the dataset faster")

    def shutdown(self) -> None:
        """Stop the workers now (also done when the iterator is exhausted or garbage collected)."""
        self._pool.shutdown()


def start_method_context(method: Any) -> Any:
    """A multiprocessing context from a start-method name, a context, or None (the platform's default)."""
    if method is None:
        return multiprocessing.get_context()
    if isinstance(method, str):
        methods = multiprocessing.get_all_start_methods()
        if method not in methods:
            raise ValueError(f"DataLoader: multiprocessing_context={method!r} is not a start method here; "
                             f"expected one of {methods}")
        return multiprocessing.get_context(method)
    if hasattr(method, "Process") and hasattr(method, "Queue"):
        return method
    raise TypeError(f"DataLoader: multiprocessing_context must be a start-method name or a multiprocessing "
                    f"context, got {type(method).__name__}")

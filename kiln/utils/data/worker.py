"""DataLoader worker processes: the loop each one runs, what it knows (`get_worker_info`), how errors travel.

Everything a worker needs comes in through its arguments (the dataset, collate function,
seeds, queues), so the loop works under every start method, ``spawn`` included: the
dataset and functions only need to be picklable (defined at module level).
"""
from __future__ import annotations

import os
import pickle
import queue
import random
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import numpy as np
import numpy.random  # noqa: F401 - imported before any fork: a child must not import it while another thread holds import locks

from .fetch import IterableFetcher, MapFetcher

POLL_SECONDS = 0.5  # how often a waiting worker (or main process) checks that the other side lives


@dataclass(frozen=True)
class WorkerInfo:
    """What a DataLoader worker process knows about itself: `id`, `num_workers`, `seed` and its `dataset` copy."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, its `WorkerInfo`; in the main process, None.

    Use it in an IterableDataset's ``__iter__`` to give each worker its own share of the stream:

    >>> info = kiln.utils.data.get_worker_info()
    >>> start = 0 if info is None else info.id
    """
    return _worker_info


class _KeyErrorMessage(str):
    """A KeyError's message shown as written (KeyError would otherwise print its repr)."""

    def __repr__(self) -> str:
        return str(self)


class ExceptionWrapper:
    """An exception raised in a worker, carried to the main process and raised there with its traceback."""

    def __init__(self, exc: BaseException, where: str):
        exc_type: type = type(exc)
        try:
            pickle.loads(pickle.dumps(exc_type))
        except Exception:  # noqa: BLE001 - a local exception class can't cross processes
            exc_type = RuntimeError
        self.exc_type = exc_type
        self.exc_name = type(exc).__name__
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.where = where

    def reraise(self) -> None:
        """Raise the worker's exception type, with a message naming the worker and the original traceback."""
        message = f"Caught {self.exc_name} {self.where}.\nOriginal {self.traceback}"
        if self.exc_type is KeyError:
            message = _KeyErrorMessage(message)
        try:
            exc = self.exc_type(message)
        except Exception:  # noqa: BLE001 - types whose constructor wants other arguments
            raise RuntimeError(message) from None
        raise exc


@dataclass(frozen=True)
class ResumeIteration:
    """Sent to persistent workers of an IterableDataset at a new epoch: restart the stream."""

    epoch: int


@dataclass(frozen=True)
class IterableStop:
    """A worker's answer when its copy of an IterableDataset is exhausted."""

    worker_id: int


def seed_worker(seed: int, worker_id: int) -> None:
    """Seed kiln's global stream, Python's `random` and NumPy's legacy global RNG for one worker."""
    from ...random import manual_seed  # noqa: PLC0415

    manual_seed(seed)
    random.seed(seed)
    np.random.seed(np.random.SeedSequence([worker_id, seed]).generate_state(4))


def dumps(data: Any, worker_id: int) -> bytes:
    """`data` pickled for the result queue; an unpicklable batch becomes an error naming the worker."""
    try:
        return bytes(ForkingPickler.dumps(data))
    except Exception as exc:  # noqa: BLE001
        wrapped = ExceptionWrapper(exc, f"in DataLoader worker process {worker_id} while sending a batch "
                                        "(the batch must be picklable)")
        return bytes(ForkingPickler.dumps(wrapped))


def worker_loop(is_iterable: bool, dataset: Any, index_queue: Any, result_queue: Any, done_event: Any,
                auto_collation: bool, collate_fn: Callable[[Any], Any], batch_size: int | None, drop_last: bool,
                base_seed: int, init_fn: Callable[[int], None] | None, worker_id: int, num_workers: int,
                parent_pid: int) -> None:
    """Serve fetch requests ``(epoch, task, index)`` from `index_queue` until told to stop (None).

    Each answer ``(epoch, task, pickled batch)`` goes to `result_queue`; an exception in
    `init_fn` or a fetch is sent instead of the batch, wrapped with the worker's id.
    """
    global _worker_info
    try:
        seed = base_seed + worker_id
        seed_worker(seed, worker_id)
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)

        def make_fetcher() -> Any:
            if is_iterable:
                return IterableFetcher(dataset, auto_collation, collate_fn, batch_size, drop_last)
            return MapFetcher(dataset, auto_collation, collate_fn)

        init_error: ExceptionWrapper | None = None
        fetcher = None
        try:
            if init_fn is not None:
                init_fn(worker_id)
            fetcher = make_fetcher()
        except Exception as exc:  # noqa: BLE001 - reported with the first request
            init_error = ExceptionWrapper(exc, f"in DataLoader worker process {worker_id}")
        ended = False
        while True:
            try:
                request = index_queue.get(timeout=POLL_SECONDS)
            except queue.Empty:
                if done_event.is_set() or os.getppid() != parent_pid:
                    break
                continue
            if request is None:
                break
            if isinstance(request, ResumeIteration):
                if init_error is None:
                    try:
                        fetcher = make_fetcher()
                    except Exception as exc:  # noqa: BLE001
                        init_error = ExceptionWrapper(exc, f"in DataLoader worker process {worker_id}")
                ended = False
                continue
            if done_event.is_set() or ended:
                continue
            epoch, task, index = request
            data: Any
            if init_error is not None:
                data, init_error = init_error, None
            else:
                try:
                    data = fetcher.fetch(index)
                except StopIteration:
                    if not is_iterable:
                        data = ExceptionWrapper(RuntimeError("dataset raised StopIteration"),
                                                f"in DataLoader worker process {worker_id}")
                    else:
                        data, ended = IterableStop(worker_id), True
                except Exception as exc:  # noqa: BLE001 - carried to the main process
                    data = ExceptionWrapper(exc, f"in DataLoader worker process {worker_id}")
            result_queue.put((epoch, task, dumps(data, worker_id)))
            del data
    except KeyboardInterrupt:
        pass
    if done_event.is_set():
        result_queue.cancel_join_thread()
        result_queue.close()
    sys.stdout.flush()

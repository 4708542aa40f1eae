"""Picklable datasets and functions for the DataLoader worker tests (spawned workers import this module)."""
from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import numpy as np

import kiln
from kiln.utils.data import Dataset, IterableDataset, get_worker_info


def worker_context():
    """The start method for the worker tests: forkserver with kiln and this module preloaded.

    Workers fork from a fresh single-threaded server, never from the test process, which may
    run threads (BLAS, or JAX imported by other tests: forking a threaded process can deadlock);
    the preload keeps starting a worker fast.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["kiln", __name__])
    return context


class Rows(Dataset):
    """Sample i is (float32 row [i, 2i], int i): deterministic, so any loader can be checked against it."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return np.array([i, 2 * i], dtype=np.float32), i


class WhoLoads(Dataset):
    """Sample i is (i, pid of the loading process, the worker's tag set by `tag_worker`)."""

    tag = -1

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        info = get_worker_info()
        return i, os.getpid(), self.tag, -1 if info is None else info.id


def tag_worker(worker_id: int) -> None:
    """worker_init_fn: mark this worker's copy of the dataset with 100 + its id."""
    get_worker_info().dataset.tag = 100 + worker_id


def failing_init(worker_id: int) -> None:
    raise OSError(f"cannot open the shard of worker {worker_id}")


class FailsAt(Dataset):
    """Raises ValueError for sample `bad`."""

    def __init__(self, n: int, bad: int):
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return i


class Draws(Dataset):
    """Sample i is draws from Python's random, NumPy's global RNG and kiln's global stream."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return random.random(), float(np.random.rand()), kiln.rand(()).item()


class Counting(IterableDataset):
    """0..n-1, split between workers by get_worker_info (each worker yields every num_workers-th item)."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))

    def __len__(self) -> int:
        return self.n


class Slow(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        time.sleep(2)
        return i


class Dies(Dataset):
    """The worker that loads sample 1 is killed."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        if i == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


class Unpicklable(Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        return i


def collate_lambda_result(samples):
    """A collate function whose batch can't be pickled back to the main process."""
    return lambda: samples

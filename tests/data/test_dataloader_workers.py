"""DataLoader with worker processes: same batches in the same order as in-process, errors, seeds, shutdown."""
from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import kiln
from kiln.utils.data import DataLoader, TensorDataset
from loader_worker_datasets import (Counting, Dies, Draws, FailsAt, Rows, Slow, WhoLoads,
                                    collate_lambda_result, failing_init, tag_worker, worker_context)

FORK = worker_context()  # forkserver: workers never fork this (possibly multithreaded) test process


def _batches(loader: DataLoader) -> list:
    return [(x.numpy().copy(), y.numpy().copy()) for x, y in loader]


def _assert_same_batches(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


@pytest.mark.parametrize("num_workers", [1, 3])
def test_workers_give_the_batches_of_the_main_process_in_order(num_workers: int) -> None:
    def make(workers: int) -> DataLoader:
        return DataLoader(Rows(37), batch_size=4, shuffle=True, generator=kiln.Generator(5), drop_last=False,
                          num_workers=workers, multiprocessing_context=FORK if workers else None,
                          prefetch_factor=3 if workers else None)

    _assert_same_batches(_batches(make(0)), _batches(make(num_workers)))


def test_a_tensor_dataset_with_workers_collates_labels_to_one_dimension() -> None:
    ds = TensorDataset(kiln.randn(10, 3), kiln.arange(10))
    x, y = next(iter(DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=FORK)))
    assert tuple(x.shape) == (4, 3) and tuple(y.shape) == (4,) and y.tolist() == [0, 1, 2, 3]


def test_spawned_workers_load_the_same_batches() -> None:
    """spawn re-imports everything in the worker: the loader's arguments must travel by pickle."""
    loader = DataLoader(Rows(10), batch_size=3, num_workers=2, multiprocessing_context="spawn")
    _assert_same_batches(_batches(DataLoader(Rows(10), batch_size=3)), _batches(loader))


def test_batches_are_loaded_in_worker_processes_round_robin() -> None:
    loader = DataLoader(WhoLoads(12), batch_size=2, num_workers=3, multiprocessing_context=FORK,
                        worker_init_fn=tag_worker)
    batches = list(loader)
    assert [b[0].tolist() for b in batches] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    pids = [set(b[1].tolist()) for b in batches]
    assert all(len(p) == 1 for p in pids) and os.getpid() not in set.union(*pids)
    assert len(set.union(*pids)) == 3
    assert [b[3].tolist() for b in batches] == [[w, w] for w in (0, 1, 2, 0, 1, 2)]
    assert [b[2].tolist() for b in batches] == [[100 + w] * 2 for w in (0, 1, 2, 0, 1, 2)]  # worker_init_fn ran


def test_an_error_in_a_worker_is_raised_with_its_type_naming_the_worker() -> None:
    loader = DataLoader(FailsAt(8, bad=5), batch_size=2, num_workers=2, multiprocessing_context=FORK)
    it = iter(loader)
    assert next(it).tolist() == [0, 1] and next(it).tolist() == [2, 3]
    with pytest.raises(ValueError, match=r"(?s)Caught ValueError in DataLoader worker process 0.*sample 5 is corrupt"):
        next(it)
    assert next(it).tolist() == [6, 7]  # the batches after the bad one still come


def test_an_error_in_worker_init_fn_is_raised_in_the_main_process() -> None:
    loader = DataLoader(Rows(4), batch_size=2, num_workers=2, multiprocessing_context=FORK,
                        worker_init_fn=failing_init)
    with pytest.raises(OSError, match="worker process 0.*(?s:.*)cannot open the shard of worker 0"):
        list(loader)


def test_an_unpicklable_batch_is_an_error_naming_the_worker() -> None:
    loader = DataLoader(Rows(2), batch_size=1, num_workers=1, multiprocessing_context=FORK,
                        collate_fn=collate_lambda_result)
    with pytest.raises(Exception, match="worker process 0 while sending a batch"):
        list(loader)


def test_workers_get_different_seeds_reproducible_from_the_generator() -> None:
    def draws(seed: int) -> np.ndarray:
        loader = DataLoader(Draws(), batch_size=4, num_workers=2, multiprocessing_context=FORK,
                            generator=kiln.Generator(seed))
        return np.stack([np.stack([f.numpy() for f in batch]) for batch in loader])

    a, b, c = draws(1), draws(1), draws(2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # worker 0 loads batch 0, worker 1 batch 1: every source of randomness differs between them
    for source in range(3):
        assert not np.array_equal(a[0, source], a[1, source])


def test_iterable_dataset_split_between_workers() -> None:
    loader = DataLoader(Counting(10), batch_size=2, num_workers=2, multiprocessing_context=FORK)
    items = sorted(i for batch in loader for i in batch.tolist())
    assert items == list(range(10))
    assert len(loader) == 5


def test_iterable_dataset_with_drop_last_and_without_batching() -> None:
    in_process = [b.tolist() for b in DataLoader(Counting(7), batch_size=3, drop_last=True)]
    assert in_process == [[0, 1, 2], [3, 4, 5]]
    single = [int(x) for x in DataLoader(Counting(5), batch_size=None, num_workers=2, multiprocessing_context=FORK)]
    assert sorted(single) == [0, 1, 2, 3, 4]


def test_workers_stop_after_the_epoch() -> None:
    it = iter(DataLoader(Rows(6), batch_size=2, num_workers=2, multiprocessing_context=FORK))
    workers = list(it._pool.workers)
    assert all(w.is_alive() for w in workers)
    list(it)
    assert not any(w.is_alive() for w in workers)


def test_workers_stop_when_the_loop_is_left_early() -> None:
    it = iter(DataLoader(Rows(40), batch_size=2, num_workers=2, multiprocessing_context=FORK))
    next(it)
    workers = list(it._pool.workers)
    del it
    gc.collect()
    assert not any(w.is_alive() for w in workers)


def test_persistent_workers_live_across_epochs() -> None:
    loader = DataLoader(WhoLoads(6), batch_size=2, num_workers=2, multiprocessing_context=FORK,
                        persistent_workers=True)
    first = [tuple(b[0].tolist()) for b in loader]
    pids_1 = {p for b in loader for p in b[1].tolist()}
    early = iter(loader)
    next(early)  # leave an epoch half done: its pending batches must not leak into the next
    second = [tuple(b[0].tolist()) for b in loader]
    pids_2 = {p for b in loader for p in b[1].tolist()}
    assert first == second == [(0, 1), (2, 3), (4, 5)]
    assert pids_1 == pids_2 and len(pids_1) == 2
    workers = loader._iterator._pool.workers
    assert all(w.is_alive() for w in workers)
    loader._iterator.shutdown()
    assert not any(w.is_alive() for w in workers)


def test_persistent_workers_restart_an_iterable_dataset_each_epoch() -> None:
    loader = DataLoader(Counting(6), batch_size=2, num_workers=2, multiprocessing_context=FORK,
                        persistent_workers=True)
    for _ in range(2):
        assert sorted(i for b in loader for i in b.tolist()) == list(range(6))
    loader._iterator.shutdown()


def test_timeout_raises_a_runtime_error() -> None:
    loader = DataLoader(Slow(), batch_size=1, num_workers=1, multiprocessing_context=FORK, timeout=0.2)
    with pytest.raises(RuntimeError, match="timed out after 0.2 seconds"):
        next(iter(loader))


def test_a_killed_worker_is_reported() -> None:
    loader = DataLoader(Dies(), batch_size=1, num_workers=2, multiprocessing_context=FORK)
    with pytest.raises(RuntimeError, match=r"worker 1 \(pid \d+, killed by signal SIGKILL\) exited unexpectedly"):
        list(loader)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_workers=-1), "num_workers"),
    (dict(num_workers=0, prefetch_factor=2), "prefetch_factor"),
    (dict(num_workers=2, prefetch_factor=0), "prefetch_factor"),
    (dict(persistent_workers=True), "persistent_workers"),
    (dict(timeout=-1), "timeout"),
    (dict(num_workers=1, multiprocessing_context="no-such-method"), "start method"),
    (dict(multiprocessing_context="spawn"), "num_workers > 0"),
])
def test_bad_worker_options_raise_value_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DataLoader(Rows(4), **kwargs)


def test_pin_memory_is_accepted_and_changes_nothing() -> None:
    with pytest.warns(UserWarning, match="pin_memory"):  # PyTorch's warnings: no accelerator, device deprecated
        a = _batches(DataLoader(Rows(5), batch_size=2, pin_memory=True, pin_memory_device="cpu"))
    _assert_same_batches(a, _batches(DataLoader(Rows(5), batch_size=2)))


def test_compiled_training_on_worker_batches_equals_eager_in_process() -> None:
    def train(num_workers: int, compiled: bool) -> list[float]:
        kiln.manual_seed(0)
        model = kiln.nn.Sequential(kiln.nn.Linear(2, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 1))
        opt = kiln.optim.SGD(model.parameters(), lr=0.01)
        run = kiln.compile(model) if compiled else model
        loader = DataLoader(Rows(24), batch_size=6, shuffle=True, generator=kiln.Generator(3), num_workers=num_workers,
                            multiprocessing_context=FORK if num_workers else None)
        losses = []
        for _ in range(2):
            for x, y in loader:
                opt.zero_grad()
                loss = ((run(x / 24.0).reshape(-1) - y.float() / 24.0) ** 2).mean()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    np.testing.assert_allclose(train(2, True), train(0, False), rtol=1e-6)

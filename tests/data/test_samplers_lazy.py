"""Samplers with replacement draw lazily: a huge num_samples ("iterate forever") costs nothing up front.

minGPT and makemore build ``RandomSampler(ds, replacement=True, num_samples=int(1e10))``; drawing
every index at the start grew the process until the OS killed it.
"""
from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

import kiln
from kiln.utils.data import DataLoader, RandomSampler, TensorDataset, WeightedRandomSampler
from kiln.utils.data import sampler as sampler_module

HUGE = int(1e10)


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("make", [
    lambda: RandomSampler(range(10), replacement=True, num_samples=HUGE, generator=kiln.Generator(0)),
    lambda: WeightedRandomSampler([1.0, 2.0, 3.0], num_samples=HUGE, generator=kiln.Generator(0)),
], ids=["random", "weighted"])
def test_first_indices_of_a_huge_sampler_cost_little_memory(make) -> None:
    sampler = make()
    assert len(sampler) == HUGE
    firsts: list[int] = []
    peak = _peak_bytes(lambda: firsts.extend(itertools.islice(iter(sampler), 100)))
    assert len(firsts) == 100 and all(isinstance(i, int) for i in firsts)
    assert peak < 8 * 1024 * 1024  # one chunk, not 10**10 float64 draws (80 GB)


def test_dataloader_over_a_huge_random_sampler_starts_at_once() -> None:
    ds = TensorDataset(kiln.arange(50))
    loader = DataLoader(ds, sampler=RandomSampler(ds, replacement=True, num_samples=HUGE), batch_size=4)
    assert len(loader) == HUGE // 4
    (batch,) = next(iter(loader))
    assert tuple(batch.shape) == (4,) and 0 <= int(batch.min()) and int(batch.max()) < 50


def _one_shot(num_samples: int, n: int, seed: int) -> list[int]:
    """What RandomSampler drew before it drew lazily: every index from one draw."""
    u = kiln.rand(num_samples, dtype="float64", generator=kiln.Generator(seed)).numpy()
    return np.minimum(np.floor(u * n).astype(np.int64), n - 1).tolist()


@pytest.mark.parametrize("num_samples", [1, 3, sampler_module.DRAW_CHUNK - 1, sampler_module.DRAW_CHUNK,
                                         2 * sampler_module.DRAW_CHUNK + 5])
def test_lazy_draws_equal_the_one_shot_draw(num_samples: int) -> None:
    got = list(RandomSampler(range(7), replacement=True, num_samples=num_samples, generator=kiln.Generator(4)))
    assert got == _one_shot(num_samples, 7, 4)


def test_generator_advances_as_one_draw_would() -> None:
    lazy, eager = kiln.Generator(9), kiln.Generator(9)
    it = iter(RandomSampler(range(5), replacement=True, num_samples=3 * sampler_module.DRAW_CHUNK + 2,
                            generator=lazy))
    next(it)  # the whole epoch's stream positions are reserved at the first index
    kiln.rand(3 * sampler_module.DRAW_CHUNK + 2, generator=eager)
    assert lazy.get_state() == eager.get_state()


def test_global_stream_draws_do_not_interleave_with_an_epoch() -> None:
    """Other draws from the global stream during an epoch do not change the epoch's indices."""
    num_samples = 2 * sampler_module.DRAW_CHUNK + 1
    kiln.manual_seed(3)
    quiet = list(RandomSampler(range(11), replacement=True, num_samples=num_samples))
    kiln.manual_seed(3)
    busy = []
    for i, index in enumerate(RandomSampler(range(11), replacement=True, num_samples=num_samples)):
        busy.append(index)
        if i % 1000 == 0:
            kiln.rand(3)  # dropout, say
    assert busy == quiet


def test_weighted_lazy_draws_follow_the_weights() -> None:
    out = np.array(list(WeightedRandomSampler([1.0, 0.0, 3.0], num_samples=3 * sampler_module.DRAW_CHUNK,
                                              generator=kiln.Generator(1))))
    counts = np.bincount(out, minlength=3) / out.size
    assert counts[1] == 0
    assert abs(counts[2] - 0.75) < 0.02

"""Samplers: the indices PyTorch's samplers give where those are deterministic, distributions where random."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.utils.data import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                             WeightedRandomSampler)

torch = pytest.importorskip("torch")
tud = torch.utils.data


def test_sequential_sampler_matches_torch() -> None:
    assert list(SequentialSampler(range(7))) == list(tud.SequentialSampler(range(7)))
    assert len(SequentialSampler(range(7))) == 7


@pytest.mark.parametrize("n, batch_size, drop_last", [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False)])
def test_batch_sampler_matches_torch(n: int, batch_size: int, drop_last: bool) -> None:
    ours = BatchSampler(SequentialSampler(range(n)), batch_size, drop_last)
    theirs = tud.BatchSampler(tud.SequentialSampler(range(n)), batch_size, drop_last)
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs)


def test_batch_sampler_takes_any_iterable_of_indices() -> None:
    assert list(BatchSampler([5, 3, 9, 1], batch_size=3, drop_last=False)) == [[5, 3, 9], [1]]


def test_random_sampler_permutes_each_epoch_reproducibly() -> None:
    sampler = RandomSampler(range(20), generator=kiln.Generator(0))
    first, second = list(sampler), list(sampler)
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second and first != list(range(20))
    assert list(RandomSampler(range(20), generator=kiln.Generator(0))) == first
    kiln.manual_seed(3)
    a = list(RandomSampler(range(20)))
    kiln.manual_seed(3)
    assert list(RandomSampler(range(20))) == a


def test_random_sampler_num_samples_beyond_the_dataset_repeats_whole_permutations() -> None:
    out = list(RandomSampler(range(4), num_samples=10, generator=kiln.Generator(1)))
    assert len(out) == 10
    assert sorted(out[:4]) == sorted(out[4:8]) == [0, 1, 2, 3] and len(set(out[8:])) == 2


def test_random_sampler_with_replacement_is_uniform() -> None:
    out = np.array(list(RandomSampler(range(5), replacement=True, num_samples=20000, generator=kiln.Generator(2))))
    counts = np.bincount(out, minlength=5)
    assert out.min() == 0 and out.max() == 4
    np.testing.assert_allclose(counts / 20000, 0.2, atol=0.015)


def test_subset_random_sampler_permutes_the_given_indices() -> None:
    indices = [10, 20, 30, 40, 50]
    out = list(SubsetRandomSampler(indices, generator=kiln.Generator(4)))
    assert sorted(out) == indices and len(SubsetRandomSampler(indices)) == 5


def test_weighted_sampler_follows_the_weights() -> None:
    weights = [0.0, 1.0, 3.0, 6.0]
    out = np.array(list(WeightedRandomSampler(weights, 40000, generator=kiln.Generator(5))))
    np.testing.assert_allclose(np.bincount(out, minlength=4) / 40000, [0.0, 0.1, 0.3, 0.6], atol=0.01)
    # the same draw frequencies as PyTorch's, which samples by torch.multinomial
    theirs = np.array(list(tud.WeightedRandomSampler(weights, 40000, generator=torch.Generator().manual_seed(0))))
    np.testing.assert_allclose(np.bincount(out, minlength=4) / 40000, np.bincount(theirs, minlength=4) / 40000,
                               atol=0.015)


def test_weighted_sampler_without_replacement_never_repeats_and_skips_zero_weights() -> None:
    for seed in range(20):
        out = list(WeightedRandomSampler([1.0, 0.0, 5.0, 2.0, 0.5], 4, replacement=False,
                                         generator=kiln.Generator(seed)))
        assert len(set(out)) == 4 and 1 not in out
    firsts = [list(WeightedRandomSampler([1.0, 100.0], 1, replacement=False, generator=kiln.Generator(s)))[0]
              for s in range(200)]
    assert firsts.count(1) > 190


def test_a_custom_sampler_drives_the_loader() -> None:
    class Evens(Sampler):
        def __init__(self, n: int):
            self.n = n

        def __iter__(self):
            return iter(range(0, self.n, 2))

        def __len__(self) -> int:
            return (self.n + 1) // 2

    loader = kiln.utils.data.DataLoader(list(range(10)), batch_size=2, sampler=Evens(10))
    assert [b.tolist() for b in loader] == [[0, 2], [4, 6], [8]]
    assert len(loader) == 3


@pytest.mark.parametrize("make, exc, message", [
    (lambda: BatchSampler(range(3), batch_size=0, drop_last=False), ValueError, "batch_size"),
    (lambda: BatchSampler(range(3), batch_size=True, drop_last=False), ValueError, "batch_size"),
    (lambda: BatchSampler(range(3), batch_size=2, drop_last=1), ValueError, "drop_last"),
    (lambda: RandomSampler(range(3), replacement=1), TypeError, "replacement"),
    (lambda: RandomSampler(range(3), num_samples=0), ValueError, "num_samples"),
    (lambda: RandomSampler(range(3), generator=np.random.default_rng()), TypeError, "kiln.Generator"),
    (lambda: WeightedRandomSampler([1.0, -1.0], 2), ValueError, "non-negative"),
    (lambda: WeightedRandomSampler([1.0, 0.0], 2, replacement=False), ValueError, "without replacement"),
    (lambda: WeightedRandomSampler([[1.0]], 1), ValueError, "1-d"),
])
def test_bad_sampler_arguments(make, exc, message) -> None:
    with pytest.raises(exc, match=message):
        make()

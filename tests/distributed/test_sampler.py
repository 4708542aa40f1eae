"""DistributedSampler: coverage, padding, drop_last and set_epoch, against PyTorch's where it is installed."""
from __future__ import annotations

import pytest

from kiln.distributed import DistributedSampler


def _shares(n: int, world: int, **kw) -> list[list[int]]:
    return [list(DistributedSampler(range(n), num_replicas=world, rank=r, **kw)) for r in range(world)]


@pytest.mark.parametrize("n", [0, 1, 7, 8, 10, 13])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_sample_on_exactly_one_rank(n, world, shuffle):
    shares = _shares(n, world, shuffle=shuffle, seed=5)
    lengths = {len(s) for s in shares}
    assert len(lengths) == 1, "every rank gets as many indices"
    flat = [i for s in shares for i in s]
    if n:
        assert set(flat) == set(range(n))
        assert len(flat) - n < world, "padding repeats fewer than world_size indices"
    dropped = _shares(n, world, shuffle=shuffle, seed=5, drop_last=True)
    flat = [i for s in dropped for i in s]
    assert len(flat) == len(set(flat)) == (n // world) * world, "drop_last: no repeats, the tail dropped"


def test_set_epoch_changes_the_order_the_same_way_on_every_rank():
    a0 = DistributedSampler(range(20), num_replicas=2, rank=0, seed=1)
    a1 = DistributedSampler(range(20), num_replicas=2, rank=1, seed=1)
    first = (list(a0), list(a1))
    assert sorted(first[0] + first[1]) == list(range(20))
    assert list(a0) == first[0], "the order only changes with set_epoch"
    a0.set_epoch(1)
    a1.set_epoch(1)
    second = (list(a0), list(a1))
    assert second != first
    assert sorted(second[0] + second[1]) == list(range(20))


@pytest.mark.parametrize("n,world,drop_last", [(10, 3, False), (10, 3, True), (2, 4, False), (9, 2, False)])
def test_unshuffled_matches_torch(n, world, drop_last):
    torch_sampler = pytest.importorskip("torch.utils.data").DistributedSampler
    for rank in range(world):
        ours = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
        theirs = torch_sampler(range(n), num_replicas=world, rank=rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)


def test_works_with_the_dataloader():
    import kiln
    from kiln.utils.data import DataLoader, TensorDataset

    data = TensorDataset(kiln.arange(10))
    seen = []
    for rank in range(2):
        loader = DataLoader(data, batch_size=2, sampler=DistributedSampler(data, num_replicas=2, rank=rank))
        seen += [int(v) for (batch,) in loader for v in batch.tolist()]
    assert sorted(seen) == list(range(10))


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"invalid rank 2; rank must be in \[0, 1\]"):
        DistributedSampler(range(4), num_replicas=2, rank=2)
    with pytest.raises(ValueError, match="num_replicas must be a positive int"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    with pytest.raises(RuntimeError, match="pass num_replicas and rank"):
        DistributedSampler(range(4))

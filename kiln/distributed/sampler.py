"""`DistributedSampler`: each rank iterates over its own share of a dataset, as in PyTorch.

>>> sampler = DistributedSampler(dataset, shuffle=True, seed=0)
>>> loader = kiln.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
>>> for epoch in range(epochs):
...     sampler.set_epoch(epoch)          # a new order every epoch, the same on every rank
...     for batch in loader: ...
"""
from __future__ import annotations

import math
from typing import Iterator, Sized

import numpy as np

from ..utils.data.sampler import Sampler
from .process_group import get_rank, get_world_size, is_initialized


class DistributedSampler(Sampler[int]):
    """Indices ``rank, rank + num_replicas, ...`` of a (shuffled, padded or trimmed) index list.

    Every rank draws the same permutation (seeded by ``seed + epoch``) and keeps every
    `num_replicas`-th index, so each sample lands on exactly one rank per epoch. Without
    `drop_last` the list is padded by repeating its start so that all ranks get
    ``ceil(len / num_replicas)`` indices; with it, the tail is dropped so that they get
    ``floor(len / num_replicas)``. `num_replicas` and `rank` default to the process group's.
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            if not is_initialized():
                raise RuntimeError("DistributedSampler: pass num_replicas and rank, or call "
                                   "kiln.distributed.init_process_group() first")
            num_replicas = get_world_size() if num_replicas is None else num_replicas
            rank = get_rank() if rank is None else rank
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be a positive int, got {num_replicas!r}")
        if not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: invalid rank {rank!r}; rank must be in [0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad > 0 and indices:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use a different shuffle for `epoch` (call it before iterating, on every rank)."""
        self.epoch = int(epoch)

"""`DataLoader`: batches of a dataset, optionally shuffled by kiln's counter-based RNG."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..functional.creation import randperm
from ..random import Generator
from ..tensor import Tensor
from .dataset import Dataset, TensorDataset


def default_collate(samples: Sequence[Any]) -> Any:
    """Stack a list of samples into a batch: tuples/lists/dicts field by field, leaves into tensors.

    Tensors, NumPy arrays and Python numbers are stacked along a new first dimension
    (Python floats become float32, ints int64, as `kiln.tensor` would make them).
    """
    if not samples:
        raise ValueError("default_collate: got an empty list of samples")
    first = samples[0]
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # namedtuple
        return type(first)(*(default_collate(list(field)) for field in zip(*samples)))
    if isinstance(first, (tuple, list)):
        if any(len(s) != len(first) for s in samples):
            raise ValueError("default_collate: samples have different numbers of fields")
        return type(first)(default_collate(list(field)) for field in zip(*samples))
    if isinstance(first, dict):
        return {key: default_collate([s[key] for s in samples]) for key in first}
    if isinstance(first, Tensor):
        return Tensor._wrap(np.stack([np.asarray(s.detach()) for s in samples]))
    if isinstance(first, (np.ndarray, np.generic)):
        return Tensor._wrap(np.stack([np.asarray(s) for s in samples]))
    if isinstance(first, bool):
        return Tensor._wrap(np.asarray(samples, dtype=np.bool_))
    if isinstance(first, int):
        return Tensor._wrap(np.asarray(samples, dtype=np.int64))
    if isinstance(first, float):
        return Tensor._wrap(np.asarray(samples, dtype=np.float32))
    raise TypeError(f"default_collate: don't know how to batch samples of type {type(first).__name__}; "
                    "pass collate_fn= to DataLoader")


class DataLoader:
    """Iterate over a dataset in batches of kiln tensors.

    `dataset` is a `Dataset` (anything with ``__len__`` and ``__getitem__``) or a tuple
    of tensors/arrays, which is wrapped in a `TensorDataset`. With ``shuffle=True``
    each epoch uses a fresh permutation from kiln's counter-based RNG: from
    ``generator`` if given, else from a private generator seeded with ``seed``, else
    from the global stream (so ``kiln.manual_seed`` makes it reproducible).

    >>> loader = DataLoader((x, y), batch_size=32, shuffle=True, seed=0, drop_last=True)
    >>> for xb, yb in loader:
    ...     loss = F.cross_entropy(model(xb), yb)
    """

    def __init__(self, dataset: Dataset | tuple | list, batch_size: int = 1, shuffle: bool = False,
                 *, seed: int | None = None, generator: Generator | None = None, drop_last: bool = False,
                 collate_fn: Callable[[list], Any] | None = None):
        if isinstance(dataset, (tuple, list)):
            dataset = TensorDataset(*dataset)
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"DataLoader expects a Dataset (with __len__ and __getitem__) or a tuple of "
                            f"tensors, got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        if seed is not None and generator is not None:
            raise ValueError("DataLoader: pass either seed= or generator=, not both")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        self.generator = generator if generator is not None else (
            Generator(seed) if seed is not None else None)

    def __len__(self) -> int:
        """The number of batches per epoch."""
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        return randperm(n, generator=self.generator).numpy()

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        fetch = getattr(self.dataset, "fetch_batch", None) if self.collate_fn is None else None
        collate = self.collate_fn or default_collate
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            if fetch is not None:
                yield fetch(idx)
            else:
                yield collate([self.dataset[int(i)] for i in idx])

    def __repr__(self) -> str:
        return (f"DataLoader({type(self.dataset).__name__} of {len(self.dataset)}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last})")

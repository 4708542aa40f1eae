"""Datasets: map-style (`Dataset`, `TensorDataset`, `Subset`, `ConcatDataset`), iterable, and `random_split`."""
from __future__ import annotations

import bisect
import math
import operator
import warnings
from typing import Any, Generic, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from ...random import Generator
from ...dtypes import lossless_array
from ...tensor import Tensor

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """Base class of map-style datasets, as in PyTorch: override `__len__` and `__getitem__`.

    ``a + b`` concatenates two datasets (a `ConcatDataset`).

    >>> class Squares(kiln.utils.data.Dataset):
    ...     def __len__(self): return 10
    ...     def __getitem__(self, i): return float(i), float(i * i)
    """

    def __getitem__(self, index: int) -> T_co:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__ (and __len__)")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """Base class of datasets that are streams: override `__iter__`.

    With ``num_workers > 0`` every worker iterates its own copy of the dataset; split
    the stream with `get_worker_info()` inside `__iter__` so workers don't repeat samples.

    >>> class Count(kiln.utils.data.IterableDataset):
    ...     def __iter__(self): return iter(range(10))
    """

    def __iter__(self) -> Iterator[T_co]:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other: Dataset) -> ChainDataset:  # type: ignore[override]
        return ChainDataset([self, other])


def _as_array(value: Any) -> np.ndarray:
    """A tensor, array or nested list as a NumPy array of a kiln dtype (no copy for CPU tensors)."""
    if isinstance(value, Tensor):
        return np.asarray(value.detach().numpy())
    return lossless_array(np.asarray(value), "TensorDataset")


def _row_index(index: Any) -> Any:
    """An index for one sample: ints (including 0-d tensors and NumPy ints) as a Python int."""
    try:
        return operator.index(index)
    except TypeError:
        return index.numpy() if isinstance(index, Tensor) else index


class TensorDataset(Dataset[tuple[Tensor, ...]]):
    """Samples are row i of each of the given tensors (or arrays), which share their first dimension.

    A row of a 1-d tensor is a 0-d tensor, so labels collate to shape ``(B,)``.

    >>> ds = TensorDataset(kiln.randn(100, 3), kiln.arange(100))
    >>> x, y = ds[0]                      # x: shape (3,), y: 0-d int64
    """

    def __init__(self, *tensors: Any):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor, e.g. TensorDataset(inputs, labels)")
        self.arrays: tuple[np.ndarray, ...] = tuple(_as_array(t) for t in tensors)
        sizes = [a.shape[0] if a.ndim else None for a in self.arrays]
        if None in sizes or len(set(sizes)) != 1:
            shapes = ", ".join(str(tuple(a.shape)) for a in self.arrays)
            raise ValueError(f"TensorDataset: all tensors need the same first dimension, got shapes {shapes}; "
                             "pass one row per sample in each tensor")

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The stored tensors (sharing memory with the dataset), as PyTorch's ``dataset.tensors``."""
        return tuple(Tensor._wrap(a) for a in self.arrays)

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        index = _row_index(index)
        return tuple(Tensor._wrap(np.array(a[index])) for a in self.arrays)

    def fetch_batch(self, indices: Sequence[int] | np.ndarray) -> tuple[Tensor, ...]:
        """The samples at `indices`, already collated: one fancy-index per tensor instead of a stack."""
        idx = np.asarray(indices, dtype=np.int64)
        return tuple(Tensor._wrap(np.ascontiguousarray(a[idx])) for a in self.arrays)


class Subset(Dataset[T_co]):
    """The samples of `dataset` at `indices`, in that order.

    >>> train = Subset(full, range(0, 800)); val = Subset(full, range(800, 1000))
    """

    def __init__(self, dataset: Dataset[T_co], indices: Sequence[int]):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[_row_index(idx)]]

    def __getitems__(self, indices: Sequence[int]) -> list:
        """A list of samples, fetched through the dataset's own `__getitems__` when it has one."""
        mapped = [self.indices[int(i)] for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(mapped)
        return [self.dataset[i] for i in mapped]

    def __len__(self) -> int:
        return len(self.indices)

    def __getattr__(self, name: str) -> Any:
        if name == "fetch_batch":  # the collated fast path, only where the dataset has one
            fetch = getattr(self.__dict__.get("dataset"), "fetch_batch", None)
            if fetch is not None:
                return lambda indices: fetch([self.indices[int(i)] for i in indices])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class ConcatDataset(Dataset[T_co]):
    """Several map-style datasets, one after another.

    >>> both = ConcatDataset([train_a, train_b]); len(both) == len(train_a) + len(train_b)
    True
    """

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset needs at least one dataset, got an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset (it has no length to index "
                                "by); use ChainDataset to chain iterable datasets")
        self.cumulative_sizes: list[int] = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: Any) -> Any:
        idx = _row_index(idx)
        n = len(self)
        if idx < 0:
            if -idx > n:
                raise IndexError(f"index {idx} is out of range for a ConcatDataset of length {n}")
            idx += n
        if idx >= n:
            raise IndexError(f"index {idx} is out of range for a ConcatDataset of length {n}")
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """Several iterable datasets, one after another."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)

    def __iter__(self) -> Iterator[Any]:
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset only supports IterableDataset, got {type(d).__name__}")
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


def _split_lengths(n: int, lengths: Sequence[int | float]) -> list[int]:
    """Lengths as counts: fractions summing to 1 become floors, the remainder dealt one by one."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"random_split: fraction at index {i} is {frac}; fractions must lie in [0, 1]")
        counts = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this split will be empty",
                              UserWarning, stacklevel=3)
        return counts
    for i, length in enumerate(lengths):
        if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
            raise ValueError(f"random_split: lengths must be non-negative ints or fractions summing to 1, "
                             f"got {length!r} at index {i}")
    return [int(x) for x in lengths]


def random_split(dataset: Dataset[T_co], lengths: Sequence[int | float],
                 generator: Generator | None = None) -> list[Subset[T_co]]:
    """Split `dataset` at random into non-overlapping `Subset`s of the given lengths (or fractions).

    The permutation comes from `generator` if given, else from kiln's global stream.

    >>> train, val = random_split(ds, [0.8, 0.2], generator=kiln.Generator(42))
    """
    from ...functional.creation import randperm  # noqa: PLC0415 - functional imports the tensor package

    if not isinstance(lengths, (list, tuple)):
        raise TypeError(f"random_split: lengths must be a list or tuple, got {type(lengths).__name__}")
    n = len(dataset)
    counts = _split_lengths(n, lengths)
    if sum(counts) != n:
        raise ValueError(f"random_split: the lengths {list(lengths)} sum to {sum(counts)}, but the dataset has "
                         f"{n} samples; give lengths that sum to {n} or fractions that sum to 1")
    order = randperm(n, generator=generator).numpy().tolist()
    out, start = [], 0
    for count in counts:
        out.append(Subset(dataset, order[start:start + count]))
        start += count
    return out

"""Map-style datasets: anything with ``__len__`` and ``__getitem__(i) -> sample``."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..tensor import Tensor


class Dataset:
    """Base class of map-style datasets, as in PyTorch: override `__len__` and `__getitem__`.

    >>> class Squares(kiln.data.Dataset):
    ...     def __len__(self): return 10
    ...     def __getitem__(self, i): return float(i), float(i * i)
    """

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")


def _as_array(value: Any) -> np.ndarray:
    """A tensor, array or nested list as a NumPy array (no copy for CPU tensors)."""
    if isinstance(value, Tensor):
        return np.asarray(value.detach())
    return np.asarray(value)


class TensorDataset(Dataset):
    """Samples are row i of each of the given tensors (or arrays), which share their first dimension.

    >>> ds = TensorDataset(kiln.randn(100, 3), kiln.arange(100))
    >>> x, y = ds[0]                      # x: shape (3,), y: 0-d int64
    """

    def __init__(self, *tensors: Any):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.arrays: tuple[np.ndarray, ...] = tuple(_as_array(t) for t in tensors)
        sizes = [a.shape[0] if a.ndim else None for a in self.arrays]
        if None in sizes or len(set(sizes)) != 1:
            shapes = ", ".join(str(tuple(a.shape)) for a in self.arrays)
            raise ValueError(f"TensorDataset: all tensors need the same first dimension, got shapes {shapes}")

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(Tensor._wrap(np.ascontiguousarray(a[index])) for a in self.arrays)

    def fetch_batch(self, indices: Sequence[int] | np.ndarray) -> tuple[Tensor, ...]:
        """The samples at `indices`, already collated: one fancy-index per tensor instead of a stack."""
        idx = np.asarray(indices, dtype=np.int64)
        return tuple(Tensor._wrap(np.ascontiguousarray(a[idx])) for a in self.arrays)

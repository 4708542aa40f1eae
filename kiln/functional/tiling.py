"""Tiling a tensor: ``Tensor.repeat`` and ``kiln.tile``, written as reshape + expand + reshape.

Each tiled dim of size s repeated r times becomes a pair (r, s) broadcast from (1, s) and
then merged, so the op is differentiable (the expand's VJP sums the copies) and the
compiler sees only movement ops.

>>> kiln.tensor([1, 2]).repeat(2, 2)
tensor([[1, 2, 1, 2],
        [1, 2, 1, 2]])
"""
from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .checks import size_tuple
from .math import _as_tensor
from .shape import clone, expand, reshape


def repeat(x: Tensor, *sizes: Any) -> Tensor:
    """x tiled `sizes[i]` times along each dim; extra leading sizes add new dims (PyTorch's Tensor.repeat).

    >>> kiln.zeros(2, 3).repeat(4, 1, 2).shape
    (4, 2, 6)
    """
    reps = size_tuple("repeat", sizes, "repeats")
    if len(reps) < x.ndim:
        raise ValueError(f"repeat(): the number of repeat sizes ({len(reps)}) can not be smaller than the number of "
                         f"dims of the tensor ({x.ndim}, shape {tuple(x.shape)}); give one size per dim, e.g. "
                         f"repeat({', '.join(['1'] * x.ndim)})")
    if any(r < 0 for r in reps):
        raise ValueError(f"repeat(): repeat sizes must be >= 0, got {reps}")
    return _tile(x, reps)


def tile(x: Any, dims: Any) -> Tensor:
    """x tiled `dims[i]` times along each dim; fewer sizes than dims are padded with 1 in front (torch.tile).

    >>> kiln.tile(kiln.tensor([[1, 2]]), (2,)).tolist()
    [[1, 2, 1, 2]]
    """
    x = _as_tensor(x)
    reps = size_tuple("tile", tuple(dims) if isinstance(dims, (tuple, list)) else (dims,), "dims")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile(): sizes must be >= 0, got {reps}")
    reps = (1,) * (x.ndim - len(reps)) + reps
    return _tile(x, reps)


def _tile(x: Tensor, reps: tuple) -> Tensor:
    shape = (1,) * (len(reps) - x.ndim) + tuple(x.shape)
    paired = tuple(d for s in shape for d in (1, s))
    target = tuple(d for r, s in zip(reps, shape) for d in (r, s))
    out = reshape(expand(reshape(x, paired), target), tuple(r * s for r, s in zip(reps, shape)))
    if out is x or out._base is not None:  # nothing was tiled: still a new tensor, as PyTorch's repeat
        out = clone(out)
    return out

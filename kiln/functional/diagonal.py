"""Diagonals: read one out of a matrix (`diagonal`, `diag`, `trace`) or build a matrix around one (`diag_embed`).

All are composed of slicing, padding, reshapes and permutes, so gradients and kiln.compile
come with those ops. Unlike PyTorch, `diagonal` returns a copy, not a view.
"""
from __future__ import annotations

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .checks import int_arg
from .math import normalize_axes, sum as sum_
from .shape import bind_index, narrow, pad, permute, reshape


def _two_dims(op: str, dim1: int, dim2: int, ndim: int) -> tuple[int, int]:
    d1 = normalize_axes(dim1, ndim, op)[0]
    d2 = normalize_axes(dim2, ndim, op)[0]
    if d1 == d2:
        raise ValueError(f"{op}: dim1 and dim2 must be two different dims, got {dim1} and {dim2} (both dim {d1}); "
                         "pass two dims, e.g. dim1=0, dim2=1")
    return d1, d2


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The `offset`-th diagonal of the matrices spanned by `dim1` (rows) and `dim2` (columns).

    Those two dims are removed and the diagonal becomes the last dim; offset > 0 is above
    the main diagonal, offset < 0 below.

    >>> kiln.diagonal(kiln.arange(9).reshape(3, 3), 1).tolist()
    [1, 5]
    """
    offset = int_arg("diagonal", "offset", offset)
    d1, d2 = _two_dims("diagonal", dim1, dim2, input.ndim)
    rest = [i for i in range(input.ndim) if i not in (d1, d2)]
    x = permute(input, (*rest, d1, d2))
    rows, cols = x.shape[-2], x.shape[-1]
    row0, col0 = max(-offset, 0), max(offset, 0)
    n = max(0, min(rows - row0, cols - col0))
    batch = tuple(x.shape[:-2])
    window = narrow(narrow(x, x.ndim - 2, min(row0, rows), n), x.ndim - 1, min(col0, cols), n)
    flat = reshape(window, batch + (n * n,))
    every = tuple(("s", None, None, None) for _ in batch) + (("s", 0, None, n + 1),)
    return bind_index(flat, (), every)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Matrices whose `offset`-th diagonal holds the last dim of `input`, zeros elsewhere.

    The matrix dims of the result are `dim1` (rows) and `dim2` (columns); it has one dim
    more than `input`.

    >>> kiln.diag_embed(kiln.tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]
    """
    offset = int_arg("diag_embed", "offset", offset)
    if input.ndim == 0:
        raise ShapeError("diag_embed: expected a tensor with at least 1 dim (its last dim is the diagonal), got a "
                         "0-d tensor; reshape it to (1,) first")
    d1, d2 = _two_dims("diag_embed", dim1, dim2, input.ndim + 1)
    batch = tuple(input.shape[:-1])
    n = input.shape[-1]
    m = n + abs(offset)
    # each value followed by m zeros lands, once flattened, m + 1 places after the previous one
    spaced = reshape(pad(reshape(input, batch + (n, 1)), (0, m)), batch + (n * (m + 1),))
    start = offset if offset >= 0 else -offset * m
    matrix = reshape(pad(spaced, (start, m * m - start - n * (m + 1))), batch + (m, m))
    perm, next_batch = [], 0
    for pos in range(input.ndim + 1):
        if pos == d1:
            perm.append(len(batch))
        elif pos == d2:
            perm.append(len(batch) + 1)
        else:
            perm.append(next_batch)
            next_batch += 1
    return permute(matrix, tuple(perm))


_diagonal = diagonal  # `diag` names its argument `diagonal`, as PyTorch does


def diag(input: Tensor, diagonal: int = 0) -> Tensor:
    """A 1-D tensor as the `diagonal`-th diagonal of a square matrix, or a matrix's diagonal as a 1-D tensor.

    >>> kiln.diag(kiln.tensor([1, 2])).tolist()
    [[1, 0], [0, 2]]
    >>> kiln.diag(kiln.arange(4).reshape(2, 2)).tolist()
    [0, 3]
    """
    if input.ndim == 1:
        return diag_embed(input, diagonal, 0, 1)
    if input.ndim == 2:
        return _diagonal(input, diagonal, 0, 1)
    raise ShapeError(f"diag: expected a 1-D or 2-D tensor, got {input.ndim}-D of shape {tuple(input.shape)}; "
                     "for the diagonals of a batch use kiln.diagonal(x, offset, dim1, dim2), to build a batch of "
                     "diagonal matrices kiln.diag_embed(x, offset)")


def trace(input: Tensor) -> Tensor:
    """The sum of the main diagonal of a 2-D tensor (integers sum to int64), differentiable.

    >>> kiln.trace(kiln.arange(9).reshape(3, 3)).item()
    12
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"trace(): expected a kiln.Tensor, got {type(input).__name__}")
    if input.ndim != 2:
        raise ShapeError(f"trace: expected a matrix (2-D tensor), got {input.ndim}-D of shape {tuple(input.shape)}; "
                         "for a batch of matrices use kiln.diagonal(x, 0, -2, -1).sum(-1)")
    if input.dtype.name == "bool":
        raise TypeError("trace: not defined for bool tensors; cast first, e.g. x.long()")
    integer = input._data.dtype.kind in "iu"
    return sum_(_diagonal(input, 0, 0, 1), dtype="int64" if integer else None)

"""The gradients flowing into one tensor during a backward pass, and how they are summed.

A VJP rule may return, for an input, a `PendingGradient` instead of a tensor: a gradient
described but not yet computed, which `GradientSum` combines with its siblings when the
tensor's total gradient is needed. Two kinds pay for themselves:

- `SliceGradient`, the gradient of a basic slice ``x[spec]``. A tensor read through several
  slices (``unbind``, ``split``, ``chunk``, ``x[t]`` in a time loop) receives one per slice.
  Scattering each into a zero tensor of the full shape and adding those up costs a full-size
  buffer and a full-size add per slice: quadratic in the number of slices (an LSTM's 35 time
  steps made 35 zero tensors of the whole sequence and 34 whole-sequence adds). Slices that
  tile one dim exactly (every index once, no overlap) are summed as one `cat` of their
  gradients in index order, as PyTorch's unbind/split backward does.
- `ProductGradient`, the gradient ``a^T @ g`` of the right operand of ``a @ b`` when `a` has
  few rows. A weight applied at every step of a loop (an RNN's recurrent weight) receives one
  per step: a thin GEMM that BLAS runs far below its peak, zeroing and writing a whole
  weight-sized output each time, then a weight-sized add. Such products are summed as one
  GEMM over the concatenated rows, ``cat(a)^T @ cat(g)``.

Pieces that combine with nothing (a lone slice, overlapping slices, gradients of the whole
tensor) are computed as the VJP would have computed them and added in arrival order.

The eager autograd engine (kiln.autograd) and the compiler's differentiation
(kiln.jit.autodiff) both sum through this class, so compiled gradients stay bit-equal to
eager ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from .late_bound import functional as _functional

if TYPE_CHECKING:
    from .tensor import Tensor

# A product's summed dim (the rows of `a`) at most this long is gathered: BLAS is far below
# its peak on such thin products, and the pieces held until the sum are small.
GATHERED_PRODUCT_ROWS = 64


class SliceOfDim(NamedTuple):
    """A basic index that keeps every dim whole but `axis`, where it takes ``[start, stop)``;
    `select` says an integer index took one element and dropped the dim."""

    axis: int
    start: int
    stop: int
    select: bool


def slice_of_dim(spec: tuple, shape: tuple) -> SliceOfDim | None:
    """The `SliceOfDim` an index `spec` on a tensor of `shape` is, or None when it is anything else
    (tensor indices, new axes, steps other than 1, several restricted dims, a symbolic size)."""
    if len(spec) > len(shape):
        return None
    found: SliceOfDim | None = None
    for axis, entry in enumerate(spec):
        kind = entry[0]
        if kind == "i":
            size = shape[axis]
            if type(size) is not int or type(entry[1]) is not int or not -size <= entry[1] < size:
                return None
            k = entry[1] % size
            piece = SliceOfDim(axis, k, k + 1, True)
        elif kind == "s":
            start, stop, step = entry[1:]
            if start is None and stop is None and step in (None, 1):
                continue  # the whole dim
            size = shape[axis]
            if (type(size) is not int or any(v is not None and type(v) is not int for v in (start, stop))
                    or step not in (None, 1)):
                return None
            lo, hi, _ = slice(start, stop).indices(size)
            if lo == 0 and hi == size:
                continue
            if hi <= lo:
                return None
            piece = SliceOfDim(axis, lo, hi, False)
        else:
            return None
        if found is not None:
            return None
        found = piece
    return found


class PendingGradient:
    """A gradient a VJP describes but leaves to `GradientSum`, which may combine it with siblings."""

    def materialize(self) -> Tensor:
        """The gradient as a tensor, computed as the VJP rule would have."""
        raise NotImplementedError

    def group(self) -> Any:
        """A key: pieces with equal keys may be combined by `combine`."""
        raise NotImplementedError

    @staticmethod
    def combine(pieces: list) -> Tensor | None:
        """The sum of `pieces` (two or more, one group) as one computation, or None when they do not fit."""
        raise NotImplementedError


class SliceGradient(PendingGradient):
    """The gradient `g` of ``x[spec]``, a basic index of a tensor `x` of `shape`."""

    __slots__ = ("g", "spec", "shape", "where")

    def __init__(self, g: Tensor, spec: tuple, shape: tuple, where: SliceOfDim) -> None:
        self.g, self.spec, self.shape, self.where = g, spec, tuple(shape), where

    def materialize(self) -> Tensor:
        return _functional().index_grad(self.g, (), self.spec, self.shape)

    def group(self) -> Any:
        return ("slice", self.where.axis)

    @staticmethod
    def combine(pieces: list) -> Tensor | None:
        """One ``cat`` of the pieces when they cover their dim exactly once, else None."""
        ordered = sorted(pieces, key=lambda p: p.where.start)
        axis, at = ordered[0].where.axis, 0
        for p in ordered:
            if p.where.start != at:
                return None  # a gap or an overlap
            at = p.where.stop
        if at != ordered[0].shape[axis]:
            return None
        F = _functional()
        return F.cat([F.unsqueeze(p.g, axis) if p.where.select else p.g for p in ordered], axis)


class ProductGradient(PendingGradient):
    """``a^T @ g``: the gradient of `b` in ``a @ b`` (2-D a of few rows), made in the memory order
    `transposed` names (True: computed as ``(g^T @ a)^T``, for a `b` that is a transposed view)."""

    __slots__ = ("a", "g", "transposed")

    def __init__(self, a: Tensor, g: Tensor, transposed: bool) -> None:
        self.a, self.g, self.transposed = a, g, transposed

    def materialize(self) -> Tensor:
        return _product(self.a, self.g, self.transposed)

    def group(self) -> Any:
        return ("product", self.transposed)

    @staticmethod
    def combine(pieces: list) -> Tensor | None:
        F = _functional()
        a = F.cat([p.a for p in pieces], 0)
        g = F.cat([p.g for p in pieces], 0)
        return _product(a, g, pieces[0].transposed)


def _product(a: Tensor, g: Tensor, transposed: bool) -> Tensor:
    F = _functional()
    if transposed:
        return F.swapaxes(F.matmul(F.swapaxes(g, 0, 1), a), 0, 1)
    return F.matmul(F.swapaxes(a, 0, 1), g)


def index_gradient(g: Tensor, spec: tuple, shape: tuple) -> Tensor | PendingGradient:
    """The gradient of ``x[spec]`` (a basic spec, no tensor indices) for an `x` of `shape`: pending
    when the spec slices one dim (so siblings may tile it), else scattered into zeros now."""
    where = slice_of_dim(spec, tuple(shape))
    if where is None:
        return _functional().index_grad(g, (), spec, tuple(shape))
    return SliceGradient(g, spec, shape, where)


class GradientSum:
    """The gradient contributions to one tensor, in arrival order, summed by `total`."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[Any] = []  # Tensors and PendingGradients

    def add(self, g: Any) -> None:
        """Add a gradient: a tensor (or a compiled call's gradient bundle), or a `PendingGradient`."""
        self.pieces.append(g)

    def total(self) -> Any:
        """The summed gradient: whole gradients in arrival order, then each group of pending ones
        (combined when it can be, else each computed), in the order its first piece arrived."""
        if len(self.pieces) == 1 and not isinstance(self.pieces[0], PendingGradient):
            return self.pieces[0]  # the common case, on eager backward's per-node path
        whole = [p for p in self.pieces if not isinstance(p, PendingGradient)]
        groups: dict[Any, list] = {}
        for p in self.pieces:
            if isinstance(p, PendingGradient):
                groups.setdefault(p.group(), []).append(p)
        parts = list(whole)
        for pieces in groups.values():
            combined = type(pieces[0]).combine(pieces) if len(pieces) > 1 else None
            parts += [combined] if combined is not None else [p.materialize() for p in pieces]
        out = parts[0]
        for p in parts[1:]:
            out = out + p  # (operands may be gradient bundles of compiled calls, which define +)
        return out

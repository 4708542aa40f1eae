"""The gradients flowing into one tensor during a backward pass, and how they are summed.

A tensor read through several basic slices (``unbind``, ``split``, ``chunk``, ``x[t]`` in a
time loop) receives one gradient per slice. Scattering each into a zero tensor of the full
shape and adding those up costs a full-size buffer and a full-size add per slice: quadratic
in the number of slices (an LSTM's 35 time steps made 35 zero tensors of the whole sequence
and 34 whole-sequence adds). `GradientSum` keeps slice gradients as pieces instead, and when
the slices tile one dim exactly (every index once, no overlap), sums them as one `cat` of
the pieces in index order, which is what PyTorch's unbind/split backward computes too.
Other pieces (overlapping or partial slices, gradients of the whole tensor) are summed as
before: each slice scattered into zeros (``index_grad``), then added in arrival order.

The eager autograd engine (kiln.autograd) and the compiler's differentiation
(kiln.jit.autodiff) both sum through this class, so compiled gradients stay bit-equal to
eager ones.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .tensor import Tensor


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


class _Piece(NamedTuple):
    g: Any  # Tensor
    spec: tuple
    shape: tuple
    where: SliceOfDim | None


class GradientSum:
    """The gradient contributions to one tensor, in arrival order, summed by `total`."""

    __slots__ = ("pieces",)

    def __init__(self) -> None:
        self.pieces: list[Any] = []  # a Tensor (the whole tensor's gradient) or a _Piece

    def add(self, g: Tensor) -> None:
        """A gradient of the whole tensor."""
        self.pieces.append(g)

    def add_index(self, g: Tensor, spec: tuple, shape: tuple) -> None:
        """The gradient `g` of the basic index ``x[spec]`` of a tensor `x` of `shape`."""
        self.pieces.append(_Piece(g, spec, tuple(shape), slice_of_dim(spec, tuple(shape))))

    def total(self) -> Tensor:
        """The summed gradient (a tensor of the whole shape)."""
        from . import functional as F  # noqa: PLC0415 - cycle: functional imports autograd

        whole = [p for p in self.pieces if not isinstance(p, _Piece)]
        slices = [p for p in self.pieces if isinstance(p, _Piece)]
        tiled = _tile(slices) if len(slices) > 1 else None
        if tiled is None:
            parts = [p if not isinstance(p, _Piece) else F.index_grad(p.g, (), p.spec, p.shape)
                     for p in self.pieces]
        else:
            parts = whole + [tiled]
        out = parts[0]
        for p in parts[1:]:
            out = out + p  # (operands may be gradient bundles of compiled calls, which define +)
        return out


def _tile(slices: list[_Piece]) -> Tensor | None:
    """One ``cat`` of `slices` when they cover one dim of their tensor exactly once, else None."""
    from . import functional as F  # noqa: PLC0415 - cycle: functional imports autograd

    first = slices[0].where
    if first is None:
        return None
    shape = slices[0].shape
    for p in slices:
        if p.where is None or p.where.axis != first.axis or p.shape != shape:
            return None
    ordered = sorted(slices, key=lambda p: p.where.start)
    at = 0
    for p in ordered:
        if p.where.start != at:
            return None  # a gap or an overlap
        at = p.where.stop
    if at != shape[first.axis]:
        return None
    axis = first.axis
    return F.cat([F.unsqueeze(p.g, axis) if p.where.select else p.g for p in ordered], axis)

"""Padding layers: reflection, replication, zero, constant and circular, each 1-, 2- or 3-D.

`padding` is an int (the same on every side) or a tuple (left, right[, top, bottom[, front,
back]]) with the last dim first, as ``F.pad`` takes it.
"""
from __future__ import annotations

import operator
from typing import Any

from ..functional.padding import pad
from ..tensor import Tensor
from .module import Module


def _padding_tuple(layer: str, padding: Any, dims: int) -> tuple[int, ...]:
    n = 2 * dims
    values = tuple(padding) if isinstance(padding, (tuple, list)) else (padding,) * n
    try:
        ints = tuple(operator.index(p) for p in values if not isinstance(p, bool))
    except TypeError:
        ints = ()
    if len(values) != n or len(ints) != n:
        raise ValueError(f"{layer}: padding must be an int or a tuple of {n} ints (the last dim's two sides "
                         f"first), got {padding!r}")
    return ints


class _PadNd(Module):
    """Shared constructor and forward: ``F.pad(input, self.padding, mode)``."""

    _dims = 1
    _mode = "constant"

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = _padding_tuple(type(self).__name__, padding, self._dims)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ReflectionPadNd(_PadNd):
    _mode = "reflect"


class ReflectionPad1d(_ReflectionPadNd):
    """Mirror the last dim of (N, C, W) or (C, W) input, without repeating the edge."""

    _dims = 1


class ReflectionPad2d(_ReflectionPadNd):
    """Mirror the last two dims of (N, C, H, W) or (C, H, W) input, without repeating the edges.

    >>> kiln.nn.ReflectionPad2d(1)(kiln.randn(1, 3, 4, 4)).shape
    (1, 3, 6, 6)
    """

    _dims = 2


class ReflectionPad3d(_ReflectionPadNd):
    """Mirror the last three dims of (N, C, D, H, W) or (C, D, H, W) input."""

    _dims = 3


class _ReplicationPadNd(_PadNd):
    _mode = "replicate"


class ReplicationPad1d(_ReplicationPadNd):
    """Repeat the edge values of the last dim of (N, C, W) or (C, W) input."""

    _dims = 1


class ReplicationPad2d(_ReplicationPadNd):
    """Repeat the edge values of the last two dims of (N, C, H, W) or (C, H, W) input."""

    _dims = 2


class ReplicationPad3d(_ReplicationPadNd):
    """Repeat the edge values of the last three dims of (N, C, D, H, W) or (C, D, H, W) input."""

    _dims = 3


class _CircularPadNd(_PadNd):
    """Wrap around: the values past one edge come from the other. Checks the input's rank first."""

    _mode = "circular"

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"{type(self).__name__}: expected {self._dims + 1}D (unbatched) or {self._dims + 2}D "
                             f"input, got {input.ndim}D input of shape {tuple(input.shape)}")
        return super().forward(input)


class CircularPad1d(_CircularPadNd):
    """Circular padding of the last dim of (N, C, W) or (C, W) input."""

    _dims = 1


class CircularPad2d(_CircularPadNd):
    """Circular padding of the last two dims of (N, C, H, W) or (C, H, W) input."""

    _dims = 2


class CircularPad3d(_CircularPadNd):
    """Circular padding of the last three dims of (N, C, D, H, W) or (C, D, H, W) input."""

    _dims = 3


class _ConstantPadNd(_PadNd):
    """Pad with a constant `value`; any number of leading dims."""

    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with `value`."""

    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two dims with `value`.

    >>> kiln.nn.ConstantPad2d((1, 0, 2, 0), 3.5)(kiln.zeros(1, 2, 2)).shape
    (1, 4, 3)
    """

    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three dims with `value`."""

    _dims = 3


class ZeroPad1d(ConstantPad1d):
    """Pad the last dim with zeros."""

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    """Pad the last two dims with zeros."""

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    """Pad the last three dims with zeros."""

    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"

"""reshape, view and squeeze_dims: a tensor's elements in C order under a new shape.

They sit below the other shape ops (shape.py) and the math ops (math.py), which both reshape, and import neither.
"""
from __future__ import annotations

import math as _math
from typing import Any, Sequence

from ..ops.primitive import REGISTRY, ShapeError, bind
from ..tensor import Tensor
from .checks import size_tuple


def _shape_arg(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _infer_shape(op: str, shape: Sequence[Any], numel: int, src: tuple) -> tuple:
    shape = size_tuple(op, shape, "shape")
    if shape.count(-1) > 1:
        raise ShapeError(f"{op}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = _math.prod(d for d in shape if d != -1)
        if known == 0 or numel % known:
            raise ShapeError(f"{op}: cannot reshape a tensor of shape {src} ({numel} elements) into {shape}")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    if _math.prod(shape) != numel:
        raise ShapeError(f"{op}: cannot reshape a tensor of shape {src} ({numel} elements) into {shape}")
    return shape


def reshape(x: Tensor, *shape: Any) -> Tensor:
    """x with a new shape (one dim may be -1)."""
    return _reshape(x, shape, "reshape")


def view(x: Tensor, *shape: Any) -> Tensor:
    return _reshape(x, shape, "view")


def _reshape(x: Tensor, shape: tuple, op: str) -> Tensor:
    src = tuple(x.shape)
    target = _infer_shape(op, _shape_arg(shape), _math.prod(src), src)
    if len(target) == len(src) and target == src:  # (src is symbolic under dynamic_dims: no shape guard)
        return x
    return bind(REGISTRY["reshape"], (x,), {"shape": target})


def squeeze_dims(x: Tensor, axes: Sequence[int]) -> Tensor:
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return reshape(x, shape)

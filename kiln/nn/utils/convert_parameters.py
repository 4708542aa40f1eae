"""Flatten parameters into one vector and back (e.g. for line searches or second-order methods)."""
from __future__ import annotations

from typing import Iterable

from ... import autograd
from ...functional.shape import cat, reshape
from ...tensor import Tensor


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All parameters, flattened and concatenated in order."""
    return cat([reshape(p, (-1,)) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of `vec` into `parameters`, in place."""
    params = list(parameters)
    total = sum(p.numel() for p in params)
    if vec.ndim != 1 or vec.shape[0] != total:
        raise ValueError(f"vector_to_parameters: expected a 1-D vector of {total} elements (the parameters' "
                         f"total size), got shape {tuple(vec.shape)}")
    offset = 0
    with autograd.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(reshape(vec[offset:offset + n], tuple(p.shape)))
            offset += n

"""Channel dropout (dropout1d/2d/3d) and alpha dropout, with PyTorch's rank rules and warnings.

Every mask is drawn with `rand` from kiln's global counter-based stream, as `dropout` does,
so a compiled call replays exactly the masks eager would draw.
"""
from __future__ import annotations

import math as _math
import warnings

from ..ops.primitive import ShapeError
from ..tensor import Tensor
from .creation import rand
from .math import add, cast, ge, mul
from .shape import squeeze, unsqueeze

# SELU's negative saturation value, -scale * alpha: where alpha dropout sends dropped units
_SELU_SATURATION = -1.0507009873554804934193349852946 * 1.6732632423543772848170429916717


def check_p(p: float) -> None:
    """Raise ValueError unless 0 <= p <= 1."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _keep_mask(x: Tensor, p: float, per_channel: bool) -> Tensor:
    """1.0 where a unit survives (probability 1-p), 0.0 where it drops; shape (N, C, 1, ...) per channel."""
    shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2) if per_channel else tuple(x.shape)
    return cast(ge(rand(*shape, dtype=x.dtype, device=x.device), p), x.dtype)


def _feature_dropout(x: Tensor, p: float, training: bool, alpha: bool, op: str) -> Tensor:
    """Drop whole channels (dim 1) of an (N, C, *) input; `alpha` keeps mean and variance (SELU nets)."""
    check_p(p)
    if x.ndim < 2:
        raise ShapeError(f"{op}: feature dropout needs at least 2 dims (N, C, ...), got shape {tuple(x.shape)}; "
                         f"use dropout for element-wise dropout")
    return _drop(x, p, training, alpha, per_channel=True)


def _drop(x: Tensor, p: float, training: bool, alpha: bool, per_channel: bool) -> Tensor:
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return mul(x, 0.0)
    keep = _keep_mask(x, p, per_channel)
    if not alpha:
        return mul(x, mul(keep, 1.0 / (1.0 - p)))
    # y = a * (x * keep + s * (1 - keep)) + b, with a, b chosen so zero-mean unit-variance inputs
    # keep mean 0 and variance 1 (s is SELU's saturation value)
    q = 1.0 - p
    a = 1.0 / _math.sqrt(q * (1.0 + p * _SELU_SATURATION ** 2))
    b = -a * _SELU_SATURATION * p
    shift = add(mul(keep, -a * _SELU_SATURATION), a * _SELU_SATURATION + b)
    return add(mul(x, mul(keep, a)), shift)


def _unbatched(x: Tensor, p: float, training: bool, op: str) -> Tensor:
    """Channel dropout of an input without a batch dim: channels are dim 0."""
    return squeeze(_feature_dropout(unsqueeze(x, 0), p, training, False, op), 0)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of an (N, C, L) or (C, L) input with probability `p`; scale the rest by 1/(1-p).

    >>> kiln.nn.functional.dropout1d(kiln.ones(2, 4, 8), 0.5)  # each (n, c) row is all 0 or all 2
    """
    check_p(p)
    if input.ndim not in (2, 3):
        raise ShapeError(f"dropout1d: expected a 2D (C, L) or 3D (N, C, L) input, got a {input.ndim}D input of "
                         f"shape {tuple(input.shape)}; use dropout2d/dropout3d for inputs with more spatial dims")
    if input.ndim == 2:
        return _unbatched(input, p, training, "dropout1d")
    return _feature_dropout(input, p, training, False, "dropout1d")


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of an (N, C, H, W) input with probability `p`; scale the rest by 1/(1-p).

    A 3D input is read as (N, C, L), with a warning, as PyTorch does; other ranks warn too.

    >>> kiln.nn.functional.dropout2d(kiln.ones(2, 4, 3, 3), 0.5)
    """
    check_p(p)
    if input.ndim == 3:
        warnings.warn("dropout2d: got a 3D input, read as (N, C, L) with whole length-L channels dropped, as "
                      "PyTorch does today (PyTorch plans to read it as an unbatched (C, H, W)); use dropout1d "
                      "for (N, C, L) inputs", UserWarning, stacklevel=2)
    elif input.ndim != 4:
        warnings.warn(f"dropout2d: expects a 3D or 4D input (N, C, H, W), got a {input.ndim}D input; dim 1 is "
                      f"taken as the channels (PyTorch deprecates this). Use dropout for element-wise dropout",
                      UserWarning, stacklevel=2)
    return _feature_dropout(input, p, training, False, "dropout2d")


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:  # noqa: A002
    """Zero whole channels of an (N, C, D, H, W) or (C, D, H, W) input with probability `p`; scale the rest.

    Other ranks warn and are read as unbatched (channels on dim 0), as PyTorch does.

    >>> kiln.nn.functional.dropout3d(kiln.ones(2, 4, 2, 3, 3), 0.5)
    """
    check_p(p)
    if input.ndim not in (4, 5):
        warnings.warn(f"dropout3d: expects a 4D (C, D, H, W) or 5D (N, C, D, H, W) input, got a {input.ndim}D "
                      f"input; it is read as unbatched, channels on dim 0 (PyTorch deprecates this). Use dropout "
                      f"for element-wise dropout", UserWarning, stacklevel=2)
    if input.ndim == 0:
        raise ShapeError("dropout3d: feature dropout needs at least 1 dim, got a 0D input; use dropout")
    if input.ndim != 5:
        return _unbatched(input, p, training, "dropout3d")
    return _feature_dropout(input, p, training, False, "dropout3d")


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:  # noqa: A002
    """Dropout for SELU networks: dropped units take SELU's saturation value, then an affine map keeps
    a zero-mean, unit-variance input's mean and variance. `training` defaults to False, as in PyTorch.

    >>> kiln.nn.functional.alpha_dropout(kiln.randn(1000), 0.2, training=True).std()  # about 1
    """
    check_p(p)
    return _drop(input, p, training, True, per_channel=False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False,  # noqa: A002
                          inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels (dim 1) of an (N, C, *) input; `training` defaults to False.

    >>> kiln.nn.functional.feature_alpha_dropout(kiln.randn(8, 4, 5), 0.2, training=True)
    """
    return _feature_dropout(input, p, training, True, "feature_alpha_dropout")

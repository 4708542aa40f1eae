"""Distribution losses: kl_div, poisson_nll_loss, gaussian_nll_loss."""
from __future__ import annotations

import math as _math
import warnings

from ..ops.primitive import ShapeError
from ..trace_state import trace_state
from ..tensor import Tensor
from .math import _as_tensor, add, clamp, div, eq, exp, gt, log, mul, sub, sum, where
from .reduction import check_reduction, legacy_reduction, reduce_loss
from .shape import unsqueeze


def _xlogx(t: Tensor) -> Tensor:
    """t * log(t), 0 where t is 0 (with a finite gradient there)."""
    zero = eq(t, 0.0)
    return where(zero, 0.0, mul(t, log(where(zero, 1.0, t))))


def kl_div(input: Tensor, target: Tensor, size_average: bool | None = None,  # noqa: A002
           reduce: bool | None = None, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL divergence of `target` from the log-probabilities `input`: target * (log target - input).

    `target` holds probabilities, or log-probabilities with ``log_target=True``. Use
    ``reduction='batchmean'`` for the true KL divergence per sample; 'mean' averages over every
    element and warns, as in PyTorch.

    >>> p = kiln.nn.functional.log_softmax(kiln.randn(4, 5), 1)
    >>> kiln.nn.functional.kl_div(p, kiln.full((4, 5), 0.2), reduction="batchmean")
    """
    reduction = legacy_reduction(size_average, reduce, reduction)
    check_reduction(reduction, "kl_div", ("mean", "batchmean", "sum", "none"))
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the total loss by the number of elements, not by the "
                      "batch size; pass reduction='batchmean' for the KL divergence as defined (PyTorch warns "
                      "the same)", UserWarning, stacklevel=2)
    if log_target:
        loss = mul(exp(target), sub(target, input))
    else:
        loss = sub(_xlogx(target), mul(target, input))
    if reduction == "batchmean":
        total = sum(loss)
        return div(total, input.shape[0]) if input.ndim else total
    return reduce_loss(loss, reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,  # noqa: A002
                     size_average: bool | None = None, eps: float = 1e-8, reduce: bool | None = None,
                     reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of counts `target` under a Poisson with rate exp(input) (``log_input``)
    or input; ``full`` adds Stirling's approximation of log(target!) where target > 1.

    >>> kiln.nn.functional.poisson_nll_loss(kiln.randn(5), kiln.tensor([0.0, 1, 2, 3, 4]))
    """
    reduction = check_reduction(legacy_reduction(size_average, reduce, reduction), "poisson_nll_loss")
    if log_input:
        loss = sub(exp(input), mul(target, input))
    else:
        loss = sub(input, mul(target, log(add(input, eps))))
    if full:
        big = gt(target, 1.0)
        t = where(big, target, 1.0)
        stirling = add(sub(mul(t, log(t)), t), mul(log(mul(t, 2 * _math.pi)), 0.5))
        loss = add(loss, where(big, stirling, 0.0))
    return reduce_loss(loss, reduction)


def _gaussian_var(input: Tensor, var: Tensor | float) -> Tensor:  # noqa: A002
    """`var` shaped to broadcast against `input`, after PyTorch's size and sign checks."""
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError(f"gaussian_nll_loss: var must be >= 0, got {var}")
        return _as_tensor(var).to(input.dtype)
    shape, vshape = tuple(input.shape), tuple(var.shape)
    if vshape != shape:
        if shape[:-1] == vshape:  # one variance per sample
            var = unsqueeze(var, -1)
        elif not (shape[:-1] == vshape[:-1] and vshape[-1:] == (1,)):
            raise ShapeError(f"gaussian_nll_loss: var of shape {vshape} does not fit the input shape {shape}; "
                             f"give var the input's shape, the input's shape with the last dim 1, or the "
                             f"input's shape without its last dim")
    if trace_state.tracer is None and var._data.size and bool((var._data < 0).any()):
        raise ValueError("gaussian_nll_loss: var has negative entries; variances must be >= 0 (e.g. pass "
                         "softplus(raw) or exp(log_var))")
    return var


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,  # noqa: A002
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of `target` under N(input, var): 0.5 (log var + (input - target)^2 / var).

    Variances below `eps` count as `eps`, with the gradient passed straight through, as in
    PyTorch; ``full`` adds the constant 0.5 log(2 pi).

    >>> kiln.nn.functional.gaussian_nll_loss(kiln.randn(4, 2), kiln.randn(4, 2), kiln.ones(4, 1))
    """
    check_reduction(reduction, "gaussian_nll_loss")
    var = _gaussian_var(input, var)
    floor = clamp(var, eps)
    var = add(var, sub(floor, var).detach()) if var.requires_grad else floor
    d = sub(input, target)
    loss = mul(add(log(var), div(mul(d, d), var)), 0.5)
    if full:
        loss = add(loss, 0.5 * _math.log(2 * _math.pi))
    return reduce_loss(loss, reduction)

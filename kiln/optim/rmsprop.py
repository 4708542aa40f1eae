"""RMSprop: divide the gradient by a running root mean square of recent gradients."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from ..functional.math import sqrt
from . import traced_math as traced
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import advance_step, decayed_grad, lerp_, step_state, zeros_state


class RMSprop(Optimizer):
    """RMSprop, updating parameters in place with PyTorch's formulas.

    With ``g = grad + weight_decay * p`` (negated first if `maximize`):
    ``v = alpha * v + (1 - alpha) * g * g``; if `centered`, ``a = lerp(a, g, 1 - alpha)``
    and the scale is ``sqrt(v - a * a) + eps``, else ``sqrt(v) + eps``. Then
    ``buf = momentum * buf + g / scale; p -= lr * buf`` when momentum > 0, else
    ``p -= lr * g / scale``. State per parameter: ``step``, ``square_avg``
    (and ``momentum_buffer``, ``grad_avg``).

    >>> opt = kiln.optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.99, centered=True)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: ParamsT, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
                 maximize: bool = False):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize)
        super().__init__(params, defaults)

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        _check_nonnegative(group, "eps", "epsilon value")
        _check_nonnegative(group, "momentum", "momentum value")
        _check_nonnegative(group, "weight_decay", "weight_decay value")
        _check_nonnegative(group, "alpha", "alpha value")

    def _update_group(self, group: dict[str, Any]) -> None:
        neg_lr, alpha, eps = -group["lr"], group["alpha"], group["eps"]
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        centered, maximize = group["centered"], group["maximize"]
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            param_state = state[p]
            if not param_state:
                _init_state(param_state, p, momentum, centered)
            data = p._data
            grad = decayed_grad(g._data, data, weight_decay, maximize)
            advance_step(param_state["step"])

            square_avg = param_state["square_avg"]
            v = square_avg._data
            avg = np.multiply(grad, 1.0 - alpha, out=np.empty_like(data))  # scratch; becomes the rms
            avg *= grad
            v *= alpha
            v += avg
            square_avg._bump_version()
            if centered:
                grad_avg = param_state["grad_avg"]
                a = grad_avg._data
                lerp_(a, grad, 1.0 - alpha)
                grad_avg._bump_version()
                np.multiply(a, a, out=avg)
                np.subtract(v, avg, out=avg)
                np.sqrt(avg, out=avg)
            else:
                np.sqrt(v, out=avg)
            avg += eps

            if momentum > 0:
                buf = param_state["momentum_buffer"]
                b = buf._data
                b *= momentum
                b += np.divide(grad, avg, out=avg)
                buf._bump_version()
                data += np.multiply(b, neg_lr, out=avg)
            else:
                update = np.multiply(grad, neg_lr, out=np.empty_like(data))
                update /= avg
                data += update
            p._bump_version()

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        alpha, eps = group["alpha"], group["eps"]
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        centered, maximize = group["centered"], group["maximize"]
        neg_lr = -group["lr"]
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            param_state = state[p]
            if not param_state:
                param_state["step"] = traced.step_state()
                param_state["square_avg"] = traced.zeros_state(p)
                if momentum > 0:
                    param_state["momentum_buffer"] = traced.zeros_state(p)
                if centered:
                    param_state["grad_avg"] = traced.zeros_state(p)
            grad = traced.decayed_grad(g, p, weight_decay, maximize)
            param_state["step"].add_(1)

            v = param_state["square_avg"]
            avg = grad * (1.0 - alpha)
            avg = avg * grad
            v.mul_(alpha)
            v.add_(avg)
            if centered:
                a = param_state["grad_avg"]
                traced.lerp_(a, grad, 1.0 - alpha)
                avg = sqrt(v - a * a)
            else:
                avg = sqrt(v)
            avg = avg + eps

            if momentum > 0:
                buf = param_state["momentum_buffer"]
                buf.mul_(momentum)
                buf.add_(grad / avg)
                p.add_(buf * neg_lr)
            else:
                update = grad * neg_lr
                update = update / avg
                p.add_(update)


def _init_state(param_state: dict[str, Any], p: Tensor, momentum: float, centered: bool) -> None:
    param_state["step"] = step_state()
    param_state["square_avg"] = zeros_state(p)
    if momentum > 0:
        param_state["momentum_buffer"] = zeros_state(p)
    if centered:
        param_state["grad_avg"] = zeros_state(p)

"""RMSprop: divide the gradient by a running root mean square of recent gradients."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from ..functional.math import sqrt
from . import traced_math as traced
from .native_kernel import NativeRule, lerp_weight
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import advance_step, decayed_grad, lerp_, step_state, zeros_state

# `RMSprop._update_group` for one element, in the same operations (see kiln.optim.native_kernel).
_NATIVE_RULE = NativeRule(
    name="rmsprop",
    states=("v", ("buf", "MOMENTUM"), ("gavg", "CENTERED")),
    group_scalars=("wd", "one_minus_alpha", "alpha", "w", "eps", "momentum", "neg_lr"),
    param_scalars=(),
    switches=("MAXIMIZE", "DECAY", "CENTERED", "MOMENTUM", "LERP_LOW"),
    body="""
        const T d = DECAYED_GRAD(p[i], g[i]);
        T t = d * one_minus_alpha;
        t = t * d;
        T vv = v[i] * alpha;
        vv = vv + t;
        v[i] = vv;
        T avg;
        if (CENTERED) {
            const T av = LERP(gavg[i], d, w);
            gavg[i] = av;
            avg = av * av;
            avg = vv - avg;
            avg = SQRT(avg);
        } else {
            avg = SQRT(vv);
        }
        avg = avg + eps;
        if (MOMENTUM) {
            T b = buf[i] * momentum;
            b = b + d / avg;
            buf[i] = b;
            p[i] = p[i] + b * neg_lr;
        } else {
            T up = d * neg_lr;
            up = up / avg;
            p[i] = p[i] + up;
        }
    """,
)


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
                 maximize: bool = False, foreach: bool | None = None, fused: bool | None = None):
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize, foreach=foreach, fused=fused)
        super().__init__(params, defaults)

    _native_rule = _NATIVE_RULE

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
        for p, g, param_state in self._with_grads(group):
            if _lacks_state(param_state, momentum, centered):
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

    def _native_spec(self, group: dict[str, Any]) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Switches and group scalars of the native kernel, computed as `_update_group` computes them."""
        alpha, weight_decay, momentum = group["alpha"], group["weight_decay"], group["momentum"]
        low, w = lerp_weight(1.0 - alpha)
        switches = (bool(group["maximize"]), weight_decay != 0, bool(group["centered"]), momentum > 0, low)
        return switches, (weight_decay, 1.0 - alpha, alpha, w, group["eps"], momentum, -group["lr"])

    def _native_state(self, group: dict[str, Any], p: Tensor) -> tuple[list[Tensor], bool]:
        param_state = self.state[p]
        momentum, centered = group["momentum"], group["centered"]
        if _lacks_state(param_state, momentum, centered):
            _init_state(param_state, p, momentum, centered)
        tensors = [param_state["square_avg"]]
        if momentum > 0:
            tensors.append(param_state["momentum_buffer"])
        if centered:
            tensors.append(param_state["grad_avg"])
        return tensors, False

    def _native_param_scalars(self, group: dict[str, Any], p: Tensor) -> tuple[float, ...]:
        advance_step(self.state[p]["step"])
        return ()

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        alpha, eps = group["alpha"], group["eps"]
        weight_decay, momentum = group["weight_decay"], group["momentum"]
        centered, maximize = group["centered"], group["maximize"]
        neg_lr = -group["lr"]
        for p, g, param_state in self._with_grads(group):
            if not param_state:
                param_state["step"] = traced.step_state()
                param_state["square_avg"] = traced.zeros_state(p)
            if momentum > 0 and "momentum_buffer" not in param_state:
                param_state["momentum_buffer"] = traced.zeros_state(p)
            if centered and "grad_avg" not in param_state:
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


def _lacks_state(param_state: dict[str, Any], momentum: float, centered: bool) -> bool:
    """Whether a state entry the options need is missing (a first step, or momentum or
    centered switched on mid-run)."""
    return not param_state or momentum > 0 and "momentum_buffer" not in param_state or \
        centered and "grad_avg" not in param_state


def _init_state(param_state: dict[str, Any], p: Tensor, momentum: float, centered: bool) -> None:
    """Create the state entries `p` lacks; a momentum buffer or gradient average switched on
    mid-run starts at zero, as on a first step."""
    if not param_state:
        param_state["step"] = step_state()
        param_state["square_avg"] = zeros_state(p)
    if momentum > 0 and "momentum_buffer" not in param_state:
        param_state["momentum_buffer"] = zeros_state(p)
    if centered and "grad_avg" not in param_state:
        param_state["grad_avg"] = zeros_state(p)

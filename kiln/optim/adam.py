"""Adam: adaptive moment estimation, with optional AMSGrad and decoupled (AdamW) weight decay."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..tensor import Tensor
from ..functional.math import sqrt
from . import traced_math as traced
from .native_kernel import NativeRule, lerp_weight
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import advance_step, decayed_grad, lerp_, step_state, zeros_state

# `Adam._update_group` for one element, in the same operations (see kiln.optim.native_kernel).
_NATIVE_RULE = NativeRule(
    name="adam",
    states=("m", "v", ("vmax", "AMSGRAD")),
    group_scalars=("shrink", "wd", "w", "one_minus_beta2", "beta2", "eps"),
    param_scalars=("c1", "c2"),
    switches=("MAXIMIZE", "DECAY", "SHRINK", "AMSGRAD", "LERP_LOW"),
    body="""
        T pv = p[i];
        if (SHRINK) pv = pv * shrink;
        const T d = DECAYED_GRAD(pv, g[i]);
        const T mv = LERP(m[i], d, w);
        m[i] = mv;
        T t = d * one_minus_beta2;
        t = t * d;
        T vv = v[i] * beta2;
        vv = vv + t;
        v[i] = vv;
        if (AMSGRAD) { vv = kiln_max(vmax[i], vv); vmax[i] = vv; }
        T den = SQRT(vv);
        den = den / c2;
        den = den + eps;
        T up = mv * c1;
        up = up / den;
        p[i] = pv + up;
    """,
)


class Adam(Optimizer):
    """Adam, updating parameters in place with PyTorch's formulas.

    Per step t, with ``g = grad + weight_decay * p`` (or, if `decoupled_weight_decay`,
    ``p *= 1 - lr * weight_decay`` and ``g = grad``; negated first if `maximize`):
    ``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + (1 - beta2) * g * g``
    (``v_max = max(v_max, v)`` with `amsgrad`, used in place of ``v`` below),
    ``p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)``.
    State per parameter: ``step``, ``exp_avg``, ``exp_avg_sq`` (and ``max_exp_avg_sq``).

    >>> opt = kiln.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: ParamsT, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False, decoupled_weight_decay: bool = False, foreach: bool | None = None,
                 fused: bool | None = None):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                        maximize=maximize, decoupled_weight_decay=decoupled_weight_decay, foreach=foreach,
                        fused=fused)
        super().__init__(params, defaults)

    _native_rule = _NATIVE_RULE

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        _check_nonnegative(group, "eps", "epsilon value")
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"Invalid betas: {betas!r} (expected a pair (beta1, beta2))")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta} (expected 0 <= beta < 1)")
        _check_nonnegative(group, "weight_decay", "weight_decay value")

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        amsgrad, maximize = group["amsgrad"], group["maximize"]
        decoupled = group.get("decoupled_weight_decay", False)
        shrink = 1.0 - lr * weight_decay  # decoupled decay: p *= shrink
        for p, g, param_state in self._with_grads(group):
            if not param_state or amsgrad and "max_exp_avg_sq" not in param_state:
                _init_state(param_state, p, amsgrad)
            data = p._data
            if decoupled:
                if weight_decay != 0:
                    data *= shrink
                grad = decayed_grad(g._data, data, 0.0, maximize)
            else:
                grad = decayed_grad(g._data, data, weight_decay, maximize)
            step = advance_step(param_state["step"])

            exp_avg, exp_avg_sq = param_state["exp_avg"], param_state["exp_avg_sq"]
            m, v = exp_avg._data, exp_avg_sq._data
            lerp_(m, grad, 1.0 - beta1)
            tmp = np.multiply(grad, 1.0 - beta2, out=np.empty_like(data))
            tmp *= grad
            v *= beta2
            v += tmp
            exp_avg._bump_version()
            exp_avg_sq._bump_version()
            if amsgrad:
                v_max = param_state["max_exp_avg_sq"]
                np.maximum(v_max._data, v, out=v_max._data)
                v_max._bump_version()
                v = v_max._data

            denom = np.sqrt(v, out=tmp)
            denom /= math.sqrt(1.0 - beta2 ** step)
            denom += eps
            update = np.multiply(m, -lr / (1.0 - beta1 ** step), out=np.empty_like(data))
            update /= denom
            data += update
            p._bump_version()

    def _native_spec(self, group: dict[str, Any]) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Switches and group scalars of the native kernel, computed as `_update_group` computes them."""
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        decoupled = group.get("decoupled_weight_decay", False)
        low, w = lerp_weight(1.0 - beta1)
        switches = (bool(group["maximize"]), not decoupled and weight_decay != 0, decoupled and weight_decay != 0,
                    bool(group["amsgrad"]), low)
        return switches, (1.0 - lr * weight_decay, weight_decay, w, 1.0 - beta2, beta2, eps)

    def _native_state(self, group: dict[str, Any], p: Tensor) -> tuple[list[Tensor], bool]:
        param_state = self.state[p]
        amsgrad = group["amsgrad"]
        if not param_state or amsgrad and "max_exp_avg_sq" not in param_state:
            _init_state(param_state, p, amsgrad)
        tensors = [param_state["exp_avg"], param_state["exp_avg_sq"]]
        if amsgrad:
            tensors.append(param_state["max_exp_avg_sq"])
        return tensors, False

    def _native_param_scalars(self, group: dict[str, Any], p: Tensor) -> tuple[float, ...]:
        """Advance `p`'s step; its bias corrections, as `_update_group` computes them."""
        lr, (beta1, beta2) = group["lr"], group["betas"]
        step = advance_step(self.state[p]["step"])
        return -lr / (1.0 - beta1 ** step), math.sqrt(1.0 - beta2 ** step)

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        amsgrad, maximize = group["amsgrad"], group["maximize"]
        decoupled = group.get("decoupled_weight_decay", False)
        for p, g, param_state in self._with_grads(group):
            if not param_state:
                param_state["step"] = traced.step_state()
                param_state["exp_avg"] = traced.zeros_state(p)
                param_state["exp_avg_sq"] = traced.zeros_state(p)
            if amsgrad and "max_exp_avg_sq" not in param_state:
                param_state["max_exp_avg_sq"] = traced.zeros_state(p)
            if decoupled:
                if weight_decay != 0:
                    p.mul_(1.0 - lr * weight_decay)
                grad = traced.decayed_grad(g, p, 0.0, maximize)
            else:
                grad = traced.decayed_grad(g, p, weight_decay, maximize)
            step = traced.advance_step(self, p)

            m, v = param_state["exp_avg"], param_state["exp_avg_sq"]
            traced.lerp_(m, grad, 1.0 - beta1)
            tmp = grad * (1.0 - beta2)
            tmp = tmp * grad
            v.mul_(beta2)
            v.add_(tmp)
            if amsgrad:
                v_max = param_state["max_exp_avg_sq"]
                traced.max_(v_max, v)
                v = v_max

            denom = sqrt(v)
            denom = denom / traced.host_sqrt(1.0 - beta2 ** step)
            denom = denom + eps
            update = m * (-lr / (1.0 - beta1 ** step))
            update = update / denom
            p.add_(update)


def _init_state(param_state: dict[str, Any], p: Tensor, amsgrad: bool) -> None:
    """Create the state entries `p` lacks. An ``amsgrad`` switched on mid-run starts its running
    maximum at zero, so the maximum runs from that step on (``max(0, v)`` is ``v``)."""
    if not param_state:
        param_state["step"] = step_state()
        param_state["exp_avg"] = zeros_state(p)
        param_state["exp_avg_sq"] = zeros_state(p)
    if amsgrad and "max_exp_avg_sq" not in param_state:
        param_state["max_exp_avg_sq"] = zeros_state(p)

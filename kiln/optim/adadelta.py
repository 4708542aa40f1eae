"""Adadelta: step sizes from running averages of squared gradients and squared updates."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..functional.math import sqrt
from ..tensor import Tensor
from . import traced_math as traced
from .native_kernel import NativeRule
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import advance_step, decayed_grad, step_state, zeros_state

# `Adadelta._update_group` for one element, in the same operations (see kiln.optim.native_kernel).
_NATIVE_RULE = NativeRule(
    name="adadelta",
    states=("v", "u"),
    group_scalars=("wd", "keep", "rho", "eps", "neg_lr"),
    param_scalars=(),
    switches=("MAXIMIZE", "DECAY"),
    body="""
        const T d = DECAYED_GRAD(p[i], g[i]);
        T t = d * keep;
        t = t * d;
        T vv = v[i] * rho;
        vv = vv + t;
        v[i] = vv;
        T sd = vv + eps;
        sd = SQRT(sd);
        T uv = u[i];
        T de = uv + eps;
        de = SQRT(de);
        de = de / sd;
        de = de * d;
        t = de * keep;
        t = t * de;
        uv = uv * rho;
        uv = uv + t;
        u[i] = uv;
        p[i] = p[i] + de * neg_lr;
    """,
)


class Adadelta(Optimizer):
    """Adadelta, updating parameters in place with PyTorch's formulas.

    With ``g = grad + weight_decay * p`` (negated first if `maximize`):
    ``v = rho * v + (1 - rho) * g * g``;
    ``delta = sqrt(u + eps) / sqrt(v + eps) * g``;
    ``u = rho * u + (1 - rho) * delta * delta``; ``p -= lr * delta``.
    State per parameter: ``step``, ``square_avg`` (v) and ``acc_delta`` (u).

    >>> opt = kiln.optim.Adadelta(model.parameters(), lr=1.0, rho=0.9)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: ParamsT, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, *, maximize: bool = False, foreach: bool | None = None,
                 fused: bool | None = None):
        defaults = dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize, foreach=foreach,
                        fused=fused)
        super().__init__(params, defaults)

    _native_rule = _NATIVE_RULE

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        rho = group["rho"]
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho} (expected 0 <= rho <= 1)")
        _check_nonnegative(group, "eps", "epsilon value")
        _check_nonnegative(group, "weight_decay", "weight_decay value")

    def _update_group(self, group: dict[str, Any]) -> None:
        neg_lr, rho, eps = -group["lr"], group["rho"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        keep = 1.0 - rho
        for p, g, param_state in self._with_grads(group):
            if not param_state:
                param_state["step"] = step_state()
                param_state["square_avg"] = zeros_state(p)
                param_state["acc_delta"] = zeros_state(p)
            data = p._data
            grad = decayed_grad(g._data, data, weight_decay, maximize)
            advance_step(param_state["step"])

            square_avg, acc_delta = param_state["square_avg"], param_state["acc_delta"]
            v, u = square_avg._data, acc_delta._data
            tmp = np.multiply(grad, keep, out=np.empty_like(data))
            tmp *= grad
            v *= rho
            v += tmp
            std = np.add(v, eps, out=np.empty_like(data))
            np.sqrt(std, out=std)
            delta = np.add(u, eps, out=np.empty_like(data))
            np.sqrt(delta, out=delta)
            delta /= std
            delta *= grad
            np.multiply(delta, keep, out=tmp)
            tmp *= delta
            u *= rho
            u += tmp
            square_avg._bump_version()
            acc_delta._bump_version()
            data += np.multiply(delta, neg_lr, out=delta)
            p._bump_version()

    def _native_spec(self, group: dict[str, Any]) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Switches and group scalars of the native kernel, computed as `_update_group` computes them."""
        rho, weight_decay = group["rho"], group["weight_decay"]
        return ((bool(group["maximize"]), weight_decay != 0),
                (weight_decay, 1.0 - rho, rho, group["eps"], -group["lr"]))

    def _native_state(self, group: dict[str, Any], p: Tensor) -> tuple[list[Tensor], bool]:
        param_state = self.state[p]
        if not param_state:
            param_state["step"] = step_state()
            param_state["square_avg"] = zeros_state(p)
            param_state["acc_delta"] = zeros_state(p)
        return [param_state["square_avg"], param_state["acc_delta"]], False

    def _native_param_scalars(self, group: dict[str, Any], p: Tensor) -> tuple[float, ...]:
        advance_step(self.state[p]["step"])
        return ()

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        for p, g, param_state in self._with_grads(group):
            if not param_state:
                param_state["step"] = traced.step_state()
                param_state["square_avg"] = traced.zeros_state(p)
                param_state["acc_delta"] = traced.zeros_state(p)
            grad = traced.decayed_grad(g, p, weight_decay, maximize)
            traced.advance_step(self, p)

            v, u = param_state["square_avg"], param_state["acc_delta"]
            tmp = grad * (1.0 - rho)
            tmp = tmp * grad
            v.mul_(rho)
            v.add_(tmp)
            std = sqrt(v + eps)
            delta = sqrt(u + eps)
            delta = delta / std
            delta = delta * grad
            tmp = delta * (1.0 - rho)
            tmp = tmp * delta
            u.mul_(rho)
            u.add_(tmp)
            p.add_(delta * -lr)

"""Adagrad: per-coordinate step sizes that shrink with the sum of all squared gradients so far."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..functional.creation import full_like
from ..functional.math import sqrt
from ..tensor import Tensor
from . import traced_math as traced
from .native_kernel import NativeRule
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import advance_step, decayed_grad, step_state

# `Adagrad._update_group` for one element, in the same operations (see kiln.optim.native_kernel).
_NATIVE_RULE = NativeRule(
    name="adagrad",
    states=("sum",),
    group_scalars=("wd", "eps"),
    param_scalars=("neg_clr",),
    switches=("MAXIMIZE", "DECAY"),
    body="""
        const T d = DECAYED_GRAD(p[i], g[i]);
        T t = d * d;
        const T s = sum[i] + t;
        sum[i] = s;
        T sd = SQRT(s);
        sd = sd + eps;
        T up = d * neg_clr;
        up = up / sd;
        p[i] = p[i] + up;
    """,
)


class Adagrad(Optimizer):
    """Adagrad, updating parameters in place with PyTorch's formulas.

    At step t, with ``g = grad + weight_decay * p`` (negated first if `maximize`):
    ``s += g * g``; ``p -= clr * g / (sqrt(s) + eps)`` with
    ``clr = lr / (1 + (t - 1) * lr_decay)``. State per parameter (created with the
    optimizer, as in PyTorch): ``step`` and ``sum`` (starting at `initial_accumulator_value`).

    >>> opt = kiln.optim.Adagrad(model.parameters(), lr=0.01)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    def __init__(self, params: ParamsT, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, *, maximize: bool = False,
                 foreach: bool | None = None, fused: bool | None = None):
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize,
                        foreach=foreach, fused=fused)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                _init_state(self.state[p], p, group["initial_accumulator_value"])

    _native_rule = _NATIVE_RULE

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        _check_nonnegative(group, "lr_decay", "lr_decay value")
        _check_nonnegative(group, "weight_decay", "weight_decay value")
        _check_nonnegative(group, "initial_accumulator_value", "initial_accumulator_value")
        _check_nonnegative(group, "eps", "epsilon value")

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        for p, g, param_state in self._with_grads(group):
            if not param_state:  # a parameter added with add_param_group after construction
                _init_state(param_state, p, group["initial_accumulator_value"])
            step = advance_step(param_state["step"])
            data = p._data
            grad = decayed_grad(g._data, data, weight_decay, maximize)
            clr = lr / (1 + (step - 1) * lr_decay)

            state_sum = param_state["sum"]
            s = state_sum._data
            tmp = np.multiply(grad, grad, out=np.empty_like(data))
            s += tmp
            state_sum._bump_version()
            std = np.sqrt(s, out=tmp)
            std += eps
            update = np.multiply(grad, -clr, out=np.empty_like(data))
            update /= std
            data += update
            p._bump_version()
    def _native_spec(self, group: dict[str, Any]) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Switches and group scalars of the native kernel, computed as `_update_group` computes them."""
        weight_decay = group["weight_decay"]
        return (bool(group["maximize"]), weight_decay != 0), (weight_decay, group["eps"])

    def _native_state(self, group: dict[str, Any], p: Tensor) -> tuple[list[Tensor], bool]:
        param_state = self.state[p]
        if not param_state:  # a parameter added with add_param_group after construction
            _init_state(param_state, p, group["initial_accumulator_value"])
        return [param_state["sum"]], False

    def _native_param_scalars(self, group: dict[str, Any], p: Tensor) -> tuple[float, ...]:
        """Advance `p`'s step; its decayed step size, negated, as `_update_group` computes it."""
        step = advance_step(self.state[p]["step"])
        return (-(group["lr"] / (1 + (step - 1) * group["lr_decay"])),)

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        weight_decay, maximize = group["weight_decay"], group["maximize"]
        for p, g, param_state in self._with_grads(group):
            if not param_state:
                param_state["step"] = traced.step_state()
                param_state["sum"] = full_like(p, group["initial_accumulator_value"])
            step = traced.advance_step(self, p)
            grad = traced.decayed_grad(g, p, weight_decay, maximize)
            clr = lr / (1 + (step - 1) * lr_decay)

            state_sum = param_state["sum"]
            state_sum.add_(grad * grad)
            std = sqrt(state_sum)
            std = std + eps
            update = grad * -clr
            update = update / std
            p.add_(update)


def _init_state(param_state: dict[str, Any], p: Tensor, initial: float) -> None:
    param_state["step"] = step_state()
    param_state["sum"] = Tensor._wrap(p._device.xp.full_like(p._data, initial), p._device)

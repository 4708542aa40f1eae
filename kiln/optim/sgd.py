"""Stochastic gradient descent with optional momentum, dampening, Nesterov and weight decay."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from . import traced_math as traced
from .native_kernel import NativeRule
from .optimizer import Optimizer, ParamsT, _check_nonnegative
from .update_math import decayed_grad

# `SGD._update_group` for one element, in the same operations (see kiln.optim.native_kernel).
_NATIVE_RULE = NativeRule(
    name="sgd",
    states=(("buf", "MOMENTUM"),),
    group_scalars=("wd", "momentum", "keep", "neg_lr"),
    param_scalars=(),
    switches=("MAXIMIZE", "DECAY", "MOMENTUM", "DAMPEN", "NESTEROV"),
    first_step=True,
    body="""
        const T d = DECAYED_GRAD(p[i], g[i]);
        T dir = d;
        if (MOMENTUM) {
            T b;
            if (FIRST) { b = d; } else { b = buf[i] * momentum; b = b + (DAMPEN ? d * keep : d); }
            buf[i] = b;
            if (NESTEROV) { dir = b * momentum; dir = dir + d; } else { dir = b; }
        }
        p[i] = p[i] + dir * neg_lr;
    """,
)


class SGD(Optimizer):
    """SGD, updating parameters in place with PyTorch's formulas.

    With ``g = grad + weight_decay * p`` (negated first if `maximize`):
    ``buf = g`` on the first step, then ``buf = momentum * buf + (1 - dampening) * g``;
    the step direction is ``g + momentum * buf`` with `nesterov`, else ``buf``
    (plain ``g`` when momentum is 0); then ``p -= lr * direction``.

    >>> opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    """

    _native_rule = _NATIVE_RULE

    def __init__(self, params: ParamsT, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, fused: bool | None = None):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize, foreach=foreach, fused=fused)
        super().__init__(params, defaults)

    def _validate_group(self, group: dict[str, Any]) -> None:
        super()._validate_group(group)
        _check_nonnegative(group, "momentum", "momentum value")
        _check_nonnegative(group, "weight_decay", "weight_decay value")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening, got "
                             f"momentum={group['momentum']}, dampening={group['dampening']}")

    def _update_group(self, group: dict[str, Any]) -> None:
        neg_lr = -group["lr"]
        momentum = group["momentum"]
        keep = 1.0 - group["dampening"]
        weight_decay = group["weight_decay"]
        nesterov, maximize = group["nesterov"], group["maximize"]
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            data = p._data
            grad = decayed_grad(g._data, data, weight_decay, maximize)
            if momentum == 0:
                direction, scratch = grad, grad is not g._data
            else:
                buf = self._momentum_buffer(state[p], p, grad, momentum, keep)
                if nesterov:
                    direction = np.multiply(buf, momentum, out=np.empty_like(data))
                    direction += grad
                    scratch = True
                else:
                    direction, scratch = buf, False
            data += np.multiply(direction, neg_lr, out=direction if scratch else np.empty_like(data))
            p._bump_version()

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops (traced by kiln.compile; the same operations, so the same rounding)."""
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        nesterov, maximize = group["nesterov"], group["maximize"]
        neg_lr = -group["lr"]
        keep = 1.0 - group["dampening"]
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is None:
                continue
            grad = traced.decayed_grad(g, p, weight_decay, maximize)
            if momentum == 0:
                direction = grad
            else:
                param_state = state[p]
                buf = param_state.get("momentum_buffer")
                if buf is None:
                    buf = param_state["momentum_buffer"] = grad.clone()
                else:
                    buf.mul_(momentum)
                    buf.add_(grad * keep if keep != 1.0 else grad)
                direction = buf * momentum + grad if nesterov else buf
            p.add_(direction * neg_lr)

    def _native_spec(self, group: dict[str, Any]) -> tuple[tuple[bool, ...], tuple[float, ...]]:
        """Switches and group scalars of the native kernel, computed as `_update_group` computes them."""
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        keep = 1.0 - group["dampening"]
        switches = (bool(group["maximize"]), weight_decay != 0, momentum != 0, keep != 1.0,
                    bool(group["nesterov"]))
        return switches, (weight_decay, momentum, keep, -group["lr"])

    def _native_state(self, group: dict[str, Any], p: Tensor) -> tuple[list[Tensor], bool]:
        """The momentum buffer (new and uninitialized on the first step: the kernel copies the gradient in)."""
        if group["momentum"] == 0:
            return [], False
        param_state = self.state[p]
        buf = param_state.get("momentum_buffer")
        if buf is None:
            buf = param_state["momentum_buffer"] = Tensor._wrap(np.empty_like(p._data), p._device)
            return [buf], True
        return [buf], False

    def _native_param_scalars(self, group: dict[str, Any], p: Tensor) -> tuple[float, ...]:
        return ()

    @staticmethod
    def _momentum_buffer(param_state: dict[str, Any], p: Tensor, grad: np.ndarray, momentum: float,
                         keep: float) -> np.ndarray:
        """Update (or start, as a copy of `grad`) the momentum buffer; return its array."""
        buf = param_state.get("momentum_buffer")
        if buf is None:
            param_state["momentum_buffer"] = Tensor._wrap(np.array(grad, copy=True), p._device)
            return param_state["momentum_buffer"]._data
        b = buf._data
        b *= momentum
        if keep != 1.0:
            b += np.multiply(grad, keep, out=np.empty_like(b))
        else:
            b += grad
        buf._bump_version()
        return b

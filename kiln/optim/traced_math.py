"""The shared update math of update_math.py in kiln ops, for steps traced by kiln.compile.

Each helper computes what its NumPy twin computes, operation for operation, so that a
compiled step rounds as the eager step does. Hyperparameters arrive as read from
``param_groups`` (Python numbers eagerly, `HyperScalar` s while tracing); scalar factors
(bias corrections included, see `advance_step`) are computed in Python floats, as eager
code computes them, and become plan inputs in the parameter's dtype where eager code
hands a Python float to NumPy.
"""
from __future__ import annotations

from typing import Any

from ..functional.creation import zeros, zeros_like
from ..functional.math import maximum
from ..jit.hyper import sqrt
from ..trace_state import trace_state
from ..tensor import Tensor


def decayed_grad(grad: Tensor, param: Tensor, weight_decay: Any, maximize: bool) -> Tensor:
    """``(-grad if maximize else grad) + weight_decay * param`` (a new tensor, or `grad` itself)."""
    if weight_decay != 0:
        out = param * weight_decay
        return out - grad if maximize else out + grad
    return -grad if maximize else grad


def lerp_(start: Tensor, end: Tensor, weight: Any) -> None:
    """``start += weight * (end - start)`` in place, with torch.lerp's two-branch rounding."""
    diff = end - start
    if abs(weight) < 0.5:
        start.add_(diff * weight)
    else:
        start.copy_(end - diff * (1.0 - weight))


def advance_step(optimizer: Any, param: Tensor, key: str = "step") -> Any:
    """Add one to the step-counter tensor ``optimizer.state[param][key]`` in place and return the
    new count as a host number (the count at the start of the call plus one, read per call while
    tracing), so bias corrections are computed in Python floats exactly as the eager step does."""
    tracer = trace_state.tracer
    if tracer is not None:
        return tracer.step_capture().advance_count(optimizer, param, key)
    counter = optimizer.state[param][key]
    before = float(counter._data)
    counter.add_(1)
    return before + 1


def zeros_state(p: Tensor) -> Tensor:
    """A zero tensor shaped like `p`, made by a kiln op (so a compiled first step can create it)."""
    return zeros_like(p)


def step_state() -> Tensor:
    """The per-parameter step counter: a float32 scalar tensor, as in PyTorch."""
    return zeros((), dtype="float32")


host_sqrt = sqrt  # math.sqrt of a Python float or a HyperScalar (kiln.jit.hyper)


def max_(a: Tensor, b: Tensor) -> None:
    """``a = max(a, b)`` in place."""
    a.copy_(maximum(a, b))

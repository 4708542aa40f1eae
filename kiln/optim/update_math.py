"""In-place NumPy math shared by the update rules, and the state tensors they update.

Temporaries are allocated with an explicit ``out=``, so that 0-d parameters get 0-d
arrays (a ufunc without `out` returns a NumPy scalar, which can't be written into).
"""
from __future__ import annotations

import numpy as np

from ..tensor import Tensor


def decayed_grad(grad: np.ndarray, param: np.ndarray, weight_decay: float, maximize: bool) -> np.ndarray:
    """``(-grad if maximize else grad) + weight_decay * param``; a new array unless it is `grad` itself."""
    if weight_decay != 0:
        out = np.multiply(param, weight_decay, out=np.empty_like(param))
        if maximize:
            np.subtract(out, grad, out=out)
        else:
            np.add(out, grad, out=out)
        return out
    return np.negative(grad, out=np.empty_like(param)) if maximize else grad


def lerp_(start: np.ndarray, end: np.ndarray, weight: float) -> None:
    """``start += weight * (end - start)`` in place, with torch.lerp's two-branch rounding."""
    diff = np.subtract(end, start, out=np.empty_like(start))
    if abs(weight) < 0.5:
        diff *= weight
        start += diff
    else:
        diff *= 1.0 - weight
        np.subtract(end, diff, out=start)


def zeros_state(p: Tensor) -> Tensor:
    """A zero tensor shaped like `p`, on its device, for optimizer state."""
    return Tensor._wrap(p._device.xp.zeros_like(p._data), p._device)


def step_state() -> Tensor:
    """The per-parameter step counter: a float32 scalar tensor, as in PyTorch."""
    return Tensor._wrap(np.zeros((), dtype=np.float32))


def advance_step(step: Tensor) -> float:
    """Add one to a step-counter tensor in place and return the new count."""
    data = step._data
    data += 1
    step._bump_version()
    return float(data)

"""Finite-difference gradient checking for kiln functions (float64, central differences)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

import kiln
from tolerances import FD_EPS, tol


def _outputs(out: Any) -> list:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs if isinstance(o, kiln.Tensor) and o.dtype.is_floating_point]


def gradcheck(fn: Callable[..., Any], inputs: Sequence[Any], wrt: Sequence[bool] | None = None,
              seed: int = 0, eps: float = FD_EPS, differentiates: bool = False) -> None:
    """Assert that autograd's gradients of `fn` match central finite differences.

    `inputs` are NumPy arrays (float64 ones are differentiated unless `wrt` says otherwise)
    or other static values passed through as they are. The scalar checked is
    ``sum_i <fn(x)_i, u_i>`` for fixed random upstream gradients ``u_i``, so the whole
    vector-Jacobian product is covered, not just the gradient of a plain sum.
    Set `differentiates` when `fn` itself calls autograd (checking second derivatives):
    its inputs then require grad during the finite-difference evaluations too.
    """
    arrays = [np.asarray(a) if isinstance(a, np.ndarray) else a for a in inputs]
    if wrt is None:
        wrt = [isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays]
    rng = np.random.default_rng(seed)

    def wrap(vals: Sequence[Any], grad: bool) -> list:
        return [kiln.tensor(v, requires_grad=grad and w) if isinstance(v, np.ndarray) else v
                for v, w in zip(vals, wrt)]

    xs = wrap(arrays, True)
    outs = _outputs(fn(*xs))
    assert outs, "gradcheck: fn returned no floating-point output"
    upstream = [rng.standard_normal(o.shape) for o in outs]
    loss = None
    for o, u in zip(outs, upstream):
        term = (o * kiln.tensor(u)).sum()
        loss = term if loss is None else loss + term
    diff = [x for x, w in zip(xs, wrt) if w]
    analytic = kiln.autograd.grad(loss, diff, allow_unused=True)

    def scalar(vals: Sequence[Any]) -> float:
        with kiln.set_grad_enabled(differentiates):
            res = _outputs(fn(*wrap(vals, differentiates)))
        return float(sum((r.detach().numpy().astype(np.float64) * u).sum() for r, u in zip(res, upstream)))

    k = 0
    for i, (a, w) in enumerate(zip(arrays, wrt)):
        if not w:
            continue
        numeric = np.zeros(a.shape)
        flat = numeric.reshape(-1)
        for j in range(a.size):
            plus, minus = a.copy(), a.copy()
            plus.reshape(-1)[j] += eps
            minus.reshape(-1)[j] -= eps
            vals_p = list(arrays)
            vals_m = list(arrays)
            vals_p[i], vals_m[i] = plus, minus
            flat[j] = (scalar(vals_p) - scalar(vals_m)) / (2 * eps)
        got = analytic[k]
        got = np.zeros(a.shape) if got is None else got.detach().numpy()
        np.testing.assert_allclose(got, numeric, **tol("float64", "fd"),
                                   err_msg=f"gradcheck: input {i} of shape {a.shape}")
        k += 1

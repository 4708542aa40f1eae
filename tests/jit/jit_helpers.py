"""Helpers shared by the JIT tests: compare compiled results with eager ones."""
from __future__ import annotations

import numpy as np

import kiln

TOL = {"float32": 1e-5, "float64": 1e-10}


def assert_close(actual, expected, dtype: str = "float32", atol: float | None = None) -> None:
    a = actual.detach().numpy() if isinstance(actual, kiln.Tensor) else np.asarray(actual)
    e = expected.detach().numpy() if isinstance(expected, kiln.Tensor) else np.asarray(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    rtol = TOL[dtype]
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol if atol is not None else rtol)


def grads_of(params) -> list[np.ndarray]:
    return [None if p.grad is None else p.grad.numpy().copy() for p in params]


def bits(a: np.ndarray) -> np.ndarray:
    """The array's raw bits as unsigned integers (numeric dtypes), for bit-for-bit comparisons."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}") if a.dtype.kind in "fiu" else a


def assert_bitwise(got, want, what: str = "", oracle: str = "eager") -> None:
    """`got` equals `want` bit for bit (any NaN matches any NaN); the message names `what` and the `oracle`."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    differ = bits(got) != bits(want)
    if got.dtype.kind == "f":
        differ &= ~(np.isnan(got) & np.isnan(want))
    if differ.any():
        where = np.flatnonzero(differ)[:5]
        raise AssertionError(f"{what}: {int(differ.sum())} of {differ.size} elements differ, e.g. at {where}: "
                             f"{got.reshape(-1)[where]} vs {oracle} {want.reshape(-1)[where]}")

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

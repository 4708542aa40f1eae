"""The one tolerance table for every op test: (rtol, atol) per dtype and check kind.

- "forward": kiln output vs PyTorch output.
- "grad": kiln gradient vs PyTorch gradient (a random upstream gradient, so sums of
  products: a little looser than forward in float32).
- "fd": autograd vs central finite differences, float64 only.
"""
from __future__ import annotations

import numpy as np

TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "float32": {"forward": (2e-5, 2e-6), "grad": (1e-4, 1e-5)},
    "float64": {"forward": (1e-10, 1e-12), "grad": (1e-9, 1e-11), "fd": (1e-6, 1e-8)},
}

FD_EPS = 1e-6  # step of the central differences (float64)


def tol(dtype: object, kind: str = "forward") -> dict[str, float]:
    """``np.testing.assert_allclose`` keyword arguments for `dtype` ("float32", kiln or numpy dtypes)."""
    name = getattr(dtype, "name", None) or str(np.dtype(dtype))
    name = name.replace("torch.", "")
    rtol, atol = TOLERANCES[name][kind]
    return {"rtol": rtol, "atol": atol}

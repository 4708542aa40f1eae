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


# C spelling (the C renderer's table, kiln/jit/backends/render) vs the primitive's own NumPy
# kernel, in units in the last place, on tests/jit/test_c_expressions.py's grid of special
# values; zeros, infinities and NaN must still match exactly. Only transcendentals are here: NumPy
# uses its own SIMD loops (float32 exp/log/sin/cos, tanh) or, on AVX-512 machines, Intel's SVML
# (pow among others), and erf comes from SciPy; none of them is correctly rounded, so no C can
# give their bits. In float32, exp, log, tanh, erf and sigmoid are kiln's own vectorized versions
# (render/vecmath.py; at most 3 ulp from NumPy on a dense grid of 34M values,
# tests/jit/test_vector_math.py) and they fuse (fusion.TRANSCENDENTAL): 4 ulp is the bound that
# compiled code keeps against eager for them. The rest is libm (glibc); measured maxima on 600k
# values (AVX-512, NumPy 2.4, glibc 2.36, SciPy 1.17) in brackets; those ops, and every float64
# transcendental, stay unfused.
C_EXPR_ULPS: dict[str, dict[str, int]] = {
    "exp": {"float32": 4, "float64": 2},  # [-, 1]
    "log": {"float32": 4, "float64": 2},  # [-, 1]
    "log1p": {"float32": 4, "float64": 2},  # [2, 1]
    "sin": {"float32": 2, "float64": 2},  # [1, 0]
    "cos": {"float32": 2, "float64": 2},  # [1, 0]
    "tanh": {"float32": 4, "float64": 4},  # [-, 2]
    "sigmoid": {"float32": 4, "float64": 4},  # [-, 2]: one exp plus the kernel's divisions
    # [-, 3] against SciPy; without SciPy the kernel's own series is 7 ulp off on the grid in float64
    "erf": {"float32": 4, "float64": 8},
    # [1, 1] against SVML; NumPy also special-cases a broadcast scalar exponent (0.5 -> sqrt, so
    # (-inf) ** 0.5 is nan there but inf in C and in NumPy's own array loop): pow is never fused
    "pow": {"float32": 2, "float64": 2},
    # libm against SVML, measured on 600k values spread over each function's domain, [float32, float64];
    # these never fuse: compiled code runs the NumPy kernels, so it keeps eager's bits
    "tan": {"float32": 4, "float64": 4},  # [3, 1]
    "asin": {"float32": 4, "float64": 4},  # [3, 1]
    "acos": {"float32": 4, "float64": 4},  # [2, 1]
    "atan": {"float32": 4, "float64": 4},  # [2, 1]
    "atan2": {"float32": 4, "float64": 4},  # [3, 1]
    "sinh": {"float32": 4, "float64": 4},  # [1, 1]
    "cosh": {"float32": 4, "float64": 4},  # [2, 1]
    "asinh": {"float32": 4, "float64": 4},  # [1, 2]
    "acosh": {"float32": 4, "float64": 4},  # [1, 2]
    "atanh": {"float32": 4, "float64": 4},  # [1, 2]
}

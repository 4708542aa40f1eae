"""fold2d (col2im) as a small C loop, for the fold2d kernel.

fold2d sums every window column back into its image position. In NumPy that is one
strided ``+=`` per kernel offset, each over rows only ``OW`` long, which costs far more
than the adds themselves (a 5x5 convolution's input gradient makes 25 such passes). The
C loop here makes the same additions in the same order, for each output element the
offsets ``(i, j)`` in row-major order starting from zero, with no fused multiply-add, so
its result equals the NumPy loop's bit for bit; the kernel uses it for float32 and float64
when a C compiler is available (built once with kiln's toolchain, cached on disk) and
keeps the NumPy loop otherwise.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

SYMBOL = "kiln_fold2d"
_C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}

_SOURCE = """
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
/* out (n, c, hp, wp), C-ordered and zeroed, += cols (n, c, kh, kw, oh, ow) at element strides s */
#define FOLD(NAME, T) \\
void NAME(const T *cols, const long long *s, T *out, const long long *d) { \\
    const long long n = d[0], c = d[1], kh = d[2], kw = d[3], oh = d[4], ow = d[5]; \\
    const long long hp = d[6], wp = d[7], sh = d[8], sw = d[9], dh = d[10], dw = d[11]; \\
    for (long long a = 0; a < n; a++) \\
        for (long long b = 0; b < c; b++) { \\
            T *o = out + (a * c + b) * hp * wp; \\
            const T *src = cols + a * s[0] + b * s[1]; \\
            for (long long i = 0; i < kh; i++) \\
                for (long long j = 0; j < kw; j++) { \\
                    const T *w = src + i * s[2] + j * s[3]; \\
                    for (long long y = 0; y < oh; y++) { \\
                        T *row = o + (i * dh + y * sh) * wp + j * dw; \\
                        const T *in = w + y * s[4]; \\
                        if (sw == 1 && s[5] == 1) \\
                            for (long long x = 0; x < ow; x++) row[x] += in[x]; \\
                        else \\
                            for (long long x = 0; x < ow; x++) row[x * sw] += in[x * s[5]]; \\
                    } \\
                } \\
        } \\
}
FOLD(kiln_fold2d_float, float)
FOLD(kiln_fold2d_double, double)
"""

_lock = threading.Lock()
_functions: dict[str, Any] = {}
_unavailable: list[str] = []  # why the library cannot be built here (filled once)
_P = ctypes.POINTER(ctypes.c_longlong)


def _function(ctype: str) -> Any:
    fn = _functions.get(ctype)
    if fn is not None or _unavailable:
        return fn
    with _lock:
        if not _functions and not _unavailable:
            from ..jit.backends.cpu import toolchain  # noqa: PLC0415 - kiln.jit imports kiln.ops

            try:
                lib = toolchain.build(_SOURCE, "kiln_fold2d_float")
            except toolchain.CompilerUnavailable as exc:
                _unavailable.append(str(exc))
                return None
            for name in _C_TYPES.values():
                f = getattr(lib, f"kiln_fold2d_{name}")
                f.argtypes = [ctypes.c_void_p, _P, ctypes.c_void_p, _P]
                f.restype = None
                _functions[name] = f
        return _functions.get(ctype)


def fold2d_into(out: np.ndarray, cols: np.ndarray, stride: tuple, dilation: tuple) -> bool:
    """Add `cols` (N, C, kh, kw, OH, OW) into the zeroed, C-ordered padded image `out` (N, C, Hp, Wp)
    in C, as the NumPy loop would; False (nothing done) where the C loop does not apply."""
    ctype = _C_TYPES.get(cols.dtype)
    if (ctype is None or type(cols) is not np.ndarray or out.dtype != cols.dtype or not out.flags.c_contiguous
            or any(s % cols.itemsize for s in cols.strides) or cols.size == 0):
        return False
    fn = _function(ctype)
    if fn is None:
        return False
    n, c, kh, kw, oh, ow = cols.shape
    strides = (ctypes.c_longlong * 6)(*(s // cols.itemsize for s in cols.strides))
    dims = (ctypes.c_longlong * 12)(n, c, kh, kw, oh, ow, out.shape[2], out.shape[3], stride[0], stride[1],
                                    dilation[0], dilation[1])
    fn(cols.ctypes.data, strides, out.ctypes.data, dims)
    return True

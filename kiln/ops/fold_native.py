"""fold2d (col2im) in C, for the eager fold2d kernel.

fold2d sums every window column back into its image position. In NumPy that is one
strided ``+=`` per kernel offset, each over rows only ``OW`` long, which costs far more
than the adds themselves (a 5x5 convolution's input gradient makes 25 such passes). The
C function here, the one a native plan's fold is rendered from (render/c_im2col.py,
`render_fold_function`: here with every size and stride read at run time), makes the same
additions in the same order, for each output element the offsets ``(i, j)`` in row-major
order starting from zero, with no fused multiply-add, so its result equals the NumPy loop's
bit for bit. The kernel uses it for float32 and float64 when a C compiler is available
(built once with kiln's toolchain, cached on disk) and keeps the NumPy loop otherwise.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

SYMBOL = "kiln_fold2d"
_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def _source() -> str:
    from ..jit.backends.render.c import C  # noqa: PLC0415 - kiln.jit imports kiln.ops
    from ..jit.backends.render.c_im2col import render_fold_function  # noqa: PLC0415

    return "\n".join([C.prelude, *(render_fold_function(name, f"{SYMBOL}_{name}") for name in _DTYPES.values())])


_lock = threading.Lock()
_functions: dict[str, Any] = {}
_unavailable: list[str] = []  # why the library cannot be built here (filled once)
_P = ctypes.POINTER(ctypes.c_longlong)


def _function(dtype: str) -> Any:
    fn = _functions.get(dtype)
    if fn is not None or _unavailable:
        return fn
    with _lock:
        if not _functions and not _unavailable:
            from ..jit.backends.cpu import toolchain  # noqa: PLC0415 - kiln.jit imports kiln.ops

            try:
                lib = toolchain.build(_source(), f"{SYMBOL}_float32")
            except toolchain.CompilerUnavailable as exc:
                _unavailable.append(str(exc))
                return None
            for name in _DTYPES.values():
                f = getattr(lib, f"{SYMBOL}_{name}")
                f.argtypes = [ctypes.c_void_p, _P, ctypes.c_void_p, _P]
                f.restype = None
                _functions[name] = f
        return _functions.get(dtype)


def fold2d_into(out: np.ndarray, cols: np.ndarray, stride: tuple, dilation: tuple) -> bool:
    """Write into the C-ordered padded image `out` (N, C, Hp, Wp; any contents) the sum of `cols` (N, C, kh, kw,
    OH, OW) in C, as the NumPy loop adds them into zeros; False (nothing done) where the C loop does not apply."""
    dtype = _DTYPES.get(cols.dtype)
    if (dtype is None or type(cols) is not np.ndarray or out.dtype != cols.dtype or not out.flags.c_contiguous
            or any(s % cols.itemsize for s in cols.strides) or cols.size == 0):
        return False
    fn = _function(dtype)
    if fn is None:
        return False
    n, c, kh, kw, oh, ow = cols.shape
    strides = (ctypes.c_longlong * 6)(*(s // cols.itemsize for s in cols.strides))
    dims = (ctypes.c_longlong * 12)(n, c, kh, kw, oh, ow, out.shape[2], out.shape[3], stride[0], stride[1],
                                    dilation[0], dilation[1])
    fn(cols.ctypes.data, strides, out.ctypes.data, dims)
    return True

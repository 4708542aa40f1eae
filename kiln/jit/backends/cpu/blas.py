"""NumPy's own BLAS, found at run time, for GEMMs called from generated C.

Why NumPy's: a compiled matmul must give exactly the bits `np.matmul` gives (the
interpreter backend is the oracle), and the only way to be sure of that is to make the
very BLAS call NumPy makes, into the very library NumPy uses. It also keeps one BLAS
thread pool in the process: two OpenBLAS pools busy at once on the same cores slow
each other down.

NumPy's wheels bundle OpenBLAS built for this (``scipy-openblas``): its CBLAS functions
carry a ``scipy_`` prefix and, in the 64-bit-integer build NumPy uses, a ``64_`` suffix
(``scipy_cblas_sgemm64_``). The functions are looked up through NumPy's own extension
module, whose dependencies include that library, so no path is guessed. Any other BLAS
(a NumPy built against MKL, Accelerate, or a system OpenBLAS with unknown integer width)
is not used: matmuls then stay with NumPy itself.
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

# (symbol prefix, symbol suffix, C type of a BLAS integer): the builds kiln knows the ABI of
_FLAVOURS = (("scipy_", "64_", "long long"), ("scipy_", "", "int"))
FUNCTIONS = ("sgemm", "dgemm", "sgemv", "dgemv", "ssyrk", "dsyrk", "sdot", "ddot")

_lock = threading.Lock()
_found: list = []  # [NumpyBlas | None], filled once


@dataclass(frozen=True)
class NumpyBlas:
    """The CBLAS functions NumPy calls: their addresses and the C type of their integers."""

    int_type: str  # "long long" (ILP64) or "int" (LP64)
    addresses: dict  # function name ("sgemm") -> address in this process
    library: str  # NumPy's extension module, through which the functions were found
    flavour: str  # e.g. "scipy_cblas_*64_"

    def table(self) -> list[int]:
        """The function addresses in FUNCTIONS order (what generated code's setup function takes)."""
        return [self.addresses[name] for name in FUNCTIONS]


def _numpy_blas_name() -> str:
    """The BLAS NumPy says it was built with ("scipy-openblas", ...), or "" when it does not say."""
    try:
        config = np.show_config(mode="dicts")
        return str(config["Build Dependencies"]["blas"].get("name", ""))
    except Exception:  # noqa: BLE001 - an old or unusual NumPy: treated as unknown
        return ""


def _lookup() -> NumpyBlas | None:
    if "openblas" not in _numpy_blas_name().lower():
        return None
    try:
        from numpy._core import _multiarray_umath as umath  # noqa: PLC0415
    except ImportError:  # NumPy 1.x
        try:
            from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]  # noqa: PLC0415
        except ImportError:
            return None
    path = getattr(umath, "__file__", None)
    if not path:
        return None
    try:
        lib = ctypes.CDLL(path)  # already loaded: this returns a handle whose lookups search its dependencies
    except OSError:
        return None
    for prefix, suffix, int_type in _FLAVOURS:
        addresses = {}
        for name in FUNCTIONS:
            try:
                addresses[name] = ctypes.cast(getattr(lib, f"{prefix}cblas_{name}{suffix}"), ctypes.c_void_p).value
            except AttributeError:
                break
        if len(addresses) == len(FUNCTIONS):
            return NumpyBlas(int_type, addresses, path, f"{prefix}cblas_*{suffix}")
    return None


def openblas_function(name: str, argtypes: list, restype: Any) -> Any:
    """OpenBLAS's C function `name` (``openblas_get_num_threads``, ...) in NumPy's BLAS, with its symbol's
    prefix and suffix and the given signature; None when kiln does not know that BLAS or it lacks the function."""
    found = numpy_blas()
    if found is None:
        return None
    prefix, suffix = found.flavour.split("cblas_*")
    try:
        function = getattr(ctypes.CDLL(found.library), f"{prefix}{name}{suffix}")
    except (AttributeError, OSError):
        return None
    function.argtypes, function.restype = argtypes, restype
    return function


SHARED_TEAM_ENV = "KILN_SHARED_BLAS_TEAM"  # 0: NumPy's OpenBLAS keeps its own threads (blas_team.py)


def threads_callback_setter() -> Any:
    """OpenBLAS's ``openblas_set_threads_callback_function`` (caller-managed threading, OpenBLAS 0.3.27+) in
    NumPy's BLAS, or None."""
    return openblas_function("openblas_set_threads_callback_function", [ctypes.c_void_p], None)


def can_share_team() -> bool:
    """Whether NumPy's OpenBLAS has caller-managed threading and $KILN_SHARED_BLAS_TEAM allows using it (what
    blas_team.share needs besides kernels that run on teams); builds nothing."""
    return os.environ.get(SHARED_TEAM_ENV, "").strip() != "0" and threads_callback_setter() is not None


def blas_threads() -> int:
    """Threads NumPy's OpenBLAS uses now (1 when kiln does not know its BLAS or cannot ask it)."""
    ask = openblas_function("openblas_get_num_threads", [], ctypes.c_int)
    return 1 if ask is None else max(1, int(ask()))


def set_blas_threads(n: int) -> bool:
    """Make NumPy's OpenBLAS use `n` threads from now on; False when kiln does not know its BLAS or cannot tell it."""
    tell = openblas_function("openblas_set_num_threads", [ctypes.c_int], None)
    if tell is not None:
        tell(int(n))
    return tell is not None


def numpy_blas() -> NumpyBlas | None:
    """NumPy's CBLAS functions when kiln knows their ABI, else None (looked up once per process)."""
    with _lock:
        if not _found:
            _found.append(_lookup())
        return _found[0]

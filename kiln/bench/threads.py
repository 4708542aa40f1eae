"""How many threads NumPy's BLAS uses, so peers can be run with the same number."""
from __future__ import annotations

import ctypes
import os

_GETTERS = ("openblas_get_num_threads", "openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "MKL_Get_Max_Threads", "mkl_get_max_threads")
_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def numpy_blas_threads() -> int:
    """Threads NumPy's BLAS uses: via threadpoolctl, else the loaded BLAS library, else env/CPU count."""
    import numpy  # noqa: F401, PLC0415 - make sure the BLAS library is loaded

    try:
        from threadpoolctl import threadpool_info  # noqa: PLC0415

        counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
        if counts:
            return int(counts[0])
    except ImportError:
        pass
    found = _ask_loaded_blas()
    if found:
        return found
    for var in _ENV_VARS:
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return available_cpus()


def available_cpus() -> int:
    """CPUs this process may run on (respects affinity masks, unlike os.cpu_count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ask_loaded_blas() -> int | None:
    """Ask the BLAS shared library mapped into this process (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "blas" in line.lower() or "mkl_rt" in line.lower()})
    except OSError:
        return None
    for path in paths:
        if not path.startswith("/"):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _GETTERS:
            getter = getattr(lib, name, None)
            if getter is not None:
                getter.restype = ctypes.c_int
                n = int(getter())
                if n > 0:
                    return n
    return None

"""One thread pool: NumPy's OpenBLAS runs its threaded calls on kiln's OpenMP team.

A multi-threaded OpenBLAS keeps its worker threads spinning on the other CPUs for a while
after every threaded call (about 2^28 cycles, tens of milliseconds). A kiln kernel that starts a
team in that time shares those CPUs with the spinners and runs at about half speed: an eager
MNIST CNN step (a GEMM between its convolutions) measured 73 ms against 51-57 ms with the
spinning gone, and compiled plans with a matmul had to run their kernels serially.

OpenBLAS 0.3.27 and later let the caller run its threads (``openblas_set_threads_callback_function``):
each threaded call hands over its jobs, which the callback must run at once. kiln's callback
(render/openmp.py, `BLAS_TEAM_SOURCE`) runs them on an OpenMP team of the libgomp kiln loads,
whose idle threads then spin a few milliseconds before they sleep, as OpenBLAS's own did
(toolchain.OPENMP_SPIN_COUNT). OpenBLAS still chooses how many jobs and how to split the work,
so every result keeps the bits it had on OpenBLAS's own threads.

`share()` installs the callback once per process, the first time kiln loads a kernel library
that runs on teams. It does nothing (and says why in a debug note) where:

* ``$KILN_SHARED_BLAS_TEAM`` is ``0``;
* NumPy's BLAS is not an OpenBLAS kiln knows the ABI of (blas.py), or has no callback API;
* kernels cannot run on teams (no OpenMP compiler, or a libgomp of unknown wait policy was
  loaded first, as PyTorch's is).

A forked child goes back to OpenBLAS's own threads (libgomp's team does not survive fork).
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading

from ..render.openmp import BLAS_TEAM_SOURCE, BLAS_TEAM_SYMBOL
from . import background, toolchain
from .blas import SHARED_TEAM_ENV, can_share_team, threads_callback_setter

_log = logging.getLogger("kiln.jit")
ENV = SHARED_TEAM_ENV

_lock = threading.RLock()
# "shared": bool once decided; "deciding": set while the deciding thread builds the callback library;
# "lib", "set": the callback library and OpenBLAS's setter
_state: dict = {}


def _back_to_openblas_threads() -> None:
    setter = _state.get("set")
    if setter is not None and _state.get("shared"):
        setter(None)
        _state["shared"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_back_to_openblas_threads)


def _decide() -> bool:
    if not can_share_team():
        _log.debug("kiln: NumPy's OpenBLAS keeps its own threads ($%s=0, or a BLAS without caller-managed "
                   "threading, which OpenBLAS has from 0.3.27)", ENV)
        return False
    setter = threads_callback_setter()
    try:
        command = toolchain.compiler_command()
        if not (toolchain.openmp_flags(command) and toolchain.prepare_openmp_runtime()):
            return False
        lib = toolchain.build(BLAS_TEAM_SOURCE, BLAS_TEAM_SYMBOL)
    except toolchain.CompilerUnavailable as exc:
        _log.debug("kiln: cannot build the BLAS team callback (%s): NumPy's OpenBLAS keeps its own threads", exc)
        return False
    _state["lib"], _state["set"] = lib, setter
    setter(ctypes.cast(getattr(lib, BLAS_TEAM_SYMBOL), ctypes.c_void_p))
    return True


def share(wait: bool = True) -> bool:
    """Run NumPy's OpenBLAS threads on kiln's team from now on, if this process can (module docstring); whether
    it does. Decided once per process (a forked child goes back to OpenBLAS's own threads).

    `wait=False` (a plan rendered while its code builds in the background): where deciding would wait for
    the compiler to build the callback library, that build goes to a worker thread (background.py) and this
    returns whether the process is expected to share (it can, and kernels run on teams). The answer only
    chooses whether a plan's kernels run serially, for speed; results are the same either way."""
    if "shared" in _state:
        return bool(_state["shared"])
    if not wait and ("deciding in the background" in _state or not _library_at_hand()):
        if "deciding in the background" not in _state:
            _state["deciding in the background"] = background.submit(share)
        return _expected()
    with _lock:  # another thread (the backward lowered beside the forward) waits for the decision
        if "shared" in _state:
            return bool(_state["shared"])
        if _state.get("deciding"):
            return False  # the deciding thread itself, building the callback library: that one runs serially
        _state["deciding"] = True
        try:
            decided = _decide()
        finally:
            del _state["deciding"]
        _state["shared"] = decided
        return decided


def _library_at_hand() -> bool:
    """Whether the callback library is loaded or in the kernel cache (deciding then waits for no compiler)."""
    try:
        return toolchain.cached(BLAS_TEAM_SOURCE, BLAS_TEAM_SYMBOL) is not None
    except toolchain.CompilerUnavailable:
        return True  # (deciding fails at once)


def _expected() -> bool:
    """What `share` will decide where its callback library builds: whether this process can share at all."""
    if "shared" in _state:
        return bool(_state["shared"])
    try:
        return can_share_team() and bool(toolchain.openmp_flags(toolchain.compiler_command()))
    except toolchain.CompilerUnavailable:
        return False


def shared() -> bool:
    """Whether NumPy's OpenBLAS runs its threads on kiln's team now (without deciding it)."""
    return bool(_state.get("shared"))


def calls() -> tuple[int, int]:
    """(calls run on a team, calls whose team came up short and ran on threads of their own) so far."""
    lib = _state.get("lib")
    if lib is None:
        return 0, 0
    return (ctypes.c_longlong.in_dll(lib, "kiln_blas_team_calls").value,
            ctypes.c_longlong.in_dll(lib, "kiln_blas_thread_calls").value)


toolchain.after_team_library.append(share)  # a library whose kernels run on teams is loaded: decide now

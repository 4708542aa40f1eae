"""How many threads generated kernels use, and from what size on (render/openmp.py spells the C).

Every loaded kernel library points its ``kiln_team`` at one process-wide array (`TEAM`):
a flag held while a team runs, the thread count, the fewest elements worth a team, and two
counters (teams run, size of the last team) that tests and benchmarks read.

* Threads: the CPUs this process may run on (its affinity mask), unless set with
  `set_kernel_threads` or ``$KILN_NUM_THREADS``. One means every kernel runs serially.
* Threshold: `MIN_ELEMENTS` (rows x columns per call). Below it a kernel runs serially:
  starting and joining a team costs several microseconds, more than splitting saves.
* A forked child process runs its kernels serially (libgomp's threads stay in the parent).
* One team at a time in the process: a kernel called while another kernel's team runs
  (another Python thread calling a plan) runs serially, so threads never exceed the CPUs
  and teams never nest.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings

MIN_ELEMENTS = 1 << 18
"""Fewest elements (outer x inner) for which a kernel runs on a team (measured, see docs/how-compile-works.md)."""

_FLAG, _THREADS, _MIN, _REGIONS, _LAST = range(5)
_lock = threading.Lock()


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else os.cpu_count()."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _configured_threads() -> int:
    text = os.environ.get("KILN_NUM_THREADS", "").strip()
    if not text:
        return available_cpus()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:  # a bad setting must not break `import kiln`: say so once and use the default
        warnings.warn(f"kiln: ignoring $KILN_NUM_THREADS={text!r}: expected a whole number of threads >= 1; "
                      f"using the {available_cpus()} CPUs this process may run on", RuntimeWarning, stacklevel=2)
        return available_cpus()
    return value


TEAM = (ctypes.c_longlong * 5)(0, _configured_threads(), MIN_ELEMENTS, 0, 0)


def _serial_in_child() -> None:
    # libgomp's thread pool does not survive fork(): a child starting a team would wait forever
    # for threads that exist only in its parent, so forked children (DataLoader workers) run serially
    TEAM[_FLAG] = 0
    TEAM[_THREADS] = 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_serial_in_child)


def kernel_threads() -> int:
    """Threads a generated kernel uses above the threshold (1: serial)."""
    return int(TEAM[_THREADS])


def set_kernel_threads(n: int) -> None:
    """Use `n` threads (>= 1) in generated kernels from now on, in every loaded kernel."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"kernel threads must be a whole number >= 1, got {n!r}")
    TEAM[_THREADS] = n


def min_elements() -> int:
    """Fewest elements per call for which a kernel runs on a team."""
    return int(TEAM[_MIN])


def team_min_for(nodes: list) -> int:
    """The `team_min` to render a fused group of graph `nodes` with (render_c): the team threshold now, so a
    kernel whose sizes stay below it is compiled without an OpenMP region; 0 (keep the region) when a size is
    symbolic, since a symbolic plan calls its kernels with other sizes than the trace saw."""
    from ...symbolic import is_symbolic  # noqa: PLC0415

    if any(is_symbolic(tuple(v.shape)) for n in nodes for v in (*n.inputs, n.out)):
        return 0
    return min_elements()


def set_min_elements(n: int) -> None:
    """Run kernels of at least `n` elements per call on a team (tests use small values)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the parallel threshold must be a whole number of elements >= 0, got {n!r}")
    TEAM[_MIN] = n


def teams_run() -> int:
    """How many kernel calls ran on a team so far in this process."""
    return int(TEAM[_REGIONS])


def last_team_size() -> int:
    """Threads in the last team that ran (0 if none has)."""
    return int(TEAM[_LAST])


def attach(lib: ctypes.CDLL) -> None:
    """Point a freshly loaded kernel library at the process-wide settings (a library without them is left alone)."""
    try:
        pointer = ctypes.c_void_p.in_dll(lib, "kiln_team")
    except ValueError:
        return
    with _lock:
        pointer.value = ctypes.addressof(TEAM)

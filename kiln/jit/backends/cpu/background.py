"""Background builds: generated C compiles in worker threads while the calls that need it run in Python.

A compiled function's first call returns what its trace computed, and its plan's C is needed
only from the next call on. With background builds on (the default), the C compiler runs in
a worker thread while the calling thread goes on. A call that comes before its code is ready
runs the plan's graph node by node through the primitives' NumPy kernels, as the
interpreter does. Those give eager's bits, as the generated code does, so the moment the
native code takes over changes no result. A library that this process has already loaded,
or that the disk cache holds, is loaded at once instead.

What builds this way: native plans (runtime.py, through `submit`), the fused kernels of a
Python replay (`Library` and `KernelBuild`, one library per replay: kernel_library.py), an
eager optimizer's kernel (kiln/optim/native_kernel.py) and the OpenBLAS team callback
(blas_team.py). Each compiler runs at the lowest CPU priority (toolchain.build's
`low_priority`), one fewer at a time than the process has CPUs (`workers`). A `Build`
survives fork: a child process starts it again when it needs it.

Turn them off with ``$KILN_BACKGROUND_BUILDS=0`` or `set_background_builds(False)`: every
plan then builds its code before its first replay, on the calling thread. The test suite does
that, so that replays run the generated code they check. `wait_for_builds()` blocks until
every build started so far has finished (benchmarks call it before they time steady state).
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from . import toolchain
from .parallel import available_cpus

ENV = "KILN_BACKGROUND_BUILDS"

_enabled = os.environ.get(ENV, "1").strip() != "0"
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1  # the process that started _pool's threads (a forked child has none of them)
_pending: set["Build"] = set()


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # (another thread may have held it when the parent forked)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def background_builds() -> bool:
    """Whether plans build their generated code in worker threads (see the module docstring)."""
    return _enabled


def set_background_builds(enabled: bool) -> bool:
    """Turn background builds on or off for plans made from now on; returns the previous setting."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_background_builds expects True or False, got {type(enabled).__name__} {enabled!r}")
    previous, _enabled = _enabled, enabled
    return previous


def workers() -> int:
    """How many builds run in the background at once: one CPU fewer than this process may use (and at
    least one). Each runs its compiler at the lowest priority, but even so two compilers on a
    2-CPU machine halve the speed of the program's own BLAS threads."""
    return max(1, available_cpus() - 1)


class Build:
    """A build running in a worker thread: `done()`, and `result()` (waiting; the exception it raised).

    A process forked while the build ran (a DataLoader worker, say) has no copy of the worker
    thread: there the build starts again the first time it is asked about, so no call waits on a
    thread that does not exist.
    """

    def __init__(self, work: Callable[[], Any]):
        self._work = work
        self._launch()

    def _launch(self) -> None:
        self._pid = os.getpid()
        self._future = _start(self._work)
        with _lock:
            _pending.add(self)
        self._future.add_done_callback(lambda _: self._finished())

    def _current(self) -> Future:
        if self._pid != os.getpid() and not self._future.done():
            self._launch()
        return self._future

    def done(self) -> bool:
        return self._current().done()

    def result(self, timeout: float | None = None) -> Any:
        return self._current().result(timeout)

    def _finished(self) -> None:
        with _lock:
            _pending.discard(self)


def _start(work: Callable[[], Any]) -> Future:
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="kiln-background-build")
            _pool_pid = os.getpid()
        return _pool.submit(work)


def submit(work: Callable[[], Any]) -> Build:
    """Run `work` in a worker thread; its Build."""
    return Build(work)


def wait_for_builds(timeout: float | None = None) -> bool:
    """Block until every background build started so far has finished (or `timeout` seconds have passed);
    whether they all have. A build that failed counts as finished: the plan that started it reports the
    failure at its next call."""
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"wait_for_builds expects a timeout of None or seconds >= 0, got {timeout!r}")
    with _lock:
        pending = list(_pending)
    _, not_done = wait([build._current() for build in pending], timeout=timeout)
    return not not_done


class Library:
    """A library of generated C, loaded from the cache, built on the calling thread when first needed, or
    built in a worker thread once `start` is called (`ready` says whether `get` would wait)."""

    def __init__(self, source: Callable[[], str]):
        self._source = source  # the C (rendered on first need)
        self._lib: ctypes.CDLL | None = None
        self._build: Build | None = None

    def start(self) -> None:
        """Load the library from the cache, or start building it in a worker thread."""
        if self._lib is not None or self._build is not None:
            return
        source = self._source()
        self._lib = toolchain.cached(source)
        if self._lib is None:
            self._build = submit(lambda: toolchain.build(source, low_priority=True))

    @property
    def ready(self) -> bool:
        """Whether `get()` would not wait for a compiler."""
        return self._lib is not None or self._build is None or self._build.done()

    def get(self) -> ctypes.CDLL | None:
        """The library: built now if it was never started (CompilerUnavailable if that fails), else the
        background build's, waiting for it (None if it failed: kiln warns once)."""
        if self._lib is None:
            if self._build is None:
                self._lib = toolchain.build(self._source())
                return self._lib
            try:
                self._lib = self._build.result()
            except toolchain.CompilerUnavailable as exc:
                warn_failed(exc)
                return None
        return self._lib


class KernelBuild:
    """The compiled function of a fused kernel run on its own: from a library of its own, or from one it
    shares with the other kernels of its plan (`share`)."""

    def __init__(self, source: Callable[[], str], bind: Callable[[ctypes.CDLL, str], Any]):
        self._library = Library(source)
        self._symbol = toolchain.SYMBOL
        self._bind = bind  # (library, symbol) -> the function, with its ctypes signature
        self._function: Any = None

    def share(self, library: Library, symbol: str) -> None:
        """Take the function `symbol` from `library` (built for several kernels) instead."""
        self._library, self._symbol = library, symbol

    def start(self) -> None:
        """Load the library from the cache, or start building it in a worker thread."""
        self._library.start()

    @property
    def ready(self) -> bool:
        """Whether `function()` would not wait for a compiler."""
        return self._function is not None or self._library.ready

    def function(self) -> Any:
        """The compiled function (None if its library failed to build in the background; see Library.get)."""
        if self._function is None:
            lib = self._library.get()
            if lib is not None:
                self._function = self._bind(lib, self._symbol)
        return self._function


_warned_failed = False


def warn_failed(exc: Exception) -> None:
    """Warn, once per process, that a build in the background failed (its code then runs through NumPy)."""
    global _warned_failed
    if not _warned_failed:
        _warned_failed = True
        warnings.warn(f"kiln: generated C failed to build in the background ({exc}); what that code would "
                      "have run goes on through NumPy, with the same results", RuntimeWarning, stacklevel=4)

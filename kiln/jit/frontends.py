"""The seed API's front ends: ``jit`` / ``djit`` decorators, ``xpr`` and ``trace_graph``."""
from __future__ import annotations

import time
from typing import Any, Callable

from ..ops.device_copy import to_gpu
from ..trace_state import trace_state
from . import debug
from .function import JITFunction
from .ir import Graph
from .lazy import LazyRecorder, SegmentPlans
from .passes import DeadNodeElim, NoGradStrip, Pipeline, inference_pipeline, run_pass
from .trace import trace


class DynamicJITFunction(JITFunction):
    """djit: the function's Python runs on every call, with its tensor ops recorded instead of run; a
    value Python needs (a branch on a tensor, ``.item()``) or the return runs what is pending as one
    compiled plan, kept per graph structure (kiln/jit/lazy.py)."""

    def __init__(self, fn: Callable, show_graph: bool = False, auto_device: bool = True):
        super().__init__(fn, show_graph=show_graph, auto_device=auto_device)
        self._segments = SegmentPlans(self._lower_timed, self._optimize, self._on_new_structure, self.stats,
                                      self._lock)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._place_on_gpu:
            args, kwargs = to_gpu(args), to_gpu(kwargs)
        if trace_state.tracer is not None or trace_state.lazy is not None:
            return self._fn(*args, **kwargs)  # inside a trace or another djit call: part of it
        with self._lock:
            self.stats.traces += 1
        recorder = LazyRecorder(self._segments)
        trace_state.lazy = recorder
        try:
            result = self._fn(*args, **kwargs)
        finally:
            trace_state.lazy = None
        recorder.realize()  # what the result (or anything else still referenced) holds
        if recorder.hot_sites:
            self._warn_hot_loop(recorder)
        return result

    def _warn_hot_loop(self, recorder: LazyRecorder) -> None:
        site, count = max(recorder.hot_sites.items(), key=lambda item: item[1])
        self._warn_once("djit hot loop", (
            f"kiln.djit({self.__name__}): one call ran what it had recorded {recorder.realizations} times, "
            f"{count} of them at {site}: a value Python needs inside a loop (a branch on a tensor, .item()) runs "
            "the pending ops as a plan at every turn, at about eager speed. Fix: take the value once, outside "
            "the loop; or use tensor ops (kiln.where, masking) instead of the branch; or kiln.compile the "
            "function, which keeps a plan per path of a branch"))

    def _optimize(self, graph: Graph) -> Graph:
        return run_pass(inference_pipeline(), graph)

    def _lower_timed(self, graph: Graph) -> Any:
        start = time.perf_counter()
        try:
            return self._lower(graph)
        finally:
            with self._lock:
                self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3

    def _on_new_structure(self, graph: Graph) -> None:
        debug.log_trace(self.__name__, graph)
        debug.log_miss(self.__name__, self.stats.misses + 1, ["new graph structure"])
        if self.show_graph:
            print(graph.to_text())


class StaticJITFunction(JITFunction):
    """jit(static=True): kiln.compile plus optional accelerator placement of inputs."""

    def __init__(self, fn: Callable, show_graph: bool = False, auto_device: bool = True):
        super().__init__(fn, show_graph=show_graph, auto_device=auto_device)


def jit(func: Callable | None = None, *, static: bool = True, show_graph: bool = False,
        auto_device: bool = True) -> Any:
    """JIT-compile a function; usable as ``jit(f)`` or ``@jit`` / ``@jit(static=False)``.

    ``auto_device=True`` (the default here) moves CPU tensor arguments to the GPU when
    ``kiln.cuda.is_available()``; without a GPU it does nothing.
    """
    def wrap(fn: Callable) -> Any:
        if not callable(fn):
            raise TypeError(f"kiln.jit() expects a callable, got {type(fn)}")
        if static:
            return StaticJITFunction(fn, show_graph=show_graph, auto_device=auto_device)
        return DynamicJITFunction(fn, show_graph=show_graph, auto_device=auto_device)

    return wrap if func is None else wrap(func)


def djit(func: Callable | None = None, *, show_graph: bool = False, auto_device: bool = True) -> Any:
    """Dynamic JIT: retraces every call, reusing compiled plans by graph-structure hash."""
    return jit(func, static=False, show_graph=show_graph, auto_device=auto_device)


def trace_graph(fn: Callable, *args: Any, **kwargs: Any) -> Graph:
    """Trace fn on example arguments and return its graph (no-grad, dead nodes removed)."""
    traced = trace(fn, args, kwargs, no_grad=True)
    return run_pass(Pipeline([NoGradStrip(), DeadNodeElim()]), traced.graph)


def xpr(fn: Callable, *primals: Any) -> str:
    """The xpr text (JAX-like) of fn's graph on example inputs `primals`."""
    return trace_graph(fn, *primals).to_text()

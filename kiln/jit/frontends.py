"""The seed API's front ends: ``jit`` / ``djit`` decorators, ``xpr`` and ``trace_graph``."""
from __future__ import annotations

import time
from typing import Any, Callable

from ..device import to_gpu
from ..ops.primitive import trace_state
from . import debug
from .function import JITFunction
from .ir import Graph
from .passes import DeadNodeElim, NoGradStrip, Pipeline, inference_pipeline, run_pass
from .trace import trace


class DynamicJITFunction(JITFunction):
    """djit: retrace on every call (data-dependent Python works) and reuse plans by graph structure."""

    def __init__(self, fn: Callable, show_graph: bool = False, auto_device: bool = True):
        super().__init__(fn, show_graph=show_graph, auto_device=auto_device)
        self._plans: dict[int, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._place_on_gpu:
            args, kwargs = to_gpu(args), to_gpu(kwargs)
        if trace_state.tracer is not None:
            return self._fn(*args, **kwargs)
        start = time.perf_counter()
        traced = trace(self._fn, args, kwargs)
        with self._lock:
            self.stats.traces += 1
            debug.log_trace(self.__name__, traced.graph)
            graph = run_pass(Pipeline([NoGradStrip(), DeadNodeElim()]), traced.graph)
            h = graph.structure_hash()
            if h in self._plans:
                self.stats.hits += 1
            else:
                self.stats.misses += 1
                debug.log_miss(self.__name__, self.stats.misses, ["new graph structure"])
                self._plans[h] = self._lower(run_pass(inference_pipeline(), graph))
                if self.show_graph:
                    print(graph.to_text())
                self.stats.cache_size = len(self._plans)
            self.stats.total_compile_time_ms += (time.perf_counter() - start) * 1e3
        return traced.result


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

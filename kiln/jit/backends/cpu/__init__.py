"""The CPU backend: plans run as calls into generated C, with NumPy for what C does not do.

`lower(graph)` fuses row groups (rows.py: a sum or max over trailing axes with the
elementwise prologue and epilogue around it, rendered by rowcode.py) and elementwise
groups (elementwise_groups.py, rendered by codegen.py) into single nodes (fuse_graph.py), then hands the
graph to the native runtime (runtime.py): runs of nodes C can do (those kernels, matmuls
through NumPy's own BLAS, leading-axis sums, fills, and views read through strides)
become one generated C function each, called once per replay, with intermediates in a
per-thread arena. The other nodes run their NumPy kernels between those calls.

Symbolic (dynamic_dims) shapes, and graphs with no native node, get the Python replay
(`python_plan`): the interpreter's Plan with large groups compiled into one library
(kernel_library.py). It is also the reference a native plan falls back to. Without a working
compiler (none, failing, silent, misconfigured or hanging) the backend warns once and lowers
exactly like `interpret`. Everything compiled is cached on disk (toolchain.py). The compiler
runs in worker threads while calls go on in Python with the same bits (background.py), unless
that is turned off.
"""
from __future__ import annotations

import os
import warnings

from ... import debug
from ...ir import Graph
from ..interpret import Plan
from . import background, blas_team, runtime, toolchain  # noqa: F401 - blas_team: told when a team library loads
from .codegen import FusedElementwise
from .fuse_graph import fuse, fuse_elementwise, fuse_rows
from .kernel_library import share_library
from .rowcode import RowKernel
from .runtime import NativePlan, plan_for, symbolic_plan_for
from .symbolic_fusion import fuse_symbolic
from .toolchain import CompilerUnavailable
from ...symbolic import is_symbolic

# $KILN_NATIVE=0 (or setting this False): every plan replays in Python, as before the native runtime
NATIVE_RUNTIME = os.environ.get("KILN_NATIVE", "1").strip() != "0"

_warned = False  # the fallback warning is given once per process


def _reset_state() -> None:
    """Forget the fallback warning, the count of native plans made, and the toolchain's per-process
    state (for tests)."""
    global _warned
    _warned = False
    runtime._made.clear()
    toolchain._reset_state()


def available() -> bool:
    """Whether a C compiler actually builds libraries here (probed once per process)."""
    return toolchain.compiler_problem() is None


def lower(graph: Graph) -> Plan | NativePlan:
    """graph -> a native plan (runtime.py) where any node runs natively, else the Python replay with
    fused kernels (`python_plan`); without a compiler, the interpreter (one warning per process)."""
    if NATIVE_RUNTIME:
        symbolic = any(is_symbolic(tuple(v.shape)) for v in _values(graph))
        try:
            plan = (symbolic_plan_for if symbolic else plan_for)(graph, lambda: python_plan(graph))
        except CompilerUnavailable as exc:
            _warn(exc)
            return _interpreted(graph)
        if plan is not None:
            debug.log_kernels(plan.graph)
            return plan
    plan = python_plan(graph)
    debug.log_kernels(plan.graph)
    return plan


def python_plan(graph: Graph) -> Plan:
    """The Python replay of `graph` with its large groups fused into C kernels of one library: the
    reference a native plan falls back to, and the plan for symbolic shapes. The library builds
    now, or in the background (background.py), when each group runs through NumPy until it is ready."""
    try:
        fused = fuse_symbolic(graph) if any(is_symbolic(tuple(v.shape)) for v in _values(graph)) else fuse(graph)
        kernels = [node.prim for node in fused.nodes if isinstance(node.prim, (FusedElementwise, RowKernel))]
        share_library(kernels)  # (one compiler run for them all)
        in_background = background.background_builds()
        for kernel in kernels:
            if in_background:
                kernel.start_build()  # (a broken compiler shows here: its probe runs now)
            else:
                kernel.fn  # noqa: B018 - build now, so a broken compiler shows here
        plan = Plan(fused)
    except CompilerUnavailable as exc:
        _warn(exc)
        return _interpreted(graph)
    plan.backend = "cpu"
    return plan


def _interpreted(graph: Graph) -> Plan:
    plan = Plan(graph)
    plan.backend = "cpu"
    return plan


def _warn(exc: Exception) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"kiln: the CPU code generator is unavailable ({exc}); using the NumPy "
                      "interpreter instead", RuntimeWarning, stacklevel=3)


def _values(graph: Graph):
    yield from graph.inputs
    for node in graph.nodes:
        yield node.out

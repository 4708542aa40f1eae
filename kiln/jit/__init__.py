"""The JIT compiler: trace -> Graph -> passes -> Plan -> cache -> replay (forward and backward).

``kiln.jit`` is both this package (``kiln.jit.passes``, ``kiln.jit.ir``, ...) and the
seed API's decorator: calling the package, ``kiln.jit(f)`` or ``@kiln.jit(static=False)``,
calls `api.jit`.
"""
import sys
import types

from . import api as _api
from .api import (CompiledFunction, DynamicJITFunction, JITFunction, JITModule, compile, djit, jit,
                  trace_graph, xpr)
from .backends.cpu.background import background_builds, set_background_builds, wait_for_builds
from .cache import CacheKey, CompilationStats, PlanCache
from .ir import Graph, InputSpec, Node, Value
from .trace import GraphBreakError, Tracer
from . import eager_plans as _eager_plans  # noqa: F401 - installs the compiled eager cross-entropy

__all__ = ["CacheKey", "CompilationStats", "CompiledFunction", "DynamicJITFunction", "Graph",
           "GraphBreakError", "InputSpec", "JITFunction", "JITModule", "Node", "PlanCache", "Tracer",
           "Value", "background_builds", "compile", "djit", "jit", "set_background_builds", "trace_graph",
           "wait_for_builds", "xpr"]


class _CallablePackage(types.ModuleType):
    """The kiln.jit package, callable as the `jit` decorator."""

    def __call__(self, func=None, **options):
        return _api.jit(func, **options)


sys.modules[__name__].__class__ = _CallablePackage

"""The JIT compiler: trace -> Graph -> passes -> Plan -> cache -> replay (forward and backward)."""
from .api import (CompiledFunction, DynamicJITFunction, JITFunction, JITModule, compile, djit, jit,
                  trace_graph, xpr)
from .cache import CacheKey, CompilationStats, PlanCache
from .ir import Graph, InputSpec, Node, Value
from .trace import GraphBreakError, Tracer

__all__ = ["CacheKey", "CompilationStats", "CompiledFunction", "DynamicJITFunction", "Graph",
           "GraphBreakError", "InputSpec", "JITFunction", "JITModule", "Node", "PlanCache", "Tracer",
           "Value", "compile", "djit", "jit", "trace_graph", "xpr"]

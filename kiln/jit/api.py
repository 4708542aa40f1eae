"""The public JIT API: ``kiln.compile`` and the names it returns.

Where things live: keys.py builds cache keys, trace.py traces, build.py turns a
trace into a cache entry, misslog.py explains misses, function.py is the call
path of `JITFunction`, jit_module.py is `JITModule`, and frontends.py holds the
``jit``/``djit``/``xpr`` front ends.
"""
from __future__ import annotations

from typing import Any

from ..nn.module import Module, register_compile
from ..tensor import Tensor
from .frontends import DynamicJITFunction, StaticJITFunction, djit, jit, trace_graph, xpr
from .function import CompiledFunction, JITFunction
from .jit_module import JITModule

__all__ = ["CompiledFunction", "DynamicJITFunction", "JITFunction", "JITModule", "StaticJITFunction", "compile",
           "djit", "jit", "trace_graph", "xpr"]


def compile(target: Any = None, *, fullgraph: bool = False, max_cache_entries: int | None = None,  # noqa: A001
            max_cache_size: int | None = None, eviction: str = "lru", dynamic_dims: Any = None,
            backend: Any = "auto", passes: list | None = None, auto_device: bool = False,
            dynamic: bool | None = None) -> Any:
    """Compile an nn.Module (-> JITModule) or a callable (-> JITFunction).

    >>> model = kiln.compile(kiln.models.mlp())
    >>> fast_fn = kiln.compile(fn, dynamic_dims={0: {0: "B"}})

    ``dynamic`` (as in ``torch.compile``): None, the default, compiles each call for its exact
    shapes until a tensor dim changes size between calls; then that dim becomes a symbolic size,
    and one plan serves its other sizes (the plans already compiled keep serving theirs).
    ``False`` compiles a plan per size; ``True`` makes every dim symbolic from the first call.
    ``dynamic_dims`` names symbolic dims explicitly (see auto_dynamic.py).

    A bound method of a module (``kiln.compile(model.forward)``) is keyed on the
    module's training mode, structure and parameters, like ``kiln.compile(model)``.
    Without a target, returns a decorator.

    ``backend`` is "auto", "cpu", "interpret" or a backend object such as
    ``kiln.jit.backends.cuda.CUDACompiler(dtype="float16")`` (which needs a GPU).
    ``auto_device=True`` moves CPU tensor arguments to the GPU before each call when
    ``kiln.cuda.is_available()``; without a GPU it does nothing. A module's parameters
    are not moved: call ``model.to("cuda")`` first.
    """
    options = dict(fullgraph=fullgraph, max_cache_entries=max_cache_entries, max_cache_size=max_cache_size,
                   eviction=eviction, dynamic_dims=dynamic_dims, backend=backend, passes=passes,
                   auto_device=auto_device, dynamic=dynamic)
    if target is None:
        return lambda fn: compile(fn, **options)
    if isinstance(target, Module):
        return JITModule(target, **options)
    if isinstance(target, type) and issubclass(target, Module):
        raise TypeError(f"kiln.compile() expects an nn.Module instance, got the class {target.__name__}; "
                        f"create the module first: kiln.compile({target.__name__}(...))")
    if callable(target) and not isinstance(target, (int, float, str, bytes, Tensor)):
        return JITFunction(target, **options)
    raise TypeError(f"kiln.compile() expects an nn.Module or a callable, got {type(target)}")


register_compile(compile)  # Module.compile calls it (kiln.nn cannot import kiln.jit, which imports it)

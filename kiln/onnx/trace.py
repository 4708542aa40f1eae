"""Tracing a model or function into an inference Graph for ONNX export.

Like ``kiln.jit.trace_graph`` (eval mode, no grad, gradient bookkeeping
stripped), plus what an exporter needs: module parameters and buffers arrive as
named inputs (they become named initializers), dims listed in `dynamic_dims`
are symbolic, and the graph gets the generic cleanup passes (constant folding,
CSE, dead code), so the ONNX model is as small as the compiled plan.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ..jit.ir import Graph
from ..jit.passes import inference_pipeline, run_pass
from ..jit.pytree import flatten
from ..jit.trace import GraphBreakError, trace
from ..tensor import Tensor
from .errors import ExportError

DynamicDims = dict[int, dict[int, str]]


@dataclass
class ExportTrace:
    """A traced inference graph and where its dynamic dims come from."""

    graph: Graph
    dim_sources: dict[str, tuple[int, int]]  # dim name -> (positional arg index, axis)
    n_outputs: int


def normalize_args(example_args: Any) -> tuple:
    """example_args as a tuple: a single tensor becomes a 1-tuple."""
    if isinstance(example_args, Tensor):
        return (example_args,)
    if isinstance(example_args, (tuple, list)):
        return tuple(example_args)
    raise TypeError(f"kiln.onnx.export: example_args must be a Tensor or a tuple of them, got "
                    f"{type(example_args).__name__}")


def check_dynamic_dims(dynamic_dims: Any, args: tuple) -> DynamicDims:
    """Validate ``{arg_index: {dim: "name"}}`` against the example arguments."""
    if dynamic_dims is None:
        return {}
    if not isinstance(dynamic_dims, dict):
        raise ValueError(f"dynamic_dims must be a dict like {{0: {{0: 'batch'}}}}, got {type(dynamic_dims).__name__}")
    out: DynamicDims = {}
    for index, dims in dynamic_dims.items():
        if not isinstance(index, int) or not 0 <= index < len(args) or not isinstance(args[index], Tensor):
            raise ValueError(f"dynamic_dims names argument {index!r}, but the example arguments have tensors at "
                             f"positions {[i for i, a in enumerate(args) if isinstance(a, Tensor)]}")
        if not isinstance(dims, dict):
            raise ValueError(f"dynamic_dims[{index}] must be a dict {{dim: 'name'}}, got {type(dims).__name__}")
        ndim = args[index].ndim
        normalized = {}
        for dim, name in dims.items():
            if not isinstance(dim, int) or not -ndim <= dim < ndim:
                raise ValueError(f"dynamic_dims[{index}] names dim {dim!r}, but argument {index} has shape "
                                 f"{tuple(args[index].shape)}")
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"dynamic_dims[{index}][{dim}] must be an identifier such as 'batch', got {name!r}")
            normalized[dim % ndim] = name
        out[index] = normalized
    return out


def trace_for_export(target: Callable, args: tuple, dynamic_dims: DynamicDims) -> ExportTrace:
    """Trace `target(*args)` in eval mode without gradients into a cleaned-up inference graph."""
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn needs kiln.tensor first

    module = target if isinstance(target, Module) else None
    modes = [(m, m.training) for m in module.modules()] if module is not None else []
    dim_sources: dict[str, tuple[int, int]] = {}
    seen: set[int] = set()
    for index, arg in enumerate(args):
        if not isinstance(arg, Tensor):
            continue
        if id(arg) in seen:
            raise ValueError(f"kiln.onnx.export: example argument {index} is the same tensor as an earlier "
                             "one; pass distinct tensors (each becomes its own ONNX input)")
        seen.add(id(arg))
        for axis, name in dynamic_dims.get(index, {}).items():
            dim_sources.setdefault(name, (index, axis))
    try:
        if module is not None:
            module.eval()
        traced = trace(target, args, fullgraph=True, dynamic=_leaf_dims(args, dynamic_dims),
                       module=module, no_grad=True)
    except GraphBreakError as exc:
        why = str(exc).split(" Fix:")[0].rstrip(".")
        raise ExportError(f"kiln.onnx.export: {why}. An ONNX graph cannot branch on tensor values in Python. "
                          "Fix: use tensor ops (kiln.where, masking) instead of Python branches.") from None
    finally:
        for m, training in modes:
            m.training = training
    tracer, result = traced.tracer, traced.result
    outputs = tensors_in(result)
    if not outputs:
        raise ExportError(f"kiln.onnx.export: the model returned {type(result).__name__} with no tensors; "
                          "an ONNX model needs at least one tensor output")
    tracer.set_outputs(outputs)
    if tracer.graph.state_writes:
        raise ExportError("kiln.onnx.export: the traced function updates tensors in place (e.g. BatchNorm "
                          "running statistics in train mode), which an ONNX model cannot do. Fix: export in "
                          "eval mode, or move the in-place update out of the exported function.")
    graph = run_pass(inference_pipeline(), tracer.graph)
    return ExportTrace(graph, dim_sources, len(outputs))


def _leaf_dims(args: tuple, dynamic_dims: DynamicDims) -> DynamicDims:
    """dynamic_dims by argument index -> by leaf index of the flattened (args, {})."""
    out: DynamicDims = {}
    offset = 0
    for index, arg in enumerate(args):
        if index in dynamic_dims:
            out[offset] = dynamic_dims[index]
        offset += len(flatten(arg)[0])
    return out


def tensors_in(result: Any) -> list[Tensor]:
    """The tensors of a model's result in order: through tuples and lists (and their subclasses,
    such as the (values, indices) of ``x.max(dim)``), dicts and dataclasses."""
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, (tuple, list)):
        return [t for item in result for t in tensors_in(item)]
    if isinstance(result, dict):
        return [t for item in result.values() for t in tensors_in(item)]
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return [t for f in dataclasses.fields(result) for t in tensors_in(getattr(result, f.name))]
    return []

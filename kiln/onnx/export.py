"""kiln.onnx.export: trace a model or function and write it as an ONNX model."""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..version import __version__
from .dynamic import verify_dynamic, widen_size_one
from .trace import check_dynamic_dims, normalize_args, trace_for_export

MIN_OPSET = 13  # ReduceSum takes axes as an input from here on


def export(model_or_fn: Any, example_args: Any, path: str | os.PathLike | None = None, *,
           dynamic_dims: dict[int, dict[int, str]] | None = None, opset: int = 17,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None) -> Any:
    """Export an nn.Module (in eval mode) or a function of tensors to an ONNX model file.

    The model is traced once on `example_args` without gradients. Parameters and
    buffers become initializers named by their state-dict keys. Dims named in
    `dynamic_dims` (``{arg_index: {dim: "name"}}``) become symbolic ``dim_param``
    dims of the ONNX inputs, and shapes computed from them are computed at run
    time; the exporter traces again at other sizes to prove that no op baked the
    example size in (a dynamic dim of example size 1 is traced at size 2, as
    broadcasting would otherwise specialize the graph to 1). Returns the ``onnx.ModelProto`` (also written to
    `path` unless it is None). Needs the ``onnx`` package: ``pip install kiln[onnx]``.

    >>> model = kiln.models.mlp()
    >>> kiln.onnx.export(model, kiln.randn(1, 784), "mlp.onnx", dynamic_dims={0: {0: "batch"}})
    >>> import onnxruntime as ort
    >>> x = kiln.randn(32, 784)
    >>> ort.InferenceSession("mlp.onnx").run(None, {"input_0": x.numpy()})[0].shape
    (32, 10)

    Raises UnsupportedOpError naming the primitive (and its xpr line) for an op
    with no ONNX form, and ExportError for programs ONNX cannot express.
    """
    onnx = _require_onnx()
    from .lowering import Lowering  # noqa: PLC0415 - it imports onnx

    if not callable(model_or_fn):
        raise TypeError(f"kiln.onnx.export expects an nn.Module or a function, got {type(model_or_fn).__name__}")
    args = normalize_args(example_args)
    max_opset = onnx.defs.onnx_opset_version()
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= max_opset:
        raise ValueError(f"kiln.onnx.export: opset must be an int from {MIN_OPSET} to {max_opset} (the newest "
                         f"your onnx package knows), got {opset!r}")
    dims = check_dynamic_dims(dynamic_dims, args)
    args = widen_size_one(args, dims)
    trace = trace_for_export(model_or_fn, args, dims)
    verify_dynamic(trace, args, dims, lambda resized: trace_for_export(model_or_fn, resized, dims))

    n_inputs = sum(1 for s in trace.graph.specs if s.kind == "arg")
    inputs = _names("input_names", input_names, n_inputs, "input")
    outputs = _names("output_names", output_names, trace.n_outputs, "output")
    if set(inputs) & set(outputs):
        raise ValueError(f"kiln.onnx.export: input and output names must differ, both have "
                         f"{sorted(set(inputs) & set(outputs))}")
    graph_name = type(model_or_fn).__name__ if not _is_function(model_or_fn) else model_or_fn.__name__
    graph = Lowering(trace, opset).run(inputs, outputs, graph_name)
    opset_ids = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=opset_ids, producer_name="kiln",
                                   producer_version=_kiln_version(),
                                   ir_version=onnx.helper.find_min_ir_version_for(opset_ids))
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


def _require_onnx() -> Any:
    try:
        import onnx  # noqa: PLC0415
    except ImportError:
        raise ImportError("kiln.onnx.export needs the onnx package: pip install onnx "
                          "(or pip install kiln[onnx], which adds onnxruntime to run the model)") from None
    return onnx


def _names(what: str, given: Sequence[str] | None, count: int, prefix: str) -> list[str]:
    if given is None:
        return [f"{prefix}_{i}" for i in range(count)]
    names = list(given)
    if len(names) != count or not all(isinstance(n, str) and n for n in names) or len(set(names)) != count:
        raise ValueError(f"kiln.onnx.export: {what} must be {count} distinct non-empty strings (one per "
                         f"{'tensor argument' if prefix == 'input' else 'tensor output'}), got {given!r}")
    return names


def _is_function(obj: Callable) -> bool:
    from ..nn.module import Module  # noqa: PLC0415

    return not isinstance(obj, Module) and hasattr(obj, "__name__")


def _kiln_version() -> str:
    return __version__

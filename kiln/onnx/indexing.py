"""Lowering of the `index` primitive (``x[spec]``) to Slice, Squeeze, Gather and Unsqueeze.

Three steps, each emitted only when needed:
  1. one Slice for every slice and integer entry (an integer i is the slice i:i+1);
  2. Squeeze the integer axes, or Gather along the axis of the one tensor index;
  3. Unsqueeze the None entries at their output positions.
Supported: any mix of slices, integers, None and Ellipsis; or one integer tensor
index on one axis with slices and None (integers allowed right next to it, as
NumPy then treats them together). Boolean masks and several tensor indices have
no static-shape ONNX form and raise UnsupportedOpError.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..jit.ir import Node
from .builder import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    from .lowering import Lowering


def expand_ellipsis(spec: tuple, ndim: int) -> list[tuple]:
    """The spec with Ellipsis replaced by full slices (and trailing dims left implicit)."""
    consumed = sum(1 for e in spec if e[0] in ("s", "i", "t"))
    out: list[tuple] = []
    for entry in spec:
        if entry[0] == "e":
            out.extend([("s", None, None, None)] * (ndim - consumed))
        else:
            out.append(entry)
    return out


def lower_index(ctx: Lowering, node: Node, ins: list) -> str:
    x, *index_tensors = ins
    ndim = len(node.inputs[0].shape)
    spec = expand_ellipsis(node.params["spec"], ndim)
    tensor_values = node.inputs[1:]
    _check_supported(ctx, node, spec, tensor_values)

    starts, ends, axes, steps = [], [], [], []
    squeeze: list[int] = []
    unsqueeze: list[int] = []
    gather_axis = None
    in_axis = out_axis = 0
    for entry in spec:
        kind = entry[0]
        if kind == "s":
            _, start, stop, step = entry
            if not (start is None and stop is None and step in (None, 1)):
                step = 1 if step is None else step
                starts.append(start if start is not None else (0 if step > 0 else INT64_MAX))
                ends.append(stop if stop is not None else (INT64_MAX if step > 0 else INT64_MIN))
                axes.append(in_axis)
                steps.append(step)
            in_axis += 1
            out_axis += 1
        elif kind == "i":
            i = entry[1]
            starts.append(i)
            ends.append(i + 1 if i != -1 else INT64_MAX)
            axes.append(in_axis)
            steps.append(1)
            squeeze.append(in_axis)
            in_axis += 1
        elif kind == "n":
            unsqueeze.append(out_axis)
            out_axis += 1
        else:  # "t": the one tensor index
            gather_axis = in_axis - len(squeeze)  # integer axes before it are squeezed first
            in_axis += 1
            out_axis += len(tensor_values[0].shape)

    b = ctx.b
    if axes:
        x = b.op("Slice", [x, b.ints_tensor(starts), b.ints_tensor(ends), b.int64s(axes), b.int64s(steps)],
                 hint="slice")
    if squeeze:
        x = b.op("Squeeze", [x, b.int64s(squeeze)], hint="squeeze")
    if gather_axis is not None:
        x = b.op("Gather", [x, index_tensors[0]], hint="take", axis=gather_axis)
    if unsqueeze:
        x = b.op("Unsqueeze", [x, b.int64s(unsqueeze)], hint="unsqueeze")
    if x == ins[0]:
        x = b.op("Identity", [x], hint="index")
    return x


def _check_supported(ctx: Lowering, node: Node, spec: list[tuple], tensor_values: list[Any]) -> None:
    tensor_positions = [i for i, e in enumerate(spec) if e[0] == "t"]
    if not tensor_positions:
        return
    if len(tensor_positions) > 1:
        ctx.unsupported(node, f"indexing with {len(tensor_positions)} tensor indices; only one tensor index "
                              "on one axis exports (as Gather)")
    if tensor_values[0].dtype.name == "bool":
        ctx.unsupported(node, "a boolean mask index gives a data-dependent shape; use kiln.where(mask, x, 0) "
                              "or an integer index instead")
    advanced = [i for i, e in enumerate(spec) if e[0] in ("i", "t")]
    if advanced != list(range(advanced[0], advanced[-1] + 1)):
        ctx.unsupported(node, "integer indices separated from the tensor index (NumPy moves the result dims "
                              "to the front); index in two steps instead")

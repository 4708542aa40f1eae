"""unfold2d (im2col) and fold2d (col2im) in generated code: a convolution's window columns.

In a native plan an unfold2d node writes the columns straight into its own C-ordered buffer,
(N, C, KH, KW, OH, OW) or (C, KH, KW, N, OH, OW) as the node's batch_axis says, and the
convolution's reshape becomes a view of it; a fold2d node sums such columns back into an image.
This module says which nodes generated code runs and makes their segment-IR statements
(`unfold_statement`, `fold_statement`); render/c_im2col.py spells them.
"""
from __future__ import annotations

from ....ops.window import batch_first
from ....shaped import c_strides
from ...ir import Node
from ..render.segment_ir import Fold, Pointer, Unfold


def column_strides(node: Node, cols_shape: tuple) -> tuple[int, int, int, int]:
    """Element strides of the N, C, KH and KW axes of C-ordered columns of `cols_shape`, laid out
    as the node's batch_axis says (each (OH, OW) plane is contiguous in either layout)."""
    return batch_first(c_strides(tuple(int(d) for d in cols_shape)), node.params.get("batch_axis", 0))[:4]


def unfold_problem(node: Node) -> str | None:
    """Why generated code cannot run this unfold2d node, or None (any static input layout will do)."""
    x = node.inputs[0]
    if x.dtype.name not in ("float32", "float64") or node.out.dtype.name != x.dtype.name or len(x.shape) != 4:
        return "unfold2d dtype or rank"
    return None


def fold_problem(node: Node, compact_input: bool) -> str | None:
    """Why generated code cannot run this fold2d node, or None."""
    cols = node.inputs[0]
    if cols.dtype.name not in ("float32", "float64") or node.out.dtype.name != cols.dtype.name:
        return "fold2d dtype"
    if any(node.params["padding"]):
        return "fold2d with padding (eager returns a view of a padded image)"
    if not compact_input:
        return "fold2d of non-contiguous columns"
    return None


def unfold_statement(node: Node, x: Pointer, x_strides: tuple, out: Pointer) -> Unfold:
    """The segment IR's unfold of this unfold2d node, reading image `x` at element `x_strides`."""
    p = node.params
    _, _, kh, kw, oh, ow = batch_first(tuple(int(d) for d in node.out.shape), p.get("batch_axis", 0))
    return Unfold(node.out.dtype.name, x, out, tuple(int(d) for d in node.inputs[0].shape),  # type: ignore[arg-type]
                  tuple(int(s) for s in x_strides), (kh, kw, oh, ow),  # type: ignore[arg-type]
                  column_strides(node, tuple(node.out.shape)), tuple(p["stride"]), tuple(p["padding"]),
                  tuple(p["dilation"]), float(p["pad_value"]))


def fold_statement(node: Node, cols: Pointer, out: Pointer) -> Fold:
    """The segment IR's fold of this fold2d node, its columns compact."""
    p = node.params
    _, _, kh, kw, oh, ow = batch_first(tuple(int(d) for d in node.inputs[0].shape), p.get("batch_axis", 0))
    return Fold(node.out.dtype.name, cols, out, tuple(int(d) for d in node.out.shape),  # type: ignore[arg-type]
                (kh, kw, oh, ow), (*column_strides(node, tuple(node.inputs[0].shape)), ow, 1),  # type: ignore[arg-type]
                tuple(p["stride"]), tuple(p["dilation"]))

"""Peephole fusions: kiln's conv and pooling compositions back into ONNX Conv and MaxPool.

kiln writes conv2d as ``unfold2d -> reshape -> matmul(weight, cols) -> reshape -> permute -> copy`` and
max pooling as ``unfold2d(pad -inf) -> max over the window axes`` (or, when the windows tile
the image, ``reshape (N, C, H/kh, kh, W/kw, kw) -> max over (3, 5)``). Runtimes are far
faster on Conv/MaxPool than on the generic im2col Gather, so the exporter matches
these chains and emits one node for each. A chain is only fused when its inner
values are used by nothing else.

Grouped convolutions match too: ``reshape(cols, (g, K/g, N*L))`` and a weight of
shape ``(g, O/g, K/g)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..jit.ir import Graph, Node

if TYPE_CHECKING:
    from .lowering import Lowering


@dataclass
class Fusion:
    """Nodes `covered` are replaced by `emit`, which produces the value of the last one (`root`)."""

    root: Node
    covered: set[int] = field(default_factory=set)  # out ids of the replaced nodes, root included
    emit: Callable[["Lowering"], str] = lambda ctx: ""


def find_fusions(graph: Graph) -> dict[int, Fusion]:
    """Fusions keyed by the out id of every node they cover."""
    users = graph.users()
    producers = graph.producers()
    outputs = {v.id for v in graph.outputs}

    def only_user(node: Node) -> Node | None:
        found = users.get(node.out.id, [])
        if len(found) != 1 or node.out.id in outputs:
            return None
        return found[0]

    fusions: dict[int, Fusion] = {}
    for node in graph.nodes:
        if not node.out.dtype.is_floating_point:
            continue
        if node.prim.name == "reshape":
            fusion = _match_tiled_max_pool(node, only_user)
        elif node.prim.name == "unfold2d":
            fusion = _match_conv(node, only_user, producers) or _match_max_pool(node, only_user)
        else:
            continue
        if fusion is not None:
            for vid in fusion.covered:
                fusions[vid] = fusion
    return fusions


def _windows(unfold: Node) -> dict:
    """Conv/MaxPool attributes from unfold2d's params."""
    p = unfold.params
    (ph, pw) = p["padding"]
    return {"kernel_shape": list(p["kernel"]), "strides": list(p["stride"]), "pads": [ph, pw, ph, pw],
            "dilations": list(p["dilation"])}


def _match_max_pool(unfold: Node, only_user: Callable) -> Fusion | None:
    reduce = only_user(unfold)
    if reduce is None or reduce.prim.name != "max" or tuple(reduce.params["axes"]) != (2, 3) \
            or reduce.params["keepdims"]:
        return None
    if unfold.params["padding"] != (0, 0) and unfold.params["pad_value"] != float("-inf"):
        return None

    def emit(ctx: Lowering) -> str:
        return ctx.b.op("MaxPool", [ctx.name(unfold.inputs[0])], hint="max_pool", **_windows(unfold))

    return Fusion(reduce, {unfold.out.id, reduce.out.id}, emit)


def _match_tiled_max_pool(tiles: Node, only_user: Callable) -> Fusion | None:
    """max_pool2d over windows that tile the image: ``reshape (N, C, H/kh, kh, W/kw, kw) -> max over (3, 5)``."""
    reduce = only_user(tiles)
    if reduce is None or reduce.prim.name != "max" or tuple(reduce.params["axes"]) != (3, 5) \
            or reduce.params["keepdims"]:
        return None
    image = tuple(tiles.inputs[0].shape)
    shape = tuple(tiles.params["shape"])
    if len(image) != 4 or len(shape) != 6 or shape[:2] != image[:2] \
            or shape[2] * shape[3] != image[2] or shape[4] * shape[5] != image[3]:
        return None
    kernel = [shape[3], shape[5]]

    def emit(ctx: Lowering) -> str:
        return ctx.b.op("MaxPool", [ctx.name(tiles.inputs[0])], hint="max_pool", kernel_shape=kernel,
                        strides=kernel, pads=[0, 0, 0, 0])

    return Fusion(reduce, {tiles.out.id, reduce.out.id}, emit)


def _match_conv(unfold: Node, only_user: Callable, producers: dict[int, Node]) -> Fusion | None:
    """conv2d's chain: ``unfold2d(batch_axis=3) -> reshape (K, N*L) -> matmul(weight, cols) ->
    reshape (O, N, OH, OW)``, then ``permute (1, 0, 2, 3) -> copy`` (or, for one image, a reshape
    to (1, O, OH, OW))."""
    if unfold.params.get("batch_axis", 0) != 3:
        return None
    if unfold.params["padding"] != (0, 0) and unfold.params["pad_value"] != 0.0:
        return None
    cols = only_user(unfold)
    if cols is None or cols.prim.name != "reshape":
        return None
    matmul = only_user(cols)
    if matmul is None or matmul.prim.name != "matmul" or matmul.inputs[1] is not cols.out:
        return None
    image = only_user(matmul)
    if image is None or image.prim.name != "reshape":
        return None
    c, kh, kw, n, oh, ow = unfold.out.shape
    weight = matmul.inputs[0]
    k = c * kh * kw
    groups = _groups(tuple(cols.params["shape"]), tuple(weight.shape), k)
    shape = tuple(image.params["shape"])
    if groups is None or len(shape) != 4 or shape[2:] != (oh, ow):
        return None
    out_channels = shape[0]
    last = _to_batch_major(image, only_user)
    if last is None:
        return None

    kernel_shape = (out_channels, c // groups, kh, kw)
    covered = {unfold.out.id, cols.out.id, matmul.out.id, image.out.id} | {node.out.id for node in last}
    flat_weight = producers.get(weight.id)  # conv2d reshapes the (O, C, kh, kw) weight: use it directly
    if flat_weight is not None and flat_weight.prim.name == "reshape" and only_user(flat_weight) is matmul \
            and tuple(flat_weight.inputs[0].shape) == kernel_shape:
        weight = flat_weight.inputs[0]
        covered.add(flat_weight.out.id)

    def emit(ctx: Lowering) -> str:
        w = ctx.name(weight)
        if tuple(weight.shape) != kernel_shape:
            w = ctx.b.op("Reshape", [w, ctx.b.int64s(kernel_shape)], hint="conv_weight")
        return ctx.b.op("Conv", [ctx.name(unfold.inputs[0]), w], hint="conv", group=groups, **_windows(unfold))

    return Fusion(last[-1], covered, emit)


def _to_batch_major(image: Node, only_user: Callable) -> list[Node] | None:
    """The nodes that turn conv2d's (O, N, OH, OW) product into its (N, O, OH, OW) output."""
    first = only_user(image)
    if first is None:
        return None
    if first.prim.name == "reshape" and image.params["shape"][1] == 1 \
            and tuple(first.params["shape"]) == (1, image.params["shape"][0], *image.params["shape"][2:]):
        return [first]
    if first.prim.name != "permute" or tuple(first.params["perm"]) != (1, 0, 2, 3):
        return None
    copy = only_user(first)
    return [first, copy] if copy is not None and copy.prim.name == "copy" else None


def _groups(cols_shape: tuple, weight_shape: tuple, k: int) -> int | None:
    """The group count when (cols, weight) shapes are conv2d's, else None."""
    if len(cols_shape) == 2 and cols_shape[0] == k and len(weight_shape) == 2 and weight_shape[1] == k:
        return 1
    if len(cols_shape) == 3 and len(weight_shape) == 3:
        g = cols_shape[0]
        if isinstance(g, int) and g > 0 and cols_shape[1] == k // g and k % g == 0 \
                and weight_shape[0] == g and weight_shape[2] == k // g:
            return int(g)
    return None

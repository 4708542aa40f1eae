"""Proof that an exported graph really is dynamic in the dims the user named.

Symbolic dims follow a value only through ops whose shape rules keep them; an op
that computes with the concrete size instead would bake the example's size into
the graph, and the ONNX model would fail (or be wrong) for other sizes. So the
exporter traces a second time with every dynamic dim resized and checks that
the two graphs, evaluated at the new sizes, are the same graph.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..jit.ir import Graph, param_key
from ..jit.symbolic import resolve
from ..tensor import from_numpy
from .errors import ExportError, node_line
from .trace import DynamicDims, ExportTrace


def verify_dynamic(first: ExportTrace, args: tuple, dynamic_dims: DynamicDims,
                   retrace: Callable[[tuple], ExportTrace]) -> None:
    """Raise ExportError if some op baked in a dynamic dim's example size.

    `retrace(args)` traces again with the same dynamic dims, so both graphs made the
    same constant-folding decisions and differ only where a size was baked in.
    """
    if not dynamic_dims:
        return
    sizes = {name: int(args[index].shape[axis]) for name, (index, axis) in first.dim_sources.items()}
    failures = []
    checked = 0
    for step in (1, 2, -1, 3):  # two other sizes: one could coincide (4 // 2 == 5 // 2)
        env = {name: size + step for name, size in sizes.items()}
        if min(env.values()) < 1:
            continue
        try:
            second = retrace(_resized(args, dynamic_dims, env))
        except Exception as exc:  # noqa: BLE001 - the model may reject some sizes; try another
            failures.append(f"{env}: {type(exc).__name__}: {exc}")
            continue
        _compare(first.graph, second.graph, env, sizes)
        checked += 1
        if checked == 2:
            return
    if checked:
        return
    raise ExportError("kiln.onnx.export: could not trace the model again with other sizes for the dynamic "
                      "dims, to check that the graph does not depend on them:\n  " + "\n  ".join(failures)
                      + "\nFix: pass example arguments whose dynamic dims can grow or shrink by one.")


def widen_size_one(args: tuple, dynamic_dims: DynamicDims) -> tuple:
    """The example arguments with every dynamic dim of size 0 or 1 grown to 2.

    Broadcasting treats a size-1 dim specially, so a trace at size 1 specializes
    the graph to it (as in torch.export and JAX); a trace at size 2 does not.
    """
    env: dict[str, int] = {}
    for index, dims in dynamic_dims.items():
        for axis, name in dims.items():
            env[name] = max(env.get(name, 0), int(args[index].shape[axis]), 2)
    if all(int(args[i].shape[a]) == env[n] for i, dims in dynamic_dims.items() for a, n in dims.items()):
        return args
    return _resized(args, dynamic_dims, env)


def _resized(args: tuple, dynamic_dims: DynamicDims, env: dict[str, int]) -> tuple:
    """The example arguments with each dynamic dim resized to env[name] (rows repeat cyclically)."""
    out: list[Any] = list(args)
    for index, dims in dynamic_dims.items():
        array = args[index].detach().numpy()
        for axis, name in dims.items():
            rows = np.arange(env[name]) % max(array.shape[axis], 1)
            array = np.take(array, rows, axis=axis)
        out[index] = from_numpy(np.ascontiguousarray(array))
    return tuple(out)


def _compare(a: Graph, b: Graph, env: dict[str, int], sizes: dict[str, int]) -> None:
    def baked(where: str) -> ExportError:
        names = ", ".join(f"{n}={sizes[n]} then {env[n]}" for n in sizes)
        return ExportError(f"kiln.onnx.export: the example size of a dynamic dim is baked into the graph "
                           f"{where} (traced with {names}): kiln could not follow the dim symbolically "
                           "there, so the exported model would only work for the example size. Fix: export "
                           "without dynamic_dims for that dim (one model per size), or compute that part "
                           "from x.shape instead of Python constants.")

    if len(a.nodes) != len(b.nodes) or len(a.inputs) != len(b.inputs) or len(a.outputs) != len(b.outputs):
        raise baked(f"structure: the traced program changes with the size ({len(a.nodes)} vs {len(b.nodes)} "
                    "nodes)")
    pos_a = {v.id: i for i, v in enumerate(list(a.inputs) + [n.out for n in a.nodes])}
    pos_b = {v.id: i for i, v in enumerate(list(b.inputs) + [n.out for n in b.nodes])}
    for (va, sa), (vb, sb) in zip(zip(a.inputs, a.specs), zip(b.inputs, b.specs)):
        if sa.kind != sb.kind or resolve(va.shape, env) != resolve(vb.shape, env):
            what = "a constant" if sa.kind == "literal" else f"input {sa.name or sa.kind}"
            raise baked(f"at {what} of shape {va.type_str()}")
        if sa.literal is not None and not (sb.literal is not None and np.array_equal(sa.literal, sb.literal,
                                                                                     equal_nan=_floaty(sa.literal))):
            raise baked(f"at a constant of shape {va.type_str()}")
    for na, nb in zip(a.nodes, b.nodes):
        same = (na.prim is nb.prim and resolve(na.out.shape, env) == resolve(nb.out.shape, env)
                and param_key(resolve(na.params, env)) == param_key(resolve(nb.params, env))
                and [pos_a[v.id] for v in na.inputs] == [pos_b[v.id] for v in nb.inputs])
        if not same:
            raise baked(f"at `{node_line(a, na)}`")
    if [pos_a[v.id] for v in a.outputs] != [pos_b[v.id] for v in b.outputs]:
        raise baked("at the outputs")


def _floaty(array: Any) -> bool:
    return np.asarray(array).dtype.kind == "f"


"""unfold2d (im2col) and fold2d (col2im) in generated C: a convolution's window columns.

Eager unfold2d returns a strided view of the (padded) image, and the convolution's reshape
to (C*KH*KW, N*OH*OW) then copies it through NumPy's generic strided copy, whose rows are
only OW elements long. In a native plan the node writes the columns straight into its own
C-ordered buffer instead, (N, C, KH, KW, OH, OW) or (C, KH, KW, N, OH, OW) as the node's
batch_axis says, and the reshape becomes a view of it. The values are copies of input
elements (read with the input's own strides: any static layout) or the padding value, so
the result equals eager's exactly.
"""
from __future__ import annotations

import math

from ....ops.window import batch_first
from ....shaped import c_strides
from ...ir import Node
from ..render.c_kernels import VECTOR_LOOP


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


def _literal(value: float, ctype: str) -> str:
    if math.isnan(value):
        return f"({ctype})NAN"
    if math.isinf(value):
        return f"({ctype})({'-' if value < 0 else ''}INFINITY)"
    return f"({ctype}){float(value)!r}"


def _inside(count: int, step: int, offset: str, size: int) -> tuple[str, str]:
    """C expressions of [first, stop), both clamped to [0, count]: the indices i < count whose
    ``i*step + offset`` lies in [0, size), for `offset` a C expression."""
    return (f"kiln_clamp(kiln_ceil_div(-({offset}), {step}), 0, {count})",
            f"kiln_clamp(kiln_ceil_div({size} - ({offset}), {step}), 0, {count})")


UNFOLD_HELPERS = r"""
/* unfold2d: ceil(a / b) for b > 0, and v clamped to [lo, hi] */
static inline long long kiln_ceil_div(long long a, long long b) { return a > 0 ? (a + b - 1) / b : -(-a / b); }
static inline long long kiln_clamp(long long v, long long lo, long long hi) { return v < lo ? lo : (v > hi ? hi : v); }
"""


def render_unfold(node: Node, ctype: str, x: str, strides: tuple, out: str) -> list[str]:
    """C statements writing the window columns of `x` (read with element `strides`) into C-ordered `out`.

    For each kernel offset (ki, kj), the output rows y whose input row ``y*sh + ki*dh - ph`` lies
    inside the image form one range [y0, y1), and the output columns likewise [k0, k1), both
    computed before the loops: the rows outside are padding, and each row inside is a run of
    padding, a run of copies and a run of padding. No loop holds a branch. (Loops that tested
    each row or element, ``iy in range ? ... : pad`` or ``if (iy out of range) { fill; continue; }``,
    were miscompiled by GCC 12.2 at -O3 with -march=native: the vectorized loop wrote padding
    over rows it had copied; tests/jit/test_native_im2col.py and tests/fuzz/test_regressions.py keep
    the shapes that showed it.)
    """
    n, c, h, w = (int(d) for d in node.inputs[0].shape)
    _, _, kh, kw, oh, ow = batch_first(tuple(int(d) for d in node.out.shape), node.params.get("batch_axis", 0))
    on, oc, oki, okj = column_strides(node, tuple(node.out.shape))
    sn, sc, srow, scol = (int(s) for s in strides)
    p = node.params
    (sh, sw), (ph, pw), (dh, dw) = p["stride"], p["padding"], p["dilation"]
    pad = _literal(float(p["pad_value"]), ctype)
    y0, y1 = _inside(oh, sh, f"ki * {dh} - {ph}", h)
    k0, k1 = _inside(ow, sw, f"kj * {dw} - {pw}", w)
    return ["    {",
            f"        const {ctype} *restrict x = {x};",
            f"        {ctype} *restrict out = {out};",
            f"        for (long long nc = 0; nc < {n * c}; nc++) {{",
            f"            const {ctype} *restrict img = x + (nc / {c}) * {sn} + (nc % {c}) * {sc};",
            f"            for (long long ki = 0; ki < {kh}; ki++) {{",
            f"                const long long y0 = {y0}, y1 = {y1};",
            f"                for (long long kj = 0; kj < {kw}; kj++) {{",
            f"                    const long long k0 = {k0}, k1 = {k1};",
            f"                    {ctype} *restrict plane = out + (nc / {c}) * {on} + (nc % {c}) * {oc}",
            f"                                              + ki * {oki} + kj * {okj};",
            f"                    for (long long i = 0; i < y0 * {ow}; i++) plane[i] = {pad};",
            "                    for (long long y = y0; y < y1; y++) {",
            f"                        {ctype} *restrict row = plane + y * {ow};",
            f"                        const {ctype} *restrict src = img + (y * {sh} + ki * {dh} - {ph}) * {srow};",
            f"                        for (long long k = 0; k < k0; k++) row[k] = {pad};",
            f"                        for (long long k = k0; k < k1; k++) row[k] = src[(k * {sw} + kj * {dw} - {pw}) * {scol}];",
            f"                        for (long long k = k1; k < {ow}; k++) row[k] = {pad};",
            "                    }",
            f"                    for (long long i = y1 * {ow}; i < {oh * ow}; i++) plane[i] = {pad};",
            "                }",
            "            }",
            "        }",
            "    }"]


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


def render_fold(node: Node, ctype: str, cols: str, out: str) -> list[str]:
    """C statements summing compact `cols` (laid out as the node's batch_axis says) into C-ordered
    (N, C, H, W) `out`."""
    _, _, kh, kw, oh, ow = batch_first(tuple(int(d) for d in node.inputs[0].shape), node.params.get("batch_axis", 0))
    cn, cc, cki, ckj = column_strides(node, tuple(node.inputs[0].shape))
    n, c, h, w = (int(d) for d in node.out.shape)
    p = node.params
    (sh, sw), (dh, dw) = p["stride"], p["dilation"]
    return ["    {",
            f"        const {ctype} *restrict cols = {cols};",
            f"        {ctype} *restrict out = {out};",
            f"        for (long long k = 0; k < {n * c * h * w}; k++) out[k] = ({ctype})0;",
            f"        for (long long nc = 0; nc < {n * c}; nc++) {{",
            f"            {ctype} *restrict img = out + nc * {h * w};",
            f"            const {ctype} *restrict src = cols + (nc / {c}) * {cn} + (nc % {c}) * {cc};",
            f"            for (long long i = 0; i < {kh}; i++)",
            f"                for (long long j = 0; j < {kw}; j++)",
            f"                    for (long long y = 0; y < {oh}; y++) {{",
            f"                        {ctype} *restrict row = img + (i * {dh} + y * {sh}) * {w} + j * {dw};",
            f"                        const {ctype} *restrict in = src + i * {cki} + j * {ckj} + y * {ow};",
            f"                        for (long long x = 0; x < {ow}; x++) row[x * {sw}] = row[x * {sw}] + in[x]; {VECTOR_LOOP}",
            "                    }",
            "        }",
            "    }"]

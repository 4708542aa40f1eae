"""C spelling of a convolution's window columns in the segment IR: `Unfold` (im2col) and `Fold` (col2im).

Eager unfold2d returns a strided view of the (padded) image, and the convolution's reshape to
(C*KH*KW, N*OH*OW) then copies it through NumPy's generic strided copy, whose rows are only OW
elements long. In a native plan the node writes the columns straight into its own buffer
instead (cpu/im2col.py plans it). The values are copies of input elements (read with the input's
own strides: any static layout) or the padding value, so the result equals eager's exactly. The
fold adds each column element into its image position in the eager kernel's order.
"""
from __future__ import annotations

import math

from .c import C
from .c_kernels import VECTOR_LOOP
from .segment_ir import Fold, Size, Unfold

UNFOLD_HELPERS = r"""
/* unfold2d: ceil(a / b) for b > 0, and v clamped to [lo, hi] */
static inline long long kiln_ceil_div(long long a, long long b) { return a > 0 ? (a + b - 1) / b : -(-a / b); }
static inline long long kiln_clamp(long long v, long long lo, long long hi) { return v < lo ? lo : (v > hi ? hi : v); }
"""


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


def render_unfold(u: Unfold, x: str, out: str) -> list[str]:
    """C statements writing the window columns of pointer `x` into pointer `out` (segment_ir.Unfold).

    For each kernel offset (ki, kj), the output rows y whose input row ``y*sh + ki*dh - ph`` lies
    inside the image form one range [y0, y1), and the output columns likewise [k0, k1), both
    computed before the loops: the rows outside are padding, and each row inside is a run of
    padding, a run of copies and a run of padding. No loop holds a branch. (Loops that tested
    each row or element, ``iy in range ? ... : pad`` or ``if (iy out of range) { fill; continue; }``,
    were miscompiled by GCC 12.2 at -O3 with -march=native: the vectorized loop wrote padding
    over rows it had copied; tests/jit/test_native_im2col.py and tests/fuzz/test_regressions.py keep
    the shapes that showed it.)
    """
    ctype = C.type_name(u.dtype)
    n, c, h, w = u.image
    kh, kw, oh, ow = u.window
    on, oc, oki, okj = u.out_strides
    sn, sc, srow, scol = u.strides
    (sh, sw), (ph, pw), (dh, dw) = u.stride, u.padding, u.dilation
    pad = _literal(u.pad_value, ctype)
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
            f"                        for (long long k = k0; k < k1; k++) "
            f"row[k] = src[(k * {sw} + kj * {dw} - {pw}) * {scol}];",
            f"                        for (long long k = k1; k < {ow}; k++) row[k] = {pad};",
            "                    }",
            f"                    for (long long i = y1 * {ow}; i < {oh * ow}; i++) plane[i] = {pad};",
            "                }",
            "            }",
            "        }",
            "    }"]


def _times(*sizes: Size) -> str:
    """The product of `sizes` in C: a number where all are numbers, else the product written out."""
    if all(isinstance(d, int) for d in sizes):
        return str(math.prod(sizes))  # type: ignore[arg-type]
    return " * ".join(str(d) for d in sizes)


def render_fold(f: Fold, cols: str, out: str) -> list[str]:
    """C statements writing into the image at pointer `out` the sum of the columns at pointer `cols`
    (segment_ir.Fold): the image zeroed, then each column element added at its place."""
    ctype = C.type_name(f.dtype)
    kh, kw, oh, ow = f.window
    cn, cc, cki, ckj, cy, cx = f.cols_strides
    n, c, h, w = f.image
    (sh, sw), (dh, dw) = f.stride, f.dilation
    term = "in[x]" if cx == 1 else f"in[x * {cx}]"
    return ["    {",
            f"        const {ctype} *restrict cols = {cols};",
            f"        {ctype} *restrict out = {out};",
            f"        for (long long k = 0; k < {_times(n, c, h, w)}; k++) out[k] = ({ctype})0;",
            f"        for (long long nc = 0; nc < {_times(n, c)}; nc++) {{",
            f"            {ctype} *restrict img = out + nc * {_times(h, w)};",
            f"            const {ctype} *restrict src = cols + (nc / {c}) * {cn} + (nc % {c}) * {cc};",
            f"            for (long long i = 0; i < {kh}; i++)",
            f"                for (long long j = 0; j < {kw}; j++)",
            f"                    for (long long y = 0; y < {oh}; y++) {{",
            f"                        {ctype} *restrict row = img + (i * {dh} + y * {sh}) * {w} + j * {dw};",
            f"                        const {ctype} *restrict in = src + i * {cki} + j * {ckj} + y * {cy};",
            f"                        for (long long x = 0; x < {ow}; x++) "
            f"row[x * {sw}] = row[x * {sw}] + {term}; {VECTOR_LOOP}",
            "                    }",
            "        }",
            "    }"]


FOLD_SIZES = ("n", "c", "kh", "kw", "oh", "ow", "h", "w", "sh", "sw", "dh", "dw")
FOLD_STRIDES = ("cn", "cc", "cki", "ckj", "cy", "cx")


def render_fold_function(dtype: str, name: str) -> str:
    """C of ``void NAME(const T *cols, const long long *strides, T *image, const long long *sizes)``: the fold of
    any sizes, written into the C-ordered image (`render_fold`, its sizes read from the arrays): `sizes` holds
    N, C, KH, KW, OH, OW, H, W and the stride and dilation (FOLD_SIZES), `strides` the columns' element strides
    along N, C, KH, KW, OH and OW (FOLD_STRIDES). Eager fold2d calls it (kiln/ops/fold_native.py)."""
    ctype = C.type_name(dtype)
    n, c, kh, kw, oh, ow, h, w, sh, sw, dh, dw = FOLD_SIZES
    fold = Fold(dtype, "cols_base", "image_base", (n, c, h, w), (kh, kw, oh, ow), FOLD_STRIDES, (sh, sw), (dh, dw))
    sizes = ", ".join(f"{name} = sizes[{k}]" for k, name in enumerate(FOLD_SIZES))
    strides = ", ".join(f"{name} = strides[{k}]" for k, name in enumerate(FOLD_STRIDES))
    return "\n".join([f"void {name}(const {ctype} *cols_base, const long long *strides, {ctype} *image_base, "
                      "const long long *sizes) {",
                      f"    const long long {sizes};",
                      f"    const long long {strides};",
                      *render_fold(fold, "cols_base", "image_base"),
                      "}", ""])

"""C spelling of a matrix product of the segment IR (segment_ir.MatrixProduct): the BLAS call `np.matmul` makes.

A compiled matmul must equal NumPy's bit for bit, and different BLAS routines (gemm, gemv, syrk, dot) and
different transpose flags round differently. So the C helper here, ``kiln_matmul2d_{s,d}``, takes one matrix
product with its element strides and follows NumPy's float matmul loop decision by decision (the planning,
and the layouts left to NumPy, are cpu/gemm.py's):

* a zero-sized dim: the plain triple loop (which writes zeros);
* a core dim of 1: ``m == p == 1`` is a dot (``?dot`` accumulated into a double, or a plain loop when a
  stride is not positive); ``n == 1`` with ``m == 1`` or ``p == 1`` is the plain loop; ``m == 1`` is ``?gemv``
  on the transposed second operand; ``p == 1`` is ``?gemv`` on the first; anything else (an outer product)
  is the plain loop;
* otherwise ``?gemm`` in row-major order with a transpose flag for each operand whose rows are not
  contiguous, except ``a @ a.T`` on the same memory, which is ``?syrk`` of the upper triangle, mirrored to
  the lower.

The plain loop is ``out = 0; out += a * b`` in the operands' type, in order. Batch dims are loops around
this call, one product per batch index, as NumPy's loop runs them. A float32 product of few rows times a
transposed matrix is made as the transposed product and copied back (``kiln_matmul_transposed_s``), as
eager does (kiln.ops.linalg.transposed_product).
"""
from __future__ import annotations

from typing import Callable

from .segment_ir import MatrixProduct, Pointer

BLAS_TYPES = {"float32": ("float", "s"), "float64": ("double", "d")}

_HELPER = r"""
/* NumPy's plain loop: each output starts at 0 and adds the products in order */
static void kiln_matmul_loop_{S}(const {T} *a, long long is1_m, long long is1_n, const {T} *b, long long is2_n,
                                 long long is2_p, {T} *o, long long os_m, long long os_p,
                                 long long dm, long long dn, long long dp) {{
    for (long long i = 0; i < dm; i++)
        for (long long j = 0; j < dp; j++) {{
            {T} acc = ({T})0;
            for (long long k = 0; k < dn; k++) acc += a[i * is1_m + k * is1_n] * b[k * is2_n + j * is2_p];
            o[i * os_m + j * os_p] = acc;
        }}
}}

static void kiln_matmul2d_{S}(const {T} *a, long long is1_m, long long is1_n,
                              const {T} *b, long long is2_n, long long is2_p,
                              {T} *o, long long os_m, long long os_p,
                              long long dm, long long dn, long long dp) {{
    if (dm == 0 || dn == 0 || dp == 0) {{
        kiln_matmul_loop_{S}(a, is1_m, is1_n, b, is2_n, is2_p, o, os_m, os_p, dm, dn, dp);
        return;
    }}
    int i1_c = kiln_blasable(is1_m, is1_n, dn), i1_f = kiln_blasable(is1_n, is1_m, dm);
    int i2_c = kiln_blasable(is2_n, is2_p, dp), i2_f = kiln_blasable(is2_p, is2_n, dn);
    if (dm == 1 || dn == 1 || dp == 1) {{
        if (dm == 1 && dp == 1) {{
            /* a dot product: NumPy's dot sums BLAS's result into a double */
            if (is1_n > 0 && is2_n > 0) {{
                double sum = 0.;
                sum += (double)kiln_blas_{S}dot((kiln_blas_int)dn, a, (kiln_blas_int)is1_n, b, (kiln_blas_int)is2_n);
                o[0] = ({T})sum;
            }} else {{
                {T} sum = ({T})0;
                for (long long k = 0; k < dn; k++) sum += a[k * is1_n] * b[k * is2_n];
                o[0] = sum;
            }}
        }} else if (dn == 1) {{
            kiln_matmul_loop_{S}(a, is1_m, is1_n, b, is2_n, is2_p, o, os_m, os_p, dm, dn, dp);
        }} else if (dm == 1 && (i2_c || i2_f) && kiln_blasable(is1_n, 1, 1)) {{
            kiln_gemv_{S}(b, is2_p, is2_n, a, is1_n, o, os_p, dp, dn);  /* vector @ matrix */
        }} else if (dp == 1 && (i1_c || i1_f) && kiln_blasable(is2_n, 1, 1)) {{
            kiln_gemv_{S}(a, is1_m, is1_n, b, is2_n, o, os_m, dm, dn);  /* matrix @ vector */
        }} else {{
            kiln_matmul_loop_{S}(a, is1_m, is1_n, b, is2_n, is2_p, o, os_m, os_p, dm, dn, dp);
        }}
        return;
    }}
    /* matrix @ matrix: both operands have a unit stride on one axis (checked at lowering) */
    int trans1 = i1_c ? KILN_NOTRANS : KILN_TRANS;
    long long lda = i1_c ? is1_m : is1_n;
    int trans2 = i2_c ? KILN_NOTRANS : KILN_TRANS;
    long long ldb = i2_c ? is2_n : is2_p;
    if (a == b && dm == dp && is1_m == is2_p && is1_n == is2_n && trans1 != trans2) {{
        /* a @ a.T on one memory: syrk's upper triangle, mirrored */
        kiln_blas_{S}syrk(KILN_ROWMAJOR, KILN_UPPER, trans1, (kiln_blas_int)dp, (kiln_blas_int)dn, ({T})1,
                          a, (kiln_blas_int)(trans1 == KILN_NOTRANS ? lda : ldb), ({T})0, o, (kiln_blas_int)os_m);
        for (long long i = 0; i < dp; i++)
            for (long long j = i + 1; j < dp; j++) o[j * os_m + i] = o[i * os_m + j];
        return;
    }}
    kiln_blas_{S}gemm(KILN_ROWMAJOR, trans1, trans2, (kiln_blas_int)dm, (kiln_blas_int)dp, (kiln_blas_int)dn,
                      ({T})1, a, (kiln_blas_int)lda, b, (kiln_blas_int)ldb, ({T})0, o, (kiln_blas_int)os_m);
}}
"""

_TRANSPOSED = r"""
/* a @ b for few rows of a times a transposed matrix b, made as (b^T @ a^T)^T in a per-thread scratch
   buffer and copied back in C order: kiln.ops.linalg.transposed_product chooses this at lowering, as
   eager does. a @ a.T on one memory stays NumPy's syrk (kiln_matmul2d). */
static void kiln_matmul_transposed_s(const float *a, long long lda, const float *b, long long ldb, float *o,
                                     long long ldo, long long dm, long long dn, long long dp) {
    static __thread float *scratch = 0;
    static __thread long long capacity = 0;
    if (a == b && dm == dp && lda == ldb) {
        kiln_matmul2d_s(a, lda, 1, b, 1, ldb, o, ldo, 1, dm, dn, dp);
        return;
    }
    if (capacity < dm * dp) {
        free(scratch);
        scratch = (float *)malloc((size_t)(dm * dp) * sizeof(float));
        capacity = scratch ? dm * dp : 0;
        if (!scratch) {  /* no memory for the scratch: the plain call, with the same bits */
            kiln_matmul2d_s(a, lda, 1, b, 1, ldb, o, ldo, 1, dm, dn, dp);
            return;
        }
    }
    kiln_blas_sgemm(KILN_ROWMAJOR, KILN_NOTRANS, KILN_TRANS, (kiln_blas_int)dp, (kiln_blas_int)dm, (kiln_blas_int)dn,
                    1.0f, b, (kiln_blas_int)ldb, a, (kiln_blas_int)lda, 0.0f, scratch, (kiln_blas_int)dm);
    for (long long i = 0; i < dm; i++)
        for (long long j = 0; j < dp; j++) o[i * ldo + j] = scratch[j * dm + i];
}
"""

_GEMV = r"""
/* NumPy's gemv: y (m) = A (m x n, element strides is_m, is_n) @ x (n, stride is_n2) */
static void kiln_gemv_{S}(const {T} *A, long long is_m, long long is_n, const {T} *x, long long incx,
                          {T} *y, long long incy, long long m, long long n) {{
    if (kiln_blasable(is_m, is_n, n))
        kiln_blas_{S}gemv(KILN_COLMAJOR, KILN_TRANS, (kiln_blas_int)n, (kiln_blas_int)m, ({T})1, A,
                          (kiln_blas_int)is_m, x, (kiln_blas_int)incx, ({T})0, y, (kiln_blas_int)incy);
    else
        kiln_blas_{S}gemv(KILN_ROWMAJOR, KILN_TRANS, (kiln_blas_int)n, (kiln_blas_int)m, ({T})1, A,
                          (kiln_blas_int)is_n, x, (kiln_blas_int)incx, ({T})0, y, (kiln_blas_int)incy);
}}
"""


def blas_prelude(int_type: str, functions: tuple[str, ...]) -> str:
    """C declarations of NumPy's CBLAS `functions` (cpu/blas.py FUNCTIONS: ``kiln_bind_blas`` sets them from a table
    in that order), with integers of C type `int_type`, and the matmul helpers."""
    lines = [
        "/* NumPy's CBLAS, bound at load time (blas.py) */",
        f"typedef {int_type} kiln_blas_int;",
        "enum { KILN_ROWMAJOR = 101, KILN_COLMAJOR = 102, KILN_NOTRANS = 111, KILN_TRANS = 112, KILN_UPPER = 121 };",
    ]
    for T, S in BLAS_TYPES.values():
        lines += [
            f"typedef void (*kiln_{S}gemm_t)(int, int, int, kiln_blas_int, kiln_blas_int, kiln_blas_int, {T}, "
            f"const {T} *, kiln_blas_int, const {T} *, kiln_blas_int, {T}, {T} *, kiln_blas_int);",
            f"typedef void (*kiln_{S}gemv_t)(int, int, kiln_blas_int, kiln_blas_int, {T}, const {T} *, kiln_blas_int, "
            f"const {T} *, kiln_blas_int, {T}, {T} *, kiln_blas_int);",
            f"typedef void (*kiln_{S}syrk_t)(int, int, int, kiln_blas_int, kiln_blas_int, {T}, const {T} *, "
            f"kiln_blas_int, {T}, {T} *, kiln_blas_int);",
            f"typedef {T} (*kiln_{S}dot_t)(kiln_blas_int, const {T} *, kiln_blas_int, const {T} *, kiln_blas_int);",
        ]
    for name in functions:
        lines.append(f"static kiln_{name}_t kiln_blas_{name};")
    lines += [
        "static void kiln_bind_blas(void *const *table) {",
        *[f"    kiln_blas_{name} = (kiln_{name}_t)table[{k}];" for k, name in enumerate(functions)],
        "}",
        "/* NumPy's test for a matrix BLAS can read: unit stride on the second axis, the first at least d2 */",
        "static inline int kiln_blasable(long long s1, long long s2, long long d2) {",
        "    return s2 == 1 && s1 >= d2;",
        "}",
    ]
    source = "#include <stdlib.h>\n" + "\n".join(lines) + "\n"
    for T, S in BLAS_TYPES.values():
        source += _GEMV.format(T=T, S=S) + _HELPER.format(T=T, S=S)
    return source + _TRANSPOSED



def render_matrix_product(p: MatrixProduct, pointer: Callable[[Pointer], str], indent: str = "    ") -> list[str]:
    """C lines computing ``p.out = p.a @ p.b`` as NumPy does (`pointer` spells a buffer pointer)."""
    out, a, b = pointer(p.out), pointer(p.a), pointer(p.b)
    transposed = (f"kiln_matmul_transposed_s({a}, {p.a_strides[-2]}, {b}, {p.b_strides[-1]}, {out}, {p.dp}, "
                  f"{p.dm}, {p.dn}, {p.dp});")
    if p.mode == "transposed":
        return [indent + transposed]
    if p.mode == "empty":
        return [f"{indent}/* empty result: nothing to compute */"]
    S = BLAS_TYPES[p.dtype][1]
    call = (f"kiln_matmul2d_{S}({a}{{ao}}, {p.a_strides[-2]}, {p.a_strides[-1]}, {b}{{bo}}, {p.b_strides[-2]}, "
            f"{p.b_strides[-1]}, {out}{{oo}}, {p.dp}, 1, {p.dm}, {p.dn}, {p.dp});")
    if p.transposed_rows is not None:  # (the row count is the call's: the choice is made here, as eager makes it)
        lo, hi = p.transposed_rows
        return [f"{indent}if ({p.dm} >= {lo} && {p.dm} <= {hi}) {transposed}",
                f"{indent}else {call.format(ao='', bo='', oo='')}"]
    if not p.loops:
        return [indent + call.format(ao="", bo="", oo="")]
    lines = []
    ao, bo, oo = [], [], []
    for depth, (size, sa, sb, so) in enumerate(p.loops):
        v = f"i{depth}"
        lines.append(f"{indent}{'    ' * depth}for (long long {v} = 0; {v} < {size}; {v}++)")
        if sa:
            ao.append(f"{v} * {sa}")
        if sb:
            bo.append(f"{v} * {sb}")
        oo.append(f"{v} * {so}")

    def offset(parts: list[str]) -> str:
        return " + " + " + ".join(parts) if parts else ""

    lines.append(f"{indent}{'    ' * len(p.loops)}" + call.format(ao=offset(ao), bo=offset(bo), oo=offset(oo)))
    return lines

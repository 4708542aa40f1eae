"""Matmul in generated code, making exactly the BLAS call `np.matmul` makes: the plan of each product.

A compiled matmul must equal NumPy's bit for bit, and different BLAS routines (gemm,
gemv, syrk, dot) and different transpose flags round differently. So the C helper
(render/c_gemm.py), ``kiln_matmul2d_{s,d}``, takes one matrix product with its element
strides and follows NumPy's float matmul loop decision by decision:

* a zero-sized dim: the plain triple loop (which writes zeros);
* a core dim of 1: ``m == p == 1`` is a dot (``?dot`` accumulated into a double, or a
  plain loop when a stride is not positive); ``n == 1`` with ``m == 1`` or ``p == 1``
  is the plain loop; ``m == 1`` is ``?gemv`` on the transposed second operand;
  ``p == 1`` is ``?gemv`` on the first; anything else (an outer product) is the plain loop;
* otherwise ``?gemm`` in row-major order with a transpose flag for each operand whose
  rows are not contiguous, except ``a @ a.T`` on the same memory, which is ``?syrk``
  of the upper triangle, mirrored to the lower.

One decision is kiln's own, made by eager and generated code alike: a float32 product of few
rows times a transposed matrix (``x @ weight.T`` at a small batch) is made as the transposed
product and copied back (`kiln.ops.linalg.transposed_product`, ``kiln_matmul_transposed_s``).

The plain loop is ``out = 0; out += a * b`` in the operands' type, in order. Operand
layouts NumPy would first copy (no unit stride on either axis) are not handled here: the
caller (schedule.py) leaves such matmuls to NumPy. Batch dims are loops around this call,
one product per batch index, as NumPy's loop runs them, except where a 2-D second operand
meets rows evenly spaced across the batch (`kiln.ops.linalg.rows_flatten`): there eager and
generated code alike make one product of all the rows.

`matmul_fits` decides at lowering time whether a matmul node's static layouts fit, and
`matrix_product` makes the segment IR's statement for it.
"""
from __future__ import annotations

import math

from ....ops.linalg import TRANSPOSED_MAX_ROWS, TRANSPOSED_MIN_ROWS, rows_flatten, transposed_product
from ....sizes import is_symbolic_number
from ..render.segment_ir import MatrixProduct, Pointer


def blasable(s1: int, s2: int, d2: int) -> bool:
    """NumPy's test, in element strides: the second axis has unit stride, the first at least d2."""
    return s2 == 1 and s1 >= d2


def matmul_fits(a_strides: tuple, a_shape: tuple, b_strides: tuple, b_shape: tuple) -> bool:
    """Whether the C helper makes NumPy's call for these core (last two) layouts.

    NumPy copies a matrix operand that BLAS cannot read (no unit stride on either axis)
    before a gemm: that path is left to NumPy itself. Every other case is handled.
    """
    (dm, dn), (_, dp) = a_shape[-2:], b_shape[-2:]
    if dm == 0 or dn == 0 or dp == 0 or dm == 1 or dn == 1 or dp == 1:
        return True
    (is1_m, is1_n), (is2_n, is2_p) = a_strides[-2:], b_strides[-2:]
    i1 = blasable(is1_m, is1_n, dn) or blasable(is1_n, is1_m, dm)
    i2 = blasable(is2_n, is2_p, dp) or blasable(is2_p, is2_n, dn)
    return i1 and i2


def batch_loops(out_shape: tuple, a_shape: tuple, a_strides: tuple, b_shape: tuple,
                b_strides: tuple) -> list[tuple[int, int, int, int]]:
    """(size, a stride, b stride, out stride) per batch dim of a broadcast matmul, outermost first.

    Element strides; a broadcast (absent or size-1) batch dim of an operand has stride 0.
    """
    batch = out_shape[:-2]
    out_strides = []
    step = out_shape[-2] * out_shape[-1]
    for d in reversed(batch):
        out_strides.append(step)
        step *= d
    out_strides.reverse()
    loops = []
    for i, size in enumerate(batch):
        k = len(batch) - i  # position from the end among the batch dims

        def stride(shape: tuple, strides: tuple) -> int:
            nb = len(shape) - 2
            j = nb - k
            if j < 0 or shape[j] == 1:
                return 0
            return strides[j]

        loops.append((size, stride(a_shape, a_strides), stride(b_shape, b_strides), out_strides[i]))
    return loops


def matrix_product(dtype: str, out: Pointer, a: Pointer, b: Pointer, out_shape: tuple, a_shape: tuple,
                   a_strides: tuple, b_shape: tuple, b_strides: tuple) -> MatrixProduct:
    """The segment IR's product ``out = a @ b`` (element strides) as NumPy makes it: its batch loops, or one product
    over every batch's rows, or the transposed product eager makes for few rows."""
    dm, dn, dp = a_shape[-2], a_shape[-1], b_shape[-1]
    loops = [lp for lp in batch_loops(out_shape, a_shape, a_strides, b_shape, b_strides) if lp[0] != 1]
    flattened = len(b_shape) == 2 and rows_flatten(a_shape, a_strides)
    if flattened:  # one product over every batch's rows
        dm, loops = math.prod(a_shape[:-1]), []
    mode, rows = "product", None
    single = math.prod(out_shape) and (flattened or len(a_shape) == len(b_shape) == 2)
    if single and is_symbolic_number(dm):  # (a plan for every size: the row count's range is tested per call)
        if transposed_product((TRANSPOSED_MIN_ROWS, dn), a_strides[-2:], (dn, dp), b_strides[-2:], dtype):
            rows = (TRANSPOSED_MIN_ROWS, TRANSPOSED_MAX_ROWS)
    elif single and transposed_product((dm, dn), a_strides[-2:], (dn, dp), b_strides[-2:], dtype):
        mode = "transposed"  # as Matmul.kernel: (b^T @ a^T)^T for few rows
    elif math.prod(out_shape) == 0:
        mode = "empty"
    return MatrixProduct(dtype, out, a, b, dm, dn, dp, tuple(a_strides[-2:]), tuple(b_strides[-2:]),
                         tuple(tuple(lp) for lp in loops), mode, rows)

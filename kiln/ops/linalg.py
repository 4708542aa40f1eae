"""Linear-algebra primitives: batched matmul (BLAS) and two-operand einsum."""
from __future__ import annotations

import math

import numpy as np

from ..gradient_sum import GATHERED_PRODUCT_ROWS, ProductGradient
from .elementwise import F, broadcast_shapes
from .primitive import AbstractValue, Primitive, ShapeError


class Matmul(Primitive):
    """a @ b for a, b with ndim >= 2; batch dims broadcast (the frontend handles 1-D)."""

    name = "matmul"
    result_layout = "c"
    saves_inputs = (0, 1)

    def abstract(self, a, b):
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise ShapeError(f"matmul: operands need >= 2 dims here, got {tuple(a.shape)} and {tuple(b.shape)}")
        if a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do not align "
                             f"(inner dimensions {a.shape[-1]} and {b.shape[-2]} differ)")
        if a.dtype is not b.dtype:
            raise TypeError(f"matmul: operands must share a dtype, got {a.dtype.name} and {b.dtype.name}")
        try:
            batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
        except ShapeError:
            raise ShapeError(f"matmul: the batch dims of shapes {tuple(a.shape)} and {tuple(b.shape)} "
                             "are not broadcastable") from None
        return AbstractValue(batch + (a.shape[-2], b.shape[-1]), a.dtype)

    def kernel(self, xp, a, b):
        if a.dtype.kind == "V":  # bfloat16: BLAS in float32, rounded once at the end (as PyTorch)
            return self.kernel(xp, a.astype(xp.float32), b.astype(xp.float32)).astype(a.dtype)
        if b.ndim == 2 and a.ndim > 2 and rows_flatten(a.shape, tuple(s // a.itemsize for s in a.strides)):
            # one product over the batch's rows; generated code makes the same call (cpu/gemm.py)
            return _matrix_product(xp, a.reshape(-1, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
        if a.ndim == 2 and b.ndim == 2:
            return _matrix_product(xp, a, b)
        return xp.matmul(a, b)

    def vjp(self, g, inputs, node):
        a, b = inputs
        f = F()
        ga = _grad_a(f, g, a, b) if a.requires_grad else None
        gb = _grad_b(f, g, a, b) if b.requires_grad else None
        return ga, gb


# Few rows times a transposed matrix (``x @ weight.T`` at a small batch): OpenBLAS computes the
# transposed product ``weight @ x.T`` 1.2-2.9x faster with its AVX-512 kernels, and with the same bits
# (measured on a Zen 4 with OpenBLAS 0.3.31 for 8-32 rows and weights of 2**17 elements and more); its
# AVX2 kernels gain up to 1.4x and round differently from ``x @ weight.T``, but eager and compiled code
# make the same call either way. Below 8 rows or with smaller weights the copy back costs more than it
# saves; from 64 rows on, it gains nothing.
TRANSPOSED_MIN_ROWS, TRANSPOSED_MAX_ROWS, TRANSPOSED_MIN_WEIGHTS = 8, 32, 1 << 17


def transposed_product(a_shape: tuple, a_strides: tuple, b_shape: tuple, b_strides: tuple, dtype_name: str) -> bool:
    """Whether the float32 matrix product ``a @ b`` is made as ``(b.T @ a.T).T``, copied to C order.

    Element strides of the two matrices. It holds for rows of `a` that are contiguous, `b` a transposed
    C-ordered matrix (what NumPy hands BLAS with a transpose flag), 8 to 32 rows and a `b` of at least
    2**17 elements. Eager (`Matmul.kernel`) and generated code (cpu/gemm.py) both ask this, so they
    make the same BLAS call.
    """
    (m, k), (_, n) = a_shape, b_shape
    if dtype_name != "float32" or not TRANSPOSED_MIN_ROWS <= m <= TRANSPOSED_MAX_ROWS or n * k < TRANSPOSED_MIN_WEIGHTS:
        return False
    (a_row, a_col), (b_row, b_col) = a_strides, b_strides
    return a_col == 1 and a_row >= k and b_row == 1 and b_col >= k


def _matrix_product(xp, a, b):
    """``a @ b`` for two matrices, as `transposed_product` says (NumPy arrays only)."""
    candidate = (TRANSPOSED_MIN_ROWS <= a.shape[0] <= TRANSPOSED_MAX_ROWS and b.size >= TRANSPOSED_MIN_WEIGHTS
                 and a.dtype == np.float32 and isinstance(a, np.ndarray))  # cheap tests: most products stop here
    if candidate and transposed_product(a.shape, _element_strides(a), b.shape, _element_strides(b), "float32"):
        same_memory = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        if not (same_memory and a.shape[0] == b.shape[1] and a.strides[0] == b.strides[1]):  # else NumPy's syrk
            out = xp.empty((a.shape[0], b.shape[1]), a.dtype)
            xp.copyto(out, xp.matmul(b.T, a.T).T)
            return out
    return xp.matmul(a, b)


def _element_strides(x) -> tuple:
    return tuple(s // x.itemsize for s in x.strides)


def rows_flatten(a_shape: tuple, a_strides: tuple) -> bool:
    """Whether ``a @ b`` with a 2-D `b` runs as one matrix product of a's rows, all batches
    flattened: (B*M, K) @ (K, N) rather than one (M, K) @ (K, N) per batch index.

    That holds when the rows of `a` (element strides `a_strides`) are evenly spaced across its
    batch dims, each row's elements contiguous: then the flattened rows are a view of `a`.
    Eager (`Matmul.kernel`) and generated code (kiln/jit/backends/cpu/gemm.py) both ask this,
    so they make the same BLAS call and keep the same bits.
    """
    if len(a_shape) < 3 or 0 in a_shape or a_strides[-1] != 1 or a_strides[-2] < a_shape[-1]:
        return False  # (rows that overlap, a broadcast among them: BLAS cannot read them as one matrix)
    expected = a_strides[-2] * a_shape[-2]  # the stride a batch dim needs to continue the rows
    for size, stride in zip(reversed(a_shape[:-2]), reversed(a_strides[:-2])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def columns_contiguous(t) -> bool:
    """Whether a tensor's last two axes are laid out column by column (a transposed matrix, such as
    ``weight.T`` in ``linear``): the gradient is then made in that order too, so that undoing the
    transpose gives a C-ordered array rather than a strided view a caller would copy."""
    data = t._data
    shape, strides = data.shape, getattr(data, "strides", None)
    if strides is None or len(shape) < 2 or shape[-1] < 2 or shape[-2] < 2:
        return False
    return strides[-2] == data.itemsize and strides[-1] != data.itemsize


def _grad_a(f, g, a, b):
    """d(a @ b)/da = g @ b^T, summed over broadcast batch dims, in a's own memory order."""
    if columns_contiguous(a):  # (b @ g^T)^T: a C-ordered product, seen transposed as a is
        return f.sum_to(f.swapaxes(f.matmul(b, f.swapaxes(g, -1, -2)), -1, -2), a.shape)
    return f.sum_to(f.matmul(g, f.swapaxes(b, -1, -2)), a.shape)


def _grad_b(f, g, a, b):
    """d(a @ b)/db = a^T @ g, in b's own memory order.

    A matrix b shared by every batch of a (``x @ w`` with x of shape (..., M, K)) gets one
    product over the flattened batch, (B*M, K)^T @ (B*M, N), instead of one per batch summed
    afterwards.
    """
    if (len(a.shape) == 2 and len(b.shape) == 2 and len(g.shape) == 2
            and type(a.shape[0]) is int and a.shape[0] <= GATHERED_PRODUCT_ROWS):
        # a thin product (a loop's weight, once per step): summed with its siblings as one GEMM
        return ProductGradient(a, g, columns_contiguous(b))
    if len(b.shape) == 2 and len(a.shape) > 2:
        rows = math.prod(a.shape[:-1])  # not -1, which an empty K or N leaves undetermined
        a = f.reshape(a, (rows, a.shape[-1]))
        g = f.reshape(g, (rows, g.shape[-1]))
    if columns_contiguous(b):  # (g^T @ a)^T: a C-ordered product, seen transposed as b is
        return f.sum_to(f.swapaxes(f.matmul(f.swapaxes(g, -1, -2), a), -1, -2), b.shape)
    return f.sum_to(f.matmul(f.swapaxes(a, -1, -2), g), b.shape)


def parse_einsum(spec: str) -> tuple[str, str, str]:
    spec = spec.replace(" ", "")
    if "->" not in spec:
        raise ValueError(f"einsum: explicit output required, got {spec!r} (write e.g. 'ij,jk->ik')")
    lhs, out = spec.split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        raise ValueError(f"einsum: exactly two operands are supported, got {len(terms)} in {spec!r}")
    a, b = terms
    for term in (a, b, out):
        if "." in term:
            raise ValueError(f"einsum: ellipsis is not supported in {spec!r}")
        if len(set(term)) != len(term):
            raise ValueError(f"einsum: repeated index within one operand is not supported: {term!r}")
    return a, b, out


class Einsum(Primitive):
    """Two-operand einsum with an explicit output, e.g. 'bij,bjk->bik'."""

    name = "einsum"
    result_layout = "kernel"  # NumPy's einsum may hand back a transposed result
    saves_inputs = (0, 1)

    def abstract(self, a, b, *, spec):
        sa, sb, so = parse_einsum(spec)
        if len(sa) != len(a.shape) or len(sb) != len(b.shape):
            raise ShapeError(f"einsum {spec!r}: operands have shapes {tuple(a.shape)} and {tuple(b.shape)}")
        sizes: dict[str, int] = {}
        for term, shape in ((sa, a.shape), (sb, b.shape)):
            for ch, d in zip(term, shape):
                if sizes.setdefault(ch, d) != d:
                    raise ShapeError(f"einsum {spec!r}: index {ch!r} has sizes {sizes[ch]} and {d} "
                                     f"(shapes {tuple(a.shape)} and {tuple(b.shape)})")
        for ch in so:
            if ch not in sizes:
                raise ShapeError(f"einsum {spec!r}: output index {ch!r} is not in the inputs")
        return AbstractValue(tuple(sizes[ch] for ch in so), a.dtype)

    def kernel(self, xp, a, b, *, spec):
        if a.dtype.kind == "V":  # bfloat16: computed in float32, rounded once at the end
            return xp.einsum(spec, a.astype(xp.float32), b.astype(xp.float32), optimize=True).astype(a.dtype)
        return xp.einsum(spec, a, b, optimize=True)

    def vjp(self, g, inputs, node, *, spec):
        a, b = inputs
        sa, sb, so = parse_einsum(spec)
        f = F()
        return (_einsum_grad(f, g, so, b, sb, a, sa) if a.requires_grad else None,
                _einsum_grad(f, g, so, a, sa, b, sb) if b.requires_grad else None)


def _einsum_grad(f, g, so, other, s_other, target, s_target):
    """d/d(target): einsum(g, other -> target), then broadcast indices only target had."""
    keep = "".join(ch for ch in s_target if ch in so or ch in s_other)
    grad = f.einsum(f"{so},{s_other}->{keep}", g, other)
    if keep == s_target:
        return grad
    shape = [target.shape[i] if ch not in keep else -1 for i, ch in enumerate(s_target)]
    view = [1 if ch not in keep else grad.shape[keep.index(ch)] for ch in s_target]
    return f.expand(f.reshape(grad, tuple(view)), tuple(t if t != -1 else v for t, v in zip(shape, view)))

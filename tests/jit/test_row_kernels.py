"""Row kernels (kiln/jit/backends/cpu/rows.py, rowcode.py): reductions over trailing axes fused
with their elementwise prologue and epilogue must equal eager execution bit for bit.

Comparison: values viewed as unsigned integers (so -0.0 != +0.0), NaN equal to NaN whatever
its sign and payload (as in test_c_expressions.py: IEEE leaves those unspecified). The one
exception: float32 groups with transcendentals (softmax's exp, log-softmax's log, GELU's
tanh, sigmoid), which fuse within 4 ulp of NumPy (render/vecmath.py): they are compared in
ulps where the result is one rounding away from those (softmax), else within the float32
tolerance of tests/tolerances.py, with NaN, infinities and zeros in the same places.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.jit.api import trace_graph
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import elementwise_groups, rowcode
from kiln.jit.backends.render import c_kernels
from kiln.models.gpt import Block
from jit_helpers import assert_bitwise, bits
from tolerances import tol

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

DTYPES = ["float32", "float64"]


@pytest.fixture
def kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def fuse_everything(kernel_cache, monkeypatch):
    """Fuse even tiny arrays."""
    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)
    return kernel_cache


def _data(shape, dtype, seed, specials=True):
    rng = np.random.default_rng(seed)
    scale = rng.choice([1e-3, 1.0, 1e3])
    x = (rng.standard_normal(shape) * scale + rng.standard_normal()).astype(dtype)
    if specials and x.ndim >= 1 and x.size >= 8:
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] >= 4:
            flat[0] = -0.0                      # a row of negative zeros
            flat[1, ::2] = 0.0                  # zeros of both signs
            flat[1, 1::2] = -0.0
            flat[2, rng.integers(flat.shape[1])] = np.nan
            flat[3, rng.integers(flat.shape[1])] = np.inf
    return x


def _row_kernels(compiled) -> list[str]:
    entry = compiled.cache_entries[0]
    plans = [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]
    return [n.prim.name for p in plans for n in p.graph.nodes if n.prim.name.startswith("fused_rows")]


def ulps_apart(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in ulps along the ordered float line; NaN vs NaN is 0, NaN vs a number is huge."""
    signed = np.dtype(f"i{got.itemsize}")
    lines = []
    for a in (np.ascontiguousarray(got), np.ascontiguousarray(want)):
        i = a.view(signed).astype(np.int64)
        lines.append(np.where(i < 0, np.int64(np.iinfo(signed).min) - i, i))
    d = np.abs(lines[0] - lines[1])
    d[np.isnan(got) & np.isnan(want)] = 0
    d[np.isnan(got) != np.isnan(want)] = np.iinfo(np.int64).max
    return d


def assert_close(got, want, what="", ulps=None):
    """Within `ulps` (else the float32 tolerance), with NaN, infinities and zeros where eager has them."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    special = ~np.isfinite(want) | (want == 0)
    same = (bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))
    assert not (special & ~same).any(), f"{what}: special values differ: {got[special & ~same][:5]} vs {want[special & ~same][:5]}"
    if ulps is None:
        np.testing.assert_allclose(got, want, err_msg=what, **tol(got.dtype))
    else:
        d = ulps_apart(got, want)
        assert d.max() <= ulps, f"{what}: {d.max()} ulp apart (allowed {ulps}) at {np.unravel_index(d.argmax(), d.shape)}"


def _check_compiled(fn, *arrays, expect_rows=True, ulps=None, exact=True):
    """kiln.compile(fn) on the cpu backend equals eager on two calls: bit for bit, or (`exact` false)
    by assert_close."""
    tensors = [kiln.tensor(a) for a in arrays]
    compiled = kiln.compile(fn, backend="cpu")
    with kiln.no_grad(), np.errstate(all="ignore"):
        compiled(*tensors)  # traces: eager's own result
        got = compiled(*tensors).numpy()
        want = fn(*tensors).numpy()
    if exact:
        assert_bitwise(got, want, getattr(fn, "__name__", "fn"))
    else:
        assert_close(got, want, getattr(fn, "__name__", "fn"), ulps)
    if expect_rows:
        assert _row_kernels(compiled), "no row kernel was formed"
    return compiled


# ---- the reducers against NumPy, every row length -------------------------------------------------
def _raw_kernel(op: str, dtype: str, shape=(4, 64)):
    """The compiled C function of `op(x * y)` over rows, callable with any [outer, inner]."""
    x, y = kiln.tensor(np.ones(shape, dtype)), kiln.tensor(np.ones(shape, dtype))

    def fn(x, y):
        p = x * y
        return p.sum(-1) if op == "sum" else p.amax(-1)
    graph = trace_graph(fn, x, y)
    fused = cpu.fuse(graph)
    (node,) = [n for n in fused.nodes if n.prim.name.startswith("fused_rows")]
    assert not any(node.prim.group.sequential.values())
    assert [v.shape for v in node.prim.group.inputs] == [shape, shape]
    return node.prim


def _run_raw(kernel, x, y):
    outer, inner = x.shape
    out = np.empty(outer, x.dtype)
    scratch = np.empty(inner, np.float64)
    flagged = kernel.fn(outer, inner, scratch.ctypes.data, out.ctypes.data, x.ctypes.data, y.ctypes.data)
    return out, flagged


ROW_LENGTHS = list(range(1, 301)) + [511, 1000, 1023, 1024, 1025, 4097, 8191, 8193, 65537]


@pytest.mark.parametrize("dtype", DTYPES)
def test_pairwise_sum_equals_numpy_for_every_row_length(fuse_everything, dtype):
    kernel = _raw_kernel("sum", dtype)
    for n in ROW_LENGTHS:
        x = _data((6, n), dtype, n)
        y = _data((6, n), dtype, n + 1, specials=False)
        with np.errstate(all="ignore"):
            want = np.sum(x * y, axis=-1, dtype=x.dtype)
            got, flagged = _run_raw(kernel, x, y)
        assert flagged == 0
        assert_bitwise(got, want, f"sum over {n}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_rows_and_overflow(fuse_everything, dtype):
    kernel = _raw_kernel("sum", dtype)
    big = np.finfo(dtype).max / 4
    for n in (1 << 20, (1 << 20) + 13):
        x = _data((2, n), dtype, 7, specials=False)
        x[1, :] = big  # overflows to inf part way
        y = np.ones_like(x)
        with np.errstate(all="ignore"):
            want = np.sum(x * y, axis=-1, dtype=x.dtype)
            got, _ = _run_raw(kernel, x, y)
        assert_bitwise(got, want, f"sum over {n}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_max_equals_numpy_or_says_it_cannot(fuse_everything, dtype):
    """Max is exact except the sign of a zero maximum over mixed +0/-0, which the kernel flags."""
    kernel = _raw_kernel("max", dtype)
    for n in ROW_LENGTHS[:300] + [1000, 4097]:
        x = _data((6, n), dtype, n)
        x[4] = -np.abs(x[4])
        x[4, 0] = 0.0  # max is a zero: +0 only
        x[5] = -np.abs(x[5])
        x[5, 0] = -0.0
        x[5, -1] = 0.0 if n > 1 else -0.0  # both signs: ambiguous when n > 1
        y = np.ones_like(x)
        with np.errstate(all="ignore"):
            want = np.max(x * y, axis=-1)
            got, flagged = _run_raw(kernel, x, y)
        p = x * y
        ambiguous = [bool(not np.isnan(r).any() and r.max() == 0 and np.signbit(r[r == 0]).any()
                          and not np.signbit(r[r == 0]).all()) for r in p]
        assert ambiguous[5] == (n > 1) and flagged == sum(ambiguous), n
        got[ambiguous] = want[ambiguous]  # flagged rows: RowKernel.kernel answers them with NumPy
        assert_bitwise(got, want, f"max over {n}")


# ---- kiln.compile == eager on the motivating patterns ------------------------------------------
SHAPES = [(4, 3), (7, 8), (5, 16), (3, 17), (6, 100), (2, 129), (3, 300), (33, 1000), (2, 3, 40), (4096, 12),
          (2048, 16), (9, 2, 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_patterns_equal_eager(fuse_everything, dtype, shape):
    x = _data(shape, dtype, sum(shape))
    y = _data(shape, dtype, sum(shape) + 1, specials=False)

    def layer_norm(x):
        return F.layer_norm(x, x.shape[-1:])

    def softmax(x):
        return F.softmax(x, -1)

    def log_softmax(x):
        return F.log_softmax(x, -1)

    def mean(x):
        return x.mean(-1)

    def centered(x):
        return x - x.mean(-1, keepdim=True)

    def row_dot(x, y):
        return (x * y).sum(-1, keepdim=True) * 2.0

    for fn in (layer_norm, mean, centered):
        _check_compiled(fn, x)
    exact = dtype != "float32"  # float32 exp and log fuse within 4 ulp of NumPy's
    _check_compiled(softmax, x, exact=exact, ulps=SOFTMAX_ULPS)
    _check_compiled(log_softmax, x, exact=exact)
    _check_compiled(row_dot, x, y)


SOFTMAX_ULPS = 12  # exp's 4 ulp in each term and in the row sum, then one division


@pytest.mark.parametrize("shape", [(7, 8), (33, 1000), (2, 3, 40), (4096, 12), (16, 4097)], ids=str)
def test_float32_transcendental_groups_are_one_row_kernel_within_tolerance(fuse_everything, shape):
    """softmax, log-softmax, LayerNorm + tanh-GELU, erf-GELU, a sigmoid row sum: fused in float32,
    within tolerance of eager on data without zeros of both signs (which would send a row
    maximum back to NumPy), and with NaN and infinities in rows of their own."""
    x = _data(shape, "float32", sum(shape), specials=False)
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] >= 4:
        flat[1, 0], flat[2, -1], flat[3, 1] = np.nan, np.inf, -np.inf

    def softmax(x):
        return F.softmax(x, -1)

    def log_softmax(x):
        return F.log_softmax(x, -1)

    def norm_gelu(x):
        return F.gelu(F.layer_norm(x, x.shape[-1:]), approximate="tanh")

    def norm_gelu_erf(x):
        return F.gelu(F.layer_norm(x, x.shape[-1:]))

    def sigmoid_sum(x):
        return F.sigmoid(x * 0.5).sum(-1)

    compiled = _check_compiled(softmax, x, exact=False, ulps=SOFTMAX_ULPS)
    assert _row_kernels(compiled) == ["fused_rows[max -> sub -> exp -> sum -> div -> mul]"]
    compiled = _check_compiled(log_softmax, x, exact=False)
    assert _row_kernels(compiled) == ["fused_rows[max -> sub -> exp -> sum -> log -> sub]"]
    for fn in (norm_gelu, norm_gelu_erf):
        compiled = _check_compiled(fn, x, exact=False)
        fused = [n.prim.name for n in compiled.cache_entries[0].plan.graph.nodes if n.prim.name.startswith("fused[")]
        assert len(fused) == 1 and ("tanh" in fused[0] if fn is norm_gelu else "erf" in fused[0]), fused
    compiled = _check_compiled(sigmoid_sum, x, exact=False)
    assert _row_kernels(compiled) == ["fused_rows[mul -> sigmoid -> sum]"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,normalized", [((64, 128), (128,)), ((4, 16, 48), (48,)), ((3, 8, 6, 10), (6, 10)),
                                              ((40, 200), (200,))], ids=str)
def test_layer_norm_module_equals_eager(fuse_everything, dtype, affine, shape, normalized):
    kiln.manual_seed(1)
    ln = nn.LayerNorm(normalized, elementwise_affine=affine)
    if dtype == "float64":
        ln = ln.double()
    if affine:
        with kiln.no_grad():
            ln.weight.copy_(kiln.tensor(_data(normalized, dtype, 3, specials=False)))
            ln.bias.copy_(kiln.tensor(_data(normalized, dtype, 4, specials=False)))
    x = kiln.tensor(_data(shape, dtype, 5))
    compiled = kiln.compile(ln, backend="cpu")
    with kiln.no_grad(), np.errstate(all="ignore"):
        compiled(x)
        assert_bitwise(compiled(x).numpy(), ln(x).numpy(), "LayerNorm")
    names = _row_kernels(compiled)
    assert names == ["fused_rows[sum -> div -> sub -> mul -> sum -> div -> add]"], names


def test_random_shapes_and_data(fuse_everything):
    """Many random shapes, axes counts and dtypes through one composite program."""
    rng = np.random.default_rng(123)

    def program(x, w):
        mu = x.mean(dim=tuple(range(x.ndim - k_axes, x.ndim)), keepdim=True)
        c = (x - mu) * w
        m = c.amax(dim=tuple(range(x.ndim - k_axes, x.ndim)), keepdim=True)
        return (c - m).relu() + c.sum(dim=tuple(range(x.ndim - k_axes, x.ndim)), keepdim=True) / 3.0

    for trial in range(40):
        ndim = int(rng.integers(1, 4))
        shape = tuple(int(d) for d in rng.integers(1, 40, ndim))
        if rng.random() < 0.3:
            shape = shape[:-1] + (int(rng.integers(100, 700)),)
        k_axes = int(rng.integers(1, ndim + 1))
        dtype = DTYPES[trial % 2]
        x = _data(shape, dtype, trial)
        w = _data(shape[-1:], dtype, trial + 1000, specials=False)
        tensors = [kiln.tensor(x), kiln.tensor(w)]
        compiled = kiln.compile(program, backend="cpu")
        with kiln.no_grad(), np.errstate(all="ignore"):
            compiled(*tensors)
            assert_bitwise(compiled(*tensors).numpy(), program(*tensors).numpy(), f"shape {shape} axes {k_axes}")


# ---- the paths where NumPy's order cannot be had: fall back, stay exact ----------------------------
def _kernel_of(compiled) -> rowcode.RowKernel:
    entry = compiled.cache_entries[0]
    return [n.prim for n in entry.plan.graph.nodes if n.prim.name.startswith("fused_rows")][0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_mixed_sign_zero_maximum_falls_back_to_numpy(fuse_everything, dtype):
    x = -np.abs(_data((8, 64), dtype, 0, specials=False))
    x[3, 5], x[3, 9] = 0.0, -0.0

    def shifted(x):
        return x - x.amax(-1, keepdim=True)

    compiled = _check_compiled(shifted, x)
    assert _kernel_of(compiled).fallbacks >= 1
    before = _kernel_of(compiled).fallbacks
    _check_compiled(shifted, np.abs(x))  # no zero maximum: no fallback
    assert _kernel_of(compiled).fallbacks == before


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_transposed_input_is_summed_as_numpy_does(fuse_everything, dtype):
    """NumPy sums rows of a transposed array in another order: the kernel must not use its own."""
    base = _data((300, 8), dtype, 1)

    def centered(x):
        return (x * 3.0).sum(-1, keepdim=True) - x

    compiled = kiln.compile(centered, backend="cpu")
    xt = kiln.tensor(base).transpose(0, 1)  # (8, 300), not C-contiguous
    with kiln.no_grad(), np.errstate(all="ignore"):
        compiled(xt)
        assert_bitwise(compiled(xt).numpy(), centered(xt).numpy(), "transposed")
        contiguous = kiln.tensor(np.ascontiguousarray(base.T))
        assert_bitwise(compiled(contiguous).numpy(), centered(contiguous).numpy(), "contiguous")
    assert _row_kernels(compiled)


@pytest.mark.parametrize("dtype", DTYPES)
def test_arrays_numpy_lays_out_in_another_order_are_not_summed_in_c(fuse_everything, dtype):
    """astype of a row-broadcast view is F-ordered, a permute is a strided view: NumPy does not sum
    their rows pairwise, so those sums stay with NumPy (max, order-free, may still fuse)."""
    w = _data((300,), dtype, 1, specials=False)
    x = _data((300, 64), dtype, 2, specials=False)
    other = "float64" if dtype == "float32" else "float32"

    def cast_of_broadcast(w):
        return w.expand(64, 300).to(other).sum(-1, keepdim=True) * 2.0

    def transposed_inside(x):
        t = x.transpose(0, 1) * 1.5
        return t.sum(-1, keepdim=True) - t.amax(-1, keepdim=True)

    compiled = _check_compiled(cast_of_broadcast, w, expect_rows=False)
    assert not _row_kernels(compiled)
    compiled = _check_compiled(transposed_inside, x, expect_rows=False)
    assert not any("sum" in n for n in _row_kernels(compiled))


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_fusion_keeps_numpys_layout(fuse_everything, dtype):
    """An elementwise chain over a permuted array is F-ordered in eager NumPy, and a NumPy sum
    over it adds in another order than over the C-ordered result of a fused loop: such chains
    are not fused (a permute inside the function) or evaluated with NumPy (a permuted argument)."""
    x = _data((300, 64), dtype, 4, specials=False)

    def inside(x):
        t = x.transpose(0, 1)
        return ((t * 2.0 + 1.0) * t).sum(-1) + ((t * 3.0 - 1.0) * t).sum(0).sum()

    def chain(x):
        return ((x * 2.0 + 1.0) * x).sum(-1) + ((x * 3.0 - 1.0) * x).sum(0).sum()

    _check_compiled(inside, x, expect_rows=False)
    compiled = kiln.compile(chain, backend="cpu")
    xt = kiln.tensor(x).transpose(0, 1)
    with kiln.no_grad(), np.errstate(all="ignore"):
        compiled(xt)
        assert_bitwise(compiled(xt).numpy(), chain(xt).numpy(), "permuted argument")
        xc = kiln.tensor(np.ascontiguousarray(x.T))
        assert_bitwise(compiled(xc).numpy(), chain(xc).numpy(), "contiguous argument")


def test_small_windows_are_summed_left_to_right(fuse_everything):
    """Where the Sum kernel chains a window of <= 16 slices (reduce.window_reduce), so does C."""
    for shape in ((4096, 12), (4096, 16), (8192, 3, 5)):
        x = _data(shape, "float32", 3)
        for fn in (lambda x: (x * 1.5).sum(tuple(range(1, x.ndim))) + 1.0,
                   lambda x: (x * 1.5).amax(tuple(range(1, x.ndim))) * 2.0):  # rows of mixed zeros too
            kernel = _kernel_of(_check_compiled(fn, x))
            assert all(kernel.group.sequential.values()) and kernel.fallbacks == 0


# ---- what is and is not grouped -------------------------------------------------------------------
def _fused_graph(fn, *tensors):
    return cpu.fuse(trace_graph(fn, *tensors))


def test_layer_norm_plan_shape(fuse_everything):
    x = kiln.randn(8, 32)
    text = str(_fused_graph(lambda x: F.layer_norm(x, (32,)), x))
    assert "fused_rows[sum -> div -> sub -> mul -> sum -> div -> add]" in text
    assert "pow" in text  # rsqrt is pow(v, -0.5): NumPy's SIMD pow is not C's, so it stays outside
    assert "fused[sub -> mul]" in text  # the normalization recomputes x - mean instead of storing it


def test_layer_norm_backward_is_one_row_kernel(fuse_everything):
    """Both reductions of LayerNorm's backward, the per-row algebra between them and the
    broadcast of their results (expand) run in one function: no full-size temporary."""
    ln = nn.LayerNorm(64)
    compiled = kiln.compile(ln, backend="cpu")
    x = kiln.randn(32, 64, requires_grad=True)
    compiled(x).sum().backward()
    backward = compiled.cache_entries[0].backward_plan.graph
    rows_nodes = [n for n in backward.nodes if n.prim.name.startswith("fused_rows")]
    assert len(rows_nodes) == 1, str(backward)
    name = rows_nodes[0].prim.name
    assert name.count("sum") == 2 and "expand" in name, name
    # every full-size operand of the row kernel comes straight from the plan's inputs: nothing
    # elementwise runs before it (a native plan also fuses the weight gradient's lone mul, which
    # feeds only the sum over the batch)
    made = {n.out.id: n for n in backward.nodes}
    full = [v for v in rows_nodes[0].inputs if tuple(v.shape) == (32, 64)]
    assert full and not any(v.id in made for v in full), str(backward)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_plan_shape(fuse_everything, dtype):
    x = kiln.tensor(np.random.default_rng(0).standard_normal((8, 32)).astype(dtype))
    names = [n.prim.name for n in _fused_graph(lambda x: F.softmax(x, -1), x).nodes]
    if dtype == "float32":  # kiln's vectorized exp joins the row
        assert names == ["fused_rows[max -> sub -> exp -> sum -> div -> mul]"]
    else:  # NumPy's float64 exp (SIMD) beats scalar libm
        assert names == ["fused_rows[max -> sub]", "exp", "fused_rows[sum -> div -> mul]"]


def _row_kernel_node(fn, x):
    (node,) = [n for n in _fused_graph(fn, kiln.tensor(x)).nodes if n.prim.name.startswith("fused_rows")]
    return node


def _row_function(source: str) -> str:
    return source[source.index("kiln_fused_range("):]


def _softmax_plus_square_sum(x):
    """softmax, but a second reduction through scratch (the row's sum of squares) comes between."""
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True) + (x * x).sum(-1, keepdim=True)


@pytest.mark.parametrize("fn,exps", [(lambda x: F.softmax(x, -1), 1), (_softmax_plus_square_sum, 2)],
                         ids=["softmax", "square-sum-between"])
def test_an_epilogue_reads_exp_back_from_the_scratch_row(fuse_everything, monkeypatch, fn, exps):
    """softmax's epilogue reads exp(x - max) from the row its sum left, rather than computing
    exp again, unless another reduction through scratch overwrote that row; bit for bit what the
    kernel computing it twice gives."""
    x = _data((33, 1000), "float32", 5, specials=False)
    x[1, 0], x[2, -1] = np.nan, -np.inf
    reused = _row_kernel_node(fn, x)
    assert _row_function(reused.prim.source).count("kiln_expf(") == exps
    monkeypatch.setattr(c_kernels.CKernelRenderer, "reuse_scratch", False)
    recomputed = _row_kernel_node(fn, x)
    assert _row_function(recomputed.prim.source).count("kiln_expf(") == 2
    inputs = [np.asarray(1.0, np.float32)] if len(reused.inputs) > 1 else []
    got = reused.prim.kernel(np, x, *inputs)
    want = recomputed.prim.kernel(np, x, *inputs)
    assert_bitwise(np.asarray(got), np.asarray(want), "scratch reuse")
    _check_compiled(fn, x, exact=False, ulps=SOFTMAX_ULPS)


def test_not_grouped(fuse_everything):
    x = kiln.randn(8, 32)
    # a leading-axis reduction, an integer sum, a reduction alone
    for fn in (lambda x: (x * 2.0).sum(0), lambda x: (x > 0).sum(-1) + 1, lambda x: x.sum(-1)):
        assert not any(n.prim.name.startswith("fused_rows") for n in _fused_graph(fn, x).nodes)


def test_a_dynamic_batch_runs_the_row_kernel_at_every_batch(kernel_cache):
    """Rows whose reduced axis is static fuse in a symbolic plan too, and the kernel runs any row count
    (within the same ulp bound as a static plan: exp is fused). Past 4096 rows of 8, NumPy's sum takes
    its window path (reduce.windowed): the native plan's guard on that size hands the call to its reference
    plan, eager's bits."""
    f = kiln.compile(lambda x: F.softmax(x * 2.0, -1), backend="cpu", dynamic_dims={0: {0: "B"}})
    with kiln.no_grad():
        for batch in (3000, 2000, 3500):
            x = kiln.randn(batch, 8)
            got, want = f(x).numpy(), F.softmax(x * 2.0, -1).numpy()
            assert ulps_apart(got, want).max() <= SOFTMAX_ULPS, batch
        (kernel,) = [n.prim for n in f.cache_entries[0].plan.graph.nodes if isinstance(n.prim, rowcode.RowKernel)]
        plan = f.cache_entries[0].plan
        assert kernel.fallbacks == 0 and plan.fallback_calls == 0
        x = kiln.randn(5000, 8)
        assert_bitwise(f(x).numpy(), F.softmax(x * 2.0, -1).numpy(), "window path")
        assert plan.fallback_calls == 1


def test_multi_output_group(fuse_everything):
    """A group whose row statistics and full-size values are both needed outside."""
    x = _data((16, 64), "float64", 2)

    def fn(x):
        mu = x.mean(-1, keepdim=True)
        c = x - mu
        return c.exp(), mu * 2.0, (c * c).sum(-1)

    tensors = [kiln.tensor(x)]
    compiled = kiln.compile(fn, backend="cpu")
    with kiln.no_grad(), np.errstate(all="ignore"):
        compiled(*tensors)
        for got, want in zip(compiled(*tensors), fn(*tensors)):
            assert_bitwise(got.numpy(), want.numpy(), "multi-output")
    assert _row_kernels(compiled)


def test_generated_source_is_shown(fuse_everything):
    x = kiln.randn(8, 32)
    (node,) = [n for n in _fused_graph(lambda x: x.mean(-1), x).nodes]
    assert "kiln_pairwise_sumf(p0, inner)" in node.prim.source
    assert isinstance(node.prim.fn, ctypes._CFuncPtr)


# ---- training: forward and backward of a transformer block ------------------------------------
def test_transformer_block_forward_and_backward_equal_the_interpreter(kernel_cache):
    """Outputs and every gradient of a compiled pre-LN transformer block (LayerNorms, softmax
    attention, GELU MLP) against the NumPy interpreter backend: bit for bit in float64, within the
    float32 gradient tolerance in float32 (its exp and tanh fuse within 4 ulp of NumPy's).

    Compiled training is not bitwise eager on either backend (the graph-level backward adds
    gradient contributions in its own order), so the oracle here is the interpreter; eager is
    checked within rounding."""
    for dtype in DTYPES:
        kiln.manual_seed(0)
        block = Block(64, 4)
        if dtype == "float64":
            block = block.double()
        x = kiln.tensor(_data((4, 32, 64), dtype, 9, specials=False), requires_grad=True)

        def step(fn):
            block.zero_grad()
            x.grad = None
            out = fn(x)
            (out * out).sum().backward()
            return [out.detach().numpy().copy(), x.grad.numpy().copy()] + \
                [p.grad.numpy().copy() for p in block.parameters()]

        results = {}
        for backend in ("cpu", "interpret"):
            compiled = kiln.compile(block, backend=backend)
            step(compiled)  # trace
            results[backend] = step(compiled)
            if backend == "cpu":
                names = _row_kernels(compiled)
                assert sum("sum -> div -> sub -> mul -> sum -> div -> add" in n for n in names) == 2  # LayerNorms
                assert sum("neg -> sum" in n for n in names) == 2  # their backward
                assert sum("max" in n for n in names) == 1  # softmax
        eager = step(block)
        for k, (got, want, ref) in enumerate(zip(results["cpu"], results["interpret"], eager)):
            if dtype == "float32":  # softmax's exp and GELU's tanh fuse within 4 ulp of NumPy's
                np.testing.assert_allclose(got, want, err_msg=f"{dtype} output/grad {k}", **tol(dtype, "grad"))
            else:
                assert_bitwise(got, want, f"{dtype} output/grad {k}")
            np.testing.assert_allclose(got, ref, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-5)

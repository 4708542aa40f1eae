"""The CPU backend's native runtime (kiln/jit/backends/cpu/runtime.py and its helpers).

The oracle is the interpreter backend: every compiled result here must equal it bit for
bit (values viewed as unsigned integers, so -0.0 != +0.0; NaN equal to NaN whatever its
payload), except where a float32 graph has transcendentals (softmax's exp, GELU's tanh):
those fuse within 4 ulp of NumPy (kiln/jit/backends/render/vecmath.py), so results are
compared with the float32 tolerance of tests/tolerances.py, NaN and infinities in place. Also checked: outputs are never overwritten by a later call, threads may call
one plan at once, the C has one function per segment, and the pieces (NumPy's BLAS
dispatch, strided views, arena offsets, leading-axis sums) against NumPy itself.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
import warnings
import zlib

import numpy as np
import pytest

from jit_helpers import assert_bitwise as _assert_bitwise
from tolerances import tol

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.jit.backends import cpu
from kiln.jit.backends.cpu import arena, blas, cpython_layout, runtime, toolchain, views
from kiln.jit.backends.render import c_gemm, c_plan
from kiln.jit.backends.cpu.codegen import PRELUDE
from kiln.models import gpt, lenet_5, mlp
from kiln.ops import strided_views
from kiln.ops.linalg import rows_flatten

pytestmark = pytest.mark.skipif(not cpu.available() or cpython_layout.object_layout() is None,
                                reason="no C compiler, or generated code cannot read Python objects here")
needs_blas = pytest.mark.skipif(blas.numpy_blas() is None, reason="NumPy's BLAS is not one kiln can call")


@pytest.fixture(autouse=True)
def kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", True)
    runtime._made.clear()  # every plan here is made eagerly (see test_a_new_shape_every_call...)
    return tmp_path


def assert_bitwise(got, want, what=""):
    _assert_bitwise(got, want, what, oracle="the interpreter's")


def assert_close(got, want, what="", kind="forward"):
    """Equal within the float32 tolerance (`kind`: tolerances.TOLERANCES), NaN and infinities in the same
    places: for float32 graphs with fused transcendentals, which stay within a few ulp of NumPy."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape, got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, err_msg=what, **tol(got.dtype, kind))


def _plans(entry) -> list:
    return [entry.plan] if hasattr(entry, "plan") else [entry.forward_plan, entry.backward_plan]


# ---- whole models against the interpreter ---------------------------------------------------
def _block(d_model: int) -> nn.Module:
    layer = dict(d_model=d_model, nhead=4, dim_feedforward=2 * d_model, dropout=0.0, activation="gelu",
                 batch_first=True, norm_first=True)
    return nn.Sequential(nn.TransformerEncoderLayer(**layer), nn.TransformerEncoderLayer(**layer))


def _case(name: str, batch: int, dtype: str):
    kiln.manual_seed(0)
    if name == "mlp":
        model, x, y = mlp(64, (32, 32), 10), kiln.randn(batch, 64), kiln.randint(0, 10, (batch,))
    elif name == "lenet":
        model, x, y = lenet_5(), kiln.randn(batch, 1, 32, 32), kiln.randint(0, 10, (batch,))
    elif name == "gpt":
        model, x, y = gpt(23, 2, 2, 16, 8), kiln.randint(0, 23, (batch, 8)), kiln.randint(0, 23, (batch, 8))
    else:
        model, x, y = _block(16), kiln.randn(batch, 6, 16), None
    if dtype == "float64":
        model = model.double()
        x = x.double() if x.is_floating_point() else x
    return model, x, y


def _loss(out, y):
    if y is None:
        return (out * out).sum()
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _train(model, x, y, backend: str, calls: int = 3):
    compiled = kiln.compile(model, backend=backend)
    results = []
    for _ in range(calls):
        model.zero_grad()
        out = compiled(x)
        _loss(out, y).backward()
        results.append([out.detach().numpy().copy()] + [p.grad.numpy().copy() for p in model.parameters()])
    return results, compiled


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt", "block"])
def test_training_equals_the_interpreter_bit_for_bit(name, batch, dtype):
    model, x, y = _case(name, batch, dtype)
    want, _ = _train(model, x, y, "interpret")
    got, compiled = _train(model, x, y, "cpu")
    fused_transcendentals = dtype == "float32" and name in ("gpt", "block")  # softmax, GELU
    for call, (g, w) in enumerate(zip(got, want)):
        for k, (a, b) in enumerate(zip(g, w)):
            what = f"{name} call {call}, {'output' if k == 0 else f'grad {k - 1}'}"
            if fused_transcendentals:
                assert_close(a, b, what, "grad")
            else:
                assert_bitwise(a, b, what)
    plans = _plans(compiled.cache_entries[0])
    assert all(isinstance(p, runtime.NativePlan) for p in plans)
    observed = [p.observed_calls for p in plans]
    fallbacks = [p.fallback_calls for p in plans]
    model.zero_grad()
    _loss(compiled(x), y).backward()
    assert [p.observed_calls for p in plans] == observed, "a steady call met layouts no variant had"
    assert [p.fallback_calls for p in plans] == fallbacks == [0] * len(plans)


@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt", "block"])
def test_first_replays_expect_the_layouts_the_trace_saw(name):
    """Transposed weights handed to the backward plan, NumPy steps' strided results: the first
    variant expects the layouts the trace saw, so no replay runs through the Observer to learn
    them (a Python run plus another compiler run, at real sizes seconds)."""
    model, x, y = _case(name, 3, "float32")
    _, compiled = _train(model, x, y, "cpu")
    plans = _plans(compiled.cache_entries[0])
    assert [p.observed_calls for p in plans] == [0] * len(plans)
    assert [len(p.variants) for p in plans] == [1] * len(plans)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch", [1, 5])
def test_mlp_inference_is_one_native_call_and_exact(batch, dtype):
    model, x, _ = _case("mlp", batch, dtype)
    interp, native = kiln.compile(model, backend="interpret"), kiln.compile(model, backend="cpu")
    with kiln.no_grad():
        for _ in range(3):
            assert_bitwise(native(x).numpy(), interp(x).numpy(), "mlp inference")
    plan = native.cache_entries[0].plan
    assert isinstance(plan, runtime.NativePlan) and plan.segments == 1
    assert plan.observed_calls == plan.fallback_calls == 0
    assert plan.driver.count("rc = seg0(") == 1


def test_mlp_training_forward_and_backward_are_one_native_call_each():
    model, x, y = _case("mlp", 4, "float32")
    compiled = kiln.compile(model, backend="cpu")
    for _ in range(3):
        _loss(compiled(x), y).backward()
    forward, backward = _plans(compiled.cache_entries[0])
    assert forward.segments == 1 and backward.segments == 1
    for plan in (forward, backward):
        assert len(plan.current.analysis.units()) == 1, plan.driver  # no NumPy step at all


def test_bias_and_activation_run_in_place_over_the_gemm_result():
    def f(x, w, b):
        g = x @ w
        first = (g + b).relu()  # g is read again below: not in place
        return first * 2.0, ((g * 0.5).sin() + b).relu()  # the last read of g's sin: in place

    compiled = kiln.compile(f, backend="cpu")
    x, w, b = kiln.randn(5, 6), kiln.randn(6, 7), kiln.randn(7)
    with kiln.no_grad():
        compiled(x, w, b)
        for got, want in zip(compiled(x, w, b), f(x, w, b)):
            assert_bitwise(got.numpy(), want.numpy(), "in place")
    model, x, _ = _case("mlp", 4, "float32")
    fast = kiln.compile(model, backend="cpu")
    with kiln.no_grad():
        fast(x)
        assert_bitwise(fast(x).numpy(), model(x).numpy(), "mlp")
    analysis = fast.cache_entries[0].plan.analysis
    assert len(analysis.in_place) == 3  # each Linear's bias (and ReLU) over its GEMM's result
    assert all(analysis.graph.nodes and k == 0 for k in analysis.in_place.values())


# ---- memory: outputs, residuals, threads ------------------------------------------------------
def test_outputs_of_one_call_survive_the_next():
    model, _, _ = _case("mlp", 4, "float32")
    compiled = kiln.compile(model, backend="cpu")
    xs = [kiln.randn(4, 64) for _ in range(3)]
    with kiln.no_grad():
        compiled(xs[0])
        first = compiled(xs[1])
        kept = first.numpy().copy()
        second = compiled(xs[2])
        assert_bitwise(first.numpy(), kept, "the first result after a second call")
        assert not np.shares_memory(first.numpy(), second.numpy())
        assert_bitwise(second.numpy(), model(xs[2]).numpy(), "the second result")


def test_residuals_of_one_call_survive_the_next_forward():
    """Two forwards, then both backwards: each backward reads its own forward's residuals."""
    model, _, _ = _case("mlp", 3, "float32")
    compiled = kiln.compile(model, backend="cpu")
    xs = [kiln.randn(3, 64) for _ in range(3)]
    compiled(xs[0]).sum().backward()  # builds the plans
    outs = [compiled(x) for x in xs[1:]]
    model.zero_grad()
    outs[0].square().sum().backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    model(xs[1]).square().sum().backward()
    for g, p in zip(got, model.parameters()):
        assert_bitwise(g, p.grad.numpy(), "a gradient from the first of two forwards")


def test_threads_calling_one_plan_at_once_get_their_own_results():
    model, _, _ = _case("mlp", 8, "float32")
    compiled = kiln.compile(model, backend="cpu")
    inputs = [kiln.randn(8, 64) for _ in range(8)]
    with kiln.no_grad():
        compiled(inputs[0])
        compiled(inputs[0])
        want = [model(x).numpy().copy() for x in inputs]
    errors = []
    start = threading.Barrier(4)

    def work(offset: int) -> None:
        try:
            start.wait()
            with kiln.no_grad():
                for i in range(40):
                    k = (i + offset) % len(inputs)
                    assert_bitwise(compiled(inputs[k]).numpy(), want[k], f"thread {offset} call {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    plan = compiled.cache_entries[0].plan
    assert plan.fallback_calls == 0 and plan.observed_calls == 0


def test_a_new_shape_every_call_compiles_only_the_first_plans(monkeypatch):
    """Past EAGER_PLANS plans of one structure, a plan runs its first call in Python and generates
    its code at its second call: a function fed a new shape on every call stops paying a compile."""
    builds = []
    real_build = toolchain.build

    def counting(source, *args, **kwargs):
        builds.append(len(source))
        return real_build(source, *args, **kwargs)

    def f(x):
        return (x * 2.0).relu().sum(0)

    compiled = kiln.compile(f, backend="cpu", max_cache_entries=64, dynamic=False)
    monkeypatch.setattr(toolchain, "build", counting)
    with kiln.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # kiln's advice to use dynamic_dims
        for n in range(1, 21):  # each shape: the trace, then one replay
            x = kiln.randn(n, 3)
            compiled(x)
            assert_bitwise(compiled(x).numpy(), f(x).numpy(), f"shape {n}")
        assert len(builds) == runtime.EAGER_PLANS
        x = kiln.randn(20, 3)
        assert_bitwise(compiled(x).numpy(), f(x).numpy(), "a lazy plan's second call")
        assert len(builds) == runtime.EAGER_PLANS + 1
    plan = compiled.cache_entries[-1].plan
    assert plan.lazy and len(plan.variants) == 1 and plan.observed_calls == 1
    assert_bitwise(compiled(x).numpy(), f(x).numpy(), "and its third")


def test_a_returned_captured_tensor_is_the_tensor_itself_as_in_eager():
    w = kiln.randn(4, 4)

    def f(x):
        return x @ w, w

    compiled = kiln.compile(f, backend="cpu")
    x = kiln.randn(2, 4)
    compiled(x)
    _, got = compiled(x)
    assert got is w and compiled.stats.hits == 1


# ---- the generated source ---------------------------------------------------------------------
def test_source_has_one_function_per_segment():
    def f(x, w):
        h = (x @ w).relu() * 2.0
        return h.sin() @ w.T + 1.0  # sin stays with NumPy: two segments around it

    compiled = kiln.compile(f, backend="cpu")
    x, w = kiln.randn(3, 5), kiln.randn(5, 5)
    with kiln.no_grad():
        compiled(x, w)
        assert_bitwise(compiled(x, w).numpy(), f(x, w).numpy(), "two segments")
    plan = compiled.cache_entries[0].plan
    assert plan.segments == 2
    assert [f"long long kiln_segment_{k}(" in plan.source for k in range(3)] == [True, True, False]
    assert plan.driver.count("rc = seg") == 2


def test_kernels_that_read_alike_are_rendered_once():
    """Repeated blocks (sizes are arguments) share their kernels' C; each kernel still computes its own node."""
    def block(x, w, b):
        return ((x @ w) * b + 1.0).relu() * 0.5

    def f(x, w, b):
        for _ in range(4):  # four blocks whose elementwise groups read alike
            x = block(x, w, b)
        return x

    compiled = kiln.compile(f, backend="cpu")
    x, w, b = kiln.randn(6, 8), kiln.randn(8, 8), kiln.randn(8)
    with kiln.no_grad():
        compiled(x, w, b)
        assert_bitwise(compiled(x, w, b).numpy(), f(x, w, b).numpy(), "four blocks")
    source = compiled.cache_entries[0].plan.source
    kernels = [line for line in source.splitlines() if line.startswith("static void kiln_loop_")]
    assert len(kernels) == 1, kernels
    assert source.count(kernels[0].split("(")[0].split()[-1] + "(") >= 4 + 1  # four calls and the definition


def test_a_large_plan_is_split_into_libraries_built_at_once(monkeypatch):
    """Past PART_CHARS of C, a plan's segments go to several libraries (one compiler each); the calls and bits
    are those of the plan in one library."""
    from kiln.jit.backends.cpu import segcode

    def f(x, w):
        h = (x @ w).relu() * 2.0
        h = h.sin() @ w.T + 1.0  # sin stays with NumPy: segments around it
        return (h.cos() @ w).tanh() - 0.5

    x, w = kiln.randn(3, 5), kiln.randn(5, 5)
    with kiln.no_grad():
        whole = kiln.compile(f, backend="cpu")
        want = [whole(x, w).numpy() for _ in range(2)][-1]
        monkeypatch.setattr(segcode, "PART_CHARS", 1000)
        monkeypatch.setattr(runtime, "_idle_cpus", lambda: 2)
        built = []
        real_build = toolchain.build
        monkeypatch.setattr(toolchain, "build", lambda source, *a, **k: built.append(source) or real_build(source, *a, **k))
        split = kiln.compile(f, backend="cpu")
        got = [split(x, w).numpy() for _ in range(2)][-1]
    assert_bitwise(got, want, "a plan in two libraries")
    plan = split.cache_entries[0].plan
    sources = plan.current.sources
    assert len(sources) == 2 and sorted(built) == sorted(sources), [s[:80] for s in built]
    assert plan.segments == 3
    for k in range(3):  # each segment in exactly one library, each library with its own setup
        assert sum(f"long long kiln_segment_{k}(" in s for s in sources) == 1
    assert all(f"void {c_plan.SETUP}(" in s and "part " in s.splitlines()[0] for s in sources)
    assert whole.cache_entries[0].plan.current.sources[0].splitlines()[0].endswith("segment(s) */")


def test_non_contiguous_inputs_get_a_variant_of_their_own():
    def f(x, w):
        return (x @ w + 1.0).relu()

    compiled = kiln.compile(f, backend="cpu")
    x, w = kiln.randn(6, 5), kiln.randn(7, 5)
    with kiln.no_grad():
        compiled(x, w.T)
        for _ in range(3):
            assert_bitwise(compiled(x, w.T).numpy(), f(x, w.T).numpy(), "transposed input")
        assert_bitwise(compiled(x, w.T.contiguous()).numpy(), f(x, w.T).numpy(), "contiguous again")
    plan = compiled.cache_entries[0].plan
    assert len(plan.variants) == 2 and plan.fallback_calls == 0
    assert plan.observed_calls == 2  # once for each new layout, then the variants run


def test_a_numpy_step_with_a_column_major_result_still_lets_the_variant_run():
    """x.T - s runs as a NumPy step in the variant for a column-major x, and NumPy keeps its result
    column-major; the segment reading it learns that layout on a miss instead of missing forever."""
    def f(x, s):
        y = x - s
        return y * 2.0 + 1.0, y * -0.5

    compiled = kiln.compile(f, backend="cpu")
    x, s = kiln.randn(4, 3), kiln.randn(())
    with kiln.no_grad():
        for _ in range(6):
            for got, want in zip(compiled(x.T, s), f(x.T, s)):
                assert_bitwise(got.numpy(), want.numpy(), "column-major input")
    plan = compiled.cache_entries[0].plan
    assert isinstance(plan, runtime.NativePlan)
    observed = plan.observed_calls
    with kiln.no_grad():
        for _ in range(3):
            compiled(x.T, s)
    assert plan.observed_calls == observed <= 2  # it stopped missing: the native code runs now


def test_dynamic_dims_get_one_native_plan_for_every_size():
    """A product whose rows and columns are both the dynamic dim (B x B) runs as native code at every size."""
    compiled = kiln.compile(lambda x: (x * 2.0).relu() @ x.T, backend="cpu", dynamic_dims={0: {0: "B"}})
    for batch in (2, 3, 17, 40, 5):
        x = kiln.randn(batch, 4)
        assert_bitwise(compiled(x).numpy(), ((x * 2.0).relu() @ x.T).numpy(), f"dynamic dims, batch {batch}")
    (entry,) = compiled.cache_entries
    plan = entry.plan
    assert isinstance(plan, runtime.NativePlan) and plan.analysis.dims == ("B",)
    assert plan.fallback_calls == 0 and plan.segments == 1


def test_constants_keep_their_bits():
    def f(x):
        return kiln.where(x > 0, x * -0.0, x + float("inf")) * 3.5 - 1e-30

    compiled = kiln.compile(f, backend="cpu")
    x = kiln.tensor(np.array([[1.5, -2.0, 0.0], [-0.0, np.nan, 7.0]], np.float32))
    with kiln.no_grad():
        compiled(x)
        assert_bitwise(compiled(x).numpy(), f(x).numpy(), "constants")
    assert isinstance(compiled.cache_entries[0].plan, runtime.NativePlan)


def test_the_runtime_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(cpu, "NATIVE_RUNTIME", False)
    compiled = kiln.compile(lambda x: (x * 2.0).relu(), backend="cpu")
    x = kiln.randn(3, 3)
    compiled(x)
    assert not isinstance(compiled.cache_entries[0].plan, runtime.NativePlan)


# ---- sums over leading axes -------------------------------------------------------------------
@pytest.mark.parametrize("shape, axes", [((16, 10), (0,)), ((5, 3, 7), (0, 1)), ((3, 8192), (0,)), ((8, 1), (0,)), ((300, 1, 1), (0,)),
                                         ((1, 6), (0,)), ((0, 4), (0,)), ((9, 2, 5), (0,)), ((1,), (0,)),
                                         ((7,), (0,)), ((300,), (0,)), ((0,), (0,))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_leading_axis_sums_add_in_numpys_order(shape, axes, dtype):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal(shape) * 1e3).astype(dtype)
    if data.size and data[(0,) * len(axes)].size > 1:
        kept = data[(0,) * len(axes)]
        kept.reshape(-1)[::2] = -0.0  # columns of -0.0 only: the sum is +0.0 when it starts from 0, as NumPy's
        data[...] = np.where(kept == 0, -0.0, data)
        if data.size > kept.size:
            data.reshape(-1)[-1] = np.finfo(dtype).max  # an overflow to inf, in order
            data.reshape(-1)[-1 - kept.size] = np.finfo(dtype).max

    def f(x):
        return x.sum(axes)

    x = kiln.tensor(data)
    compiled = kiln.compile(f, backend="cpu")
    with kiln.no_grad():
        compiled(x)
        assert_bitwise(compiled(x).numpy(), f(x).numpy(), f"sum over {axes} of {shape}")
    plan = compiled.cache_entries[0].plan
    kinds = {n.prim.name: plan.current.analysis.kinds[id(n)] for n in plan.graph.nodes}
    assert kinds in ({"sum": "native"}, {"fused_rows[sum]": "native"}), kinds  # (a vector may be a row kernel)


# ---- matmul: NumPy's BLAS call, bit for bit ---------------------------------------------------
MATMUL_CASES = [
    ("x @ w", (5, 7), (7, 3)), ("x @ w.T", (5, 7), (3, 7)), ("x.T @ w", (7, 5), (7, 3)),
    ("x.T @ w.T", (7, 5), (3, 7)), ("x @ x.T", (6, 9), None), ("x.T @ x", (6, 9), None),
    ("x @ w", (1, 7), (7, 3)), ("x @ w", (5, 7), (7, 1)), ("x @ w", (1, 7), (7, 1)),
    ("x @ w", (5, 1), (1, 3)), ("x @ w.T", (1, 7), (3, 7)), ("x.T @ w", (1, 5), (1, 3)),
    ("x @ w", (0, 7), (7, 3)), ("x @ w", (5, 0), (0, 3)), ("x @ w", (33, 65), (65, 17)),
    ("x @ w", (2, 3, 5, 7), (7, 4)), ("x @ w", (2, 5, 7), (2, 7, 4)), ("x @ w", (5, 7), (3, 7, 4)),
    ("x @ w.transpose(-1, -2)", (2, 5, 7), (2, 4, 7)),
    # a 2-D second operand: one product over all rows where they are evenly spaced (rows_flatten)
    ("x[:, ::2] @ w", (3, 10, 7), (7, 4)), ("x[..., :5] @ w", (3, 6, 7), (5, 4)),
    ("x[:, :4] @ w", (3, 8, 7), (7, 4)), ("x.transpose(0, 1) @ w", (5, 3, 7), (7, 4)),
    ("x @ w.T", (35, 20, 16), (64, 16)),
]


@needs_blas
def test_a_batch_of_rows_times_a_matrix_is_one_blas_call():
    rng = np.random.default_rng(4)
    x = kiln.tensor(rng.standard_normal((35, 20, 16)).astype(np.float32))
    w = kiln.tensor(rng.standard_normal((64, 16)).astype(np.float32))
    compiled = kiln.compile(lambda x, w: x @ w.T, backend="cpu")
    with kiln.no_grad():
        compiled(x, w)
        assert_bitwise(compiled(x, w).numpy(), (x @ w.T).numpy(), "(35, 20, 16) @ (16, 64)")
    source = compiled.cache_entries[0].plan.current.source
    body = source[source.index("kiln_segment_0("):]
    assert "i0 < 35" not in body and ", 700, 16, 64);" in body  # one 700-row product, no batch loop


# few rows times a transposed matrix: (w @ x.T).T, in eager and generated code alike (transposed_product).
# (expression, x's shape, w's shape, NumPy's own expression of the same call, whether it is transposed)
TRANSPOSED_CASES = [
    ("x @ w.T", (16, 512), (256, 512), "(w @ x.T).T", True),
    ("x @ w.T", (2, 12, 512), (256, 512), "(w @ x.reshape(24, 512).T).T.reshape(2, 12, 256)", True),
    ("x @ w.T", (32, 400), (400, 400), "(w @ x.T).T", True),
    ("x @ x.T", (16, 8192), None, "x @ x.T", True),  # the helper keeps NumPy's syrk when both are one memory
    ("x @ w.transpose(-1, -2)", (1, 16, 512), (1, 256, 512), "x @ w.swapaxes(-1, -2)", False),  # a batch dim
    ("x @ w.T", (7, 512), (256, 512), "x @ w.T", False), ("x @ w.T", (33, 512), (256, 512), "x @ w.T", False),
    ("x @ w.T", (16, 64), (64, 64), "x @ w.T", False), ("x @ w", (16, 512), (512, 256), "x @ w", False),
]


@needs_blas
@pytest.mark.parametrize("expr, xs, ws, numpy_expr, transposed", TRANSPOSED_CASES, ids=lambda c: str(c))
def test_few_rows_times_a_transposed_matrix_make_the_same_call_eager_and_compiled(expr, xs, ws, numpy_expr,
                                                                                  transposed):
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal(xs).astype(np.float32)
    w_np = rng.standard_normal(ws if ws else (1,)).astype(np.float32)
    x, w = kiln.tensor(x_np), kiln.tensor(w_np)
    compiled = kiln.compile(lambda x, w: eval(expr, {"x": x, "w": w}), backend="cpu")  # noqa: S307
    with kiln.no_grad():
        eager = eval(expr, {"x": x, "w": w}).numpy()  # noqa: S307
        compiled(x, w)
        got = compiled(x, w).numpy()
    # (the transposed call's bits equal x @ w.T's with OpenBLAS's AVX-512 kernels, not with its AVX2 ones)
    assert_bitwise(eager, np.ascontiguousarray(eval(numpy_expr, {"x": x_np, "w": w_np})), f"eager {expr}")  # noqa: S307
    assert_bitwise(got, eager, f"compiled {expr}")
    source = compiled.cache_entries[0].plan.current.source
    body = source[source.index("kiln_segment_0("):]
    assert ("kiln_matmul_transposed_s(" in body) is transposed, expr


def test_transposed_product_asks_for_few_rows_a_transposed_matrix_and_float32():
    from kiln.ops.linalg import transposed_product  # noqa: PLC0415

    wide = ((16, 512), (512, 1), (512, 256), (1, 512))  # x (16, 512) @ w.T, w (256, 512)
    assert transposed_product(*wide, "float32")
    assert not transposed_product(*wide, "float64")
    assert not transposed_product((7, 512), (512, 1), (512, 256), (1, 512), "float32")  # too few rows
    assert not transposed_product((33, 512), (512, 1), (512, 256), (1, 512), "float32")  # too many
    assert not transposed_product((16, 512), (512, 1), (512, 255), (1, 512), "float32")  # too small a matrix
    assert not transposed_product((16, 512), (512, 1), (512, 256), (256, 1), "float32")  # w not transposed
    assert not transposed_product((16, 512), (1, 16), (512, 256), (1, 512), "float32")  # x's rows not contiguous


def test_rows_flatten_needs_rows_evenly_spaced_across_the_batch():
    def strides(a):
        return tuple(s // a.itemsize for s in a.strides)

    base = np.zeros((3, 8, 7), np.float32)
    for view, flat in [(base, True), (base[:, ::2], True), (base[..., :5], True), (base[:1], True),
                       (base[:, :4], False), (base.transpose(1, 0, 2), False), (base[..., ::2], False),
                       (base.transpose(0, 2, 1), False), (base[:, :0], False),
                       (np.broadcast_to(base[:, :1], (3, 4, 7)), False),
                       (np.broadcast_to(base[:1, :1], (3, 1, 7)), False)]:
        assert rows_flatten(view.shape, strides(view)) is flat, (view.shape, view.strides)
        if flat:  # the flattened rows are a view of the operand, as the eager kernel reshapes it
            assert np.shares_memory(view.reshape(-1, view.shape[-1]), view)


@needs_blas
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expr, xs, ws", MATMUL_CASES, ids=lambda c: str(c))
def test_compiled_matmul_equals_numpy(expr, xs, ws, dtype):
    rng = np.random.default_rng(1)
    x = kiln.tensor((rng.standard_normal(xs) * 10).astype(dtype))
    w = kiln.tensor((rng.standard_normal(ws if ws else (1,)) * 10).astype(dtype))

    def f(x, w):
        return eval(expr, {"x": x, "w": w}) * 1.0  # noqa: S307 - the expressions above

    compiled = kiln.compile(f, backend="cpu")
    with kiln.no_grad():
        compiled(x, w)
        got = compiled(x, w).numpy()
    assert_bitwise(got, f(x, w).numpy(), expr)
    plan = compiled.cache_entries[0].plan
    native = [n for n in plan.current.analysis.order if n.prim.name == "matmul"
              and plan.current.analysis.kinds[id(n)] == "native"] if isinstance(plan, runtime.NativePlan) else []
    assert native or 0 in xs or 0 in (ws or ()), "the matmul was not native"


def _helper_library():
    found = blas.numpy_blas()
    source = PRELUDE + c_gemm.blas_prelude(found.int_type, blas.FUNCTIONS) + r"""
void kiln_setup(void *const *t) { kiln_bind_blas(t); }
#define KILN_MM(S, T) void mm_##S(const T *a, long long s1m, long long s1n, const T *b, long long s2n, \
    long long s2p, T *o, long long m, long long n, long long p) { \
    kiln_matmul2d_##S(a, s1m, s1n, b, s2n, s2p, o, p, 1, m, n, p); }
KILN_MM(s, float)
KILN_MM(d, double)
"""
    lib = toolchain.build(source, "kiln_setup")
    table = (ctypes.c_void_p * len(blas.FUNCTIONS))(*found.table())
    lib.kiln_setup(table)
    for fn in (lib.mm_s, lib.mm_d):
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p, *[ctypes.c_longlong] * 2, ctypes.c_void_p, *[ctypes.c_longlong] * 2,
                       ctypes.c_void_p, *[ctypes.c_longlong] * 3]
    return lib


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_matmul_helper_makes_numpys_call_for_every_layout(dtype):
    """Thousands of products: sizes with 0, 1 and odd dims, C and F operands, special values."""
    lib = _helper_library()
    fn = lib.mm_s if dtype == np.float32 else lib.mm_d
    rng = np.random.default_rng(2)
    size = np.dtype(dtype).itemsize
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], dtype)

    def operand(shape, order):
        a = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3])).astype(dtype)
        if a.size and rng.random() < 0.3:
            a.reshape(-1)[rng.integers(0, a.size, 3)] = rng.choice(specials, 3)
        return np.asfortranarray(a) if order == "F" else a

    sizes = [0, 1, 2, 3, 8, 17, 64]
    for m, n, p in itertools.product(sizes, repeat=3):
        for oa, ob in itertools.product("CF", repeat=2):
            a, b = operand((m, n), oa), operand((n, p), ob)
            with np.errstate(all="ignore"):
                want = a @ b
            out = np.empty((m, p), dtype)
            fn(a.ctypes.data, a.strides[0] // size, a.strides[1] // size, b.ctypes.data, b.strides[0] // size,
               b.strides[1] // size, out.ctypes.data, m, n, p)
            assert_bitwise(out, want, f"{m}x{n} ({oa}) @ {n}x{p} ({ob})")
    for m, n in [(5, 7), (64, 33), (3, 1)]:  # a @ a.T on one memory: syrk
        a = operand((m, n), "C")
        out = np.empty((m, m), dtype)
        fn(a.ctypes.data, n, 1, a.ctypes.data, 1, n, out.ctypes.data, m, n, m)
        with np.errstate(all="ignore"):
            want = a @ a.T
        assert_bitwise(out, want, f"syrk {m}x{n}")


# ---- static views and the arena ---------------------------------------------------------------
def test_strided_reshape_views_match_numpy():
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(1500):
        nd = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.choice([1, 2, 3, 4, 6], nd))
        grow = tuple(d * int(rng.choice([1, 1, 2])) for d in shape)
        base = np.arange(int(np.prod(grow)), dtype=np.float32).reshape(grow)
        a = base[tuple(slice(0, d) for d in shape)].transpose(rng.permutation(nd) if rng.random() < 0.4 else None)
        new = tuple(int(d) for d in rng.permutation([*_factors(a.size, rng), 1][: int(rng.integers(1, 5))]))
        if int(np.prod(new)) != a.size:
            continue
        mine = strided_views.reshaped(a.shape, tuple(s // 4 for s in a.strides), 0, new)
        r = a.reshape(new)
        if np.shares_memory(r, a):
            assert mine is not None, (a.shape, a.strides, new)
            assert all(x == y for d, x, y in zip(new, mine[1], (s // 4 for s in r.strides)) if d != 1)
            checked += 1
        else:
            assert mine is None, (a.shape, a.strides, new)
    assert checked > 200


def _factors(n: int, rng) -> list[int]:
    out = []
    while n > 1:
        d = int(rng.choice([k for k in range(2, n + 1) if n % k == 0]))
        out.append(d)
        n //= d
    return out or [1]


def test_index_views_match_numpy():
    from kiln.jit.ir import Node, Value
    from kiln.ops.primitive import REGISTRY

    x = np.arange(5 * 6 * 7, dtype=np.float64).reshape(5, 6, 7)
    specs = [(("s", 1, 4, None),), (("i", 2), ("s", None, None, 2)), (("e",), ("s", 1, None, 3)),
             (("n",), ("i", -1), ("s", 2, 5, None)), (("s", None, None, None), ("i", 0), ("i", 3))]
    from kiln.ops.movement import resolve_index

    for spec in specs:
        want = x[resolve_index(spec, ())]
        node = Node(REGISTRY["index"], [Value(x.shape, kiln.float64)], {"spec": spec}, Value(want.shape, kiln.float64))
        got = views.view_layout(node, views.Layout.contiguous(x.shape))
        assert got is not None and got.shape == want.shape, spec
        offset = (want.__array_interface__["data"][0] - x.__array_interface__["data"][0]) // 8
        assert got.offset == offset and all(a == b // 8 for d, a, b in zip(want.shape, got.strides, want.strides)
                                             if d != 1), spec


def test_arena_offsets_never_overlap_live_buffers():
    rng = np.random.default_rng(4)
    for _ in range(50):
        intervals = []
        for k in range(int(rng.integers(1, 30))):
            first = int(rng.integers(0, 20))
            intervals.append(arena.Interval(k, int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
        offsets, total = arena.assign_offsets(intervals)
        for iv in intervals:
            assert offsets[iv.key] % arena.ALIGN == 0 and offsets[iv.key] + iv.nbytes <= total
        for a, b in itertools.combinations(intervals, 2):
            if a.first <= b.last and b.first <= a.last:  # live at once: disjoint bytes
                assert offsets[a.key] + a.nbytes <= offsets[b.key] or offsets[b.key] + b.nbytes <= offsets[a.key]
        assert total <= sum(-(-iv.nbytes // arena.ALIGN) * arena.ALIGN for iv in intervals)


def test_the_object_probe_reads_this_python():
    layout = cpython_layout.object_layout()
    assert layout is not None and cpython_layout.layout_problem() is None
    assert layout.array_data == object.__basicsize__


# ---- a differential test: templates over random shapes, layouts and special values -----------
def _layout(base: np.ndarray, kind: str, shape: tuple) -> kiln.Tensor:
    """A tensor of `shape` whose array is contiguous, a transposed view, an offset slice, or a strided slice."""
    if kind == "T":
        return kiln.tensor(np.ascontiguousarray(base[: shape[-1] * shape[0]].reshape(shape[::-1]))).T
    if kind == "offset":
        big = kiln.tensor(base[: (shape[0] + 1) * max(shape[1], 1)].reshape(shape[0] + 1, max(shape[1], 1)))
        return big[1:, : shape[1]]
    if kind == "step":
        big = kiln.tensor(base[: shape[0] * shape[1] * 2].reshape(shape[0], shape[1] * 2))
        return big[:, ::2]
    return kiln.tensor(base[: shape[0] * shape[1]].reshape(shape))


TEMPLATES = {
    "linear relu": lambda x, w, b, y: ((x @ w) + b).relu(),
    "linear and sums": lambda x, w, b, y: ((x @ w) * b - 1.0).sum(0) + (x @ w).sum(-1).sum(),
    "softmax rows": lambda x, w, b, y: (x - x.amax(-1, keepdim=True)).exp() / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True),
    "where max": lambda x, w, b, y: kiln.where(x > y, kiln.maximum(x, y), x * y - 2.5),
    "gram": lambda x, w, b, y: x @ x.T + y @ y.T,
    "views": lambda x, w, b, y: (x.T.reshape(-1) * 2.0).reshape(x.shape[1], x.shape[0]) @ y,
    "broadcast": lambda x, w, b, y: (x.unsqueeze(-1) * w.unsqueeze(0)).sum(1) + b,
    "layer norm": lambda x, w, b, y: F.layer_norm(x @ w, (w.shape[1],)) * b,
}


def _draw(rng, template: str, dtype: str):
    m, n, k = (int(rng.choice([0, 1, 2, 3, 5, 8])) for _ in range(3))
    if template in ("views", "gram", "where max", "softmax rows") and m * n == 0:
        m, n = 3, 4
    if template == "layer norm":
        k = max(k, 2)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3e38], np.float64)

    def base(size):
        a = rng.standard_normal((size + 16) * 3) * float(rng.choice([1e-3, 1.0, 1e3]))
        if rng.random() < 0.5:
            a[rng.integers(0, a.size, 2)] = rng.choice(specials, 2)
        return a.astype(dtype)

    kinds = ["C", "T", "offset", "step"]
    x = _layout(base(m * n), str(rng.choice(kinds)), (m, n))
    w = _layout(base(n * k), str(rng.choice(kinds)), (n, k))
    y_shape = (m, n) if template != "views" else (m, k)
    y = _layout(base(y_shape[0] * y_shape[1]), str(rng.choice(kinds)), y_shape)
    b = kiln.tensor(base(k)[:k])
    return x, w, b, y


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("template", list(TEMPLATES))
def test_templates_on_random_shapes_layouts_and_special_values(template, dtype):
    fn = TEMPLATES[template]
    rng = np.random.default_rng(zlib.crc32(f"{template} {dtype}".encode()))
    for draw in range(3):
        args = _draw(rng, template, dtype)
        try:
            with np.errstate(all="ignore"):
                want = fn(*args)
        except (ValueError, IndexError, RuntimeError):  # shapes a template cannot take (e.g. an empty max)
            continue
        compiled, interp = kiln.compile(fn, backend="cpu"), kiln.compile(fn, backend="interpret")
        check = assert_close if dtype == "float32" and template == "softmax rows" else assert_bitwise  # exp
        with kiln.no_grad():
            for _ in range(2):
                check(compiled(*args).numpy(), interp(*args).numpy(), f"{template} draw {draw}")
        check(compiled(*args).numpy(), want.numpy(), f"{template} draw {draw} vs eager")


def test_a_compiler_that_breaks_later_costs_one_warning_and_no_error(monkeypatch):
    def f(x, w):
        return (x @ w + 1.0).relu()

    compiled = kiln.compile(f, backend="cpu")
    x, w = kiln.randn(4, 3), kiln.randn(5, 3)
    with kiln.no_grad():
        compiled(x, w.T.contiguous())
        compiled(x, w.T.contiguous())  # the plan and its first variant exist

        def broken(*args, **kwargs):
            raise toolchain.CompilerUnavailable("the compiler went away")

        monkeypatch.setattr(toolchain, "build", broken)
        with pytest.warns(RuntimeWarning, match="new input layouts"):
            got = compiled(x, w.T)  # a new layout: no variant can be made
        assert_bitwise(got.numpy(), f(x, w.T).numpy(), "after the compiler broke")
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_bitwise(compiled(x, w.T).numpy(), f(x, w.T).numpy(), "again, quietly")
            assert_bitwise(compiled(x, w.T.contiguous()).numpy(), f(x, w.T).numpy(), "the old layout")


def test_strided_groups_are_not_run_block_by_block():
    """A flat group reading an input through a strided form (here (1024,1,5) + (1,3,1), whose only long
    inner loop is the whole output) indexes from its loop's own start: it must not join a block-by-block
    run, which moves pointers to each block's start instead (wrong elements from the second block on)."""
    def fn(a, b, c):
        y = a + b
        return y, (y * c).relu()

    rng = np.random.default_rng(0)
    a, b, c = (kiln.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((1024, 1, 5), (1, 3, 1), (1024, 3, 5)))
    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):
        got = compiled(a, b, c)
    for g, w in zip(got, fn(a, b, c)):
        assert_bitwise(g.numpy(), w.numpy())
    (entry,) = compiled.cache_entries
    plan = _plans(entry)[0]
    assert plan.fallback_calls == 0 and "(unsigned)j" in plan.source


def test_the_address_reader_gives_numpys_data_address(monkeypatch):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    arrays = [base, base[2:], base[:, 3:], base.T, np.empty(0, np.float64), np.float32(1.5) * np.ones(1)]
    read = cpython_layout.address_reader()
    assert [read(a) for a in arrays] == [a.ctypes.data for a in arrays]
    monkeypatch.setattr(cpython_layout, "object_layout", lambda: None)  # an unknown layout: NumPy's own answer
    fallback = cpython_layout.address_reader()
    assert fallback is not read and [fallback(a) for a in arrays] == [a.ctypes.data for a in arrays]

"""conv2d's forward as one register-tiled contraction (kiln/ops/conv_native.py), with no im2col.

Oracles: the same sums in float64 by NumPy (the contraction, and convolution by explicit window
sums), PyTorch's conv2d where installed, and the library itself under other tilings and thread
counts, which must give the same bits (each output is one sequence of multiply-adds).
"""
from __future__ import annotations

import numpy as np
import pytest
from test_conv_one_gemm import autograd_nodes

import kiln
import kiln.nn.functional as F
from kiln.jit.backends.cpu import parallel, toolchain
from kiln.jit.backends.render import kernel_ir
from kiln.jit.backends.render.c_contraction import TARGETS, render_contraction
from kiln.ops import conv_native

needs_library = pytest.mark.skipif(not conv_native.available(), reason="no C compiler for the contraction library")


def _reference_conv(x: np.ndarray, w: np.ndarray, stride, padding, dilation) -> np.ndarray:
    """Convolution by explicit window sums in float64."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh, ow = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j].astype(np.float64))
    return out


GEOMETRIES = [  # (n, c, h, w, o, kh, kw, stride, padding, dilation)
    (1, 1, 5, 5, 1, 3, 3, (1, 1), (1, 1), (1, 1)),  # one of everything: tails in every direction
    (2, 3, 7, 9, 5, 3, 3, (1, 1), (1, 1), (1, 1)),
    (3, 4, 11, 6, 33, 3, 2, (2, 1), (2, 0), (1, 2)),  # 33 channels: two full vectors and a 1-lane tail
    (2, 6, 8, 8, 100, 1, 1, (2, 2), (0, 0), (1, 1)),
    (1, 5, 9, 13, 17, 5, 3, (3, 2), (2, 1), (2, 3)),
    (4, 2, 6, 6, 64, 2, 2, (1, 1), (3, 3), (1, 1)),  # padding wider than the kernel: all-padding windows
]


@needs_library
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:7])))
def test_the_contraction_convolves_like_explicit_window_sums(geometry, dtype):
    n, c, h, wd, o, kh, kw, stride, padding, dilation = geometry
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((n, c, h, wd)).astype(dtype), rng.standard_normal((o, c, kh, kw)).astype(dtype)
    want = _reference_conv(x, w, stride, padding, dilation)
    got = conv_native.conv2d_direct(x, w, stride, padding, dilation, want.shape[2:])
    assert got.shape == want.shape and got.dtype == np.dtype(dtype) and got.flags.c_contiguous
    tol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(c * kh * kw) * np.abs(want).max())


@needs_library
def test_a_weight_gradient_summing_over_more_positions_than_a_block():
    """5 x 30 x 30 = 4500 positions: three blocks of K_BLOCK terms, each resuming from the stored sums."""
    from kiln.jit.backends.render.c_contraction import K_BLOCK  # noqa: PLC0415

    rng = np.random.default_rng(9)
    x, g = rng.standard_normal((5, 3, 30, 30)), rng.standard_normal((5, 20, 30, 30))
    assert 5 * 30 * 30 > 2 * K_BLOCK
    got = conv_native.conv2d_weight_grad_direct(x, g, (3, 3), (1, 1), (1, 1), (1, 1))
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.stack([np.einsum("nchw,nohw->oc", padded[:, :, i:i + 30, j:j + 30], g)
                     for i in range(3) for j in range(3)], -1).reshape(20, 3, 3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11 * np.abs(want).max())


@needs_library
def test_a_plain_matrix_product_through_the_offset_tables():
    """mo[m] = m*K, ko[k] = k, om[m] = m*N, ldn = 1: a row-major GEMM, stored a vector at a time."""
    rng = np.random.default_rng(1)
    for m, k, n in [(1, 1, 1), (7, 13, 29), (13, 64, 48), (40, 3, 70)]:
        a, bmat = rng.standard_normal((m, k)), rng.standard_normal((n, k))  # b given as (n, k), as a weight
        out = np.full((m, n), np.nan)
        mo, ko, om = (np.arange(m, dtype=np.int64) * step for step in (k, 0, n))
        ko = np.arange(k, dtype=np.int64)
        assert conv_native.contract(a, mo, ko, conv_native.packed_operand(bmat), n, out, om, 1)
        np.testing.assert_allclose(out, a @ bmat.T, rtol=1e-13, atol=1e-13 * k)


@needs_library
def test_the_bits_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 8, 10, 10)).astype(np.float32), rng.standard_normal((20, 8, 3, 3)).astype(np.float32)
    threads, threshold = parallel.kernel_threads(), parallel.min_elements()
    try:
        parallel.set_min_elements(0)
        results, teams = [], []
        for count in (1, 2, 3):
            parallel.set_kernel_threads(count)
            before = parallel.teams_run()
            results.append(conv_native.conv2d_direct(x, w, (1, 1), (1, 1), (1, 1), (10, 10)))
            teams.append(parallel.teams_run() - before)
    finally:
        parallel.set_kernel_threads(threads)
        parallel.set_min_elements(threshold)
    for got in results[1:]:
        np.testing.assert_array_equal(got.view(np.uint32), results[0].view(np.uint32))
    assert teams[0] == 0  # one thread: no team
    command = toolchain.compiler_command()
    if toolchain.openmp_flags(command) and toolchain.prepare_openmp_runtime():  # the library runs teams here
        assert teams[1] > 0 and teams[2] > 0


def _primitives(t) -> list[str]:
    """The primitives of the autograd graph that made `t`."""
    return [node.prim.name for node in autograd_nodes(t)]


def test_neither_direction_makes_columns():
    x, w = kiln.randn(2, 3, 8, 8, requires_grad=True), kiln.randn(4, 3, 3, 3, requires_grad=True)
    y = F.conv2d(x, w, padding=1)
    assert _primitives(y) == ["conv2d"]
    gx, gw = kiln.autograd.grad(y.sum(), (x, w), create_graph=True)
    assert "unfold2d" not in _primitives(gx) + _primitives(gw)
    assert "conv2d_input_grad" in _primitives(gx) and "conv2d_weight_grad" in _primitives(gw)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("stride, padding, dilation", [(1, 1, 1), (2, 1, 1), (1, 3, 2), (2, 0, 1)])
def test_nn_grad_functions_match_torch(groups, stride, padding, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4, 9, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    geometry = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    out = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), **geometry)
    g = rng.standard_normal(out.shape).astype(np.float32)
    got_x = kiln.nn.grad.conv2d_input(x.shape, kiln.tensor(w), kiln.tensor(g), **geometry).numpy()
    got_w = kiln.nn.grad.conv2d_weight(kiln.tensor(x), w.shape, kiln.tensor(g), **geometry).numpy()
    want_x = torch.nn.grad.conv2d_input(x.shape, torch.tensor(w), torch.tensor(g), **geometry).numpy()
    want_w = torch.nn.grad.conv2d_weight(torch.tensor(x), w.shape, torch.tensor(g), **geometry).numpy()
    np.testing.assert_allclose(got_x, want_x, rtol=1e-5, atol=1e-5 * np.abs(want_x).max())
    np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-5 * np.abs(want_w).max())


@needs_library
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[:7])))
def test_the_gradient_contractions_match_float64_sums(geometry):
    """Weight gradient: rows are window terms, terms are the batch's positions (long sums, in blocks);
    image gradient: the flipped weight over the padded output gradient (stride 1), or one contraction per
    phase of the stride over its own taps."""
    torch = pytest.importorskip("torch")
    n, c, h, wd, o, kh, kw, stride, padding, dilation = geometry
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((n, c, h, wd)), rng.standard_normal((o, c, kh, kw))
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding, dilation=dilation)
    g = rng.standard_normal(out.shape)
    out.backward(torch.tensor(g))
    got_w = conv_native.conv2d_weight_grad_direct(x, g, (kh, kw), stride, padding, dilation)
    np.testing.assert_allclose(got_w, tw.grad.numpy(), rtol=1e-12, atol=1e-12 * np.abs(tw.grad.numpy()).max())
    got_x = conv_native.conv2d_input_grad_direct(g, w, (h, wd), stride, padding, dilation)
    np.testing.assert_allclose(got_x, tx.grad.numpy(), rtol=1e-12, atol=1e-12 * np.abs(tx.grad.numpy()).max())


@needs_library
@pytest.mark.parametrize("kernel, stride, padding, dilation", [
    ((1, 1), (2, 2), (0, 0), (1, 1)),  # a ResNet shortcut: odd positions get no gradient at all
    ((3, 3), (2, 2), (1, 1), (1, 1)),
    ((5, 2), (3, 2), (3, 1), (2, 1)),
    ((2, 3), (2, 3), (0, 2), (3, 1)),
    ((3, 3), (4, 4), (1, 1), (1, 1)),  # stride past the kernel: phases without taps
])
def test_strided_image_gradients_run_one_contraction_per_phase(kernel, stride, padding, dilation):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((2, 3, 13, 11)), rng.standard_normal((5, 3, *kernel))
    tx = torch.tensor(x, requires_grad=True)
    out = torch.nn.functional.conv2d(tx, torch.tensor(w), stride=stride, padding=padding, dilation=dilation)
    g = rng.standard_normal(out.shape)
    out.backward(torch.tensor(g))
    got = conv_native.conv2d_input_grad_direct(g, w, (13, 11), stride, padding, dilation)
    want = tx.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


def test_without_the_library_the_same_values_come_from_one_gemm(monkeypatch):
    """No compiler (or another array type): conv2d computes the product with BLAS over im2col columns."""
    monkeypatch.setattr(conv_native, "available", lambda: False)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 7, 7)).astype(np.float32), rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    got = F.conv2d(kiln.tensor(x), kiln.tensor(w), stride=2, padding=1).numpy()
    want = _reference_conv(x, w, (2, 2), (1, 1), (1, 1))
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_convolution_equals_eager_bit_for_bit(dtype):
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((3, 4, 9, 7)).astype(dtype), rng.standard_normal((6, 4, 3, 3)).astype(dtype)

    def fn(x, w):
        return F.relu(F.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2))) * 2.0

    compiled = kiln.compile(fn)
    for _ in range(2):
        got = compiled(kiln.tensor(x), kiln.tensor(w)).numpy()
    want = fn(kiln.tensor(x), kiln.tensor(w)).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_a_native_plan_says_where_its_convolutions_run():
    from kiln.jit.backends.cpu import runtime  # noqa: PLC0415

    compiled = kiln.compile(lambda x, w: F.relu(F.conv2d(x, w, padding=1)) * 2.0, backend="cpu")
    compiled(kiln.randn(2, 3, 6, 6), kiln.randn(4, 3, 3, 3))
    (entry,) = compiled.cache_entries
    if not isinstance(entry.plan, runtime.NativePlan):
        pytest.skip("no native runtime here")
    analysis = entry.plan.analysis
    notes = [analysis.notes.get(id(n)) for n in analysis.graph.nodes if n.prim.name == "conv2d"]
    assert notes and all("contraction library" in note for note in notes)


def test_the_kernel_ir_names_the_sum_and_its_order():
    text = kernel_ir.Contraction("kiln_contract_f32", "float32").text()
    assert "sum[sequential, fma]" in text and "a[mo[m] + ko[k]]" in text and "out[om[m] + n * ldn]" in text
    with pytest.raises(kernel_ir.KernelIRError, match="dtype"):
        kernel_ir.Contraction("c", "int64").verify()
    with pytest.raises(kernel_ir.KernelIRError, match="C identifier"):
        kernel_ir.Contraction("not a name", "float32").verify()


def test_every_target_tile_fits_its_vector_registers():
    """rows x vectors accumulators, the vectors of b and one broadcast: at most 32 registers on AVX-512 and
    aarch64, 16 elsewhere."""
    for condition, _nbytes, rows, vectors in TARGETS:
        registers = 32 if ("AVX512" in condition or "aarch64" in condition) else 16
        assert rows * vectors + vectors + 1 <= registers, condition
    source = render_contraction(conv_native.contractions())
    assert source.count("_tile4(") and "#pragma GCC optimize(\"fp-contract=fast\")" in source


def test_conv2d_matches_torch_with_odd_sizes_and_batch_one():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    for n, c, h, w, o, k, stride, padding, dilation in [(1, 3, 5, 7, 7, 3, 1, 1, 1), (2, 5, 9, 4, 17, 2, 2, 1, 1),
                                                         (3, 2, 13, 11, 1, 3, 2, 2, 2)]:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((o, c, k, k)).astype(np.float32)
        got = F.conv2d(kiln.tensor(x), kiln.tensor(wt), stride=stride, padding=padding, dilation=dilation).numpy()
        want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(wt), stride=stride, padding=padding,
                                          dilation=dilation).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_library
def test_each_dtype_builds_its_own_library_when_first_used(monkeypatch):
    """The float64 half costs the C compiler several seconds: a float32 convolution never waits for it."""
    monkeypatch.setattr(conv_native, "_functions", {})
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    out = conv_native.conv2d_direct(x, w, (1, 1), (0, 0), (1, 1), (3, 3))
    np.testing.assert_array_equal(out, np.full((1, 3, 3, 3), 18.0, np.float32))
    assert conv_native._functions and all("f32" in name for name in conv_native._functions)
    out64 = conv_native.conv2d_direct(x.astype(np.float64), w.astype(np.float64), (1, 1), (0, 0), (1, 1), (3, 3))
    np.testing.assert_array_equal(out64, np.full((1, 3, 3, 3), 18.0))
    assert any("f64" in name for name in conv_native._functions)

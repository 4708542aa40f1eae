"""unfold2d (im2col) runs as generated C in native plans, equal to eager bit for bit.

Convolutions written as im2col (unfold2d + one GEMM, as grouped convolutions and machines
without the contraction library run them) with padding, stride and dilation, max-pooling with
padding (its windows are padded with -inf) and float64, forward and backward, each compared with
eager on the same inputs; the plan must run the unfold natively (no NumPy step for it).
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from jit_helpers import assert_bitwise
from native_helpers import native_cache, needs_native, node_kinds  # noqa: F401 - native_cache: an autouse fixture

pytestmark = needs_native


def im2col_conv(x, w, b=None, stride=1, padding=0, dilation=1):
    """conv2d written as unfold2d (batch_axis=3) + one GEMM over the batch."""
    from kiln.functional.layers import _pair, unfold2d  # noqa: PLC0415

    n, (o, c, kh, kw) = x.shape[0], w.shape
    cols = unfold2d(x, (kh, kw), _pair(stride, "stride"), _pair(padding, "padding"), _pair(dilation, "dilation"),
                    batch_axis=3)
    oh, ow = cols.shape[4], cols.shape[5]
    out = (w.reshape(o, -1) @ cols.reshape(c * kh * kw, -1)).reshape(o, n, oh, ow).permute(1, 0, 2, 3).clone()
    return out if b is None else out + b.reshape(1, o, 1, 1)


def _check(fn, *arrays):
    inputs = [kiln.tensor(a, requires_grad=True) for a in arrays]
    compiled = kiln.compile(fn, backend="cpu")
    for _ in range(3):  # (the first replay of a backward plan may run in Python while it learns layouts)
        for t in inputs:
            t.grad = None
        out = compiled(*inputs)
        out.sum().backward()
    got = [out.detach().numpy(), *[t.grad.numpy() for t in inputs]]
    for t in inputs:
        t.grad = None
    want_out = fn(*inputs)
    want_out.sum().backward()
    want = [want_out.detach().numpy(), *[t.grad.numpy() for t in inputs]]
    for g, w, what in zip(got, want, ["output", *[f"grad {k}" for k in range(len(inputs))]]):
        assert_bitwise(g, w, what, oracle="eager")
    return compiled


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 0, 2), (2, 1, 1), (1, 2, 2), ((2, 1), (0, 3), (1, 2))])
def test_convolutions_unfold_natively_and_equal_eager(dtype, stride, padding, dilation):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 11, 13)).astype(dtype)
    w = rng.standard_normal((5, 3, 3, 3)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    compiled = _check(lambda x, w, b: im2col_conv(x, w, b, stride=stride, padding=padding, dilation=dilation).relu(),
                      x, w, b)
    assert "native" in node_kinds(compiled, "unfold2d")


@pytest.mark.parametrize("image, kernel, stride, padding, dilation", [
    ((4, 4), (1, 3), 1, 1, 1),  # found by the fuzzer: GCC 12 -O3 miscompiled the per-element padding test
    ((4, 6), (1, 1), 1, 1, 1),  # found by the fuzzer next: ... and then the per-row one
    ((7, 5), (3, 1), 1, 2, 1),
    ((4, 4), (3, 1), 1, 1, 1),
    ((5, 7), (2, 5), (1, 2), (2, 3), 1),
    ((3, 3), (1, 1), 2, 2, 1),  # padding wider than the kernel reaches: whole rows and columns of padding
    ((6, 5), (2, 3), 3, (1, 4), (2, 2)),
    ((1, 9), (1, 4), (1, 3), (0, 5), (1, 3)),
])
def test_unfold_covers_odd_kernels_paddings_and_strides(image, kernel, stride, padding, dilation):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, *image)).astype(np.float32)
    w = rng.standard_normal((2, 3, *kernel)).astype(np.float32)
    compiled = _check(lambda x, w: im2col_conv(x, w, stride=stride, padding=padding, dilation=dilation), x, w)
    assert "native" in node_kinds(compiled, "unfold2d")


def test_max_pool_with_padding_pads_with_minus_infinity():
    rng = np.random.default_rng(1)
    x = -np.abs(rng.standard_normal((2, 3, 9, 9))).astype(np.float32)  # all negative: a padded 0 would win
    x[0, 0, 0, 0] = np.nan
    compiled = _check(lambda x: F.max_pool2d(x, 3, stride=2, padding=1) * 2.0, x)
    assert "native" in node_kinds(compiled, "unfold2d")


def test_a_strided_input_is_read_through_its_own_strides():
    """The image a convolution unfolds may be a view (here transposed and sliced): no copy, no NumPy step."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 12, 20)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    compiled = _check(lambda x, w: im2col_conv(x.permute(0, 1, 3, 2)[:, :, ::2, 1:], w, padding=1), x, w)
    assert node_kinds(compiled, "unfold2d") and set(node_kinds(compiled, "unfold2d")) == {"native"}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (1, 2), ((2, 3), (2, 1))])
def test_the_input_gradient_folds_natively_without_padding(dtype, stride, dilation):
    """fold2d (col2im) adds the columns back in the eager kernel's order: the input's gradient is bitwise
    eager's; with padding it stays a NumPy step (eager returns a view of a padded image)."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 2, 13, 11)) * np.exp(rng.uniform(-6, 6, (3, 2, 13, 11)))).astype(dtype)
    w = rng.standard_normal((4, 2, 3, 3)).astype(dtype)
    def squared(padding):  # (squared: the columns folded back carry varied gradients, not one per weight)
        return lambda x, w: im2col_conv(x, w, stride=stride, dilation=dilation, padding=padding) ** 2

    compiled = _check(squared(0), x, w)
    assert set(node_kinds(compiled, "fold2d")) == {"native"}
    padded = _check(squared(1), x, w)
    assert set(node_kinds(padded, "fold2d")) == {"python"}


def test_unfold_equals_eager_on_random_small_shapes():
    """Random images, kernels, strides, paddings, dilations, dtypes, pad values and input layouts, each
    unfolded natively and compared with eager bit for bit (the shapes where a miscompiled loop shows)."""
    from kiln.functional.layers import unfold2d  # noqa: PLC0415

    rng = np.random.default_rng(11)
    checked = 0
    while checked < 40:
        (h, w), (kh, kw), (sh, sw) = rng.integers(1, 8, 2), rng.integers(1, 4, 2), rng.integers(1, 4, 2)
        (ph, pw), (dh, dw) = rng.integers(0, 3, 2), rng.integers(1, 3, 2)
        if h + 2 * ph - dh * (kh - 1) < 1 or w + 2 * pw - dw * (kw - 1) < 1:
            continue
        dtype = ("float32", "float64")[checked % 2]
        x = rng.standard_normal((2, 2, h, w)).astype(dtype)
        if checked % 3 == 0:  # a transposed view: read through its strides
            x = np.ascontiguousarray(x.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)
        params = [tuple(int(v) for v in pair) for pair in ((kh, kw), (sh, sw), (ph, pw), (dh, dw))]
        pad_value = float("-inf") if checked % 4 == 1 else 0.0
        batch_axis = (0, 3)[(checked // 2) % 2]  # per image, or the convolution's one-GEMM layout

        def columns(t, params=params, pad_value=pad_value, batch_axis=batch_axis):
            return unfold2d(t, *params, pad_value=pad_value, batch_axis=batch_axis) * 1.0

        compiled = kiln.compile(columns, backend="cpu")
        with kiln.no_grad():
            want = columns(kiln.tensor(x)).numpy()
            for _ in range(3):
                got = compiled(kiln.tensor(x)).numpy()
        assert_bitwise(got, want, f"unfold2d of {x.shape} with {params}, batch_axis {batch_axis}", oracle="eager")
        assert "native" in node_kinds(compiled, "unfold2d")
        checked += 1


@pytest.mark.parametrize("batch_axis", [0, 3])
def test_fold_of_either_column_layout_runs_natively_and_equals_eager(batch_axis):
    """fold2d of per-image columns (pooling's) and of the one-GEMM layout (a convolution's)."""
    from kiln.functional.layers import fold2d, unfold2d  # noqa: PLC0415

    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 2, 9, 8)).astype(np.float32)
    scale = kiln.tensor(rng.standard_normal(unfold2d(kiln.tensor(x), (3, 2), (2, 1), (0, 0), (1, 2),
                                                     batch_axis=batch_axis).shape).astype(np.float32))

    def round_trip(t):
        cols = unfold2d(t, (3, 2), (2, 1), (0, 0), (1, 2), batch_axis=batch_axis) * scale
        return fold2d(cols, (9, 8), (3, 2), (2, 1), (0, 0), (1, 2), batch_axis=batch_axis)

    compiled = _check(round_trip, x)
    assert set(node_kinds(compiled, "fold2d")) == {"native"}
    assert set(node_kinds(compiled, "unfold2d")) == {"native"}

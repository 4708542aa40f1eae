"""Convolutions that go through im2col run the whole batch as one GEMM per direction, through
unfold2d's batch_axis=3 layout: a grouped convolution, and every convolution where the contraction
library cannot run (no C compiler, CuPy arrays); the one-group convolution and its gradients
otherwise make no columns at all (tests/ops/test_conv_direct.py).

unfold2d/fold2d with batch_axis=3 lay the columns out as (C, kh, kw, N, OH, OW): the same values
as the per-image layout, moved. conv2d's output is C-ordered (N, O, OH, OW) like PyTorch's, and
its forward and both gradients match PyTorch at ResNet-18's shapes.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.functional import layers
from kiln.functional.layers import fold2d, unfold2d

WINDOWS = [((3, 3), (1, 1), (1, 1), (1, 1)), ((2, 3), (2, 1), (0, 2), (1, 2)), ((1, 1), (2, 2), (0, 0), (1, 1))]


@pytest.mark.parametrize("kernel, stride, padding, dilation", WINDOWS)
def test_batch_axis_3_holds_the_per_image_columns_moved(kernel, stride, padding, dilation):
    x = kiln.tensor(np.random.default_rng(0).standard_normal((3, 4, 7, 9)).astype(np.float32))
    per_image = unfold2d(x, kernel, stride, padding, dilation).numpy()
    one_gemm = unfold2d(x, kernel, stride, padding, dilation, batch_axis=3).numpy()
    assert one_gemm.shape == (4, *kernel, 3, *per_image.shape[4:])
    np.testing.assert_array_equal(one_gemm, np.moveaxis(per_image, 0, 3))


@pytest.mark.parametrize("kernel, stride, padding, dilation", WINDOWS)
def test_fold_of_moved_columns_is_bitwise_the_per_image_fold(kernel, stride, padding, dilation):
    x = kiln.tensor(np.zeros((3, 4, 7, 9), np.float32))
    shape = unfold2d(x, kernel, stride, padding, dilation).shape
    cols = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = fold2d(kiln.tensor(cols), (7, 9), kernel, stride, padding, dilation).numpy()
    got = fold2d(kiln.tensor(np.ascontiguousarray(np.moveaxis(cols, 0, 3))), (7, 9), kernel, stride, padding,
                 dilation, batch_axis=3).numpy()
    np.testing.assert_array_equal(got, want)


def test_fold_names_the_layout_it_expected():
    cols = kiln.zeros(4, 3, 3, 2, 5, 5)  # a batch_axis=3 layout passed as per-image columns
    with pytest.raises(kiln.ShapeError, match=r"\(N, C, 3, 3, 5, 5\).*batch_axis"):
        fold2d(cols, (7, 7), (3, 3), (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="batch_axis must be one of"):
        unfold2d(kiln.zeros(1, 1, 4, 4), (2, 2), (1, 1), (0, 0), (1, 1), batch_axis=1)


@pytest.mark.parametrize("batch", [1, 3])
def test_conv_output_is_c_ordered_like_torch(batch):
    x, w = kiln.randn(batch, 4, 6, 6), kiln.randn(5, 4, 3, 3)
    y = F.conv2d(x, w, padding=1)
    assert y.shape == (batch, 5, 6, 6) and y.is_contiguous()
    assert y.view(batch, -1).shape == (batch, 180)  # a flatten by view, as classifier heads do


def test_without_the_library_each_direction_is_one_gemm_over_the_batch(monkeypatch):
    """No contraction library: the forward and both gradients are one 2-D GEMM each, no per-image products."""
    from kiln.ops import conv, conv_native  # noqa: PLC0415

    monkeypatch.setattr(conv_native, "available", lambda: False)
    seen = []

    class Spy:
        def kernel(self, xp, a, b):
            seen.append((tuple(a.shape), tuple(b.shape)))
            return kiln.ops.REGISTRY["matmul"].kernel(xp, a, b)

    monkeypatch.setattr(conv, "REGISTRY", {**kiln.ops.REGISTRY, "matmul": Spy()})
    x, w = kiln.randn(4, 3, 8, 8, requires_grad=True), kiln.randn(6, 3, 3, 3, requires_grad=True)
    F.conv2d(x, w, padding=1).sum().backward()
    assert sorted(seen) == sorted([((6, 27), (27, 4 * 8 * 8)), ((6, 4 * 8 * 8), (4 * 8 * 8, 27)),
                                   ((27, 6), (6, 4 * 8 * 8))])


RESNET_CONVS = [  # (in, out, image, kernel, stride, padding) of ResNet-18 on 32x32 images
    (3, 64, 32, 3, 1, 1), (64, 64, 32, 3, 1, 1), (64, 128, 32, 3, 2, 1), (64, 128, 32, 1, 2, 0),
    (256, 512, 8, 3, 2, 1), (512, 512, 4, 3, 1, 1),
]


@pytest.mark.parametrize("c_in, c_out, size, k, stride, padding", RESNET_CONVS)
def test_conv_forward_and_gradients_match_torch_at_resnet_shapes(c_in, c_out, size, k, stride, padding):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, c_in, size, size)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, k, k)) / np.sqrt(c_in * k * k)).astype(np.float32)
    kx, kw = kiln.tensor(x, requires_grad=True), kiln.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ky = F.conv2d(kx, kw, stride=stride, padding=padding)
    ty = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=padding)
    g = rng.standard_normal(ty.shape).astype(np.float32)
    ky.backward(kiln.tensor(g))
    ty.backward(torch.tensor(g))
    for got, want, what in [(ky, ty, "output"), (kx.grad, tx.grad, "input grad"), (kw.grad, tw.grad, "weight grad")]:
        want = want.detach().numpy()
        scale = np.abs(want).max()
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=2e-5 * scale, err_msg=what)


def autograd_nodes(t) -> list:
    """The autograd nodes of the graph that made `t`."""
    seen, stack, found = set(), [t._node], []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen or node.inputs is None:
            continue
        seen.add(id(node))
        found.append(node)
        stack += [edge for edge in node.edges if edge]
    return found


def _matmul_nodes(t):
    """The autograd nodes of matmuls reachable from `t`."""
    return [node for node in autograd_nodes(t) if node.prim.name == "matmul"]


def _manual_conv(x, w, padding):
    """A two-group conv2d's own ops, with the columns kept by autograd (nothing remade)."""
    cols = unfold2d(x, (3, 3), (1, 1), (padding, padding), (1, 1), batch_axis=3)
    n, (c, _, _, _, oh, ow) = x.shape[0], cols.shape
    out = kiln.matmul(w.reshape(2, w.shape[0] // 2, -1), cols.reshape(2, c // 2 * 9, n * oh * ow))
    return out.reshape(w.shape[0], n, oh, ow).permute(1, 0, 2, 3).clone()


@pytest.fixture
def remake_all_columns(monkeypatch):
    """A grouped convolution's columns of any size are remade in backward (by default only large ones are)."""
    monkeypatch.setattr(layers, "RECOMPUTE_COLUMNS_BYTES", 0)


def test_eager_backward_remakes_the_columns_instead_of_keeping_them(remake_all_columns):
    rng = np.random.default_rng(3)
    x = kiln.tensor(rng.standard_normal((3, 4, 9, 9)).astype(np.float32), requires_grad=True)
    w = kiln.tensor(rng.standard_normal((6, 2, 3, 3)).astype(np.float32), requires_grad=True)
    y = F.conv2d(x, w, padding=1, groups=2)
    (node,) = _matmul_nodes(y)
    assert node.inputs[1]._data is None  # dropped after the forward
    g = kiln.tensor(rng.standard_normal(y.shape).astype(np.float32))
    y.backward(g)
    got = (x.grad.numpy().copy(), w.grad.numpy().copy())
    x.grad = w.grad = None
    _manual_conv(x, w, 1).backward(g)
    np.testing.assert_array_equal(got[0], x.grad.numpy())
    np.testing.assert_array_equal(got[1], w.grad.numpy())


def test_small_columns_are_kept_with_the_same_gradients(monkeypatch):
    rng = np.random.default_rng(5)
    x = kiln.tensor(rng.standard_normal((3, 4, 9, 9)).astype(np.float32), requires_grad=True)
    w = kiln.tensor(rng.standard_normal((6, 2, 3, 3)).astype(np.float32), requires_grad=True)
    g = kiln.tensor(rng.standard_normal((3, 6, 9, 9)).astype(np.float32))
    grads = []
    for limit in (layers.RECOMPUTE_COLUMNS_BYTES, 0):
        monkeypatch.setattr(layers, "RECOMPUTE_COLUMNS_BYTES", limit)
        y = F.conv2d(x, w, padding=1, groups=2)
        (node,) = _matmul_nodes(y)
        assert (node.inputs[1]._data is None) == (limit == 0)  # kept below the limit, else remade
        y.backward(g)
        grads.append((x.grad.numpy().copy(), w.grad.numpy().copy()))
        x.grad = w.grad = None
    for kept, remade in zip(*grads):
        np.testing.assert_array_equal(kept, remade)


@pytest.mark.usefixtures("remake_all_columns")
@pytest.mark.parametrize("groups", [1, 2])
def test_a_retained_graph_backpropagates_twice_with_the_same_gradients(groups):
    x, w = kiln.randn(2, 4, 6, 6, requires_grad=True), kiln.randn(4, 4 // groups, 3, 3, requires_grad=True)
    y = F.conv2d(x, w, groups=groups).square().sum()
    y.backward(retain_graph=True)
    first = w.grad.numpy().copy()
    w.grad = None
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


@pytest.mark.usefixtures("remake_all_columns")
@pytest.mark.parametrize("groups", [1, 2])
def test_changing_the_image_in_place_before_backward_raises_like_a_saved_input(groups):
    x, w = kiln.randn(2, 4, 6, 6), kiln.randn(4, 4 // groups, 3, 3, requires_grad=True)
    y = F.conv2d(x, w, padding=1, groups=groups)
    x.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_double_backward_through_conv_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    xs, ws = rng.standard_normal((2, 3, 7, 7)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)

    def second_order(lib, x, w):
        y = lib.nn.functional.conv2d(x, w, padding=1)
        (gx,) = lib.autograd.grad((y * y).sum(), x, create_graph=True)
        (gw,) = lib.autograd.grad(gx.square().sum(), w)
        return gw

    kx, kw = kiln.tensor(xs, requires_grad=True), kiln.tensor(ws, requires_grad=True)
    tx, tw = torch.tensor(xs, requires_grad=True), torch.tensor(ws, requires_grad=True)
    want = second_order(torch, tx, tw).numpy()
    np.testing.assert_allclose(second_order(kiln, kx, kw).numpy(), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

"""The one-node eager cross_entropy (kiln/functional/loss_fast.py) against the decomposed loss and PyTorch.

Values and gradients must be bit-identical to the primitive-level loss (the path a tracer
records), and agree with torch.nn.functional.cross_entropy within float tolerance.
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.functional.losses import _cross_entropy

CASES = [  # (dtype, n, c, ignore_index, reduction, with ignored targets)
    ("float32", 16, 10, -100, "mean", False),
    ("float32", 16, 10, -100, "sum", False),
    ("float32", 16, 10, -100, "none", False),
    ("float64", 7, 5, -100, "mean", False),
    ("float32", 9, 4, 2, "mean", False),  # ignore_index is a real class: its targets are dropped
    ("float32", 12, 6, -1, "mean", True),
    ("float32", 12, 6, -1, "sum", True),
    ("float64", 12, 6, -1, "none", True),
    ("float32", 5, 3, -1, "mean", "all"),  # every target ignored: nan loss, zero gradient
    ("float32", 1, 1, -100, "mean", False),
    ("float32", 4100, 3, -1, "mean", True),  # many rows, few classes: the row sums chain slices
]


def _data(dtype: str, n: int, c: int, ignore_index: int, ignored: object, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, c)) * 3).astype(dtype)
    x[0, :] = x[0, 0]  # a row of ties: the max is shared
    t = rng.integers(0, c, n).astype(np.int64)
    if ignored == "all":
        t[:] = ignore_index
    elif ignored:
        t[::3] = ignore_index
    return x, t


def _loss_and_grad(fn, x: np.ndarray, t: np.ndarray, reduction: str, ignore_index: int, g: np.ndarray | None):
    xt = kiln.tensor(x, requires_grad=True)
    loss = fn(xt, kiln.tensor(t), None, ignore_index, reduction, 0.0)
    loss.backward(None if g is None else kiln.tensor(g))
    return loss.detach().numpy(), xt.grad.numpy()


def _fast(x, t, w, ii, red, ls):
    return kiln.functional.cross_entropy(x, t, w, ignore_index=ii, reduction=red, label_smoothing=ls)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}-ii{c[3]}-{c[4]}-{c[5]}" for c in CASES])
def test_bit_identical_to_the_decomposed_loss(case: tuple) -> None:
    dtype, n, c, ii, red, ignored = case
    x, t = _data(dtype, n, c, ii, ignored)
    g = np.random.default_rng(1).standard_normal(n).astype(dtype) if red == "none" else None
    fast = _loss_and_grad(_fast, x, t, red, ii, g)
    slow = _loss_and_grad(_cross_entropy, x, t, red, ii, g)
    assert fast[0].dtype == slow[0].dtype and fast[0].shape == slow[0].shape
    np.testing.assert_array_equal(fast[0], slow[0])
    assert fast[1].dtype == slow[1].dtype
    np.testing.assert_array_equal(fast[1], slow[1])
    # bit for bit, the sign of zeros (ignored targets) and NaN payloads included
    assert np.ascontiguousarray(fast[0]).tobytes() == np.ascontiguousarray(slow[0]).tobytes()
    assert np.ascontiguousarray(fast[1]).tobytes() == np.ascontiguousarray(slow[1]).tobytes()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}-ii{c[3]}-{c[4]}-{c[5]}" for c in CASES])
def test_matches_torch(case: tuple) -> None:
    torch = pytest.importorskip("torch")
    dtype, n, c, ii, red, ignored = case
    x, t = _data(dtype, n, c, ii, ignored)
    g = np.random.default_rng(1).standard_normal(n).astype(dtype) if red == "none" else None
    loss, grad = _loss_and_grad(_fast, x, t, red, ii, g)
    xt = torch.tensor(x, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(xt, torch.tensor(t), ignore_index=ii, reduction=red)
    ref.backward(None if g is None else torch.tensor(g))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(loss, ref.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=tol, atol=tol)


def test_the_fast_path_records_one_node_and_other_options_stay_decomposed() -> None:
    x, t = _data("float32", 6, 4, -100, False)
    xt, tt = kiln.tensor(x, requires_grad=True), kiln.tensor(t)
    assert _fast(xt, tt, None, -100, "mean", 0.0).grad_fn.prim.name == "cross_entropy"
    assert _fast(xt, tt, None, -100, "mean", 0.1).grad_fn.prim.name != "cross_entropy"
    assert _fast(xt, tt, kiln.ones(4), -100, "mean", 0.0).grad_fn.prim.name != "cross_entropy"
    with kiln.no_grad():
        assert _fast(xt, tt, None, -100, "mean", 0.0).grad_fn is None
    assert _fast(kiln.tensor(x), tt, None, -100, "mean", 0.0).requires_grad is False


def test_bad_targets_raise_as_the_decomposed_loss_does() -> None:
    x, t = _data("float32", 4, 3, -100, False)
    t[1] = 3
    with pytest.raises(IndexError):
        _fast(kiln.tensor(x, requires_grad=True), kiln.tensor(t), None, -100, "mean", 0.0)
    with pytest.raises(IndexError):
        _cross_entropy(kiln.tensor(x, requires_grad=True), kiln.tensor(t), None, -100, "mean", 0.0)


def test_second_backward_needs_retain_graph() -> None:
    x, t = _data("float32", 4, 3, -100, False)
    xt = kiln.tensor(x, requires_grad=True)
    loss = _fast(xt, kiln.tensor(t), None, -100, "mean", 0.0)
    loss.backward(retain_graph=True)
    first = xt.grad.numpy().copy()
    loss.backward()
    np.testing.assert_array_equal(xt.grad.numpy(), 2 * first)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_logits_modified_after_the_loss_keep_the_forward_gradient() -> None:
    x, t = _data("float32", 5, 4, -100, False)
    results = []
    for fn in (_fast, _cross_entropy):
        leaf = kiln.tensor(x, requires_grad=True)
        logits = leaf * 1.0
        loss = fn(logits, kiln.tensor(t), None, -100, "mean", 0.0)
        with kiln.no_grad():
            logits.add_(5.0)
        loss.backward()
        results.append(leaf.grad.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_hooks_on_the_logits_see_the_gradient() -> None:
    x, t = _data("float32", 5, 4, -100, False)
    seen = []
    leaf = kiln.tensor(x, requires_grad=True)
    logits = leaf * 2.0
    logits.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2.0)
    _fast(logits, kiln.tensor(t), None, -100, "mean", 0.0).backward()
    assert len(seen) == 1
    np.testing.assert_array_equal(leaf.grad.numpy(), seen[0] * 2.0 * 2.0)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_create_graph_gives_second_order_gradients(reduction: str) -> None:
    torch = pytest.importorskip("torch")
    x, t = _data("float64", 6, 5, -1, True)
    g = np.random.default_rng(2).standard_normal(6) if reduction == "none" else None
    xt = kiln.tensor(x, requires_grad=True)
    loss = _fast(xt, kiln.tensor(t), None, -1, reduction, 0.0)
    (gx,) = kiln.autograd.grad(loss, xt, None if g is None else kiln.tensor(g), create_graph=True)
    (gx * gx).sum().backward()
    xr = torch.tensor(x, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(xr, torch.tensor(t), ignore_index=-1, reduction=reduction)
    (gr,) = torch.autograd.grad(ref, xr, None if g is None else torch.tensor(g), create_graph=True)
    (gr * gr).sum().backward()
    np.testing.assert_allclose(gx.detach().numpy(), gr.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_compiled_training_step_matches_eager() -> None:
    kiln.manual_seed(0)
    x, t = _data("float32", 8, 6, -100, False)
    w0 = np.random.default_rng(3).standard_normal((6, 6)).astype(np.float32)

    def step(x, t, w):
        loss = kiln.functional.cross_entropy(x @ w, t)
        loss.backward()
        return loss

    grads = []
    for fn in (step, kiln.compile(step)):
        w = kiln.tensor(w0, requires_grad=True)
        loss = fn(kiln.tensor(x), kiln.tensor(t), w)
        grads.append((loss.detach().numpy(), w.grad.numpy()))
    np.testing.assert_allclose(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-6)


def test_a_gradient_of_another_dtype_takes_the_recorded_path_and_matches() -> None:
    x, t = _data("float32", 6, 4, -1, True)
    g = np.random.default_rng(4).standard_normal(6)  # float64 into a float32 loss
    fast = _loss_and_grad(_fast, x, t, "none", -1, g)
    slow = _loss_and_grad(_cross_entropy, x, t, "none", -1, g)
    assert fast[1].dtype == slow[1].dtype
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-6, atol=1e-7)

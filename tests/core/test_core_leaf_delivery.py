"""Leaf gradients are delivered as soon as the graph can no longer add to them, and
`register_post_accumulate_grad_hook` runs right after ``.grad`` is updated (checked against PyTorch)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


def _chain(lib, a0, b0, x0):
    """x -> h = x * a -> y = h * b -> loss; b feeds only the last node, a only the first."""
    a = lib.tensor(a0, requires_grad=True)
    b = lib.tensor(b0, requires_grad=True)
    x = lib.tensor(x0, requires_grad=True)
    h = x * a
    loss = (h * b).sum()
    return a, b, x, h, loss


def test_a_leaf_is_delivered_before_the_rest_of_backward_runs():
    a, b, x, h, loss = _chain(kiln, [1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    events: list[str] = []
    h.register_hook(lambda g: events.append("h's gradient"))
    for name, t in (("a", a), ("b", b), ("x", x)):
        t.register_hook(lambda g, name=name: events.append(f"{name} hook"))
        t.register_post_accumulate_grad_hook(lambda t, name=name: events.append(f"{name} accumulated"))
    loss.backward()
    # b's only edge is the last node (h * b): its .grad is final before backward reaches h
    assert events.index("b accumulated") < events.index("h's gradient")
    assert events.index("b hook") < events.index("b accumulated")
    assert events.index("h's gradient") < events.index("a hook") < events.index("a accumulated")
    assert len(events) == 7


def test_post_accumulate_hook_sees_the_updated_grad_like_pytorch():
    torch = pytest.importorskip("torch")
    seen: dict[str, list] = {"kiln": [], "torch": []}
    for lib, key in ((kiln, "kiln"), (torch, "torch")):
        w = lib.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=lib.float64, requires_grad=True)
        x = lib.tensor([[2.0, 1.0], [-1.0, 4.0]], dtype=lib.float64)
        w.register_post_accumulate_grad_hook(lambda t, key=key: seen[key].append(t.grad.detach().numpy().copy()))
        for _ in range(2):  # .grad accumulates; the hook runs once per pass, after it
            y = (x @ w) * w  # w reaches the loss through two edges: delivered once, with the sum
            (y.sum() + (w * w).sum()).backward()
    assert len(seen["kiln"]) == len(seen["torch"]) == 2
    for mine, ref in zip(seen["kiln"], seen["torch"]):
        np.testing.assert_allclose(mine, ref, rtol=1e-12)


def test_a_hook_changes_what_accumulates_and_what_the_post_hook_sees():
    w = kiln.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_hook(lambda g: g * 10)
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    (w * w).sum().backward()
    np.testing.assert_allclose(seen[0], [20.0, 40.0])
    np.testing.assert_allclose(w.grad.numpy(), [20.0, 40.0])


def test_post_hook_runs_for_backward_inputs_but_not_for_autograd_grad():
    w = kiln.tensor([1.0, 2.0], requires_grad=True)
    v = kiln.tensor([3.0, 4.0], requires_grad=True)
    calls = []
    w.register_post_accumulate_grad_hook(lambda t: calls.append("w"))
    v.register_post_accumulate_grad_hook(lambda t: calls.append("v"))
    kiln.autograd.grad((w * v).sum(), [w, v])
    assert calls == [] and w.grad is None
    (w * v).sum().backward(inputs=[w])
    assert calls == ["w"] and v.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 4.0])


def test_removed_post_hook_is_not_called_and_non_leaves_refuse_it():
    w = kiln.tensor([1.0], requires_grad=True)
    calls = []
    handle = w.register_post_accumulate_grad_hook(lambda t: calls.append(1))
    handle.remove()
    (w * 2).sum().backward()
    assert calls == []
    with pytest.raises(RuntimeError, match="non-leaf"):
        (w * 2).register_post_accumulate_grad_hook(lambda t: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        kiln.tensor([1.0]).register_post_accumulate_grad_hook(lambda t: None)


def test_early_delivery_keeps_higher_order_gradients():
    x = kiln.tensor([1.5, -0.5], dtype=kiln.float64, requires_grad=True)
    y = (x * x * x).sum()
    y.backward(create_graph=True)
    g = x.grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.array([1.5, -0.5]))


def test_a_post_hook_writing_a_bias_grad_in_place_leaves_the_other_gradients_alone():
    """``y = x @ w.T + b`` without a batch dim hands b the very gradient that still flows to w:
    a post-accumulate hook scaling b.grad in place must not scale w's gradient (as in PyTorch)."""
    torch = pytest.importorskip("torch")
    grads = {}

    def halve(p):
        p.grad.mul_(0.5)

    for lib in (kiln, torch):
        w = lib.tensor([[1.0, -2.0, 3.0], [0.5, 1.5, -1.0]], requires_grad=True)
        b = lib.tensor([0.25, -0.75], requires_grad=True)
        b.register_post_accumulate_grad_hook(halve)
        x = lib.tensor([1.0, -2.0, 3.0])
        ((x @ w.T + b) ** 2).sum().backward()
        grads[lib.__name__] = (w.grad.numpy().copy(), b.grad.numpy().copy())
    for got, want in zip(grads["kiln"], grads["torch"]):
        np.testing.assert_allclose(got, want, rtol=1e-6)

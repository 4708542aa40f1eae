"""Autograd semantics: backward rules, graph retention, accumulation, hooks, grad modes,
version counters and kiln.autograd.grad."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import kiln


def leaf(*values: float) -> kiln.Tensor:
    return kiln.tensor(list(values), requires_grad=True)


# ---- backward basics ------------------------------------------------------------------------
def test_backward_on_non_scalar_without_gradient_raises() -> None:
    x = leaf(1.0, 2.0)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2).backward()


def test_backward_on_non_scalar_with_gradient() -> None:
    x = leaf(1.0, 2.0)
    (x * x).backward(kiln.tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 40.0])


def test_backward_gradient_shape_mismatch_raises() -> None:
    x = leaf(1.0, 2.0)
    with pytest.raises((RuntimeError, ValueError), match="shape"):
        (x * 2).backward(kiln.tensor([1.0, 2.0, 3.0]))


def test_backward_on_tensor_without_grad_raises() -> None:
    with pytest.raises(RuntimeError, match="does not require grad"):
        kiln.tensor([1.0]).sum().backward()


def test_one_element_non_scalar_backward_is_allowed() -> None:
    x = leaf(3.0)
    (x * x).backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0])


def test_second_backward_needs_retain_graph() -> None:
    x = leaf(1.0, 2.0)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_retain_graph_allows_second_backward_and_accumulates() -> None:
    x = leaf(1.0, 2.0)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_grad_accumulates_across_graphs() -> None:
    x = leaf(1.0, 2.0)
    (x * 3).sum().backward()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0])
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_shared_subexpression_and_reused_input() -> None:
    x = leaf(0.5, -1.0)
    h = x.tanh()
    y = (h * h + h * x + x).sum()
    y.backward()
    t = np.tanh([0.5, -1.0])
    dt = 1 - t**2
    np.testing.assert_allclose(x.grad.numpy(), 2 * t * dt + dt * np.array([0.5, -1.0]) + t + 1, rtol=1e-6)


def test_leaf_grads_do_not_alias() -> None:
    """Two leaves fed the same upstream gradient get separate .grad buffers."""
    a, b = leaf(1.0, 2.0), leaf(3.0, 4.0)
    (a + b).sum().backward()
    a.grad.mul_(10)
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])


def test_grad_does_not_alias_user_gradient() -> None:
    x = leaf(1.0, 2.0)
    up = kiln.tensor([5.0, 6.0])
    x.clone().backward(up)
    x.grad.zero_()
    np.testing.assert_allclose(up.numpy(), [5.0, 6.0])


def test_grad_is_not_part_of_a_graph_by_default() -> None:
    x = leaf(1.0, 2.0)
    (x * x).sum().backward()
    assert not x.grad.requires_grad and x.grad.grad_fn is None


def test_create_graph_gives_differentiable_grad() -> None:
    x = leaf(1.5)
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    assert g.requires_grad
    x.grad = None
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [6 * 1.5])


def test_is_leaf_grad_fn_and_requires_grad_propagation() -> None:
    x = leaf(1.0)
    c = kiln.tensor([2.0])
    y = x * c
    assert x.is_leaf and x.grad_fn is None
    assert not y.is_leaf and y.grad_fn is not None and y.requires_grad
    z = c * 2
    assert z.is_leaf and not z.requires_grad
    assert "Mul" in y.grad_fn.name()


def test_non_float_results_do_not_require_grad() -> None:
    x = kiln.randn(3, 4, requires_grad=True)
    for t in (x > 0, x.argmax(), x.argmax(1), x == x, x.long(), kiln.isnan(x)):
        assert not t.requires_grad, t
        assert t.grad_fn is None, t


def test_grads_through_int_cast_are_cut() -> None:
    x = kiln.randn(4, requires_grad=True)
    mask = (x > 0).float()
    assert not mask.requires_grad
    (x * mask).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (x.detach().numpy() > 0).astype(np.float32))


def test_backward_inputs_argument() -> None:
    x, w = leaf(1.0, 2.0), leaf(3.0, 4.0)
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0])


# ---- retain_grad and hooks ---------------------------------------------------------------------
def test_retain_grad_on_non_leaf() -> None:
    x = leaf(1.0, 2.0)
    h = x * 3
    h.retain_grad()
    assert h.retains_grad
    out = (h * h).sum()
    out.backward()
    np.testing.assert_allclose(h.grad.numpy(), [6.0, 12.0])
    np.testing.assert_allclose(x.grad.numpy(), [18.0, 36.0])


def test_non_leaf_grad_is_none_without_retain_grad() -> None:
    x = leaf(1.0, 2.0)
    h = x * 3
    (h * h).sum().backward()
    assert h.grad is None


def test_hook_on_leaf_modifies_grad() -> None:
    x = leaf(1.0, 2.0)
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    x.register_hook(lambda g: g * 10)
    (x * x).sum().backward()
    np.testing.assert_allclose(seen[0], [2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), [20.0, 40.0])


def test_hook_on_non_leaf_modifies_upstream_grads() -> None:
    x = leaf(1.0, 2.0)
    h = x * 2
    seen = []

    def hook(g: kiln.Tensor) -> kiln.Tensor:
        seen.append(g.numpy().copy())
        return g * 0.5

    h.register_hook(hook)
    (h * h).sum().backward()
    np.testing.assert_allclose(seen[0], [4.0, 8.0])
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_hook_handle_remove() -> None:
    x = leaf(1.0)
    handle = x.register_hook(lambda g: g * 100)
    handle.remove()
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0])


def test_hook_on_tensor_without_grad_raises() -> None:
    with pytest.raises(RuntimeError):
        kiln.tensor([1.0]).register_hook(lambda g: g)


# ---- grad modes ---------------------------------------------------------------------------------
def test_no_grad_context_manager() -> None:
    x = leaf(1.0)
    with kiln.no_grad():
        assert not kiln.is_grad_enabled()
        y = x * 2
    assert kiln.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_enable_grad_inside_no_grad() -> None:
    x = leaf(1.0)
    with kiln.no_grad():
        with kiln.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad


def test_grad_mode_decorators() -> None:
    @kiln.no_grad()
    def f(t: kiln.Tensor) -> kiln.Tensor:
        assert not kiln.is_grad_enabled()
        return t * 2

    @kiln.no_grad
    def f_bare(t: kiln.Tensor) -> kiln.Tensor:
        return t * 2

    @kiln.enable_grad()
    def g(t: kiln.Tensor) -> kiln.Tensor:
        return t * 2

    @kiln.set_grad_enabled(False)
    def h(t: kiln.Tensor) -> kiln.Tensor:
        return t * 2

    x = leaf(1.0)
    assert not f(x).requires_grad
    assert not f_bare(x).requires_grad
    assert not h(x).requires_grad
    assert kiln.is_grad_enabled()
    with kiln.no_grad():
        assert g(x).requires_grad
        assert not kiln.is_grad_enabled()
    assert f.__name__ == "f"


def test_set_grad_enabled_context_and_function() -> None:
    x = leaf(1.0)
    with kiln.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert kiln.is_grad_enabled()
    with kiln.set_grad_enabled(True):
        assert (x * 2).requires_grad
    kiln.set_grad_enabled(False)  # as a plain call, like torch.set_grad_enabled
    try:
        assert not kiln.is_grad_enabled()
    finally:
        kiln.set_grad_enabled(True)
    assert kiln.is_grad_enabled()


def test_grad_mode_restored_after_exception() -> None:
    with pytest.raises(ValueError):
        with kiln.no_grad():
            raise ValueError
    assert kiln.is_grad_enabled()


def test_grad_mode_is_thread_local() -> None:
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def worker() -> None:
        with kiln.no_grad():
            seen["worker"] = kiln.is_grad_enabled()
            inside.set()
            release.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    inside.wait(5)
    x = leaf(1.0)
    seen["main"] = kiln.is_grad_enabled()
    y = x * 2
    release.set()
    t.join()
    assert seen == {"worker": False, "main": True}
    assert y.requires_grad

    def fresh() -> None:
        seen["fresh"] = kiln.is_grad_enabled()

    with kiln.no_grad():
        t2 = threading.Thread(target=fresh)
        t2.start()
        t2.join()
    assert seen["fresh"] is True


# ---- in-place ops and versions ---------------------------------------------------------------------
def test_inplace_ops_bump_version() -> None:
    x = kiln.zeros(3)
    v0 = x._version
    x.add_(1)
    x.mul_(2)
    x.zero_()
    x.fill_(3.0)
    x.copy_(kiln.ones(3))
    x[0] = 5.0
    x += 1
    assert x._version == v0 + 7
    np.testing.assert_allclose(x.numpy(), [6.0, 2.0, 2.0])


def test_views_share_version_and_data() -> None:
    x = kiln.zeros(2, 3)
    v = x[0]
    v.fill_(1.0)
    np.testing.assert_allclose(x.numpy(), [[1, 1, 1], [0, 0, 0]])
    assert x._version == v._version == 1
    d = x.detach()
    d.add_(1)
    assert x._version == 2
    np.testing.assert_allclose(x.numpy()[1], [1, 1, 1])


def test_modifying_saved_output_raises_version_error() -> None:
    x = leaf(1.0, 2.0)
    y = x.exp()
    y.add_(1)
    with pytest.raises(RuntimeError, match="version"):
        y.sum().backward()


def test_modifying_saved_input_raises_version_error() -> None:
    x = leaf(1.0, 2.0)
    a = x * 1
    b = a * a
    a.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*version"):
        b.sum().backward()


def test_modifying_unsaved_tensor_is_fine() -> None:
    x = leaf(1.0, 2.0)
    a = x * 1
    b = a + 3  # add saves nothing
    a.mul_(2)
    (b * 1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])


def test_inplace_on_non_leaf_is_differentiated() -> None:
    x = leaf(1.0, 2.0)
    y = x * 2
    y.add_(x)
    y.mul_(3)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [9.0, 9.0])
    np.testing.assert_allclose(y.detach().numpy(), [9.0, 18.0])


def test_inplace_on_leaf_requiring_grad_raises() -> None:
    x = leaf(1.0, 2.0)
    with pytest.raises(RuntimeError, match="leaf"):
        x.add_(1)
    with pytest.raises(RuntimeError, match="leaf"):
        x[0] = 3.0
    with kiln.no_grad():
        x.add_(1)  # allowed: the optimizer's update
    np.testing.assert_allclose(x.detach().numpy(), [2.0, 3.0])
    assert x.is_leaf and x.requires_grad


def test_setitem_with_grad_into_plain_tensor() -> None:
    w = leaf(1.0, 2.0)
    buf = kiln.zeros(2, 2)
    buf[1] = w * 3
    assert buf.requires_grad and not buf.is_leaf
    buf.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])


# ---- kiln.autograd.grad -------------------------------------------------------------------------
def test_autograd_grad_returns_grads_without_touching_dot_grad() -> None:
    x, w = leaf(1.0, 2.0), leaf(3.0, 4.0)
    y = (x * w).sum()
    gx, gw = kiln.autograd.grad(y, [x, w])
    np.testing.assert_allclose(gx.numpy(), [3.0, 4.0])
    np.testing.assert_allclose(gw.numpy(), [1.0, 2.0])
    assert x.grad is None and w.grad is None


def test_autograd_grad_non_leaf_input_and_grad_outputs() -> None:
    x = leaf(1.0, 2.0)
    h = x * x
    y = h * 3
    (gh,) = kiln.autograd.grad(y, h, grad_outputs=kiln.tensor([1.0, 2.0]))
    np.testing.assert_allclose(gh.numpy(), [3.0, 6.0])


def test_autograd_grad_unused_input() -> None:
    x, z = leaf(1.0), leaf(2.0)
    with pytest.raises(RuntimeError, match="allow_unused"):
        kiln.autograd.grad((x * 2).sum(), [x, z])
    gx, gz = kiln.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gz is None
    np.testing.assert_allclose(gx.numpy(), [2.0])


def test_autograd_grad_multiple_outputs() -> None:
    x = leaf(1.0, 2.0)
    a, b = x * 2, x * x
    (g,) = kiln.autograd.grad([a.sum(), b.sum()], x)
    np.testing.assert_allclose(g.numpy(), [4.0, 6.0])


def test_autograd_grad_create_graph_second_order() -> None:
    x = leaf(2.0)
    y = (x ** 3).sum()
    (g,) = kiln.autograd.grad(y, x, create_graph=True)
    (gg,) = kiln.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(g.detach().numpy(), [12.0])
    np.testing.assert_allclose(gg.numpy(), [12.0])


def test_detach_cuts_the_graph() -> None:
    x = leaf(1.0, 2.0)
    y = x.detach() * x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0])


def test_inplace_after_use_by_an_unsaving_op_keeps_grads_right() -> None:
    """`b = a + 3` saves nothing; modifying `a` later must not reroute b's gradient."""
    x = leaf(1.0, 2.0)
    a = x * 1
    b = a.reshape(2) + 3
    a.mul_(5)
    (a.sum() + b.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0])


def test_inplace_on_plain_tensor_used_earlier_does_not_join_the_graph() -> None:
    w = leaf(1.0, 2.0)
    buf = kiln.ones(2)
    y = buf * 3  # recorded with buf not requiring grad
    buf.add_(w)  # buf now requires grad
    (y.sum() + buf.sum()).backward()  # y must not send gradient into buf's new node
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0])


def test_zero_fill_copy_keep_non_leaf_in_graph() -> None:
    x = leaf(1.0, 2.0)
    y = x * 2
    y.zero_()
    assert not y.is_leaf and y.requires_grad
    z = y + x
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])
    y.add_(1)  # still a non-leaf: in-place ops stay allowed


def test_inplace_on_advanced_index_result_is_not_a_view() -> None:
    base = kiln.zeros(3)
    sel = base[[0, 1]]
    sel.add_(1)
    assert base._version == 0 and base.tolist() == [0.0, 0.0, 0.0]
    w = leaf(1.0, 2.0, 3.0)
    y = w[[0, 2]]
    y.mul_(3)  # allowed: y owns its memory
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 0.0, 3.0])
    v = base[1:]
    v.add_(2)  # a basic slice is a real view
    assert base._version == 1 and base.tolist() == [0.0, 2.0, 2.0]


def test_reductions_of_0d_return_new_tensors() -> None:
    x = kiln.tensor(2.0, requires_grad=True)
    for r in (x.sum(), x.amax(), x.max(), x.mean()):
        assert r is not x and r.shape == ()
    s = x.detach().sum()
    s.add_(1)
    assert x.item() == 2.0
    (x.sum() * x.amax()).backward()
    assert x.grad.item() == 4.0


def test_backward_inputs_grads_do_not_alias() -> None:
    a, b = leaf(1.0, 2.0), leaf(3.0, 4.0)
    (a + b).sum().backward(inputs=[a, b])
    a.grad.mul_(10)
    np.testing.assert_allclose(b.grad.numpy(), [1.0, 1.0])
    (a + b).sum().backward(inputs=[a])
    np.testing.assert_allclose(a.grad.numpy(), [11.0, 11.0])

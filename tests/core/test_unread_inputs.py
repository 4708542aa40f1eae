"""Backward nodes keep the values their VJPs read and only the shapes of the rest (kiln/unread_inputs.py)."""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import kiln
from kiln.ops.primitive import Primitive, bind
from kiln.unread_inputs import ShapeOnly, UnsavedInputError


def test_an_intermediate_no_vjp_reads_is_freed_after_the_forward():
    x = kiln.randn(4, 5, requires_grad=True)
    t = x * 3.0
    ref = weakref.ref(t)
    loss = (t + 1.0).sum()  # Add's VJP reads only the shapes of its inputs
    del t
    gc.collect()
    assert ref() is None
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 3.0, np.float32))


def test_a_chain_of_additions_holds_one_array_not_one_per_step():
    x = kiln.randn(256, 1024, requires_grad=True)  # 1 MiB
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        y = x
        for _ in range(12):
            y = y + 1.0
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 3 * x.detach().numpy().nbytes  # the last result (and one in flight), not twelve
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((256, 1024), np.float32))


def test_values_a_vjp_reads_are_kept():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    xs = [kiln.tensor(a, requires_grad=True), kiln.tensor(b, requires_grad=True)]
    ts = [torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)]
    for lib, (p, q) in ((kiln, xs), (torch, ts)):
        h = lib.tanh(p * 2.0) + 1.0  # tanh saves its output; the product feeds it
        lib.sigmoid((h @ q).exp()).sum().backward()
    for k, t in zip(xs, ts):
        np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_second_order_gradients_through_the_fast_cross_entropy_of_computed_logits():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, w, t = rng.standard_normal((6, 4)), rng.standard_normal((4, 5)), rng.integers(0, 5, 6)
    grads = []
    for lib in (kiln, torch):
        xv, wv = lib.tensor(x, requires_grad=True), lib.tensor(w, requires_grad=True)
        loss = lib.nn.functional.cross_entropy(xv @ wv, lib.tensor(t))  # the logits are not a leaf
        (gw,) = lib.autograd.grad(loss, wv, create_graph=True)
        (gw * gw).sum().backward()
        grads.append(xv.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10, atol=1e-12)


class _ReadsItsInput(Primitive):
    """A primitive whose VJP reads its input's values without listing it in saves_inputs (named after
    the class is made: a class that names itself would be registered as one of kiln's primitives)."""

    def kernel(self, xp, x):
        return x * 2.0

    def vjp(self, g, inputs, node):
        return (g * inputs[0],)


def test_a_vjp_reading_an_unsaved_input_fails_loudly_naming_the_fix():
    x = kiln.randn(3, requires_grad=True)
    prim = _ReadsItsInput()
    prim.name = "test_reads_its_input"
    y = bind(prim, (x * 1.0,), {})
    with pytest.raises(UnsavedInputError, match=r"test_reads_its_input \(input 0\).*saves_inputs"):
        y.sum().backward()


def test_a_shape_only_stand_in_refuses_every_read():
    stand_in = ShapeOnly((2, 3), np.dtype(np.float32), kiln.ops.primitive.REGISTRY["mul"], 1)
    assert (stand_in.shape, stand_in.dtype, stand_in.ndim, stand_in.size) == ((2, 3), np.float32, 2, 6)
    for read in (lambda: np.asarray(stand_in), lambda: np.add(stand_in, 1), lambda: stand_in[0],
                 lambda: stand_in.sum()):
        with pytest.raises((UnsavedInputError, TypeError)):
            read()


def test_backward_frees_each_nodes_saved_arrays_once_its_vjp_has_run():
    x = kiln.randn(3, requires_grad=True)
    a = x * 2.0
    ref = weakref.ref(a)
    loss = (a * a).sum()  # the product saves `a`; the pass reaches x's node after it
    del a
    freed_by_then = []
    x.register_hook(lambda g: freed_by_then.append(ref() is None))
    loss.backward()
    assert freed_by_then == [True]
    np.testing.assert_allclose(x.grad.numpy(), 8.0 * x.detach().numpy(), rtol=1e-6)


def _x_grads(program, data):
    """x.grad after ``program(lib, x).backward()`` in kiln and in torch (skipped without torch)."""
    torch = pytest.importorskip("torch")
    grads = []
    for lib in (kiln, torch):
        x = lib.tensor(data, requires_grad=True)
        program(lib, x).backward()
        grads.append(x.grad.numpy())
    return grads


def test_an_output_its_own_node_reads_survives_its_consumers_letting_go():
    def program(lib, x):
        y = lib.tanh(x)  # its VJP reads y; the addition, which runs first in backward, keeps only its shape
        return (y + 1.0).sum()  # (y dies with this frame)

    kiln_grad, torch_grad = _x_grads(program, np.random.default_rng(2).standard_normal(5))
    np.testing.assert_allclose(kiln_grad, torch_grad, rtol=1e-12)


def test_a_retained_graph_keeps_its_saved_arrays_for_a_second_pass():
    x = kiln.randn(4, requires_grad=True)
    loss = (kiln.tanh(x * 3.0) * x).sum()
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    x.grad = None
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), first)


def test_a_product_with_a_constant_keeps_no_copy_of_the_other_factor():
    # Mul reads each factor only for the other's gradient (as PyTorch's mul saves): updating h in place
    # afterwards is then no error, in either library, and the gradients agree
    def program(lib, x):
        h = x * 3.0
        y = (h * 0.5) / 4.0  # neither the product nor the quotient needs h's values
        h.add_(1.0)
        return y.sum()

    kiln_grad, torch_grad = _x_grads(program, np.random.default_rng(3).standard_normal(4))
    np.testing.assert_array_equal(kiln_grad, torch_grad)


def test_a_factor_that_takes_a_gradient_from_the_other_is_still_version_checked():
    x = kiln.randn(3, requires_grad=True)
    w = kiln.randn(3, requires_grad=True)
    h = x * 2.0
    y = (h * w).sum()  # w's gradient reads h
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()

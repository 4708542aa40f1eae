"""PyTorch conveniences on Tensor: repeat, new_*, .data, format specs and randint(high, size)."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.jit import GraphBreakError

torch = pytest.importorskip("torch")


# ---- repeat ---------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, reps", [((2, 3), (2, 2)), ((3,), (2, 1, 3)), ((), (4,)), ((2, 1), (1, 1)),
                                         ((2, 3), (0, 1)), ((1, 2, 1), (2, 1, 3))])
def test_repeat_matches_pytorch_values_and_grads(shape, reps):
    rng = np.random.default_rng(0)
    array = rng.standard_normal(shape).astype(np.float32)
    k = kiln.tensor(array, requires_grad=True)
    t = torch.tensor(array, requires_grad=True)
    kout, tout = k.repeat(*reps), t.repeat(*reps)
    np.testing.assert_array_equal(kout.detach().numpy(), tout.detach().numpy())
    upstream = rng.standard_normal(tout.shape).astype(np.float32)
    kout.backward(kiln.tensor(upstream))
    tout.backward(torch.tensor(upstream))
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(k.repeat(reps).detach().numpy(), tout.detach().numpy())  # one tuple works too


def test_repeat_always_returns_a_new_tensor():
    x = kiln.ones(2, 3)
    y = x.repeat(1, 1)
    y.add_(1.0)
    assert x.tolist() == [[1.0] * 3] * 2


def test_repeat_errors():
    with pytest.raises(ValueError, match=r"can not be smaller than the number of dims.*repeat\(1, 1\)"):
        kiln.ones(2, 3).repeat(2)
    with pytest.raises(ValueError, match=">= 0"):
        kiln.ones(2).repeat(-1)
    with pytest.raises(TypeError, match="must be a tuple of ints"):
        kiln.ones(2).repeat(1.5)


def test_tile_matches_pytorch():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    for dims in [(2,), (2, 1), (1, 2, 2), 3]:
        np.testing.assert_array_equal(kiln.tile(kiln.tensor(array), dims).numpy(),
                                      torch.tile(torch.tensor(array), dims if isinstance(dims, tuple) else (dims,)))
    np.testing.assert_array_equal(kiln.tensor(array).tile((2, 2)).numpy(), torch.tensor(array).tile((2, 2)).numpy())


def test_repeat_compiles_and_matches_eager():
    def f(x):
        return (x.repeat(3, 1, 2) * kiln.arange(12.0).reshape(1, 1, 12)).sum(dim=(0, 1))

    compiled = kiln.compile(f, fullgraph=True)
    for _ in range(2):
        x1 = kiln.randn(2, 6, requires_grad=True)
        x2 = kiln.tensor(x1.detach().numpy(), requires_grad=True)
        e, c = f(x1), compiled(x2)
        np.testing.assert_allclose(c.detach().numpy(), e.detach().numpy(), rtol=1e-6)
        e.sum().backward()
        c.sum().backward()
        np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-6)
    assert compiled.stats.hits == 1


# ---- new_* ---------------------------------------------------------------------------------
def test_new_constructors_take_dtype_and_device_from_self():
    x = kiln.ones(2, dtype=kiln.float64)
    t = torch.ones(2, dtype=torch.float64)
    for name, args in [("new_zeros", (2, 3)), ("new_ones", ((4,),)), ("new_empty", (2,)), ("new_full", ((2, 2), 7))]:
        k, r = getattr(x, name)(*args), getattr(t, name)(*args)
        assert k.dtype == kiln.float64 and tuple(k.shape) == tuple(r.shape) and k.device == x.device
        if name != "new_empty":
            np.testing.assert_array_equal(k.numpy(), r.numpy())
    assert x.new_tensor([1, 2]).dtype == kiln.float64 and torch.ones(2, dtype=torch.float64).new_tensor([1, 2]).dtype \
        == torch.float64
    ints = kiln.tensor([1, 2])
    assert ints.new_zeros(3).dtype == kiln.int64
    assert ints.new_zeros(3, dtype=kiln.float32).dtype == kiln.float32
    y = ints.new_ones(2, dtype=kiln.float32, requires_grad=True)
    assert y.requires_grad and y.is_leaf


def test_new_tensor_copies():
    source = kiln.tensor([1.0, 2.0])
    copy = kiln.zeros(1).new_tensor(source)
    copy.add_(1.0)
    assert source.tolist() == [1.0, 2.0]
    array = np.ones(2, np.float32)
    kiln.zeros(1).new_tensor(array).add_(1.0)
    assert array.tolist() == [1.0, 1.0]


# ---- .data ---------------------------------------------------------------------------------
def test_data_is_a_detached_alias_that_in_place_updates_go_through():
    p = kiln.nn.Parameter(kiln.ones(3))
    alias = p.data
    assert not alias.requires_grad and alias.is_leaf and p.requires_grad
    p.data.mul_(0.5)
    assert p.tolist() == [0.5, 0.5, 0.5] and alias.tolist() == [0.5, 0.5, 0.5]
    p.data[0] = 2.0
    assert p.tolist() == [2.0, 0.5, 0.5]


def test_manual_sgd_through_data_matches_pytorch():
    rng = np.random.default_rng(1)
    w0, x0 = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    kw, tw = kiln.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    for _ in range(3):
        for w, lib in ((kw, kiln), (tw, torch)):
            loss = (lib.tensor(x0) @ w).tanh().sum()
            loss.backward()
            w.data.sub_(0.1 * w.grad.data)
            w.grad = None
    np.testing.assert_allclose(kw.detach().numpy(), tw.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_setting_data_replaces_the_tensor_contents():
    p = kiln.nn.Parameter(kiln.ones(2))
    new = kiln.zeros(3, 2)
    p.data = new
    assert p.shape == (3, 2) and p.requires_grad and p.tolist() == [[0.0, 0.0]] * 3
    new.add_(1.0)  # shared, as in PyTorch
    assert p.tolist() == [[1.0, 1.0]] * 3
    (p * 2).sum().backward()
    assert p.grad.shape == (3, 2)


def test_setting_data_errors():
    p = kiln.nn.Parameter(kiln.ones(2))
    with pytest.raises(TypeError, match="must be set to a kiln.Tensor"):
        p.data = [1.0, 2.0]
    with pytest.raises(TypeError, match="requires grad, so its data must be floating point"):
        p.data = kiln.tensor([1, 2])


def test_data_version_bump_is_seen_by_autograd():
    w = kiln.ones(3, requires_grad=True)
    y = (w * w).sum()
    w.data.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation|version"):
        y.backward()


def test_setting_data_inside_a_compiled_function_is_a_graph_break():
    p = kiln.ones(2)

    def f(x):
        p.data = x
        return x + 1

    with pytest.raises(GraphBreakError, match=r"tensor\.data = \.\.\."):
        kiln.compile(f, fullgraph=True)(kiln.zeros(2))


# ---- __format__ ------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [".4f", "", "e", ">10.2f", "+.3g"])
def test_format_of_a_0d_tensor_matches_pytorch(spec):
    k, t = kiln.tensor(0.123456), torch.tensor(0.123456)
    assert format(k, spec) == format(t, spec)
    assert f"{kiln.tensor(7):03d}" == f"{torch.tensor(7):03d}" == "007"
    loss = (kiln.ones(2, requires_grad=True) * 0.25).sum()
    assert f"loss {loss:.4f}" == "loss 0.5000"


def test_format_spec_on_a_non_scalar_tensor_raises():
    with pytest.raises(TypeError, match=r"applies to 0-d tensors only.*t\.item\(\):\.2f"):
        f"{kiln.ones(2):.2f}"
    with pytest.raises(TypeError):
        f"{torch.ones(2):.2f}"  # PyTorch refuses it too
    assert f"{kiln.ones(2)}" == str(kiln.ones(2))


# ---- randint ---------------------------------------------------------------------------------
def test_randint_high_size_form():
    kiln.manual_seed(0)
    a = kiln.randint(10, (200,))
    assert a.dtype == kiln.int64 and a.shape == (200,) and 0 <= int(a.min()) and int(a.max()) < 10
    kiln.manual_seed(0)
    np.testing.assert_array_equal(kiln.randint(0, 10, (200,)).numpy(), a.numpy())
    b = kiln.randint(5, 8, size=[3, 4])
    assert b.shape == (3, 4) and 5 <= int(b.min()) and int(b.max()) < 8
    assert kiln.randint(3, size=(2,)).shape == (2,)
    with pytest.raises(TypeError, match=r"randint\(10, \(3,\)\)"):
        kiln.randint(10)

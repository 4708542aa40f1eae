"""`index_add` / `Tensor.index_add_` against PyTorch: values, both gradients, repeated indices, alpha, a 0-d
index, the in-place form, compiled against eager, and clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ops.primitive import ShapeError

torch = pytest.importorskip("torch")

CASES = [  # (x shape, dim, index, alpha)
    ((5, 3), 0, [0, 4, 0, 2], 1),
    ((2, 6, 3), 1, [5, 5, 1], 2.5),
    ((4, 3, 2), -1, [1, 0, 1, 1], -1),
    ((3, 4), 1, 2, 1),  # a 0-d index
]


def _source_shape(shape: tuple, dim: int, index: list | int) -> tuple:
    d = dim % len(shape)
    count = 1 if isinstance(index, int) else len(index)
    return tuple(count if i == d else n for i, n in enumerate(shape))


@pytest.mark.parametrize("shape, dim, index, alpha", CASES)
def test_values_and_gradients_match_pytorch(shape, dim, index, alpha):
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(shape).astype(np.float32)
    s_np = rng.standard_normal(_source_shape(shape, dim, index)).astype(np.float32)
    g_np = rng.standard_normal(shape).astype(np.float32)
    x, s = kiln.tensor(x_np, requires_grad=True), kiln.tensor(s_np, requires_grad=True)
    tx, ts = torch.tensor(x_np, requires_grad=True), torch.tensor(s_np, requires_grad=True)
    out = x.index_add(dim, kiln.tensor(np.array(index)), s, alpha=alpha)
    want = tx.index_add(dim, torch.tensor(np.array(index)), ts, alpha=alpha)
    np.testing.assert_allclose(out.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    (out * kiln.tensor(g_np)).sum().backward()
    (want * torch.tensor(g_np)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_the_function_and_the_in_place_method():
    x = kiln.zeros(3, 2)
    index = kiln.tensor([0, 2, 0])
    got = kiln.index_add(x, 0, index, kiln.ones(3, 2))
    np.testing.assert_array_equal(got.numpy(), [[2, 2], [0, 0], [1, 1]])
    assert x.numpy().sum() == 0  # out of place
    assert x.index_add_(0, index, kiln.ones(3, 2), alpha=3) is x
    np.testing.assert_array_equal(x.numpy(), [[6, 6], [0, 0], [3, 3]])


def test_compiled_equals_eager():
    rng = np.random.default_rng(1)
    x, s = (kiln.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
            for shape in ((6, 4), (5, 4)))
    index = kiln.tensor(np.array([3, 0, 3, 5, 1]))

    def f(x, s):
        return (x.index_add(0, index, s, alpha=0.5) ** 2).sum()

    compiled = kiln.compile(f)
    for _ in range(3):
        got = compiled(x, s)
    got.backward()
    grads = x.grad.numpy().copy(), s.grad.numpy().copy()
    x.grad = s.grad = None
    want = f(x, s)
    want.backward()
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    np.testing.assert_array_equal(grads[0], x.grad.numpy())
    np.testing.assert_array_equal(grads[1], s.grad.numpy())


def test_bad_input_gets_a_clear_error():
    x = kiln.zeros(3, 2)
    with pytest.raises(ShapeError, match=r"source of shape \(2, 3\) does not fit: expected \(2, 2\)"):
        x.index_add(0, kiln.tensor([0, 1]), kiln.ones(2, 3))
    with pytest.raises(ShapeError, match="index must be 1-D"):
        x.index_add(0, kiln.tensor([[0, 1]]), kiln.ones(2, 2))
    with pytest.raises((IndexError, ValueError), match="index_add"):
        x.index_add(0, kiln.tensor([0, 3]), kiln.ones(2, 2))
    with pytest.raises(TypeError, match="index_add"):
        x.index_add(0, kiln.tensor([0.0, 1.0]), kiln.ones(2, 2))
    with pytest.raises(TypeError, match="source must be a Tensor"):
        x.index_add(0, kiln.tensor([0, 1]), np.ones((2, 2)))

"""softmax, log_softmax and logsumexp over tensors with no elements: results as PyTorch, gradients empty.

They shift by the max for stability, and the max of an empty dimension does not exist; the
shift must not be what fails (it used to raise a ShapeError naming the internal `max`).
"""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F

CASES = [((3, 0), -1), ((3, 0), 0), ((0, 4), 0), ((0, 4), 1), ((0,), 0), ((2, 0, 3), 1), ((2, 0, 3), -1)]
SOFTMAXES = {"softmax": F.softmax, "log_softmax": F.log_softmax}


@pytest.mark.parametrize("name", SOFTMAXES)
@pytest.mark.parametrize("shape, dim", CASES)
def test_softmax_of_empty_tensor_is_empty_with_empty_gradient(name: str, shape: tuple, dim: int) -> None:
    x = kiln.zeros(*shape, requires_grad=True)
    out = SOFTMAXES[name](x, dim=dim)
    assert tuple(out.shape) == shape and out.dtype == kiln.float32
    out.sum().backward()
    assert tuple(x.grad.shape) == shape


@pytest.mark.parametrize("shape, dim", CASES)
def test_softmax_spellings_and_modules(shape: tuple, dim: int) -> None:
    x = kiln.zeros(*shape)
    assert tuple(kiln.softmax(x, dim).shape) == shape
    assert tuple(kiln.log_softmax(x, dim).shape) == shape
    assert tuple(kiln.nn.Softmax(dim=dim)(x).shape) == shape
    assert tuple(kiln.nn.LogSoftmax(dim=dim)(x).shape) == shape


@pytest.mark.parametrize("shape, dim", CASES + [((3, 0), None), ((2, 0, 3), (0, 2))])
def test_logsumexp_of_empty_dimension_is_minus_inf(shape: tuple, dim) -> None:
    x = kiln.zeros(*shape, requires_grad=True)
    out = kiln.logsumexp(x) if dim is None else kiln.logsumexp(x, dim)
    reduced = range(len(shape)) if dim is None else [dim] if isinstance(dim, int) else dim
    with np.errstate(divide="ignore"):
        expected = np.log(np.exp(np.zeros(shape)).sum(axis=tuple(reduced)))  # -inf where the sum is empty
    np.testing.assert_array_equal(out.detach().numpy(), expected)
    out.sum().backward()
    assert tuple(x.grad.shape) == shape


def test_logsumexp_keepdim_of_empty_dimension() -> None:
    out = kiln.logsumexp(kiln.zeros(3, 0), -1, keepdim=True)
    assert tuple(out.shape) == (3, 1) and out.tolist() == [[-float("inf")]] * 3


def test_nonempty_softmax_still_shifts_by_the_max() -> None:
    x = kiln.tensor([[1000.0, 1000.0], [-1000.0, 0.0]])
    np.testing.assert_allclose(F.softmax(x, -1).numpy(), [[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(kiln.logsumexp(x, -1).numpy(), [1000.0 + np.log(2.0), 0.0], rtol=1e-6)


def test_compiled_softmax_and_logsumexp_of_empty_tensor() -> None:
    soft = kiln.compile(lambda x: F.log_softmax(x, -1).sum())
    x = kiln.zeros(4, 0, requires_grad=True)
    loss = soft(x)
    loss.backward()
    assert loss.item() == 0.0 and tuple(x.grad.shape) == (4, 0)
    lse = kiln.compile(lambda x: kiln.logsumexp(x, -1))
    assert lse(kiln.zeros(3, 0)).tolist() == [-float("inf")] * 3


@pytest.mark.parametrize("shape, dim", CASES)
def test_matches_torch(shape: tuple, dim: int) -> None:
    torch = pytest.importorskip("torch")
    for name, fn in SOFTMAXES.items():
        theirs = getattr(torch, name)(torch.zeros(*shape), dim)
        assert tuple(fn(kiln.zeros(*shape), dim=dim).shape) == tuple(theirs.shape)
    np.testing.assert_array_equal(kiln.logsumexp(kiln.zeros(*shape), dim).numpy(),
                                  torch.logsumexp(torch.zeros(*shape), dim).numpy())

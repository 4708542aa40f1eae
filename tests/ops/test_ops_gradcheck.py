"""Finite-difference gradient checks (float64) for every differentiable case in op_cases,
plus double-backward (create_graph=True) parity with PyTorch on a few ops."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import kiln
from gradcheck import gradcheck
from op_cases import CASES, Case
from tolerances import tol

FD_CASES = [c for c in CASES if c.grad and c.fd and any(getattr(s, "grad", False) for s in c.inputs)]


@pytest.mark.parametrize("c", FD_CASES, ids=[c.id for c in FD_CASES])
def test_finite_differences(c: Case) -> None:
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))  # stable across runs
    arrays = [spec.draw(rng, "float64") for spec in c.inputs]
    wrt = [bool(getattr(spec, "grad", False)) for spec in c.inputs]
    gradcheck(lambda *xs: c.fn(kiln, *xs), arrays, wrt=wrt)


def test_gradcheck_catches_a_wrong_gradient() -> None:
    """The checker itself must fail on a wrong VJP (here: a detached factor)."""
    x = np.linspace(0.5, 1.5, 4)
    with pytest.raises(AssertionError):
        gradcheck(lambda t: t * t.detach(), [x])
    gradcheck(lambda t: t * t, [x])


# ---- double backward ------------------------------------------------------------------------
torch_ops = {
    "tanh": lambda L, x: L.tanh(x),
    "sigmoid": lambda L, x: L.sigmoid(x),
    "exp_mul": lambda L, x: L.exp(x) * x,
    "div_pow": lambda L, x: (x ** 3) / (x * x + 1.0),
    "softmax": lambda L, x: L.softmax(x, -1),
    "log_softmax": lambda L, x: L.log_softmax(x, -1),
    "gelu": lambda L, x: L.nn.functional.gelu(x),
    "gelu_tanh": lambda L, x: L.nn.functional.gelu(x, approximate="tanh"),
    "matmul_self": lambda L, x: x @ x.transpose(-1, -2),
    "layer_norm": lambda L, x: L.nn.functional.layer_norm(x, (4,)),
    "conv2d_pool": lambda L, x: L.nn.functional.avg_pool2d(
        L.nn.functional.conv2d(x.reshape(1, 1, 3, 4), x[:2, :2].reshape(1, 1, 2, 2), padding=1), 2).reshape(-1)[:3],
    "cross_entropy": lambda L, x: L.nn.functional.cross_entropy(x, L.tensor([0, 3, 1])) * x[0],
    "sqrt_log": lambda L, x: L.sqrt(x * x + 1.0) + L.log(x * x + 2.0),
    "max_relu": lambda L, x: L.relu(x).amax(-1) * x.sum(-1),
    "erf_sin": lambda L, x: L.erf(x) * L.sin(x),
    "prod": lambda L, x: x.prod(-1),
    "remainder": lambda L, x: L.remainder(x * x, 0.7) * x,
}


@pytest.mark.parametrize("name", sorted(torch_ops))
def test_double_backward_matches_torch(name: str) -> None:
    torch = pytest.importorskip("torch")
    fn = torch_ops[name]
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.5, 1.5, (3, 4))
    u = rng.standard_normal((3, 3) if name == "matmul_self" else (4,) if name == "cross_entropy" else (3, 4))
    if name in ("max_relu", "conv2d_pool", "prod"):
        u = rng.standard_normal((3,))
    v = rng.standard_normal((3, 4))
    results = []
    for L, make in ((kiln, kiln.tensor), (torch, torch.tensor)):
        t = make(x, requires_grad=True)
        out = fn(L, t)
        (g,) = L.autograd.grad(out, t, make(u), create_graph=True)
        assert g.requires_grad
        (g * make(v)).sum().backward()
        results.append((g.detach().numpy(), t.grad.numpy()))
    (kg, kgg), (tg, tgg) = results
    np.testing.assert_allclose(kg, tg, **tol("float64", "grad"))
    np.testing.assert_allclose(kgg, tgg, **tol("float64", "grad"))


def test_double_backward_finite_differences() -> None:
    """d/dx <d/dx f(x), v> by finite differences of the first derivative."""
    def first_grad(t: kiln.Tensor) -> kiln.Tensor:
        y = (kiln.tanh(t) * kiln.exp(t) + t ** 3).sum()
        (g,) = kiln.autograd.grad(y, t, create_graph=True)
        return g

    gradcheck(first_grad, [np.linspace(-1.0, 1.0, 5)], differentiates=True)

"""Creation ops against PyTorch: values, shapes and dtypes."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from tolerances import tol

torch = pytest.importorskip("torch")


def same(k: kiln.Tensor, t: "torch.Tensor") -> None:
    assert tuple(k.shape) == tuple(t.shape)
    assert k.dtype.name == str(t.dtype).replace("torch.", "")
    dt = k.dtype.name if k.dtype.is_floating_point and k.dtype.name != "float16" else "float64"
    np.testing.assert_allclose(k.numpy().astype(np.float64), t.numpy().astype(np.float64), **tol(dt))


CALLS = [
    ("zeros", (2, 3), {}), ("zeros", ((2, 3),), {}), ("zeros", (4,), {"dtype": "int64"}), ("zeros", ((),), {}),
    ("ones", (3, 1), {}), ("ones", ([2, 2],), {"dtype": "float64"}), ("ones", (2,), {"dtype": "bool"}),
    ("full", ((2, 3), 1.5), {}), ("full", ((2,), 7), {}), ("full", ((2,), True), {}),
    ("full", ((3,), 2), {"dtype": "float64"}), ("full", ((), -1.0), {}),
    ("arange", (5,), {}), ("arange", (2, 9, 3), {}), ("arange", (0.0, 1.0, 0.25), {}), ("arange", (5, 0, -2), {}),
    ("arange", (4,), {"dtype": "float32"}), ("arange", (1, 2.5, 0.5), {}), ("arange", (0, 1, 0.1), {}),
    ("arange", (3,), {"dtype": "float64"}),
    ("linspace", (0.0, 1.0, 5), {}), ("linspace", (-2, 3, 7), {"dtype": "float64"}), ("linspace", (1.0, 1.0, 1), {}),
    ("linspace", (0, 10, 4), {}),
    ("eye", (3,), {}), ("eye", (2, 4), {}), ("eye", (3,), {"dtype": "int64"}),
    ("empty", (2, 3), {}), ("empty", (4,), {"dtype": "int32"}),
]


@pytest.mark.parametrize("name,args,kw", CALLS, ids=[f"{n}{a}{kw or ''}" for n, a, kw in CALLS])
def test_creation_matches_torch(name: str, args: tuple, kw: dict) -> None:
    k = getattr(kiln, name)(*args, **{k_: getattr(kiln, v) if k_ == "dtype" else v for k_, v in kw.items()})
    t = getattr(torch, name)(*args, **{k_: getattr(torch, v) if k_ == "dtype" else v for k_, v in kw.items()})
    if name == "empty":  # values are unspecified; kiln fills zeros
        assert tuple(k.shape) == tuple(t.shape) and k.dtype.name == str(t.dtype)[6:]
        return
    same(k, t)


@pytest.mark.parametrize("name", ["zeros_like", "ones_like", "empty_like"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_like_ops(name: str, dtype: str) -> None:
    base = np.arange(6).reshape(2, 3).astype(dtype)
    k = getattr(kiln, name)(kiln.tensor(base))
    t = getattr(torch, name)(torch.tensor(base))
    assert tuple(k.shape) == tuple(t.shape) and k.dtype.name == dtype
    if name != "empty_like":
        same(k, t)
    k2 = getattr(kiln, name)(kiln.tensor(base), dtype=kiln.float64)
    assert k2.dtype is kiln.float64
    assert kiln.full_like(kiln.tensor(base), 3).tolist() == np.full((2, 3), 3).astype(dtype).tolist()


def test_creation_requires_grad_and_device() -> None:
    for t in (kiln.zeros(2, requires_grad=True), kiln.ones(2, 2, requires_grad=True),
              kiln.full((2,), 1.0, requires_grad=True), kiln.randn(3, requires_grad=True),
              kiln.arange(3.0, requires_grad=True), kiln.linspace(0, 1, 3, requires_grad=True),
              kiln.eye(2, requires_grad=True)):
        assert t.requires_grad and t.is_leaf
        assert t.device == kiln.device("cpu")
    assert kiln.zeros(2, device="cpu").device.type == "cpu"
    z = kiln.zeros(3, requires_grad=True)
    (z * 2).sum().backward()
    assert z.grad.tolist() == [2.0, 2.0, 2.0]


def test_default_dtype() -> None:
    assert kiln.get_default_dtype() is kiln.float32
    assert kiln.zeros(1).dtype is kiln.float32 and kiln.arange(1.0).dtype is kiln.float32

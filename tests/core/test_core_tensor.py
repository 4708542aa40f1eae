"""The Tensor API: metadata, conversions, memory sharing, copies, dtype promotion, operators."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


def test_metadata() -> None:
    x = kiln.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.ndim == 3 and x.dim() == 3
    assert x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.numel() == 24 and len(x) == 2
    assert x.dtype is kiln.float32 and x.dtype == kiln.float32
    assert x.device == kiln.device("cpu") and str(x.device) == "cpu" and x.device == "cpu"
    assert x.is_floating_point() and not x.is_cuda
    assert kiln.arange(3).dtype is kiln.int64


def test_scalar_tensors_are_0d() -> None:
    for t in (kiln.tensor(3.0), kiln.tensor(np.float32(2.0)), kiln.tensor(np.array(1.5)), kiln.tensor(7),
              kiln.tensor(True)):
        assert t.shape == () and t.ndim == 0 and t.numel() == 1
    assert kiln.tensor(7).dtype is kiln.int64 and kiln.tensor(True).dtype is kiln.bool
    assert kiln.ones(3).sum().shape == ()


def test_tensor_constructor_dtypes() -> None:
    assert kiln.tensor([1.0, 2.0]).dtype is kiln.float32
    assert kiln.tensor([1, 2]).dtype is kiln.int64
    assert kiln.tensor([True]).dtype is kiln.bool
    assert kiln.tensor(np.zeros(2, np.float64)).dtype is kiln.float64
    assert kiln.tensor(np.zeros(2, np.int32)).dtype is kiln.int32
    assert kiln.tensor([1, 2], dtype=kiln.float64).dtype is kiln.float64
    assert kiln.tensor([1.5], dtype="float16").dtype is kiln.float16
    assert kiln.Tensor([1.0, 2.0]).shape == (2,)


def test_tensor_copies_its_input() -> None:
    a = np.zeros(3, np.float32)
    t = kiln.tensor(a)
    a[0] = 5
    assert t.numpy()[0] == 0
    u = kiln.tensor(t)
    t.add_(1)
    assert u.numpy()[0] == 0


def test_from_numpy_and_numpy_share_memory() -> None:
    a = np.zeros(3, np.float32)
    t = kiln.from_numpy(a)
    a[1] = 4
    assert t.tolist() == [0.0, 4.0, 0.0]
    n = t.numpy()
    n[2] = 7
    assert t.tolist() == [0.0, 4.0, 7.0]
    t.add_(1)
    assert n.tolist() == [1.0, 5.0, 8.0]


def test_item_tolist_and_python_scalars() -> None:
    x = kiln.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert x.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert x[0, 0].item() == 1.5 and isinstance(x[0, 0].item(), float)
    assert kiln.tensor([3]).item() == 3 and isinstance(kiln.tensor([3]).item(), int)
    assert float(x[1, 1]) == 4.0 and int(x[1, 0]) == 3
    assert bool(kiln.tensor(True)) and not bool(kiln.tensor([0.0]))
    assert [1, 2, 3][kiln.tensor(1)] == 2  # __index__


def test_detach_shares_memory_and_drops_grad() -> None:
    x = kiln.ones(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    d[0] = 10.0
    assert y.detach().numpy()[0] == 10.0
    xd = x.detach()
    with kiln.no_grad():
        xd.mul_(3)
    assert x.detach().numpy().tolist() == [3.0, 3.0, 3.0]


def test_clone_copies_and_passes_grad() -> None:
    x = kiln.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c.requires_grad and not c.is_leaf
    with kiln.no_grad():
        c2 = x.clone()
        c2.add_(5)
    assert x.detach().tolist() == [1.0, 2.0]
    (c * c).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_contiguous() -> None:
    x = kiln.arange(6).reshape(2, 3).T
    c = x.contiguous()
    assert c.tolist() == [[0, 3], [1, 4], [2, 5]]
    assert c._data.flags.c_contiguous
    y = kiln.ones(2, 2)
    assert y.contiguous() is y


def test_to_dtype_and_conversions() -> None:
    x = kiln.tensor([1.7, -2.2])
    assert x.to(kiln.float64).dtype is kiln.float64
    assert x.to("float64").dtype is kiln.float64
    assert x.to(dtype=kiln.int32).tolist() == [1, -2]
    assert x.to("cpu") is x or x.to("cpu").tolist() == x.tolist()
    assert x.double().dtype is kiln.float64 and x.half().dtype is kiln.float16
    assert x.long().dtype is kiln.int64 and x.int().dtype is kiln.int32 and x.bool().dtype is kiln.bool
    assert x.to(kiln.ones(1, dtype=kiln.float64)).dtype is kiln.float64
    w = kiln.tensor([1.0, 2.0], requires_grad=True)
    w.to(kiln.float64).sum().backward()
    assert w.grad.dtype is kiln.float32 and w.grad.tolist() == [1.0, 1.0]


def test_requires_grad_() -> None:
    x = kiln.ones(2)
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad_(False)
    assert not x.requires_grad
    y = kiln.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError):
        y.requires_grad_(False)


def test_T_and_mT() -> None:
    x = kiln.arange(24).reshape(2, 3, 4)
    assert x.T.shape == (4, 3, 2)
    assert x.mT.shape == (2, 4, 3)
    np.testing.assert_array_equal(x.mT.numpy(), np.swapaxes(x.numpy(), -1, -2))
    np.testing.assert_array_equal(x[0].T.numpy(), x.numpy()[0].T)


# ---- dtype promotion ----------------------------------------------------------------------------
@pytest.mark.parametrize("a,b,expected", [
    (kiln.int64, kiln.float32, kiln.float32),
    (kiln.int32, kiln.float64, kiln.float64),
    (kiln.int32, kiln.int64, kiln.int64),
    (kiln.float32, kiln.float64, kiln.float64),
    (kiln.float16, kiln.float32, kiln.float32),
    (kiln.bool, kiln.int32, kiln.int32),
    (kiln.bool, kiln.float16, kiln.float16),
    (kiln.int64, kiln.float16, kiln.float16),
])
def test_tensor_tensor_promotion(a: kiln.DType, b: kiln.DType, expected: kiln.DType) -> None:
    x, y = kiln.ones(2, dtype=a), kiln.ones(2, dtype=b)
    assert (x + y).dtype is expected and (y + x).dtype is expected
    assert (x * y).dtype is expected


def test_promotion_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    names = ["bool", "int32", "int64", "float16", "float32", "float64"]
    for a in names:
        for b in names:
            if a == b == "bool":
                continue
            k = (kiln.ones(2, dtype=a) + kiln.ones(2, dtype=b)).dtype.name
            t = str((torch.ones(2, dtype=getattr(torch, a)) + torch.ones(2, dtype=getattr(torch, b))).dtype)
            assert k == t.replace("torch.", ""), (a, b)
        for scalar in (2, 2.5, True):
            k = (kiln.ones(2, dtype=a) * scalar).dtype.name
            t = str((torch.ones(2, dtype=getattr(torch, a)) * scalar).dtype)
            assert k == t.replace("torch.", ""), (a, scalar)


def test_scalar_promotion_rules() -> None:
    f32 = kiln.ones(2)
    assert (f32 + 1.5).dtype is kiln.float32 and (2.5 * f32).dtype is kiln.float32
    assert (kiln.ones(2, dtype=kiln.float16) + 1.5).dtype is kiln.float16
    i64 = kiln.arange(3)
    assert (i64 + 1).dtype is kiln.int64
    assert (i64 / 2).dtype is kiln.float32 and (i64 / 2).tolist() == [0.0, 0.5, 1.0]
    assert (i64 * 1.5).dtype is kiln.float32
    assert (kiln.arange(3, dtype=kiln.int32) + 1).dtype is kiln.int32
    b = kiln.tensor([True, False])
    assert (b + 1).dtype is kiln.int64 and (b + 1).tolist() == [2, 1]
    assert (b * 2.0).dtype is kiln.float32
    assert (i64 // 2).tolist() == [0, 0, 1] and (i64 % 2).tolist() == [0, 1, 0]
    assert kiln.arange(4).sum().dtype is kiln.int64 and kiln.tensor([True, True]).sum().item() == 2


def test_comparisons_and_logical_ops() -> None:
    x = kiln.tensor([1.0, 2.0, 3.0])
    assert (x > 2).tolist() == [False, False, True] and (x > 2).dtype is kiln.bool
    assert (x >= 2).tolist() == [False, True, True]
    assert (x < 2).tolist() == [True, False, False] and (x <= 2).tolist() == [True, True, False]
    assert (x == 2).tolist() == [False, True, False] and (x != 2).tolist() == [True, False, True]
    assert (2 < x).tolist() == [False, False, True]
    assert (x == kiln.tensor([1.0, 0.0, 3.0])).tolist() == [True, False, True]
    assert ((x > 1) & (x < 3)).tolist() == [False, True, False]
    assert ((x < 2) | (x > 2)).tolist() == [True, False, True]
    assert (~(x > 1)).tolist() == [True, False, False]


def test_reflected_operators() -> None:
    x = kiln.tensor([1.0, 2.0, 4.0], requires_grad=True)
    np.testing.assert_allclose((2 - x).detach().numpy(), [1.0, 0.0, -2.0])
    np.testing.assert_allclose((2 / x).detach().numpy(), [2.0, 1.0, 0.5])
    np.testing.assert_allclose((2 ** x).detach().numpy(), [2.0, 4.0, 16.0])
    np.testing.assert_allclose((3 + x).detach().numpy(), [4.0, 5.0, 7.0])
    np.testing.assert_allclose((3 * x).detach().numpy(), [3.0, 6.0, 12.0])
    y = (2 ** x).sum() + (2 / x).sum() + (2 - x).sum()
    y.backward()
    xv = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(x.grad.numpy(), 2**xv * np.log(2) - 2 / xv**2 - 1, rtol=1e-6)
    assert (np.float32(2.0) * kiln.ones(2)).dtype is kiln.float32  # NumPy scalars defer to the tensor
    assert isinstance(np.ones(2) + kiln.ones(2), kiln.Tensor)


def test_inplace_operators_keep_identity() -> None:
    x = kiln.ones(3)
    y = x
    x += 1
    x *= 3
    x -= 1
    x /= 5
    assert x is y
    np.testing.assert_allclose(x.numpy(), [1.0, 1.0, 1.0])
    i = kiln.arange(3)
    with pytest.raises(RuntimeError, match="cast"):
        i += 0.5  # int tensor can't hold a float result, as in PyTorch


def test_iteration_and_len() -> None:
    x = kiln.arange(6).reshape(3, 2)
    rows = list(x)
    assert len(rows) == 3 and rows[1].tolist() == [2, 3]
    with pytest.raises(TypeError):
        len(kiln.tensor(1.0))


def test_repr() -> None:
    assert repr(kiln.tensor([1.0, 2.0])).startswith("tensor([1., 2.]")
    assert "float64" in repr(kiln.tensor([1.0], dtype=kiln.float64))
    assert "requires_grad=True" in repr(kiln.tensor([1.0], requires_grad=True))
    assert "grad_fn" in repr(kiln.tensor([1.0], requires_grad=True) * 2)


def test_zero_fill_copy() -> None:
    x = kiln.ones(2, 3)
    assert x.zero_() is x and x.sum().item() == 0
    x.fill_(2.5)
    assert x.tolist() == [[2.5] * 3] * 2
    x.copy_(kiln.arange(3))
    assert x.tolist() == [[0.0, 1.0, 2.0]] * 2 and x.dtype is kiln.float32
    x.copy_(kiln.tensor([[1.0], [2.0]]))
    assert x.tolist() == [[1.0] * 3, [2.0] * 3]


def test_setitem_variants() -> None:
    x = kiln.zeros(3, 4)
    x[0] = 1.0
    x[1, 1:3] = kiln.tensor([5.0, 6.0])
    x[:, -1] = kiln.tensor([7.0, 8.0, 9.0])
    x[x == 0] = -1.0
    x[kiln.tensor([2, 2])] = 3.0
    assert x.tolist() == [[1, 1, 1, 7], [-1, 5, 6, 8], [3, 3, 3, 3]]


def test_transpose_dims_are_checked() -> None:
    with pytest.raises(IndexError, match="out of range"):
        kiln.ones(3).mT
    with pytest.raises(IndexError, match="out of range"):
        kiln.ones(2, 3).transpose(0, 2)
    assert kiln.ones(3).transpose(0, -1).shape == (3,)
    assert kiln.tensor(1.0).transpose(0, -1).shape == ()

"""Zero-copy exchange: from_numpy / numpy(), __array__, and DLPack with NumPy, PyTorch and JAX."""
from __future__ import annotations

import numpy as np
import pytest

import kiln


# ---- NumPy ------------------------------------------------------------------------------
def test_from_numpy_and_numpy_share_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = kiln.from_numpy(a)
    assert np.shares_memory(t.numpy(), a)
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0
    t.add_(1.0)
    assert a[0, 0] == 43.0


def test_numpy_of_a_view_shares_the_base_memory():
    t = kiln.arange(12, dtype=kiln.float32).reshape(3, 4)
    col = t[:, 1]
    assert np.shares_memory(col.numpy(), t.numpy())


def test_asarray_uses_array_protocol_without_copying():
    t = kiln.randn(3, 4)
    assert np.shares_memory(np.asarray(t), t.numpy())
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_np_array_copies():
    t = kiln.zeros(3)
    a = np.array(t)
    a[0] = 1.0
    assert t[0].item() == 0.0
    assert not np.shares_memory(a, t.numpy())


def test_asarray_works_on_tensors_that_require_grad():
    t = kiln.ones(2, requires_grad=True)
    np.testing.assert_array_equal(np.asarray(t), [1.0, 1.0])


# ---- DLPack with NumPy --------------------------------------------------------------------
def test_dlpack_device_is_cpu():
    assert kiln.ones(2).__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "bool"])
def test_numpy_from_dlpack_of_a_tensor_shares_memory(dtype):
    t = kiln.ones(2, 3, dtype=dtype)
    a = np.from_dlpack(t)
    assert a.dtype == np.dtype(dtype) and np.shares_memory(a, t.numpy())


def test_from_dlpack_of_numpy_shares_memory_including_strided_views():
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    for a in (base, base.T, base[:, ::2]):
        t = kiln.from_dlpack(a)
        assert np.shares_memory(t.numpy(), a)
        np.testing.assert_array_equal(t.numpy(), a)


def test_from_dlpack_of_a_kiln_tensor_is_itself():
    t = kiln.ones(2)
    assert kiln.from_dlpack(t) is t


def test_from_dlpack_converts_dtypes_kiln_lacks():
    t = kiln.from_dlpack(np.arange(3, dtype=np.uint8))
    assert t.dtype == kiln.int64
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2])


def test_from_dlpack_rejects_non_dlpack_objects():
    with pytest.raises(TypeError, match=r"expects an object with __dlpack__.*got list"):
        kiln.from_dlpack([1, 2, 3])


def test_from_dlpack_rejects_non_cpu_devices():
    class OnGpu:
        def __dlpack__(self, **kw):
            raise AssertionError("must not be called")

        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(BufferError, match=r"on a CUDA device.*CPU tensors only"):
        kiln.from_dlpack(OnGpu())


def test_dlpack_export_of_a_tensor_requiring_grad_says_detach():
    t = kiln.ones(2, requires_grad=True)
    with pytest.raises(BufferError, match="detach"):
        t.__dlpack__()
    assert np.shares_memory(np.from_dlpack(t.detach()), t.detach().numpy())


def test_dlpack_rejects_a_stream_on_cpu():
    with pytest.raises(BufferError, match="stream must be None"):
        kiln.ones(2).__dlpack__(stream=1)


def test_dlpack_inside_a_compiled_function_is_a_graph_break():
    @kiln.compile(fullgraph=True)
    def f(x):
        return np.from_dlpack(x * 2)

    with pytest.raises(kiln.GraphBreakError, match="__dlpack__"):
        f(kiln.ones(2))


# ---- PyTorch --------------------------------------------------------------------------------
def test_torch_round_trip_shares_memory():
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = kiln.from_dlpack(x)
    assert t.numpy().ctypes.data == x.data_ptr()
    t.mul_(2.0)
    assert x[1, 2].item() == 10.0

    back = torch.from_dlpack(t)
    assert back.data_ptr() == t.numpy().ctypes.data
    back.add_(1.0)
    assert t[0, 0].item() == 1.0


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "bool"])
def test_torch_dtypes_survive_the_exchange(dtype):
    torch = pytest.importorskip("torch")
    x = (torch.arange(6) % 2).to(getattr(torch, dtype))
    t = kiln.from_dlpack(x)
    assert t.dtype == kiln.dtypes.get_dtype(dtype)
    assert torch.from_dlpack(t).dtype == x.dtype
    assert torch.equal(torch.from_dlpack(t), x)


def test_torch_non_contiguous_tensor_is_imported_as_a_view():
    torch = pytest.importorskip("torch")
    x = torch.arange(12.0).reshape(3, 4).t()
    t = kiln.from_dlpack(x)
    np.testing.assert_array_equal(t.numpy(), x.numpy())
    assert np.shares_memory(t.numpy(), x.numpy())


def test_torch_tensor_requiring_grad_says_detach():
    torch = pytest.importorskip("torch")
    with pytest.raises(BufferError, match="detach"):
        kiln.from_dlpack(torch.ones(2, requires_grad=True))


def test_torch_model_output_feeds_kiln_model_without_copies():
    torch = pytest.importorskip("torch")
    features = torch.nn.Linear(4, 8)(torch.randn(3, 4)).detach()
    t = kiln.from_dlpack(features)
    out = kiln.nn.Linear(8, 2)(t)
    assert out.shape == (3, 2)
    assert t.numpy().ctypes.data == features.data_ptr()


# ---- JAX ------------------------------------------------------------------------------------
def test_jax_round_trip():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    t = kiln.from_dlpack(x)
    np.testing.assert_array_equal(t.numpy(), np.asarray(x))
    back = jnp.from_dlpack(kiln.ones(2, 2))
    np.testing.assert_array_equal(np.asarray(back), np.ones((2, 2), np.float32))

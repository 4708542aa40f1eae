"""PyTorch names real training scripts use: inference_mode, kiln.accelerator, roll, diag/diagonal/diag_embed,
legacy constructors (FloatTensor, Tensor(*sizes)), ``size=`` on creation ops, and ``is_<device>`` properties."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

import kiln

torch = pytest.importorskip("torch")

HAVE_BF16 = isinstance(kiln.bfloat16, kiln.DType)


def _parity(kout: kiln.Tensor, tout: object) -> None:
    """Same values, shape and dtype name."""
    assert tuple(kout.shape) == tuple(tout.shape)
    assert kout.dtype.name == str(tout.dtype).replace("torch.", "")
    np.testing.assert_array_equal(kout.detach().numpy(), tout.detach().numpy())


# ---- inference_mode -------------------------------------------------------------------------
def _flags(lib: object) -> tuple[bool, bool]:
    return lib.is_grad_enabled(), lib.is_inference_mode_enabled()


@pytest.mark.parametrize("scenario", ["plain", "false", "nested_false", "no_grad_then_false", "enable_grad_inside"])
def test_inference_mode_flags_match_pytorch(scenario):
    def run(lib):
        seen = []
        if scenario == "plain":
            with lib.inference_mode():
                seen.append(_flags(lib))
        elif scenario == "false":
            with lib.inference_mode(False):
                seen.append(_flags(lib))
        elif scenario == "nested_false":
            with lib.inference_mode():
                with lib.inference_mode(False):
                    seen.append(_flags(lib))
                seen.append(_flags(lib))
        elif scenario == "no_grad_then_false":
            with lib.no_grad(), lib.inference_mode(False):
                seen.append(_flags(lib))
        else:
            with lib.inference_mode(), lib.enable_grad():
                seen.append(_flags(lib))
        seen.append(_flags(lib))
        return seen

    assert run(kiln) == run(torch)


def test_inference_mode_records_no_graph_and_restores_after_an_error():
    x = kiln.ones(3, requires_grad=True)
    with kiln.inference_mode():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(ZeroDivisionError):
        with kiln.inference_mode():
            raise ZeroDivisionError
    assert _flags(kiln) == (True, False)
    assert (x * 2).requires_grad


@pytest.mark.parametrize("form", ["bare", "called", "false"])
def test_inference_mode_as_a_decorator(form):
    def predict(x):
        """Doc."""
        return (x * 2).requires_grad, kiln.is_inference_mode_enabled()

    deco = {"bare": kiln.inference_mode, "called": kiln.inference_mode(), "false": kiln.inference_mode(False)}[form]
    wrapped = deco(predict)
    x = kiln.ones(2, requires_grad=True)
    assert wrapped(x) == ((False, True) if form != "false" else (True, False))
    assert wrapped.__name__ == "predict" and wrapped.__doc__ == "Doc."
    assert _flags(kiln) == (True, False)


def test_inference_mode_is_per_thread_and_checks_its_argument():
    seen = []
    with kiln.inference_mode():
        thread = threading.Thread(target=lambda: seen.append(_flags(kiln)))
        thread.start()
        thread.join()
    assert seen == [(True, False)]
    with pytest.raises(TypeError, match=r"expects a bool, got str.*inference_mode\(False\)"):
        kiln.inference_mode("yes")
    assert kiln.inference_mode(False).clone()._value is False


def test_compiled_model_under_inference_mode_matches_eager():
    model = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.ReLU(), kiln.nn.Linear(8, 2))
    compiled = kiln.compile(model)
    x = kiln.randn(3, 4)
    with kiln.inference_mode():
        want, got = model(x), compiled(x)
    assert not got.requires_grad
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_inference_mode_inside_a_compiled_function_acts_as_no_grad():
    w = kiln.randn(4, requires_grad=True)

    def step(x):
        with kiln.inference_mode():
            frozen = x * w  # no gradient flows through this part
        return (frozen + x * w).sum()

    compiled = kiln.compile(step, fullgraph=True)
    x = kiln.randn(4)
    step(x).backward()
    eager_grad, w.grad = w.grad.numpy().copy(), None
    compiled(x).backward()
    np.testing.assert_allclose(w.grad.numpy(), eager_grad, rtol=1e-6)
    np.testing.assert_allclose(eager_grad, x.numpy(), rtol=1e-6)  # only x * w outside the block counts


# ---- kiln.accelerator -----------------------------------------------------------------------
def test_accelerator_answers_as_a_cpu_only_pytorch_build():
    if kiln.accelerator.is_available():
        pytest.skip("a GPU is present: covered by the simulated-GPU test and the GPU test below")
    assert kiln.accelerator.is_available() is torch.accelerator.is_available() is False
    assert kiln.accelerator.current_accelerator() is None is torch.accelerator.current_accelerator()
    assert kiln.accelerator.current_accelerator(check_available=True) is None
    assert kiln.accelerator.device_count() == torch.accelerator.device_count() == 0
    for name, args in [("current_device_index", ()), ("set_device_index", (0,)), ("synchronize", ()),
                       ("empty_cache", ())]:
        with pytest.raises(RuntimeError, match="none is available"):
            getattr(torch.accelerator, name)(*args)
        with pytest.raises(RuntimeError, match=f"{name}.*none is available.*is_available"):
            getattr(kiln.accelerator, name)(*args)
    for name, args in [("current_device_idx", ()), ("set_device_idx", (0,))]:  # deprecated names, as in PyTorch
        for lib in (torch, kiln):
            with pytest.warns(FutureWarning, match="index"), pytest.raises(RuntimeError, match="none is available"):
                getattr(lib.accelerator, name)(*args)
    with pytest.raises(RuntimeError, match="none is available"):
        with kiln.accelerator.device_index(0):
            pass
    with kiln.accelerator.device_index(None):  # None changes nothing, with or without a device
        pass
    device = kiln.accelerator.current_accelerator().type if kiln.accelerator.is_available() else "cpu"
    assert kiln.zeros(2, device=device).device == "cpu"


class _FakeRuntime:
    """Stands in for cupy.cuda.runtime: records the current device and the synchronizations."""

    def __init__(self):
        self.current, self.syncs = 0, []

    def getDevice(self):  # noqa: N802 - CuPy's name
        return self.current

    def setDevice(self, index):  # noqa: N802
        self.current = index

    def deviceSynchronize(self):  # noqa: N802
        self.syncs.append(self.current)


def test_accelerator_with_a_simulated_two_gpu_machine(monkeypatch):
    runtime = _FakeRuntime()

    class _DeviceScope:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.prev, runtime.current = runtime.current, self.index

        def __exit__(self, *exc):
            runtime.current = self.prev

    cupy = SimpleNamespace(cuda=SimpleNamespace(runtime=runtime, Device=_DeviceScope))
    monkeypatch.setattr(kiln.accelerator, "gpu_count", lambda: 2)
    monkeypatch.setattr(kiln.accelerator, "_cuda_module", lambda: cupy)
    acc = kiln.accelerator
    assert acc.is_available() and acc.device_count() == 2
    assert acc.current_accelerator() == kiln.Device("cuda") and acc.current_accelerator().type == "cuda"
    assert acc.current_device_index() == 0
    acc.set_device_index("cuda:1")
    assert acc.current_device_index() == 1
    with pytest.warns(FutureWarning):
        acc.set_device_idx(0)
    with pytest.warns(FutureWarning):
        assert acc.current_device_idx() == 0
    with acc.device_index(1):
        assert acc.current_device_index() == 1
    assert acc.current_device_index() == 0
    acc.synchronize()
    acc.synchronize(1)
    assert runtime.syncs == [0, 1] and runtime.current == 0
    with pytest.raises(ValueError, match=r"index 2 is out of range: there are 2 device\(s\)"):
        acc.set_device_index(2)
    with pytest.raises(ValueError, match="'cuda\\[:N\\]' device, got 'mps'"):
        acc.set_device_index("mps")
    with pytest.raises(TypeError, match="expects a device index"):
        acc.set_device_index(True)


@pytest.mark.skipif(not kiln.cuda.is_available(), reason="needs a GPU and CuPy")
def test_accelerator_on_a_real_gpu():
    acc = kiln.accelerator
    assert acc.is_available() and acc.current_accelerator().type == "cuda"
    assert acc.device_count() == kiln.cuda.device_count()
    assert acc.current_device_index() == kiln.cuda.current_device()
    x = kiln.ones(3, device=acc.current_accelerator()) * 2
    acc.synchronize()
    assert x.tolist() == [2.0, 2.0, 2.0]


# ---- roll -----------------------------------------------------------------------------------
ROLLS = [(3, None), (-7, None), ((2,), None), (1, 0), (-1, -1), (5, 1), ((1, 2), (0, 1)), ((1, -3), (1, 1)),
         ((2, 1, -1), (2, 0, 1)), (0, 1)]


@pytest.mark.parametrize("shifts, dims", ROLLS)
def test_roll_matches_pytorch_values_and_grads(shifts, dims):
    rng = np.random.default_rng(0)
    array = rng.standard_normal((2, 3, 4)).astype(np.float32)
    k, t = kiln.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    kout, tout = kiln.roll(k, shifts, dims), torch.roll(t, shifts, dims)
    _parity(kout, tout)
    upstream = rng.standard_normal(tout.shape).astype(np.float32)
    kout.backward(kiln.tensor(upstream))
    tout.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(k.grad.numpy(), t.grad.numpy())
    _parity(k.detach().roll(shifts, dims), tout)


def test_roll_edge_cases_and_dtypes():
    _parity(kiln.roll(kiln.tensor(5), 1), torch.roll(torch.tensor(5), 1))
    _parity(kiln.roll(kiln.zeros(0, 3), 2, 0), torch.roll(torch.zeros(0, 3), 2, 0))
    _parity(kiln.roll(kiln.tensor([True, False, False]), 1), torch.roll(torch.tensor([True, False, False]), 1))
    _parity(kiln.roll(kiln.arange(6, dtype=kiln.int32).reshape(2, 3), [1], [1]),
            torch.roll(torch.arange(6, dtype=torch.int32).reshape(2, 3), [1], [1]))


def test_roll_errors():
    x = kiln.zeros(2, 3)
    with pytest.raises(ValueError, match=r"without dims, shifts must be one int.*dims=\.\.\."):
        kiln.roll(x, (1, 2))
    with pytest.raises(ValueError, match=r"one entry each.*2 shifts \(1, 2\) and 1 dims \(0,\)"):
        kiln.roll(x, (1, 2), 0)
    with pytest.raises(IndexError, match="dimension 2 is out of range"):
        kiln.roll(x, 1, 2)
    with pytest.raises(TypeError, match="'shifts' must be a tuple of ints.*float"):
        kiln.roll(x, 1.5, 0)


# ---- diag, diagonal, diag_embed -------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4,), (3, 5), (5, 3)])
@pytest.mark.parametrize("k", [0, 1, -2, 6, -6])
def test_diag_matches_pytorch_values_and_grads(shape, k):
    rng = np.random.default_rng(1)
    array = rng.standard_normal(shape).astype(np.float64)
    a, b = kiln.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    kout, tout = kiln.diag(a, k), torch.diag(b, k)
    _parity(kout, tout)
    upstream = rng.standard_normal(tout.shape)
    kout.backward(kiln.tensor(upstream))
    tout.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    _parity(a.detach().diag(k), tout)


@pytest.mark.parametrize("offset, dim1, dim2", [(0, 0, 1), (1, 0, 2), (-1, 2, 0), (2, -1, -3), (0, 3, 1), (9, 1, 2)])
def test_diagonal_matches_pytorch_values_and_grads(offset, dim1, dim2):
    rng = np.random.default_rng(2)
    array = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    a, b = kiln.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    kout, tout = kiln.diagonal(a, offset, dim1, dim2), torch.diagonal(b, offset, dim1, dim2)
    _parity(kout, tout)
    upstream = rng.standard_normal(tout.shape).astype(np.float32)
    kout.backward(kiln.tensor(upstream))
    tout.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    _parity(a.detach().diagonal(offset, dim1, dim2), tout)


@pytest.mark.parametrize("offset, dim1, dim2", [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (0, 1, 0)])
def test_diag_embed_matches_pytorch_values_and_grads(offset, dim1, dim2):
    rng = np.random.default_rng(3)
    array = rng.standard_normal((2, 3)).astype(np.float32)
    a, b = kiln.tensor(array, requires_grad=True), torch.tensor(array, requires_grad=True)
    kout, tout = kiln.diag_embed(a, offset, dim1, dim2), torch.diag_embed(b, offset, dim1, dim2)
    _parity(kout, tout)
    upstream = rng.standard_normal(tout.shape).astype(np.float32)
    kout.backward(kiln.tensor(upstream))
    tout.backward(torch.tensor(upstream))
    np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    _parity(a.detach().diag_embed(offset, dim1, dim2), tout)


def test_diag_integer_and_bool_dtypes_and_errors():
    _parity(kiln.diag(kiln.arange(3), 1), torch.diag(torch.arange(3), 1))
    _parity(kiln.diag(kiln.tensor([True, False])), torch.diag(torch.tensor([True, False])))
    _parity(kiln.diagonal(kiln.arange(6, dtype=kiln.int32).reshape(2, 3)),
            torch.diagonal(torch.arange(6, dtype=torch.int32).reshape(2, 3)))
    with pytest.raises(kiln.ShapeError, match=r"1-D or 2-D tensor, got 3-D.*kiln\.diagonal"):
        kiln.diag(kiln.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="two different dims, got 1 and -2"):
        kiln.diagonal(kiln.zeros(2, 2, 2), 0, 1, -2)
    with pytest.raises(IndexError, match="out of range"):
        kiln.diagonal(kiln.zeros(3))
    with pytest.raises(kiln.ShapeError, match="0-d tensor"):
        kiln.diag_embed(kiln.tensor(1.0))


def test_roll_and_diagonals_compile_to_eager_values_and_grads():
    def f(x):
        y = kiln.roll(x, (1, -2), (0, 1)) * kiln.diag(x[0]).sum()
        return y.sum() + kiln.diagonal(x, 1).sum() + (kiln.diag_embed(x) * 2).sum() + x.diag(-1).sum()

    compiled = kiln.compile(f, fullgraph=True)
    x = kiln.randn(3, 4, requires_grad=True)
    want = f(x)
    want.backward()
    want_grad, x.grad = x.grad.numpy().copy(), None
    got = compiled(x)
    got.backward()
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), want_grad, rtol=1e-6, atol=1e-6)


# ---- legacy constructors --------------------------------------------------------------------
LEGACY = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "BoolTensor"]
LEGACY += ["BFloat16Tensor"] if HAVE_BF16 else []


@pytest.mark.parametrize("name", LEGACY)
@pytest.mark.parametrize("args", [(2, 3), (), ([1.5, 2, 0],), ([[1, 0], [3, 4]],), (np.array([1, 2]),), (4,)],
                         ids=["sizes", "none", "floats", "nested", "array", "one_size"])
def test_legacy_constructor_matches_pytorch(name, args):
    kout, tout = getattr(kiln, name)(*args), getattr(torch, name)(*args)
    assert tuple(kout.shape) == tuple(tout.shape) and type(kout) is kiln.Tensor
    assert kout.dtype.name == str(tout.dtype).replace("torch.", "")
    if args and not isinstance(args[0], int):  # sizes give uninitialized memory in PyTorch (zeros in kiln)
        np.testing.assert_array_equal(kout.float().numpy(), tout.float().numpy())
    else:
        assert not kout.float().numpy().any()
    assert isinstance(kout, getattr(kiln, name))
    assert getattr(kiln, name).dtype.name == str(getattr(torch, name).dtype).replace("torch.", "")


def test_legacy_isinstance_checks_dtype_like_pytorch():
    for name in LEGACY:
        for dtype in ("float32", "float64", "int64", "bool"):
            assert (isinstance(kiln.zeros(2, dtype=dtype), getattr(kiln, name))
                    == isinstance(torch.zeros(2, dtype=getattr(torch, dtype)), getattr(torch, name))), (name, dtype)
    assert isinstance(kiln.nn.Parameter(kiln.zeros(2)), kiln.FloatTensor)
    assert not isinstance(np.zeros(2, np.float32), kiln.FloatTensor)
    assert repr(kiln.LongTensor) == "<class 'kiln.LongTensor'>"


def test_legacy_constructor_of_a_tensor_shares_memory_and_checks_dtype():
    x = kiln.tensor([1.0, 2.0])
    y = kiln.FloatTensor(x)
    y.add_(1.0)
    assert x.tolist() == [2.0, 3.0] and y is not x
    with pytest.raises(TypeError, match=r"expects a tensor of dtype float32, got int64.*tensor\.to\(kiln\.float32\)"):
        kiln.FloatTensor(kiln.tensor([1, 2]))
    with pytest.raises(TypeError):
        torch.FloatTensor(torch.tensor([1, 2]))


def test_legacy_constructor_errors():
    with pytest.raises(TypeError, match=r"data must be a sequence, got float \(3\.0\).*kiln\.tensor\(3\.0\)"):
        kiln.FloatTensor(3.0)
    with pytest.raises(TypeError, match=r"expects sizes.*got \(list, int\)"):
        kiln.LongTensor([1], 2)
    with pytest.raises(ValueError, match="negative dimension"):
        kiln.FloatTensor(-1, 2)


def test_tensor_class_constructor_legacy_forms_match_pytorch():
    for args in [(2, 3), (4,), (), ([1, 2],), ([[1.5, 2], [3, 4]],), ([True, False],), (np.float32([1, 2]),)]:
        kout, tout = kiln.Tensor(*args), torch.Tensor(*args)
        assert tuple(kout.shape) == tuple(tout.shape) and kout.dtype is kiln.float32, args
        if args and not isinstance(args[0], int):
            np.testing.assert_array_equal(kout.numpy(), tout.numpy())
    ints = kiln.tensor([1, 2])
    shared = kiln.Tensor(ints)  # a tensor keeps its dtype and memory, as in PyTorch
    assert shared.dtype is kiln.int64 and np.shares_memory(shared.numpy(), ints.numpy())
    assert torch.Tensor(torch.tensor([1, 2])).dtype == torch.int64
    assert kiln.Tensor(np.array([1e300])).dtype is kiln.float64  # kiln keeps an array's values (PyTorch: inf)
    with pytest.raises(TypeError, match="data must be a sequence"):
        kiln.Tensor(2.5)


def test_tensor_class_constructor_keeps_kilns_own_keywords():
    x = kiln.Tensor([1, 2], dtype=kiln.float64, requires_grad=True)
    assert x.dtype is kiln.float64 and x.requires_grad and x.is_leaf
    assert kiln.Tensor([1, 2], kiln.int64).dtype is kiln.int64
    assert kiln.Tensor(2, 3, dtype=kiln.int32).dtype is kiln.int32
    copy = kiln.Tensor(kiln.tensor([1, 2]), dtype=kiln.float32)
    assert copy.dtype is kiln.float32 and copy.tolist() == [1.0, 2.0]
    with pytest.raises(TypeError, match="takes sizes or"):
        kiln.Tensor([1], None, None, False, 5)


def test_type_accepts_legacy_classes_and_names():
    x = kiln.tensor([1.5, 2.5])
    assert x.type(kiln.LongTensor).dtype is kiln.int64
    assert x.type("torch.IntTensor").dtype is kiln.int32 and x.type("kiln.DoubleTensor").dtype is kiln.float64
    assert torch.tensor([1.5]).type(torch.LongTensor).dtype == torch.int64


def test_legacy_constructors_inside_a_compiled_function():
    def f(x):
        return x * kiln.FloatTensor([1, 2, 3]) + kiln.Tensor(3) + kiln.zeros(size=(3,))

    compiled = kiln.compile(f, fullgraph=True)
    x = kiln.randn(3)
    np.testing.assert_array_equal(compiled(x).numpy(), f(x).numpy())


# ---- size= on creation ops ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["empty", "zeros", "ones", "rand", "randn"])
def test_size_keyword_matches_pytorch(name):
    for size in [(2, 3), [4], ()]:
        kout, tout = getattr(kiln, name)(size=size), getattr(torch, name)(size=size)
        assert tuple(kout.shape) == tuple(tout.shape) and kout.dtype.name == "float32"
    assert getattr(kiln, name)(size=(2,), dtype=kiln.float64).dtype is kiln.float64
    with pytest.raises(TypeError, match=rf"{name}\(\) got the size twice"):
        getattr(kiln, name)(2, size=(2,))
    with pytest.raises(TypeError):
        getattr(torch, name)(2, size=(2,))


def test_size_keyword_on_full_randint_and_new_ops():
    _parity(kiln.full(size=(2, 3), fill_value=7.0), torch.full(size=(2, 3), fill_value=7.0))
    _parity(kiln.full((2,), 3), torch.full((2,), 3))
    assert kiln.full(shape=(2,), fill_value=1.0).shape == (2,)  # NumPy's spelling
    for k, t in [(kiln.randint(high=5, size=(3,)), torch.randint(high=5, size=(3,))),
                 (kiln.randint(0, 5, size=(3,)), torch.randint(0, 5, size=(3,)))]:
        assert k.shape == tuple(t.shape) and k.dtype is kiln.int64 and int(k.max()) < 5
    x, tx = kiln.zeros(2, dtype=kiln.float64), torch.zeros(2, dtype=torch.float64)
    for name in ("new_zeros", "new_ones", "new_empty"):
        k, t = getattr(x, name)(size=(3, 1)), getattr(tx, name)(size=(3, 1))
        assert k.shape == tuple(t.shape) and k.dtype is kiln.float64
    _parity(x.new_full(size=(2,), fill_value=4.0), tx.new_full(size=(2,), fill_value=4.0))
    with pytest.raises(TypeError, match="needs a size and a fill_value"):
        kiln.full((2,))


# ---- is_<device> properties -----------------------------------------------------------------
DEVICE_PROPERTIES = ["is_cpu", "is_cuda", "is_ipu", "is_maia", "is_meta", "is_mkldnn", "is_mps", "is_mtia",
                     "is_vulkan", "is_xla", "is_xpu"]


def test_is_device_properties_match_pytorch_on_the_cpu():
    missing = [n for n in DEVICE_PROPERTIES if not hasattr(torch.Tensor, n)]
    assert not missing, f"PyTorch dropped {missing}"
    x, t = kiln.zeros(2), torch.zeros(2)
    for name in DEVICE_PROPERTIES:
        assert getattr(x, name) is getattr(t, name), name
    assert kiln.nn.Parameter(kiln.zeros(1)).is_cpu


@pytest.mark.skipif(not kiln.cuda.is_available(), reason="needs a GPU and CuPy")
def test_is_device_properties_on_a_gpu():
    x = kiln.zeros(2, device="cuda")
    assert x.is_cuda and not x.is_cpu and not x.is_xpu

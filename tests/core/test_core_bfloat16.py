"""kiln.bfloat16: casts round like PyTorch's, arithmetic computes in float32 and rounds back,
reductions and matmul accumulate in float32, autograd and kiln.compile work, files round trip.
Without the optional ml_dtypes package the dtype says how to install it."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kiln

pytest.importorskip("ml_dtypes", reason="pip install 'kiln[bfloat16]' to run the bfloat16 tests")
torch = pytest.importorskip("torch")

BF = kiln.bfloat16


def _bits(t) -> np.ndarray:
    """The raw 16-bit patterns of a bfloat16 tensor (kiln or torch)."""
    if isinstance(t, kiln.Tensor):
        return t.detach().numpy().view(np.uint16)
    return t.detach().view(torch.int16).numpy().view(np.uint16)


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1.0, 1.00390625, 1.01171875, 1.0 + 2**-9, 3.0e38, 3.4e38, 1e-40, -1e-45,
               np.inf, -np.inf, 65504.0, 1.0 / 3.0]
    return np.concatenate([special, rng.standard_normal(200) * 10.0 ** rng.integers(-8, 8, 200)]).astype(np.float32)


def test_dtype_object_names_and_parsing():
    assert BF.is_floating_point and BF.itemsize == 2 and repr(BF) == "kiln.bfloat16"
    for spec in ("bfloat16", "bf16", torch.bfloat16):
        assert kiln.dtypes.get_dtype(spec) is BF
    assert kiln.zeros(2, dtype=BF).dtype is BF and kiln.ones(2).to(BF).dtype is BF
    assert kiln.ones(2).bfloat16().dtype is BF and kiln.ones(2).bfloat16().float().tolist() == [1.0, 1.0]
    assert kiln.tensor([1.5], dtype=BF).is_floating_point()
    assert repr(kiln.tensor([1.0, 2.5], dtype=BF)) == "tensor([1. , 2.5], dtype=kiln.bfloat16)"


def test_casts_from_float32_round_to_nearest_even_like_pytorch():
    values = _values()
    np.testing.assert_array_equal(_bits(kiln.tensor(values).to(BF)), _bits(torch.tensor(values).to(torch.bfloat16)))
    back = kiln.tensor(values).to(BF).float().numpy()
    np.testing.assert_array_equal(back, torch.tensor(values).to(torch.bfloat16).float().numpy())
    nan = kiln.tensor([np.nan]).to(BF).float().numpy()
    assert np.isnan(nan).all()


def test_casts_to_and_from_other_dtypes():
    x = kiln.tensor([1.5, -2.0, 3.0], dtype=BF)
    assert x.to(kiln.int64).tolist() == [1, -2, 3] and x.double().tolist() == [1.5, -2.0, 3.0]
    assert kiln.tensor([1, 2]).to(BF).float().tolist() == [1.0, 2.0]
    assert kiln.tensor([True, False]).to(BF).float().tolist() == [1.0, 0.0]
    assert (x + kiln.ones(3)).dtype == kiln.float32          # bfloat16 with float32: float32
    assert (x + kiln.ones(3, dtype=kiln.float16)).dtype == kiln.float32  # with float16: float32, as PyTorch
    assert (x + 1).dtype is BF and (x * 2.5).dtype is BF      # Python scalars keep bfloat16
    assert (x + kiln.tensor([1, 2, 3])).dtype is BF


OPS = {
    "add": lambda L, a, b: a + b, "sub": lambda L, a, b: a - b, "mul": lambda L, a, b: a * b,
    "div": lambda L, a, b: a / b, "scalar": lambda L, a, b: a * 3.0 - 0.5, "neg": lambda L, a, b: -a,
    "maximum": lambda L, a, b: L.maximum(a, b), "exp": lambda L, a, b: (a / 4).exp(), "relu": lambda L, a, b: a.relu(),
    "where": lambda L, a, b: L.where(a > b, a, b), "sqrt": lambda L, a, b: b.abs().sqrt(),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_elementwise_ops_match_pytorch_bfloat16_bit_for_bit(name):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((6, 7)).astype(np.float32) * 3 for _ in range(2))
    ka, kb = kiln.tensor(a).to(BF), kiln.tensor(b).to(BF)
    ta, tb = torch.tensor(a).to(torch.bfloat16), torch.tensor(b).to(torch.bfloat16)
    got, want = OPS[name](kiln, ka, kb), OPS[name](torch, ta, tb)
    assert got.dtype is BF
    if name == "exp":  # libm and PyTorch's vectorized exp may differ by one bfloat16 step
        np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2**-7)
    else:
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_sum_and_mean_accumulate_in_float32():
    x = kiln.ones(1000, dtype=BF)
    assert x.sum().item() == 1000.0 and x.mean().item() == 1.0  # bfloat16 accumulation would stop at 256
    rng = np.random.default_rng(2)
    a = rng.standard_normal((8, 300)).astype(np.float32)
    got = kiln.tensor(a).to(BF).sum(dim=1)
    want = torch.tensor(a).to(torch.bfloat16).sum(dim=1)
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2**-8)
    assert kiln.ones(300, dtype=BF).cumsum(0)[-1].item() == 300.0


def test_matmul_accumulates_in_float32_and_rounds_once():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((64, 3)).astype(np.float32)
    ka, kb = kiln.tensor(a).to(BF), kiln.tensor(b).to(BF)
    exact = (ka.float() @ kb.float()).to(BF)
    got = ka @ kb
    assert got.dtype is BF
    np.testing.assert_array_equal(_bits(got), _bits(exact))
    want = torch.tensor(a).to(torch.bfloat16) @ torch.tensor(b).to(torch.bfloat16)
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2**-7, atol=1e-2)


def _mlp_loss(L, x, w1, w2):
    h = (x @ w1).tanh()
    return ((h @ w2) * 0.5).relu().float().pow(2).sum()


def _softmax_loss(L, x, w1, w2):
    return L.nn.functional.softmax((x @ w1).tanh() @ w2, dim=-1).float().pow(2).sum()


def test_gradients_are_bfloat16_and_match_pytorch():
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 3))]
    kx, kw1, kw2 = (kiln.tensor(a).to(BF).requires_grad_() for a in arrays)
    tx, tw1, tw2 = (torch.tensor(a).to(torch.bfloat16).requires_grad_() for a in arrays)
    _mlp_loss(kiln, kx, kw1, kw2).backward()
    _mlp_loss(torch, tx, tw1, tw2).backward()
    for k, t in ((kx, tx), (kw1, tw1), (kw2, tw2)):
        assert k.grad.dtype is BF
        np.testing.assert_allclose(k.grad.float().numpy(), t.grad.float().numpy(), rtol=0.05, atol=0.02)


@pytest.mark.parametrize("loss", [_mlp_loss, _softmax_loss])
def test_compiled_equals_eager_in_bfloat16(loss):
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 3))]
    compiled = kiln.compile(lambda x, w1, w2: loss(kiln, x, w1, w2), fullgraph=True)
    eager_in = [kiln.tensor(a).to(BF).requires_grad_() for a in arrays]
    comp_in = [kiln.tensor(a).to(BF).requires_grad_() for a in arrays]
    e, c = loss(kiln, *eager_in), compiled(*comp_in)
    e.backward()
    c.backward()
    assert c.item() == e.item()
    for a, b in zip(eager_in, comp_in):
        np.testing.assert_array_equal(_bits(b.grad), _bits(a.grad))


def test_bfloat16_tensors_round_trip_through_kiln_save(tmp_path):
    x = kiln.tensor(_values()).to(BF)
    kiln.save({"w": x, "nested": [x[:3]]}, tmp_path / "bf16.safetensors")
    loaded = kiln.load(tmp_path / "bf16.safetensors")
    assert loaded["w"].dtype is BF
    np.testing.assert_array_equal(_bits(loaded["w"]), _bits(x))
    np.testing.assert_array_equal(_bits(loaded["nested"][0]), _bits(x[:3]))


def test_bfloat16_files_move_between_kiln_and_pytorch(tmp_path):
    st_torch = pytest.importorskip("safetensors.torch")
    t = torch.tensor(_values()).to(torch.bfloat16)
    st_torch.save_file({"t": t}, str(tmp_path / "from_torch.safetensors"))
    np.testing.assert_array_equal(_bits(kiln.load(tmp_path / "from_torch.safetensors")["t"]), _bits(t))
    kiln.save({"k": kiln.tensor(_values()).to(BF)}, tmp_path / "from_kiln.safetensors")
    back = st_torch.load_file(str(tmp_path / "from_kiln.safetensors"))["k"]
    assert back.dtype == torch.bfloat16
    np.testing.assert_array_equal(_bits(back), _bits(t))


def test_without_ml_dtypes_bfloat16_names_the_install_command():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import kiln\n"
            "assert kiln.float32 in kiln.dtypes.ALL_DTYPES and 'bfloat16' not in [d.name for d in kiln.dtypes.ALL_DTYPES]\n"
            "for make in (lambda: kiln.zeros(2, dtype=kiln.bfloat16), lambda: kiln.ones(2).to('bfloat16')):\n"
            "    try:\n"
            "        make()\n"
            "    except TypeError as e:\n"
            "        assert \"pip install 'kiln[bfloat16]'\" in str(e), e\n"
            "    else:\n"
            "        raise AssertionError('no error')\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr

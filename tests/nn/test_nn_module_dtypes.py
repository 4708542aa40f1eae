"""Module.float(), .double(), .half() and .bfloat16() cast a model as PyTorch's do.

Floating parameters, grads and buffers change dtype in place (the Parameter objects an
optimizer holds stay valid); integer buffers keep theirs. The cast values are PyTorch's bit
for bit, the cast model runs eagerly and compiled in its new dtype, and bfloat16 without the
optional ml_dtypes package names the install command.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln import nn

torch = pytest.importorskip("torch")

CASTS = {"float": "float32", "double": "float64", "half": "float16", "bfloat16": "bfloat16"}


def needs(method: str) -> None:
    if method == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="pip install 'kiln[bfloat16]' for Module.bfloat16()")


def kiln_net() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def torch_net():
    return torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def bits(x) -> np.ndarray:
    """The raw bytes of a kiln or torch tensor, as unsigned ints of its width."""
    if isinstance(x, kiln.Tensor):
        arr = x.detach().numpy()
    elif x.dtype == torch.bfloat16:
        arr = x.detach().view(torch.int16).numpy()
    else:
        arr = x.detach().numpy()
    return arr.view(f"u{arr.dtype.itemsize}")


@pytest.mark.parametrize("method", sorted(CASTS))
def test_cast_keeps_parameters_and_gives_torchs_dtypes_and_values(method):
    needs(method)
    k, t = kiln_net().double(), torch_net().double()
    k(kiln.randn(4, 5, dtype=kiln.float64)).sum().backward()    # grads and running stats to cast
    t.load_state_dict({n: torch.from_numpy(v.numpy().copy()) for n, v in k.state_dict().items()})
    params = list(k.parameters())
    opt = kiln.optim.SGD(k.parameters(), lr=0.1)
    assert getattr(k, method)() is k
    getattr(t, method)()
    assert [p is q for p, q in zip(params, k.parameters())] == [True] * len(params)
    tstate = t.state_dict()
    for name, value in k.state_dict().items():
        assert value.dtype.name == str(tstate[name].dtype).replace("torch.", ""), name
        np.testing.assert_array_equal(bits(value), bits(tstate[name]), err_msg=name)
    assert k[1].num_batches_tracked.dtype == kiln.int64                  # integer buffers keep their dtype
    assert all(p.grad.dtype.name == CASTS[method] for p in k.parameters())
    assert opt.param_groups[0]["params"][0] is k[0].weight


@pytest.mark.parametrize("method", sorted(CASTS))
def test_cast_model_runs_in_its_dtype_eager_and_compiled(method):
    needs(method)
    dtype = getattr(kiln, CASTS[method])
    model = getattr(kiln_net(), method)().eval()
    x = kiln.randn(6, 5).to(dtype)
    eager = model(x)
    assert eager.dtype == dtype
    compiled = kiln.compile(model)(x)
    assert compiled.dtype == dtype
    np.testing.assert_array_equal(bits(compiled), bits(eager))
    with pytest.raises(kiln.DTypeMismatchError):
        model(kiln.randn(6, 5, dtype=kiln.float64 if method != "double" else kiln.float32))


def test_bfloat16_model_matches_torch_within_bfloat16_rounding():
    needs("bfloat16")
    k, t = kiln_net().eval(), torch_net().eval()
    t.load_state_dict({n: torch.from_numpy(v.numpy().copy()) for n, v in k.state_dict().items()})
    k.bfloat16()
    t.bfloat16()
    x = np.random.default_rng(0).standard_normal((16, 5)).astype(np.float32)
    got = k(kiln.tensor(x).bfloat16()).float().detach().numpy()
    want = t(torch.tensor(x).bfloat16()).float().detach().numpy()
    np.testing.assert_allclose(got, want, rtol=2 ** -6, atol=2 ** -6 * np.abs(want).max())


def test_bfloat16_without_ml_dtypes_names_the_install_command():
    code = ("import sys; sys.modules['ml_dtypes'] = None\n"
            "import kiln\n"
            "m = kiln.nn.Linear(2, 2)\n"
            "try:\n"
            "    m.bfloat16()\n"
            "except TypeError as e:\n"
            "    assert \"pip install 'kiln[bfloat16]'\" in str(e), e\n"
            "else:\n"
            "    raise AssertionError('no error')\n"
            "assert m.weight.dtype == kiln.float32\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr

"""BatchNorm1d/2d against PyTorch: train-mode outputs and grads, running stats over steps, eval mode."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from nn_parity import assert_close, check_parity, copy_weights

torch = pytest.importorskip("torch")

CASES = [("BatchNorm1d", (8, 3)), ("BatchNorm1d", (4, 3, 5)), ("BatchNorm2d", (4, 3, 5, 6))]


def _pair(name: str, **kwargs):
    return getattr(nn, name)(3, **kwargs), getattr(torch.nn, name)(3, **kwargs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,shape", CASES)
def test_train_forward_and_grads(dtype, name, shape):
    kmod, tmod = _pair(name)
    with torch.no_grad():
        tmod.weight.copy_(torch.rand(3) + 0.5)
        tmod.bias.copy_(torch.randn(3))
    x = np.random.default_rng(0).standard_normal(shape) * 2 + 1
    check_parity(kmod, tmod, [x], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,shape", CASES)
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
def test_running_stats_match_after_steps_then_eval(dtype, name, shape, momentum):
    kmod, tmod = _pair(name, momentum=momentum)
    kmod.to(dtype)
    tmod.to(getattr(torch, dtype))
    rng = np.random.default_rng(1)
    for _ in range(4):
        x = rng.standard_normal(shape) * 3 - 2
        kmod(kiln.tensor(x, dtype=dtype))
        tmod(torch.tensor(x, dtype=getattr(torch, dtype)))
    for key, value in tmod.state_dict().items():
        assert_close(kmod.state_dict()[key], value, dtype, what=key)
    assert int(kmod.num_batches_tracked.item()) == 4

    kmod.eval()
    tmod.eval()
    x = rng.standard_normal(shape)
    kx = kiln.tensor(x, dtype=dtype, requires_grad=True)
    tx = torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=True)
    assert_close(kmod(kx), tmod(tx), dtype)
    kmod(kx).sum().backward()
    tmod(tx).sum().backward()
    assert_close(kx.grad, tx.grad, dtype, "grad")
    assert int(kmod.num_batches_tracked.item()) == 4  # eval leaves the stats alone


def test_eval_uses_running_stats_not_batch_stats():
    bn = nn.BatchNorm1d(2).eval()
    with kiln.no_grad():
        bn.running_mean.copy_(kiln.tensor([1.0, -1.0]))
        bn.running_var.copy_(kiln.tensor([4.0, 1.0]))
    out = bn(kiln.tensor([[3.0, 0.0]])).detach().numpy()
    np.testing.assert_allclose(out, [[2.0 / np.sqrt(4 + 1e-5), 1.0 / np.sqrt(1 + 1e-5)]], rtol=1e-6)


def test_running_stats_updates_do_not_touch_autograd():
    bn = nn.BatchNorm2d(3)
    out = bn(kiln.randn(2, 3, 4, 4, requires_grad=True))
    out.sum().backward()
    assert not bn.running_mean.requires_grad and bn.running_mean.grad_fn is None


def test_no_running_stats_and_no_affine():
    kmod, tmod = _pair("BatchNorm2d", track_running_stats=False, affine=False)
    assert list(kmod.state_dict()) == list(tmod.state_dict()) == []
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 2))
    kmod.eval()
    tmod.eval()  # still normalizes with batch statistics
    assert_close(kmod(kiln.tensor(x, dtype="float64")), tmod(torch.tensor(x)), "float64")


def test_bias_false():
    kmod, tmod = _pair("BatchNorm1d", bias=False)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    check_parity(kmod, tmod, [np.random.default_rng(0).standard_normal((5, 3))], "float64")


@pytest.mark.parametrize("name", ["BatchNorm1d", "BatchNorm2d"])
def test_state_dict_keys_and_shapes_match_pytorch(name):
    kmod, tmod = _pair(name)
    assert list(kmod.state_dict()) == list(tmod.state_dict())
    for key, value in tmod.state_dict().items():
        assert tuple(kmod.state_dict()[key].shape) == tuple(value.shape), key
    assert kmod.num_batches_tracked.dtype == kiln.int64
    copy_weights(kmod, tmod)


def test_input_checks():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input"):
        nn.BatchNorm2d(3)(kiln.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input"):
        nn.BatchNorm1d(3)(kiln.randn(2, 3, 4, 4))
    with pytest.raises(ValueError, match="expected 3 channels"):
        nn.BatchNorm1d(3)(kiln.randn(2, 4))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(kiln.randn(1, 3))


def test_reset_running_stats():
    bn = nn.BatchNorm1d(2)
    bn(kiln.randn(4, 2) + 3)
    bn.reset_running_stats()
    np.testing.assert_array_equal(bn.running_mean.numpy(), [0, 0])
    np.testing.assert_array_equal(bn.running_var.numpy(), [1, 1])
    assert bn.num_batches_tracked.item() == 0

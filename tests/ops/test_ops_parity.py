"""Forward and gradient parity with PyTorch CPU for every op in op_cases.CASES.

Each case runs in float32 and float64 on the same NumPy inputs in kiln and PyTorch;
outputs, output dtypes and the gradients of a random upstream gradient must agree
within tests/tolerances.py.
"""
from __future__ import annotations

from typing import Any

import zlib

import numpy as np
import pytest

import kiln
from op_cases import CASES, Case
from tolerances import tol

torch = pytest.importorskip("torch")

_FROM_F = {
    "relu", "leaky_relu", "gelu", "silu", "softplus", "softmax", "log_softmax", "dropout", "layer_norm",
    "batch_norm", "embedding", "one_hot", "conv1d", "conv2d", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "mse_loss",
    "l1_loss", "binary_cross_entropy_with_logits", "pad", "linear",
}


class TorchLib:
    """PyTorch under kiln's names: torch.nn.functional for the nn ops, torch for the rest."""

    def __getattr__(self, name: str) -> Any:
        if name in _FROM_F:
            return getattr(torch.nn.functional, name)
        return getattr(torch, name)


TL = TorchLib()


def _draw(c: Case, dtype: str) -> tuple[list[np.ndarray], list[bool]]:
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))  # stable across runs
    arrays = [spec.draw(rng, dtype) for spec in c.inputs]
    grads = [bool(getattr(spec, "grad", False)) and c.grad for spec in c.inputs]
    return arrays, grads


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def run_case(c: Case, dtype: str) -> None:
    arrays, grads = _draw(c, dtype)
    kx = [kiln.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    tx = [torch.tensor(a, requires_grad=g) for a, g in zip(arrays, grads)]
    kout = _flat(c.fn(kiln, *kx))
    tout = _flat((c.tfn or c.fn)(TL, *tx))
    assert len(kout) == len(tout), f"{c.id}: {len(kout)} outputs, PyTorch gives {len(tout)}"
    for i, (k, t) in enumerate(zip(kout, tout)):
        assert isinstance(k, kiln.Tensor), f"{c.id}: output {i} is {type(k).__name__}"
        assert tuple(k.shape) == tuple(t.shape), f"{c.id}: output {i} shape {tuple(k.shape)} vs {tuple(t.shape)}"
        assert k.dtype.name == str(t.dtype).replace("torch.", ""), f"{c.id}: output {i} dtype {k.dtype} vs {t.dtype}"
        np.testing.assert_allclose(k.detach().numpy(), t.detach().numpy(), **tol(dtype, "forward"),
                                   err_msg=f"{c.id}: output {i}")
    if not any(grads):
        return
    rng = np.random.default_rng(1)
    kroots, troots, kups, tups = [], [], [], []
    for k, t in zip(kout, tout):
        if t.requires_grad:
            u = rng.standard_normal(t.shape).astype(dtype)
            kroots.append(k), troots.append(t)
            kups.append(kiln.tensor(u)), tups.append(torch.tensor(u))
        else:
            assert not k.requires_grad or not k.dtype.is_floating_point, f"{c.id}: kiln output requires grad"
    if len(kroots) == 1:  # the common path: Tensor.backward with an upstream gradient
        kroots[0].backward(kups[0])
        troots[0].backward(tups[0])
        kg = [x.grad for x in kx]
        tg = [x.grad for x in tx]
    else:
        kwant = [x for x, g in zip(kx, grads) if g]
        twant = [x for x, g in zip(tx, grads) if g]
        kres = iter(kiln.autograd.grad(kroots, kwant, kups, allow_unused=True))
        tres = iter(torch.autograd.grad(troots, twant, tups, allow_unused=True))
        kg = [next(kres) if g else None for g in grads]
        tg = [next(tres) if g else None for g in grads]
    for i, (g, a, k, t) in enumerate(zip(grads, arrays, kg, tg)):
        if not g:
            continue
        kv = np.zeros(a.shape, dtype) if k is None else k.numpy()
        tv = np.zeros(a.shape, dtype) if t is None else t.numpy()
        if k is not None:
            assert k.dtype.name == dtype, f"{c.id}: grad {i} dtype {k.dtype}"
            assert not k.requires_grad, f"{c.id}: grad {i} requires grad without create_graph"
        assert kv.shape == a.shape, f"{c.id}: grad {i} shape {kv.shape} vs input {a.shape}"
        np.testing.assert_allclose(kv, tv, **tol(dtype, "grad"), err_msg=f"{c.id}: grad of input {i}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_parity(c: Case, dtype: str) -> None:
    with np.errstate(divide="ignore", invalid="ignore"):  # nan/inf cases compare like PyTorch, silently
        run_case(c, dtype)

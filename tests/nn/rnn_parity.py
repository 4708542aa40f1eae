"""Helpers for recurrent-layer tests: run a kiln and a torch module on the same data, compare everything."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import kiln
from kiln.nn.utils.rnn import PackedSequence
from nn_parity import assert_close, copy_weights


@pytest.fixture(autouse=True)
def torch_one_thread():
    """Run torch on one thread: its recurrent kernels are ~100x slower when threads fight for shared cores."""
    import torch  # noqa: PLC0415

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randn(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def flat(out: Any) -> list:
    """Tensors of a (nested) output, PackedSequences by their data, in order."""
    if isinstance(out, (tuple, list)) and not hasattr(out, "batch_sizes"):
        return [t for o in out for t in flat(o)]
    if isinstance(out, PackedSequence) or hasattr(out, "batch_sizes"):
        return [out.data]
    return [out]


def to_both(x: Any, dtype: str, grad: bool = True) -> tuple[Any, Any]:
    """A NumPy array (or a tuple of them, or None) as a kiln and a torch tensor."""
    import torch  # noqa: PLC0415

    if x is None:
        return None, None
    if isinstance(x, tuple):
        pairs = [to_both(v, dtype, grad) for v in x]
        return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    return (kiln.tensor(x, dtype=dtype, requires_grad=grad),
            torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=grad))


def leaves(x: Any) -> list:
    if x is None:
        return []
    if isinstance(x, tuple):
        return [v for item in x for v in leaves(item)]
    return [x]


def compare_modules(kmod: kiln.nn.Module, tmod: Any, k_args: tuple, t_args: tuple, dtype: str,
                    grad_leaves: tuple[list, list] = ([], []), seed: int = 0) -> None:
    """Forward both modules (weights copied from torch), compare all outputs, then all gradients.

    `grad_leaves` are the (kiln, torch) tensors whose gradients are compared too.
    """
    import torch  # noqa: PLC0415

    copy_weights(kmod, tmod)
    k_out = flat(kmod(*k_args))
    t_out = flat(tmod(*t_args))
    assert len(k_out) == len(t_out)
    rng = np.random.default_rng(seed)
    k_loss = t_loss = 0
    for i, (k, t) in enumerate(zip(k_out, t_out)):
        assert tuple(k.shape) == tuple(t.shape), (i, k.shape, t.shape)
        assert_close(k, t, dtype, "forward", f"output {i}")
        u = rng.standard_normal(tuple(t.shape))
        k_loss = k_loss + (k * kiln.tensor(u, dtype=dtype)).sum()
        t_loss = t_loss + (t * torch.tensor(u, dtype=getattr(torch, dtype))).sum()
    k_loss.backward()
    t_loss.backward()
    for i, (k, t) in enumerate(zip(*grad_leaves)):
        assert_close(k.grad, t.grad, dtype, "grad", f"grad of input {i}")
    k_params = dict(kmod.named_parameters())
    t_params = dict(tmod.named_parameters())
    assert sorted(k_params) == sorted(t_params)
    for name, tp in t_params.items():
        assert k_params[name].grad is not None, f"no grad for {name}"
        assert_close(k_params[name].grad, tp.grad, dtype, "grad", f"grad of {name}")

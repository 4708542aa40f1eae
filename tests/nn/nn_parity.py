"""Helpers for nn parity tests: copy torch weights into kiln modules and compare outputs and grads."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import kiln

# (rtol, atol) for whole layers; atol is scaled by the largest reference magnitude.
LAYER_TOLERANCES: dict[str, dict[str, tuple[float, float]]] = {
    "float32": {"forward": (1e-5, 1e-6), "grad": (1e-4, 1e-5)},
    "float64": {"forward": (1e-10, 1e-12), "grad": (1e-9, 1e-11)},
}


def assert_close(actual: Any, expected: Any, dtype: str, kind: str = "forward", what: str = "") -> None:
    """assert_allclose with the layer tolerance table; atol grows with the reference's scale."""
    actual = _np(actual)
    expected = _np(expected)
    rtol, atol = LAYER_TOLERANCES[dtype][kind]
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * scale, err_msg=what)


def _np(x: Any) -> np.ndarray:
    if isinstance(x, kiln.Tensor):
        return x.detach().numpy()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def copy_weights(kmod: kiln.nn.Module, tmod: Any) -> None:
    """Load a torch module's state dict into the kiln module (keys and shapes must match)."""
    kmod.load_state_dict({k: v.detach().numpy() for k, v in tmod.state_dict().items()})


def check_parity(kmod: kiln.nn.Module, tmod: Any, inputs: Sequence[Any], dtype: str, *,
                 grad_inputs: bool = True, seed: int = 0, kwargs: dict | None = None,
                 output_index: int | None = None) -> None:
    """Run both modules on the same inputs; compare outputs, input grads and parameter grads.

    `inputs` are NumPy arrays: floating ones are cast to `dtype` and (with `grad_inputs`)
    differentiated; integer ones pass through. `output_index` picks one output of a tuple.
    """
    import torch  # noqa: PLC0415

    tdt = getattr(torch, dtype)
    kmod.to(dtype)
    tmod.to(tdt)
    copy_weights(kmod, tmod)
    k_in, t_in = [], []
    for x in inputs:
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            k_in.append(kiln.tensor(x, dtype=dtype, requires_grad=grad_inputs))
            t_in.append(torch.tensor(x, dtype=tdt, requires_grad=grad_inputs))
        elif isinstance(x, np.ndarray):
            k_in.append(kiln.tensor(x))
            t_in.append(torch.tensor(x))
        else:
            k_in.append(x)
            t_in.append(x)
    kwargs = kwargs or {}
    k_out = kmod(*k_in, **_kiln_kwargs(kwargs, dtype))
    t_out = tmod(*t_in, **_torch_kwargs(kwargs, dtype))
    if output_index is not None:
        k_out, t_out = k_out[output_index], t_out[output_index]
    assert tuple(k_out.shape) == tuple(t_out.shape), (k_out.shape, t_out.shape)
    assert_close(k_out, t_out, dtype, "forward", "forward output")

    upstream = np.random.default_rng(seed).standard_normal(tuple(t_out.shape))
    (k_out * kiln.tensor(upstream, dtype=dtype)).sum().backward()
    (t_out * torch.tensor(upstream, dtype=tdt)).sum().backward()
    for i, (kx, tx) in enumerate(zip(k_in, t_in)):
        if isinstance(kx, kiln.Tensor) and kx.requires_grad:
            if tx.grad is None:  # the output does not depend on this input
                assert kx.grad is None or not np.any(kx.grad.numpy()), f"input {i}"
            else:
                assert_close(kx.grad, tx.grad, dtype, "grad", f"grad of input {i}")
    t_params = dict(tmod.named_parameters())
    k_params = dict(kmod.named_parameters())
    assert sorted(k_params) == sorted(t_params)
    for name, tp in t_params.items():
        kp = k_params[name]
        if tp.grad is None:
            assert kp.grad is None or not np.any(kp.grad.numpy()), name
            continue
        assert kp.grad is not None, f"no grad for parameter {name}"
        assert_close(kp.grad, tp.grad, dtype, "grad", f"grad of parameter {name}")


def _kiln_kwargs(kwargs: dict, dtype: str) -> dict:
    """NumPy keyword arguments (masks) as kiln tensors; floating ones in `dtype`."""
    return {k: kiln.tensor(v, dtype=dtype if v.dtype.kind == "f" else None) if isinstance(v, np.ndarray) else v
            for k, v in kwargs.items()}


def _torch_kwargs(kwargs: dict, dtype: str) -> dict:
    import torch  # noqa: PLC0415

    return {k: torch.tensor(v, dtype=getattr(torch, dtype) if v.dtype.kind == "f" else None)
            if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}

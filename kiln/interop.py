"""Zero-copy exchange with NumPy, PyTorch, JAX and other array libraries.

- ``kiln.from_numpy(a)`` / ``t.numpy()``: share memory with a NumPy array.
- ``np.asarray(t)``: the ``__array__`` protocol (no copy; ``np.array(t)`` copies).
- ``t.__dlpack__()`` / ``t.__dlpack_device__()`` and ``kiln.from_dlpack(obj)``: the
  DLPack protocol, so ``torch.from_dlpack(t)``, ``jax.dlpack.from_dlpack(t)`` and
  ``kiln.from_dlpack(torch_tensor)`` share memory where the layout allows.

Only CPU tensors can be exchanged for now.

>>> t = kiln.from_dlpack(torch.arange(4.0))   # shares torch's memory
>>> u = torch.from_dlpack(t)                  # and back
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import ALL_DTYPES
from .ops import primitive
from .tensor import Tensor, _to_host, from_numpy

__all__ = ["from_dlpack", "DLPACK_CPU"]

DLPACK_CPU = 1  # DLDeviceType kDLCPU
_DEVICE_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm",
                 13: "CUDA managed", 14: "oneAPI"}
_KILN_NP_DTYPES = {d.np for d in ALL_DTYPES}


def from_dlpack(obj: Any) -> Tensor:
    """A kiln tensor sharing memory with any DLPack producer (NumPy array, torch/JAX/CuPy tensor).

    The data is not copied when its dtype is one kiln has (bool, int32, int64,
    float16/32/64); other dtypes are converted (a copy). Strided views stay views.

    >>> x = torch.ones(2, 3)
    >>> t = kiln.from_dlpack(x); t.add_(1.0)   # x is now all 2s
    """
    if isinstance(obj, Tensor):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"kiln.from_dlpack expects an object with __dlpack__ (a NumPy array, a torch, "
                        f"JAX or CuPy tensor), got {type(obj).__name__}; pass the tensor itself, not a "
                        "DLPack capsule")
    if hasattr(obj, "__dlpack_device__"):
        device_type, device_id = obj.__dlpack_device__()
        if int(device_type) != DLPACK_CPU:
            name = _DEVICE_NAMES.get(int(device_type), f"type {int(device_type)}")
            raise BufferError(f"kiln.from_dlpack: the tensor lives on a {name} device (id {device_id}); kiln "
                              "exchanges CPU tensors only for now. Move it to the CPU first (torch: "
                              "x.cpu(), JAX: jax.device_put(x, jax.devices('cpu')[0]))")
    try:
        array = np.from_dlpack(obj)
    except (BufferError, TypeError, RuntimeError) as exc:
        raise BufferError(f"kiln.from_dlpack: could not import {type(obj).__name__} via DLPack: {exc}. "
                          "A tensor that requires grad must be detached first (torch: x.detach())") from exc
    if array.dtype not in _KILN_NP_DTYPES:
        array = np.asarray(array)  # from_numpy converts it to the nearest kiln dtype (a copy)
    return from_numpy(array)


# ---- protocol methods, attached to Tensor below ----------------------------------------
def _host_array(t: Tensor, why: str) -> np.ndarray:
    """The tensor's NumPy array; tells an active tracer that Python reads the data."""
    tracer = primitive.trace_state.tracer
    if tracer is not None:
        tracer.on_concretize(t, why)
    return _to_host(t._data)


def _check_exportable(t: Tensor) -> None:
    if t._device.type != "cpu":
        raise BufferError(f"Tensor.__dlpack__: the tensor is on {t._device}; kiln exchanges CPU tensors "
                          "only for now. Move it first with t.cpu()")
    if t.requires_grad:
        raise BufferError("Tensor.__dlpack__: can't export a tensor that requires grad (the consumer would "
                          "bypass autograd); use t.detach() first")


def tensor_dlpack(self: Tensor, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                  dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """Export the data as a DLPack capsule (delegates to the NumPy array's ``__dlpack__``)."""
    _check_exportable(self)
    if stream is not None:
        raise BufferError(f"Tensor.__dlpack__: stream must be None for a CPU tensor, got {stream!r}")
    kwargs: dict[str, Any] = {}
    if max_version is not None:
        kwargs["max_version"] = max_version
    if dl_device is not None:
        kwargs["dl_device"] = dl_device
    if copy is not None:
        kwargs["copy"] = copy
    return _host_array(self, "__dlpack__").__dlpack__(**kwargs)


def tensor_dlpack_device(self: Tensor) -> tuple[int, int]:
    """``(device_type, device_id)`` in DLPack terms: ``(1, 0)`` for the CPU."""
    if self._device.type != "cpu":
        raise BufferError(f"Tensor.__dlpack_device__: the tensor is on {self._device}; kiln exchanges CPU "
                          "tensors only for now. Move it first with t.cpu()")
    return (DLPACK_CPU, 0)


Tensor.__dlpack__ = tensor_dlpack  # type: ignore[attr-defined]
Tensor.__dlpack_device__ = tensor_dlpack_device  # type: ignore[attr-defined]

"""Copies between devices: `transfer` copies a tensor to another device with autograd (the gradient flows back to
the source device), and `to_gpu` moves a tree of tensors to the GPU (``auto_device=True``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import late_bound
from ..autograd import Node, _state
from ..device import Device, get_device
from ..trace_state import trace_state
from .primitive import Primitive


def to_gpu(tree: Any) -> Any:
    """`tree` (a tensor, or tuples, lists and dicts of them) with every CPU tensor copied to the GPU.

    What ``auto_device=True`` does to a compiled function's arguments when a GPU is present.
    """
    if isinstance(tree, late_bound.Tensor):
        return transfer(tree, get_device("cuda")) if tree._device.type == "cpu" else tree
    if isinstance(tree, dict):
        return {k: to_gpu(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        return type(tree)(to_gpu(v) for v in tree)
    return tree


def transfer(x: Any, device: Device) -> Any:
    """Copy tensor `x` to `device`; with autograd, the gradient is copied back to x's device.

    A transfer inside a compiled function raises RuntimeError: a compiled plan runs on one
    device, so move the inputs before the call.
    """
    if trace_state.tracer is not None:
        raise RuntimeError(f"moving a tensor from {x.device} to {device} inside a compiled function is not "
                           "supported: the plan runs on one device; move the inputs before calling it (or pass "
                           "auto_device=True to kiln.compile), and the module with model.to(device)")
    out = late_bound.Tensor._wrap(_copy_array(x._data, device), device)
    if x.requires_grad and _state.enabled:
        out.requires_grad = True
        out._node = Node(_DEVICE_COPY, (x,), {"device": device}, out)
    return out


def _copy_array(data: Any, device: Device) -> Any:
    if device.type == "cpu":
        return data.get() if hasattr(data, "get") and not isinstance(data, np.ndarray) else np.array(data)
    xp = device.xp
    with xp.cuda.Device(device.index or 0):
        return xp.asarray(data)


class DeviceCopy(Primitive):
    """A copy to another device; not in the primitive registry, since traces refuse transfers."""

    def __init__(self) -> None:
        self.name = "device_copy"

    def abstract(self, x: Any, *, device: Device) -> Any:
        return x

    def kernel(self, xp: Any, x: Any, *, device: Device) -> Any:
        return _copy_array(x, device)

    def vjp(self, g: Any, inputs: tuple, node: Any, *, device: Device) -> tuple:
        return (transfer(g, inputs[0].device),)


_DEVICE_COPY = DeviceCopy()

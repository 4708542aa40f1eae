"""Devices: where a tensor lives, and the array module (`xp`) that computes on it.

``"cpu"`` computes with NumPy and ``"cuda"`` (alias ``"gpu"``) with CuPy. `array_module`
says which module serves a device, `check_same_device` gives the error for an op whose
tensors live on two devices, and `transfer` copies a tensor to another device with
autograd (the gradient flows back to the source device).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from .dtypes import _BY_NAME
from .trace_state import trace_state


class Device:
    """A device such as ``kiln.device("cpu")``. ``xp`` is its array module (numpy or cupy)."""

    __slots__ = ("type", "index", "_xp")

    def __init__(self, type: str, index: int | None = None):
        self.type = type
        self.index = index
        self._xp = np if type == "cpu" else None

    @property
    def xp(self) -> ModuleType:
        xp = self._xp
        if xp is None:
            xp = self._xp = _cuda_module()
        return xp

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = _parse(other)
        return isinstance(other, Device) and self.type == other.type and (self.index or 0) == (other.index or 0)

    def __hash__(self) -> int:
        return hash((self.type, self.index or 0))

    def __repr__(self) -> str:
        return f"device(type='{self.type}')" if self.index is None else f"device(type='{self.type}', index={self.index})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


CPU = Device("cpu")

SUPPORTED = ("cpu", "cuda")
ALIASES = {"gpu": "cuda"}  # other names users write for a supported device
# Device types PyTorch knows that kiln does not run on: named in the error instead of "unknown".
UNSUPPORTED = {
    "mps": "Apple's Metal (MPS)", "xpu": "Intel GPUs (XPU)", "xla": "XLA/TPU devices", "hip": "AMD GPUs (HIP)",
    "meta": "meta tensors (shapes without data)", "vulkan": "Vulkan", "ipu": "Graphcore IPUs",
    "hpu": "Habana HPUs", "mtia": "MTIA accelerators", "privateuseone": "custom backends",
}


class UnsupportedDeviceError(ValueError, RuntimeError):
    """A device PyTorch knows but kiln does not run on, such as "mps".

    A ValueError like any bad device name, and a RuntimeError like PyTorch's error for a
    backend that is not there, so either ``except`` clause catches it.
    """


def _parse(spec: str) -> Device:
    name, _, index = spec.strip().partition(":")
    name = ALIASES.get(name, name)
    if name in UNSUPPORTED:
        raise UnsupportedDeviceError(f"device {spec!r} is not supported: kiln runs on 'cpu' and 'cuda' (NVIDIA GPUs through "
                           f"CuPy), not on {UNSUPPORTED[name]}; use device='cpu'")
    if name not in SUPPORTED or (index and not index.isdigit()):
        raise ValueError(f"unknown device {spec!r}: expected 'cpu' or 'cuda[:N]' / 'gpu[:N]' (or, to cast, a dtype name such "
                         "as 'float32')")
    return Device(name, int(index) if index else None)


_DTYPE_PREFIXES = ("float", "int", "uint", "bool", "bfloat", "complex")


def is_device_spec(arg: Any) -> bool:
    """Whether a positional argument of ``.to(...)`` names a device rather than a dtype.

    A Device, a torch.device, or a string that is neither a dtype name nor starts like one
    (so ``"mps"`` or ``"gpu"`` gets the device error that names it, not "unknown dtype").
    """
    if isinstance(arg, Device) or type(arg).__name__ == "device":
        return True
    if not isinstance(arg, str):
        return False
    if arg in _BY_NAME or arg.startswith(_DTYPE_PREFIXES):  # "float8" is a wrong dtype, not a device
        return False
    return arg not in ("bf16", "half", "double", "long")


def get_device(spec: Any) -> Device:
    """Parse a device given as a Device, a string ("cpu", "cuda:0") or None (the CPU)."""
    if spec is None:
        return CPU
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        device = _parse(spec)
        if device.type == "cpu":
            return CPU
        _cuda_module()  # raises a clear error when CUDA is not usable
        return device
    text = str(spec)
    if type(spec).__name__ == "device" or text.startswith(("cpu", "cuda")):  # e.g. a torch.device
        return get_device(text)
    raise ValueError(f"unknown device {spec!r}: expected 'cpu', 'cuda[:N]' or a kiln.device")


class DeviceUnavailableError(RuntimeError):
    """A GPU device was asked for, and CuPy or a usable NVIDIA GPU is missing."""


class DeviceMismatchError(RuntimeError):
    """One op got tensors on two devices (PyTorch raises RuntimeError there too)."""


_gpu_probe: list = []  # [(count, reason)] once probed: CuPy's answer does not change within a process


def _probe_gpu() -> tuple[int, str]:
    """(number of GPUs CuPy sees, why there are none: "" when there are some)."""
    if _gpu_probe:
        return _gpu_probe[0]
    try:
        import cupy  # noqa: PLC0415
    except ImportError:
        result = (0, "CuPy is not installed")
    else:
        try:
            count = int(cupy.cuda.runtime.getDeviceCount())
            result = (count, "" if count else f"CuPy {cupy.__version__} is installed but sees no GPU")
        except Exception as exc:  # noqa: BLE001 - no driver, no device, a driver too old: all mean "none"
            result = (0, f"CuPy {cupy.__version__} is installed but found no usable GPU ({exc})")
    _gpu_probe.append(result)
    return result


def _cuda_module() -> ModuleType:
    """CuPy, once it is known to see a GPU; else DeviceUnavailableError saying what is missing."""
    count, reason = _probe_gpu()
    if not count:
        raise DeviceUnavailableError(
            f"device 'cuda' needs an NVIDIA GPU through CuPy, and {reason}; use device='cpu' (check "
            "kiln.cuda.is_available() first), or install kiln[cuda] (pip install cupy-cuda12x) on a machine "
            "with an NVIDIA GPU and driver")
    import cupy  # noqa: PLC0415

    return cupy


def cuda_is_available() -> bool:
    """True when CuPy is installed and sees at least one GPU."""
    return _probe_gpu()[0] > 0


def gpu_count() -> int:
    """How many GPUs CuPy sees (0 without CuPy, a driver or a GPU)."""
    return _probe_gpu()[0]


def array_module(device: Any) -> ModuleType:
    """The array module that computes on `device`: numpy for the CPU, cupy for a GPU.

    >>> from kiln.device import array_module
    >>> array_module("cpu") is numpy
    True

    A GPU device without CuPy or a GPU raises DeviceUnavailableError saying which is missing.
    """
    return get_device(device).xp


def array_module_of(array: Any) -> ModuleType:
    """The array module an array belongs to (numpy, or cupy for a cupy.ndarray), without importing CuPy."""
    if type(array).__module__.partition(".")[0] == "cupy":
        return _cuda_module()
    return np


def to_gpu(tree: Any) -> Any:
    """`tree` (a tensor, or tuples, lists and dicts of them) with every CPU tensor copied to the GPU.

    What ``auto_device=True`` does to a compiled function's arguments when a GPU is present.
    """
    from .tensor import Tensor  # noqa: PLC0415 - kiln.tensor imports this module

    if isinstance(tree, Tensor):
        return transfer(tree, get_device("cuda")) if tree._device.type == "cpu" else tree
    if isinstance(tree, dict):
        return {k: to_gpu(v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)) and not hasattr(tree, "_fields"):
        return type(tree)(to_gpu(v) for v in tree)
    return tree


def check_same_device(op: str, tensors: Any) -> None:
    """Raise DeviceMismatchError when `tensors` do not all live on one device, naming both."""
    first = None
    for t in tensors:
        device = t._device
        if first is None:
            first = device
        elif device != first:
            raise DeviceMismatchError(
                f"{op}: expected all tensors on one device, got one on {first} and one on {device}; move them "
                f"to one device first, e.g. x.to('{first}') or x.to('{device}')")


def transfer(x: Any, device: Device) -> Any:
    """Copy tensor `x` to `device`; with autograd, the gradient is copied back to x's device.

    A transfer inside a compiled function raises RuntimeError: a compiled plan runs on one
    device, so move the inputs before the call.
    """
    from .autograd import Node, _state  # noqa: PLC0415 - kiln.autograd imports kiln.device
    from .tensor import Tensor  # noqa: PLC0415

    if trace_state.tracer is not None:
        raise RuntimeError(f"moving a tensor from {x.device} to {device} inside a compiled function is not "
                           "supported: the plan runs on one device; move the inputs before calling it (or pass "
                           "auto_device=True to kiln.compile), and the module with model.to(device)")
    out = Tensor._wrap(_copy_array(x._data, device), device)
    if x.requires_grad and _state.enabled:
        out.requires_grad = True
        out._node = Node(_device_copy(), (x,), {"device": device}, out)
    return out


def _copy_array(data: Any, device: Device) -> Any:
    if device.type == "cpu":
        return data.get() if hasattr(data, "get") and not isinstance(data, np.ndarray) else np.array(data)
    xp = device.xp
    with xp.cuda.Device(device.index or 0):
        return xp.asarray(data)


_copy_prim: list = []


def _device_copy() -> Any:
    """The device-copy primitive of `transfer`'s autograd nodes, made on first use (kiln.ops imports this module)."""
    if _copy_prim:
        return _copy_prim[0]
    from .ops.primitive import Primitive  # noqa: PLC0415

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

    _copy_prim.append(DeviceCopy())
    return _copy_prim[0]

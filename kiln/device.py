"""Devices: where a tensor lives, and the array module (`xp`) that computes on it.

``"cpu"`` computes with NumPy and ``"cuda"`` (alias ``"gpu"``) with CuPy. `array_module`
says which module serves a device, and `check_same_device` gives the error for an op whose
tensors live on two devices. Copies between devices are a primitive (kiln/ops/device_copy.py).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from .dtypes import _BY_NAME


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

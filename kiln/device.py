"""Devices: where a tensor lives, and the array module (`xp`) that computes on it."""
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
    if name in UNSUPPORTED:
        raise UnsupportedDeviceError(f"device {spec!r} is not supported: kiln runs on 'cpu' and 'cuda' (NVIDIA GPUs through "
                           f"CuPy), not on {UNSUPPORTED[name]}; use device='cpu'")
    if name not in SUPPORTED or (index and not index.isdigit()):
        raise ValueError(f"unknown device {spec!r}: expected 'cpu' or 'cuda[:N]' (or, to cast, a dtype name such "
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


def _cuda_module() -> ModuleType:
    try:
        import cupy  # noqa: PLC0415
    except ImportError as exc:
        raise RuntimeError(
            "device 'cuda' needs CuPy and an NVIDIA GPU: install kiln[cuda] "
            "(pip install cupy-cuda12x), or use device='cpu'"
        ) from exc
    return cupy


def cuda_is_available() -> bool:
    """True when CuPy is installed and sees at least one GPU."""
    try:
        import cupy  # noqa: PLC0415

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False

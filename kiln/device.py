"""Devices: where a tensor lives, and the array module (`xp`) that computes on it."""
from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np


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


def _parse(spec: str) -> Device:
    name, _, index = spec.partition(":")
    if name not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ValueError(f"unknown device {spec!r}: expected 'cpu' or 'cuda[:N]'")
    return Device(name, int(index) if index else None)


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
    if text.startswith(("cpu", "cuda")):
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

"""`kiln.accelerator`: device-agnostic queries, as ``torch.accelerator`` (PyTorch 2.6+).

kiln's one accelerator is CUDA (NVIDIA GPUs through CuPy). Without a usable GPU it
answers as a CPU-only PyTorch build does: ``is_available()`` is False,
``current_accelerator()`` None, ``device_count()`` 0, and the calls that need a device
(``current_device_index``, ``set_device_index``, ``synchronize``) raise RuntimeError.

>>> device = kiln.accelerator.current_accelerator().type if kiln.accelerator.is_available() else "cpu"
"""
from __future__ import annotations

import contextlib
import warnings
from types import ModuleType
from typing import Any, Iterator

from .device import Device, DeviceUnavailableError, _cuda_module, gpu_count

__all__ = ["current_accelerator", "current_device_idx", "current_device_index", "device_count", "device_index",
           "empty_cache", "is_available", "set_device_idx", "set_device_index", "synchronize"]


def is_available() -> bool:
    """True when an accelerator (a GPU CuPy can use) is there.

    >>> kiln.accelerator.is_available()  # on a machine without a GPU
    False
    """
    return gpu_count() > 0


def current_accelerator(check_available: bool = False) -> Device | None:
    """The accelerator's device type, ``device(type='cuda')``, or None when there is none.

    kiln knows only CUDA, so without a usable GPU there is no accelerator whatever
    `check_available` says.

    >>> acc = kiln.accelerator.current_accelerator()
    >>> acc.type if acc is not None else "cpu"
    'cpu'
    """
    return Device("cuda") if is_available() else None


def device_count() -> int:
    """How many accelerator devices there are (0 without a GPU)."""
    return gpu_count()


def _cupy(what: str) -> ModuleType:
    if not is_available():
        raise DeviceUnavailableError(
            f"kiln.accelerator.{what}() cannot access an accelerator device when none is available; check "
            "kiln.accelerator.is_available() first and use the CPU without one")
    return _cuda_module()


def _index_of(device: Any, what: str) -> int:
    """The device index that `device` (an int, "cuda:1", a kiln or torch device) names."""
    if isinstance(device, bool):
        raise TypeError(f"kiln.accelerator.{what}() expects a device index (an int) or a device such as "
                        f"'cuda:0', got {device!r}")
    if isinstance(device, int):
        index = device
    else:
        text = str(device) if not isinstance(device, Device) else f"{device.type}:{device.index or 0}"
        kind, _, number = text.partition(":")
        if kind not in ("cuda", "gpu") or (number and not number.isdigit()):
            raise ValueError(f"kiln.accelerator.{what}() expects an index or a 'cuda[:N]' device, got {device!r}; "
                             "the accelerator of kiln is CUDA")
        index = int(number or 0)
    count = device_count()
    if not 0 <= index < count:
        raise ValueError(f"kiln.accelerator.{what}(): device index {index} is out of range: there are {count} "
                         f"device(s), indexed 0 to {count - 1}")
    return index


def current_device_index() -> int:
    """The index of the current accelerator device."""
    return int(_cupy("current_device_index").cuda.runtime.getDevice())


def set_device_index(device: Any, /) -> None:
    """Make `device` (an index, or a device such as ``"cuda:1"``) the current accelerator device; None does nothing."""
    cupy = _cupy("set_device_index")
    if device is not None:
        cupy.cuda.runtime.setDevice(_index_of(device, "set_device_index"))


def current_device_idx() -> int:
    """Deprecated name of `current_device_index` (a FutureWarning, as in PyTorch)."""
    warnings.warn("kiln.accelerator.current_device_idx is deprecated: use current_device_index instead",
                  FutureWarning, stacklevel=2)
    return current_device_index()


def set_device_idx(device: Any, /) -> None:
    """Deprecated name of `set_device_index` (a FutureWarning, as in PyTorch)."""
    warnings.warn("kiln.accelerator.set_device_idx is deprecated: use set_device_index instead",
                  FutureWarning, stacklevel=2)
    set_device_index(device)


@contextlib.contextmanager
def device_index(device: Any, /) -> Iterator[None]:
    """Make `device` current inside the block, then restore the previous one; None does nothing.

    >>> with kiln.accelerator.device_index(None):
    ...     pass
    """
    if device is None:
        yield
        return
    previous = current_device_index()
    set_device_index(device)
    try:
        yield
    finally:
        set_device_index(previous)


def synchronize(device: Any = None, /) -> None:
    """Wait until all work queued on `device` (default: the current one) is done."""
    cupy = _cupy("synchronize")
    if device is None:
        cupy.cuda.runtime.deviceSynchronize()
        return
    with cupy.cuda.Device(_index_of(device, "synchronize")):
        cupy.cuda.runtime.deviceSynchronize()


def empty_cache() -> None:
    """Give cached accelerator memory back to the driver (RuntimeError without an accelerator, as in PyTorch)."""
    _cupy("empty_cache").get_default_memory_pool().free_all_blocks()

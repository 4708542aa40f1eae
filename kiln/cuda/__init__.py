"""`kiln.cuda`: is a GPU usable, how many, and seeding, as ``torch.cuda`` (CUDA comes through CuPy).

Written for device-agnostic scripts: everything here answers on a machine without a GPU
(``is_available()`` is False, ``device_count()`` 0, seeding does nothing), and calls that
need a GPU (``current_device``, ``synchronize``, ``get_device_name``) raise RuntimeError
with the fix.

>>> device = "cuda" if kiln.cuda.is_available() else "cpu"
>>> kiln.manual_seed(0); kiln.cuda.manual_seed_all(0)
"""
from __future__ import annotations

from typing import Any

from ..device import _cuda_module, cuda_is_available, gpu_count
from . import amp

__all__ = ["amp", "current_device", "device_count", "empty_cache", "get_device_name", "is_available",
           "is_bf16_supported", "manual_seed", "manual_seed_all", "synchronize"]


def is_available() -> bool:
    """True when CuPy is installed and sees at least one NVIDIA GPU."""
    return cuda_is_available()


def device_count() -> int:
    """How many GPUs CuPy sees (0 without CuPy or a GPU)."""
    return gpu_count()


def _check_seed(seed: Any, where: str) -> int:
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise TypeError(f"kiln.cuda.{where} expects an int seed, got {type(seed).__name__}")
    return int(seed)


def manual_seed(seed: int) -> None:
    """Seed the random stream of the GPU; without a GPU it does nothing (as in PyTorch).

    kiln draws random numbers for every device from one counter-based stream, so with a
    GPU this is ``kiln.manual_seed(seed)``.
    """
    seed = _check_seed(seed, "manual_seed")
    if cuda_is_available():
        from ..random import manual_seed as seed_stream  # noqa: PLC0415

        seed_stream(seed)


def manual_seed_all(seed: int) -> None:
    """Seed the random streams of all GPUs: the same as `manual_seed` (kiln has one stream for every device)."""
    manual_seed(_check_seed(seed, "manual_seed_all"))


def _need_gpu(what: str) -> Any:
    if not cuda_is_available():
        raise RuntimeError(f"kiln.cuda.{what}() needs an NVIDIA GPU and CuPy, and none is available; guard the "
                           "call with kiln.cuda.is_available() (install kiln[cuda] on a machine with a GPU)")
    return _cuda_module()


def current_device() -> int:
    """The index of the current GPU."""
    return int(_need_gpu("current_device").cuda.runtime.getDevice())


def synchronize(device: Any = None) -> None:
    """Wait until all work queued on the GPU is done."""
    _need_gpu("synchronize").cuda.runtime.deviceSynchronize()


def get_device_name(device: Any = None) -> str:
    """The GPU's name, e.g. ``"NVIDIA H100 80GB HBM3"``."""
    cupy = _need_gpu("get_device_name")
    if device is None:
        index = 0
    elif isinstance(device, int):
        index = device
    else:
        index = getattr(device, "index", None) or int(str(device).partition(":")[2] or 0)
    name = cupy.cuda.runtime.getDeviceProperties(index)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def empty_cache() -> None:
    """Give cached GPU memory back to the driver; nothing to do without a GPU."""
    if cuda_is_available():
        _cuda_module().get_default_memory_pool().free_all_blocks()


def is_bf16_supported() -> bool:
    """False: kiln's CUDA kernels don't compute in bfloat16 (and without a GPU there is nothing to ask)."""
    return False

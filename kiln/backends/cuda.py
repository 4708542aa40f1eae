"""``torch.backends.cuda`` flags: TF32 and attention-kernel switches, stored without effect in kiln.

>>> kiln.backends.cuda.matmul.allow_tf32 = True
>>> kiln.backends.cuda.enable_flash_sdp(False)
"""
from __future__ import annotations

from ..device import cuda_is_available


class _MatmulFlags:
    """``backends.cuda.matmul``: reduced-precision switches for GPU matmuls (kiln keeps full precision)."""

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True

    def __repr__(self) -> str:
        return f"<kiln.backends.cuda.matmul allow_tf32={self.allow_tf32}>"


matmul = _MatmulFlags()
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}


def is_built() -> bool:
    """Whether kiln can run on CUDA here (CuPy and a GPU are present)."""
    return cuda_is_available()


def enable_flash_sdp(enabled: bool) -> None:
    _sdp["flash"] = bool(enabled)


def flash_sdp_enabled() -> bool:
    return _sdp["flash"]


def enable_mem_efficient_sdp(enabled: bool) -> None:
    _sdp["mem_efficient"] = bool(enabled)


def mem_efficient_sdp_enabled() -> bool:
    return _sdp["mem_efficient"]


def enable_math_sdp(enabled: bool) -> None:
    _sdp["math"] = bool(enabled)


def math_sdp_enabled() -> bool:
    return _sdp["math"]


def enable_cudnn_sdp(enabled: bool) -> None:
    _sdp["cudnn"] = bool(enabled)


def cudnn_sdp_enabled() -> bool:
    return _sdp["cudnn"]

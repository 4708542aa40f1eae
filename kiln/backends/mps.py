"""``torch.backends.mps``: kiln does not run on Apple's Metal, so MPS is never available."""
from __future__ import annotations


def is_available() -> bool:
    """False: kiln runs on the CPU and on NVIDIA GPUs (CUDA), not on MPS."""
    return False


def is_built() -> bool:
    """False: kiln has no MPS backend."""
    return False

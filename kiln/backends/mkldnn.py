"""``torch.backends.mkldnn``: kiln does not use oneDNN; the flag is stored without effect."""
from __future__ import annotations

enabled = True


def is_available() -> bool:
    """False: kiln's CPU kernels are NumPy, BLAS and its own generated C."""
    return False

"""The libraries kiln is compared with. Each is optional: a missing one skips its column."""
from __future__ import annotations

from types import ModuleType


def import_torch(num_threads: int | None = None) -> ModuleType | None:
    """PyTorch if importable (with `num_threads` intra-op threads), else None."""
    try:
        import torch  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - a broken install is as good as none here
        return None
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    return torch

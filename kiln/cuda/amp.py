"""``torch.cuda.amp`` spellings: `autocast` and `GradScaler` for device "cuda" (see `kiln.amp`)."""
from __future__ import annotations

from typing import Any

from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast

__all__ = ["GradScaler", "autocast"]


class autocast(_autocast):  # noqa: N801 - PyTorch's name
    """``kiln.autocast("cuda", ...)``: the older spelling ``torch.cuda.amp.autocast(enabled=...)``."""

    def __init__(self, enabled: bool = True, dtype: Any = "float16", cache_enabled: bool = True):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """``kiln.amp.GradScaler("cuda", ...)``: the older spelling ``torch.cuda.amp.GradScaler(enabled=...)``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)

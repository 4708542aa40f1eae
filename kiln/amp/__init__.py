"""Mixed precision, PyTorch-style: `autocast` regions and the `GradScaler` (see each for what kiln does).

>>> scaler = kiln.amp.GradScaler("cpu", enabled=use_amp)
>>> with kiln.autocast(device_type="cpu", dtype=kiln.bfloat16, enabled=use_amp):
...     loss = loss_fn(model(x), y)
>>> scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
"""
from .autocast_mode import autocast, get_autocast_dtype, is_autocast_enabled
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]

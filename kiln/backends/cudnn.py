"""``torch.backends.cudnn`` flags: kiln does not use cuDNN, so they are stored and have no effect.

>>> import kiln.backends.cudnn as cudnn
>>> cudnn.benchmark = True
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: kiln's GPU kernels are its own (through CuPy), not cuDNN's."""
    return False


def version() -> None:
    """None: there is no cuDNN in kiln."""
    return None


@contextlib.contextmanager
def flags(enabled: bool = False, benchmark: bool = False, deterministic: bool = False,  # noqa: PLR0913
          allow_tf32: bool = True, **_: Any) -> Iterator[None]:
    """Set the flags for a ``with`` block, restoring them after (they change nothing in kiln)."""
    module = globals()
    saved = {k: module[k] for k in ("enabled", "benchmark", "deterministic", "allow_tf32")}
    module.update(enabled=enabled, benchmark=benchmark, deterministic=deterministic, allow_tf32=allow_tf32)
    try:
        yield
    finally:
        module.update(saved)

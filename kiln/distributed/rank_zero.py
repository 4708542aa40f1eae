"""Rank-0-only helpers: print, log and save once per job rather than once per rank.

>>> dist.print0(f"step {step}: loss {loss.item():.4f}")
>>> dist.save_on_rank0({"model": ddp.module.state_dict()}, "ckpt.safetensors")
"""
from __future__ import annotations

import logging
import os
from typing import Any

from . import process_group


def is_rank0() -> bool:
    """True on rank 0, and in a process that has not joined a process group."""
    return not process_group.is_initialized() or process_group.get_rank() == 0


def print0(*args: Any, **kwargs: Any) -> None:
    """`print` on rank 0 only (flushed, so lines from a launcher appear in order)."""
    if is_rank0():
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


class _RankZeroFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return is_rank0()


def get_logger(name: str = "kiln.distributed") -> logging.Logger:
    """A logger whose records are emitted on rank 0 only (its handlers stay yours to choose)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _RankZeroFilter) for f in logger.filters):
        logger.addFilter(_RankZeroFilter())
    return logger


def save_on_rank0(obj: Any, f: str | os.PathLike, barrier: bool = True) -> None:
    """`kiln.save(obj, f)` on rank 0 only; with `barrier`, every rank returns once the file exists."""
    if is_rank0():
        from ..io import save  # noqa: PLC0415

        save(obj, f)
    if barrier and process_group.is_initialized():
        process_group.barrier()

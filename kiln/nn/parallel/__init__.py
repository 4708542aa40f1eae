"""Parallel wrappers: `DistributedDataParallel` (data parallel over `kiln.distributed` ranks)."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]

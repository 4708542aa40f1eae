"""Parallel wrappers: `DistributedDataParallel` (data parallel over `kiln.distributed` ranks) and
`DataParallel` (PyTorch's single-process wrapper, run on one device)."""
from .data_parallel import DataParallel
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]

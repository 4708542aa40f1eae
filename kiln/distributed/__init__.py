"""Data-parallel training across processes and machines, on MPI (mpi4py; MPICH's pip wheel gives mpiexec).

PyTorch's names: a process group, in-place collectives on kiln tensors, `DistributedDataParallel`
and `DistributedSampler`. A process started without an MPI launcher is a world of one, where all
of this works without mpi4py. Launch several ranks with::

    python -m kiln.distributed.run -n 4 train.py --lr 0.1
    python -m kiln.distributed.run -n 16 --hostfile hosts train.py

>>> import kiln.distributed as dist
>>> dist.init_process_group()
>>> model = dist.DistributedDataParallel(kiln.compile(model))
>>> sampler = dist.DistributedSampler(dataset)

Install the extra with ``pip install "kiln[distributed]"``. See docs/distributed.md.
"""
from ..nn.parallel import DistributedDataParallel
from .agreement import CollectiveMismatchError
from .collectives import ReduceOp, Work, all_gather, all_reduce, broadcast, reduce_scatter
from .mpi import EXTRA_HINT
from .process_group import (ProcessGroup, barrier, destroy_process_group, get_rank, get_world_size,
                            init_process_group, is_available, is_initialized)
from .rank_zero import get_logger, is_rank0, print0, save_on_rank0
from .sampler import DistributedSampler
from .waiting import DistTimeoutError

__all__ = [
    "CollectiveMismatchError", "DistributedDataParallel", "DistributedSampler", "DistTimeoutError", "EXTRA_HINT",
    "ProcessGroup", "ReduceOp", "Work", "all_gather", "all_reduce", "barrier", "broadcast", "destroy_process_group",
    "get_logger", "get_rank", "get_world_size", "init_process_group", "is_available", "is_initialized",
    "is_rank0", "print0", "reduce_scatter", "save_on_rank0",
]

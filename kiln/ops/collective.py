"""`all_reduce_mean`: the gradient average of data-parallel training, as a primitive a plan replays.

``all_reduce_mean(x, sync)`` returns the mean of `x` over the ranks of the current process
group (an MPI Allreduce on a copy, divided by the world size) when the 0-d boolean `sync` is
True, and `x` unchanged (a copy) when it is False. DistributedDataParallel binds it on each
flat gradient bucket while a whole training step is being traced, so every replay of the
plan all-reduces again; `sync` is a tensor the reducer owns (``no_sync()`` writes it), read
fresh on every call, so accumulation steps replay the same plan without a collective.

It is a runtime effect: passes keep the node even though nothing would be lost by dropping
it locally (`is_check`, as for the runtime checks), because every rank must issue the same
collectives in the same order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .primitive import REGISTRY, Primitive, ShapeError, bind


class AllReduceMean(Primitive):
    """Mean over ranks of a float array (an identity in a world of one); `sync` False skips it."""

    name = "all_reduce_mean"
    is_check = True  # an effect on the other ranks: dead-code elimination keeps it

    def abstract(self, x, sync, **params):
        if sync.shape != ():
            raise ShapeError(f"all_reduce_mean: sync must be a 0-d bool tensor, got shape {list(sync.shape)}")
        return x

    def kernel(self, xp: Any, x: Any, sync: Any, **params: Any) -> Any:
        from ..distributed.process_group import group  # noqa: PLC0415 - cycle: distributed imports nn

        out = np.array(x, copy=True, order="C")
        g = group()
        if not bool(sync) or g.comm is None:
            return out
        from mpi4py import MPI  # noqa: PLC0415 - a multi-rank world has it loaded

        from ..distributed.waiting import wait  # noqa: PLC0415

        wait(g.comm.Iallreduce(MPI.IN_PLACE, out, MPI.SUM), "DistributedDataParallel gradient all-reduce", g)
        np.divide(out, g.size, out=out)
        return out

    def vjp(self, g, inputs, node, **params):
        return (all_reduce_mean(g, inputs[1]), None)  # the mean over ranks is its own adjoint


def all_reduce_mean(x: Any, sync: Any) -> Any:
    """The mean of `x` over all ranks when `sync` (a 0-d bool tensor) holds True, else a copy of `x`."""
    if x.dtype.name not in ("float32", "float64"):
        raise TypeError(f"all_reduce_mean expects a float32 or float64 tensor, got {x.dtype.name}; MPI sums "
                        "these natively. Fix: keep the parameters (and so the gradients) in float32 or float64")
    return bind(REGISTRY["all_reduce_mean"], (x, sync), {})

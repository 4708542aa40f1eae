"""Gradient averaging inside a compiled whole training step, as graph ops the plan replays.

While ``kiln.compile(train_step)`` traces ``loss.backward()``, DDP's post-accumulate hooks
see traced ``.grad`` values (this backward's gradient plus any accumulated by earlier no_sync
backwards). When the last one is in, every bucket is flattened with ``cat``, averaged with
the `all_reduce_mean` primitive (gated by the reducer's ``sync_flag``, so ``no_sync()``
replays the same plan without a collective), and each ``.grad`` is set to its slice of the
average; the tracer records those assignments, so ``.grad`` holds the averages on every
replay. Buckets are reduced in the same order on every rank, after the whole backward (a
plan does not overlap them with backward).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...autograd import no_grad
from ...functional.shape import cat
from ...ops.collective import all_reduce_mean
from ...tensor import Tensor

if TYPE_CHECKING:
    from .reducer import Reducer


class TracedReduction:
    """The traced half of a `Reducer`: collects one backward's gradients, then averages them."""

    def __init__(self, reducer: "Reducer"):
        self.reducer = reducer
        self.locals: dict[int, Tensor] = {}

    def reset(self) -> None:
        self.locals = {}

    def on_accumulated(self, index: int) -> None:
        """A parameter's traced ``.grad`` is complete for this backward."""
        r = self.reducer
        if r.find_unused:
            raise NotImplementedError(
                "DistributedDataParallel(find_unused_parameters=True) inside a compiled whole training step is "
                "not supported: which parameters a backward reaches is decided per call. Fix: make every "
                "parameter contribute to the loss and drop find_unused_parameters, or compile the module "
                "instead, DistributedDataParallel(kiln.compile(model)), with backward() outside kiln.compile")
        if len(self.locals) == len(r.params):  # a second backward in the same step
            self.reset()
        grad = r.params[index].grad
        assert grad is not None  # the hook runs right after backward set it
        self.locals[index] = grad
        if len(self.locals) == len(r.params):
            self._reduce_all()

    def _reduce_all(self) -> None:
        r = self.reducer
        with no_grad():
            for bucket in r.buckets:
                flat = cat([self.locals[i].reshape(-1) for i in bucket.indices])
                averaged = all_reduce_mean(flat, r.sync_flag)
                for i, off in zip(bucket.indices, bucket.offsets):
                    p = r.params[i]
                    n = p.numel()
                    p.grad = averaged[off:off + n].reshape(tuple(p.shape))

"""`DistributedDataParallel`: data-parallel training over the ranks of `kiln.distributed`.

>>> dist.init_process_group()
>>> ddp = DistributedDataParallel(model)             # or DistributedDataParallel(kiln.compile(model))
>>> loss = F.cross_entropy(ddp(x_shard), y_shard)
>>> loss.backward()                                  # grads are now averaged over all ranks
>>> opt.step()
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


from ...autograd import is_grad_enabled
from ...trace_state import trace_state
from ..module import Module
from .reducer import Reducer


class DistributedDataParallel(Module):
    """Wrap `module` so that ``backward()`` leaves every rank with the gradients averaged over ranks.

    At wrap time it checks that every rank holds the same parameter and buffer names, shapes and
    dtypes (a ValueError names the first difference) and copies rank 0's values to every rank.
    Each forward (in train mode with grad enabled) arms the gradient reduction; `no_sync()`
    skips it so gradients accumulate locally over micro-batches. `module` may be a compiled
    module (``kiln.compile(model)``): its compiled backward feeds the same reduction. The
    wrapped module is ``ddp.module`` (state-dict keys start with ``module.``, as in PyTorch).
    `device_ids`, `output_device`, `dim`, `gradient_as_bucket_view` and `static_graph` are
    accepted for PyTorch compatibility and change nothing on the CPU.
    """

    def __init__(self, module: Any, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group: Any = None, bucket_cap_mb: float = 25.0,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False, init_sync: bool = True) -> None:
        super().__init__()
        from ...distributed import collectives  # noqa: PLC0415 - cycle: kiln.distributed imports this
        from ...distributed.process_group import ProcessGroup, group  # noqa: PLC0415

        inner = getattr(module, "_module", None) if not isinstance(module, Module) else module
        if not isinstance(inner, Module):
            raise TypeError("DistributedDataParallel expects an nn.Module or a compiled module "
                            f"(kiln.compile(model)), got {type(module).__name__}")
        if process_group is not None and not isinstance(process_group, ProcessGroup):
            raise TypeError(f"process_group must be None (the world) or a ProcessGroup, got "
                            f"{type(process_group).__name__}")
        if not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be a positive number of megabytes, got {bucket_cap_mb!r}")
        self.process_group = process_group or group()
        self.module = inner
        object.__setattr__(self, "_call", module)
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        self.dim = dim
        _check_same_model(inner, self.process_group)
        if init_sync:
            for t in list(inner.parameters()) + list(inner.buffers()):
                collectives.broadcast(t, 0, group=self.process_group)
        params = [p for p in inner.parameters() if p.requires_grad]
        object.__setattr__(self, "reducer", Reducer(params, self.process_group,
                                                    int(bucket_cap_mb * 1024 * 1024), find_unused_parameters))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module, after syncing buffers from rank 0 and arming the gradient reduction."""
        from ...distributed import collectives  # noqa: PLC0415

        reduces = self.training and is_grad_enabled() and self.require_backward_grad_sync
        if reduces and self.reducer.in_progress():
            raise RuntimeError(
                "DistributedDataParallel: the previous backward() produced gradients for only some parameters, "
                "so the gradient reduction never finished. This happens when some parameters do not take part "
                "in computing the loss. Fix: pass find_unused_parameters=True, or make every parameter "
                "contribute to the loss")
        if self.broadcast_buffers and self.process_group.size > 1:
            if trace_state.tracer is not None and any(True for _ in self.module.buffers()):
                raise NotImplementedError(
                    "DistributedDataParallel: broadcasting buffers from rank 0 inside a compiled whole training "
                    "step is not supported yet (the plan would not replay it). Fix: pass "
                    "broadcast_buffers=False (buffers then stay per rank), or compile the module instead, "
                    "DistributedDataParallel(kiln.compile(model)), with backward() outside kiln.compile")
            for b in self.module.buffers():
                collectives.broadcast(b, 0, group=self.process_group)
        out = self._call(*args, **kwargs)
        if self.training and is_grad_enabled():
            self.reducer.prepare(self.require_backward_grad_sync, out)
        return out

    @property
    def require_backward_grad_sync(self) -> bool:
        """Whether the next backward averages gradients over ranks (False inside `no_sync()`)."""
        return self.__dict__.get("_require_backward_grad_sync", True)

    @require_backward_grad_sync.setter
    def require_backward_grad_sync(self, value: bool) -> None:
        self.__dict__["_require_backward_grad_sync"] = bool(value)
        reducer = self.__dict__.get("reducer")
        if reducer is not None:
            reducer.set_sync(bool(value))  # read by compiled whole steps on every call

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Within it, forward/backward accumulate gradients locally; the next synced backward averages all.

        >>> with ddp.no_sync():
        ...     ddp(x1).sum().backward()
        >>> ddp(x2).sum().backward()         # .grad = average over ranks of (g1 + g2)
        """
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def extra_repr(self) -> str:
        return f"world_size={self.process_group.size}, buckets={len(self.reducer.buckets)}"


def _signature(module: Module) -> list[tuple[str, str, tuple[int, ...], str]]:
    entries = [("parameter", name, tuple(p._data.shape), str(p._data.dtype)) for name, p in module.named_parameters()]
    entries += [("buffer", name, tuple(b._data.shape), str(b._data.dtype)) for name, b in module.named_buffers()]
    return entries


def _check_same_model(module: Module, group: Any) -> None:
    """Raise ValueError, on every rank alike, naming the first way a rank's model differs from rank 0's."""
    if group.comm is None:
        return
    mine = _signature(module)
    everyone = group.comm.allgather(mine)
    reference = everyone[0]
    for rank, theirs in enumerate(everyone[1:], start=1):
        problem = _first_difference(reference, theirs, rank)
        if problem:
            raise ValueError(f"DistributedDataParallel: the model on rank {rank} differs from rank 0's: {problem}. "
                             "Fix: build the same model on every rank (same layers, shapes and dtypes)")


def _first_difference(ref: list, other: list, rank: int) -> str:
    for i, (a, b) in enumerate(zip(ref, other)):
        if a == b:
            continue
        if a[:2] != b[:2]:
            return (f"entry {i} is {a[0]} '{a[1]}' on rank 0 but {b[0]} '{b[1]}' on rank {rank}")
        if a[2] != b[2]:
            return f"{a[0]} '{a[1]}' has shape {a[2]} on rank 0 but {b[2]} on rank {rank}"
        return f"{a[0]} '{a[1]}' has dtype {a[3]} on rank 0 but {b[3]} on rank {rank}"
    if len(ref) != len(other):
        longer, which = (ref, "rank 0") if len(ref) > len(other) else (other, f"rank {rank}")
        extra = longer[min(len(ref), len(other))]
        return (f"rank 0 has {len(ref)} parameters and buffers, rank {rank} has {len(other)}; "
                f"{extra[0]} '{extra[1]}' exists only on {which}")
    return ""



"""DDP overlaps gradient all-reduce with backward: a bucket's all-reduce starts as soon as its
parameters' gradients are final, before backward reaches the layers in front of them."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import nn


def _model() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))


def _buckets_before_first_layer(reducer) -> int:
    """How many buckets, in launch order, hold no parameter of the first Linear (indices 0, 1)."""
    count = 0
    for bucket in reducer.buckets:
        if any(i < 2 for i in bucket.indices):
            break
        count += 1
    return count


def test_buckets_start_before_backward_reaches_the_first_layer(world_of_one):
    reference = _model()
    ddp = world_of_one.DistributedDataParallel(_model(), bucket_cap_mb=1e-4)
    expected = _buckets_before_first_layer(ddp.reducer)
    assert 0 < expected < len(ddp.reducer.buckets)
    seen: list[int] = []

    def watch(mod, args, out) -> None:
        out.register_hook(lambda g: seen.append(ddp.reducer.launched))

    ddp.module[0].register_forward_hook(watch)
    x = kiln.randn(8, 4)
    x.requires_grad_(True)
    ddp(x).square().sum().backward()
    # when backward reaches the first Linear's output, the later layers' buckets are already reducing
    assert seen == [expected]
    assert ddp.reducer.launched == len(ddp.reducer.buckets)
    reference(x.detach()).square().sum().backward()
    for p, q in zip(ddp.module.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)


def test_several_ranks_overlap_all_reduce_with_backward(mpi_launch):
    proc = mpi_launch(2, "overlap.py", timeout=60)
    assert proc.returncode == 0 and "OVERLAP OK" in proc.stdout, proc.stdout


@pytest.mark.parametrize("no_sync_first", [False, True])
def test_second_pass_and_no_sync_still_reduce_once(world_of_one, no_sync_first):
    """.grad accumulated under no_sync is part of what the next synced backward reduces."""
    reference = _model()
    ddp = world_of_one.DistributedDataParallel(_model(), bucket_cap_mb=1e-4)
    xs = [kiln.randn(8, 4) for _ in range(2)]
    if no_sync_first:
        with ddp.no_sync():
            ddp(xs[0]).sum().backward()
        assert ddp.reducer.launched == 0
    else:
        ddp(xs[0]).sum().backward()
    ddp(xs[1]).sum().backward()
    for x in xs:
        reference(x).sum().backward()
    for p, q in zip(ddp.module.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6)

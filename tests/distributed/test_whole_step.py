"""DistributedDataParallel inside a whole compiled training step: the plan replays the all-reduces."""
from __future__ import annotations

import json

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln import models, nn, optim


def _result(proc) -> dict:
    assert proc.returncode == 0, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0][len("RESULT "):])


def test_whole_compiled_step_follows_full_batch_training_on_two_ranks(mpi_launch):
    """float64 MLP, SGD-momentum, 20 steps: losses within 1e-5 relative; the plan replays."""
    r = _result(mpi_launch(2, "whole_step.py", "20"))
    assert r["whole-error"] < 1e-5 and r["whole-decreased"]
    assert r["whole-stats"] == {"traces": 2, "hits": 18, "fallbacks": 0}
    assert r["nosync-error"] < 1e-5
    assert r["nosync-stats"]["traces"] == 2 and r["nosync-stats"]["fallbacks"] == 0
    # rank 0 alone replayed the synced plan under no_sync(): no collective (else a 10 s timeout), local grads
    assert r["no_sync-grad-error"] < 1e-12 and r["no_sync-traces"] == 2


def _step_pair(dist, **ddp_kwargs):
    kiln.manual_seed(0)
    ddp = dist.DistributedDataParallel(models.mlp(6, (8,), 3).double(), **ddp_kwargs)
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        return loss

    return ddp, train_step


def test_world_of_one_compiled_step_equals_eager(world_of_one):
    dist = world_of_one
    eager_ddp, eager_step = _step_pair(dist, bucket_cap_mb=0.0001)
    comp_ddp, comp_fn = _step_pair(dist, bucket_cap_mb=0.0001)
    step = kiln.compile(comp_fn)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, y = kiln.tensor(rng.standard_normal((4, 6))), kiln.tensor(rng.integers(0, 3, 4))
        np.testing.assert_allclose(step(x, y).item(), eager_step(x, y).item(), rtol=1e-12)
    for p, q in zip(comp_ddp.parameters(), eager_ddp.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12)
    assert step.stats.traces == 2 and step.stats.fallbacks == 0
    graph = step.cache_entries[-1].graph
    reduces = [n for n in graph.nodes if n.prim.name == "all_reduce_mean"]
    assert len(reduces) == len(comp_ddp.reducer.buckets) > 1, "every bucket's all-reduce stays in the plan"


def test_all_reduce_mean_primitive_world_of_one(world_of_one):
    from kiln.ops.collective import all_reduce_mean

    x = kiln.tensor([1.0, -2.0, 3.5])
    out = all_reduce_mean(x, kiln.tensor(True))
    assert out.tolist() == [1.0, -2.0, 3.5] and out._data is not x._data
    with pytest.raises(TypeError, match="float32 or float64"):
        all_reduce_mean(kiln.tensor([1, 2]), kiln.tensor(True))


def test_find_unused_parameters_in_a_compiled_step_says_what_to_do(world_of_one):
    _, fn = _step_pair(world_of_one, find_unused_parameters=True)
    step = kiln.compile(fn, fullgraph=True)
    with pytest.raises(NotImplementedError, match=r"find_unused_parameters=True\) inside a compiled whole"):
        step(kiln.randn(4, 6).double(), kiln.tensor([0, 1, 2, 0]))


def test_no_sync_flag_follows_require_backward_grad_sync(world_of_one):
    ddp = world_of_one.DistributedDataParallel(nn.Linear(2, 2))
    assert ddp.reducer.sync_flag.item() is True
    with ddp.no_sync():
        assert ddp.require_backward_grad_sync is False and ddp.reducer.sync_flag.item() is False
    assert ddp.reducer.sync_flag.item() is True
    ddp.require_backward_grad_sync = False
    assert ddp.reducer.sync_flag.item() is False

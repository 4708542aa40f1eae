"""A process started without an MPI launcher is a world of one: everything works, nothing needs MPI."""
from __future__ import annotations

import builtins
import logging
import sys

import numpy as np
import pytest

import kiln
import kiln.functional as F
from kiln import nn


def test_init_is_a_no_op_world_of_one(world_of_one):
    dist = world_of_one
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    dist.barrier()
    with pytest.raises(RuntimeError, match="already called"):
        dist.init_process_group()


def test_uninitialized_group_says_to_initialize():
    import kiln.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.get_rank()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.DistributedDataParallel(nn.Linear(2, 2))


def test_init_rejects_bad_arguments(monkeypatch):
    import kiln.distributed as dist

    monkeypatch.delenv("PMI_SIZE", raising=False)
    with pytest.raises(ValueError, match="backend='mpi'"):
        dist.init_process_group(backend="nccl")
    with pytest.raises(TypeError, match="timedelta or a positive number"):
        dist.init_process_group(timeout=-1)
    with pytest.raises(ValueError, match="world_size=1"):
        dist.init_process_group(world_size=4)
    assert not dist.is_initialized()


def test_missing_mpi4py_names_the_extra(monkeypatch):
    import kiln.distributed as dist

    monkeypatch.setenv("PMI_SIZE", "2")  # as if started by mpiexec -n 2
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    real_import = builtins.__import__

    def no_mpi4py(name, *args, **kwargs):
        if name.startswith("mpi4py"):
            raise ImportError("No module named 'mpi4py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_mpi4py)
    with pytest.raises(ImportError, match=r'pip install "kiln\[distributed\]"'):
        dist.init_process_group()
    assert not dist.is_initialized()


def test_collectives_in_a_world_of_one(world_of_one):
    dist = world_of_one
    a = np.arange(6.0).reshape(2, 3)
    for op in ("sum", "avg", "max", "min", "product"):
        t = kiln.tensor(a)
        dist.all_reduce(t, op=op)
        np.testing.assert_array_equal(t.numpy(), a)
    t = kiln.tensor(a)
    dist.broadcast(t, src=0)
    np.testing.assert_array_equal(t.numpy(), a)
    outs = [kiln.zeros(2, 3, dtype=kiln.float64)]
    dist.all_gather(outs, kiln.tensor(a))
    np.testing.assert_array_equal(outs[0].numpy(), a)
    out = kiln.zeros(2, 3, dtype=kiln.float64)
    dist.reduce_scatter(out, [kiln.tensor(a)])
    np.testing.assert_array_equal(out.numpy(), a)
    work = dist.all_reduce(kiln.tensor(a), async_op=True)
    assert not work.is_completed() and work.wait() and work.is_completed()


def test_collectives_reject_bad_input(world_of_one):
    dist = world_of_one
    with pytest.raises(TypeError, match="ReduceOp.AVG needs a floating-point tensor"):
        dist.all_reduce(kiln.tensor([1, 2]), op=dist.ReduceOp.AVG)
    with pytest.raises(ValueError, match="op must be one of"):
        dist.all_reduce(kiln.ones(2), op="mean")
    with pytest.raises(TypeError, match="expects a kiln.Tensor"):
        dist.all_reduce(np.ones(2))
    with pytest.raises(ValueError, match="src must be a rank in 0..0"):
        dist.broadcast(kiln.ones(2), src=1)
    with pytest.raises(ValueError, match="list of world_size=1 tensors, got 2 items"):
        dist.all_gather([kiln.ones(2), kiln.ones(2)], kiln.ones(2))
    with pytest.raises(ValueError, match=r"tensor_list\[0\] is float32\[3\], expected float32\[2\]"):
        dist.all_gather([kiln.ones(3)], kiln.ones(2))


def _mlp(seed: int = 0) -> nn.Module:
    kiln.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def test_ddp_world_of_one_matches_torch(world_of_one):
    torch = pytest.importorskip("torch")
    dist = world_of_one
    model = _mlp()
    ddp = dist.DistributedDataParallel(model, bucket_cap_mb=1e-4)
    assert len(ddp.reducer.buckets) > 1, "a tiny bucket cap must split the parameters into several buckets"
    assert list(ddp.state_dict()) == ["module." + k for k in model.state_dict()]
    twin = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    with torch.no_grad():
        for (_, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
            q.copy_(torch.from_numpy(p.detach().numpy().copy()))
    x = np.random.default_rng(0).standard_normal((5, 4))
    y = np.array([0, 2, 1, 1, 0])
    F.cross_entropy(ddp(kiln.tensor(x)), kiln.tensor(y)).backward()
    torch.nn.functional.cross_entropy(twin(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12, atol=1e-14)


def test_no_sync_accumulates_then_reduces_the_sum(world_of_one):
    dist = world_of_one
    model, plain = _mlp(), _mlp()
    ddp = dist.DistributedDataParallel(model)
    x1, x2 = kiln.randn(3, 4).double(), kiln.randn(3, 4).double()
    with ddp.no_sync():
        ddp(x1).sum().backward()
    assert ddp.require_backward_grad_sync
    ddp(x2).sum().backward()
    plain(x1).sum().backward()
    plain(x2).sum().backward()
    for p, q in zip(model.parameters(), plain.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-13)


def test_compiled_module_inside_ddp_matches_eager(world_of_one):
    dist = world_of_one
    model, plain = _mlp(), _mlp()
    compiled = kiln.compile(model)
    ddp = dist.DistributedDataParallel(compiled)
    assert ddp.module is model
    x = kiln.randn(6, 4).double()
    for _ in range(3):
        model.zero_grad()
        plain.zero_grad()
        ddp(x).square().mean().backward()
        plain(x).square().mean().backward()
        for p, q in zip(model.parameters(), plain.parameters()):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12)
    assert compiled.stats.hits >= 2


def test_unused_parameters(world_of_one):
    dist = world_of_one

    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(3, 2)
            self.b = nn.Linear(3, 2)

        def forward(self, x):
            return self.a(x)

    ddp = dist.DistributedDataParallel(TwoHeads())
    ddp(kiln.ones(1, 3)).sum().backward()
    with pytest.raises(RuntimeError, match="find_unused_parameters=True"):
        ddp(kiln.ones(1, 3))
    model = TwoHeads()
    ddp = dist.DistributedDataParallel(model, find_unused_parameters=True)
    for _ in range(2):
        ddp(kiln.ones(1, 3)).sum().backward()
    np.testing.assert_allclose(model.a.bias.grad.numpy(), [2.0, 2.0])
    assert model.b.weight.grad is None, "a parameter no rank used keeps .grad None, as in PyTorch"


def test_ddp_rejects_non_modules(world_of_one):
    with pytest.raises(TypeError, match="expects an nn.Module or a compiled module"):
        world_of_one.DistributedDataParallel(lambda x: x)
    with pytest.raises(ValueError, match="bucket_cap_mb must be a positive"):
        world_of_one.DistributedDataParallel(nn.Linear(2, 2), bucket_cap_mb=0)


def test_backward_inside_a_compiled_function_sets_grads_like_eager(world_of_one):
    model = _mlp()
    ddp = world_of_one.DistributedDataParallel(model)

    def step(x):
        loss = ddp(x).sum()
        loss.backward()
        return loss

    compiled = kiln.compile(step, fullgraph=True)
    x = kiln.randn(2, 4).double()
    compiled(x)
    got = [p.grad.numpy().copy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    step(x)
    for g, p in zip(got, model.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-12)


def test_model_differences_are_named():
    from kiln.nn.parallel.distributed import _first_difference

    ref = [("parameter", "w", (2, 3), "float32"), ("parameter", "b", (2,), "float32")]
    assert _first_difference(ref, ref, 1) == ""
    assert "'b' has shape (2,) on rank 0 but (3,) on rank 2" in _first_difference(
        ref, [ref[0], ("parameter", "b", (3,), "float32")], 2)
    assert "'w' has dtype float32 on rank 0 but float64 on rank 1" in _first_difference(
        ref, [("parameter", "w", (2, 3), "float64"), ref[1]], 1)
    assert "parameter 'b' exists only on rank 0" in _first_difference(ref, ref[:1], 1)
    assert "entry 1 is parameter 'b' on rank 0 but buffer 'running_mean'" in _first_difference(
        ref, [ref[0], ("buffer", "running_mean", (2,), "float32")], 1)


def test_rank_zero_helpers(world_of_one, tmp_path, capsys, caplog):
    dist = world_of_one
    dist.print0("hello", 3)
    assert capsys.readouterr().out == "hello 3\n"
    with caplog.at_level(logging.INFO, logger="kiln.distributed.test"):
        dist.get_logger("kiln.distributed.test").info("logged once")
    assert "logged once" in caplog.text
    path = tmp_path / "ckpt.safetensors"
    dist.save_on_rank0({"w": kiln.ones(2), "step": 3}, path)
    assert kiln.load(path)["step"] == 3


def test_launcher_command_and_report(tmp_path):
    from kiln.distributed.run import mpiexec_command, rank_report

    cmd = mpiexec_command("/x/mpiexec", 4, "train.py", ["--lr", "0.1"], "hosts")
    assert cmd[:5] == ["/x/mpiexec", "-n", "4", "-f", "hosts"] and cmd[-3:] == ["train.py", "--lr", "0.1"]
    (tmp_path / "rank0").write_text("running")
    (tmp_path / "rank1").write_text("failed: KeyError: 'x'")
    (tmp_path / "rank2").write_text("ok")
    assert rank_report(str(tmp_path), 4) == [
        "kiln.distributed.run: rank 0: stopped: aborted because rank 1 failed",
        "kiln.distributed.run: rank 1: failed: KeyError: 'x'",
        "kiln.distributed.run: rank 2: finished",
        "kiln.distributed.run: rank 3: stopped: aborted because rank 1 failed, before this rank reached "
        "init_process_group (or it ran on another machine)",
    ]
    (tmp_path / "rank1").write_text("ok")
    assert rank_report(str(tmp_path), 4)[3] == (
        "kiln.distributed.run: rank 3: no report (it did not call init_process_group, or ran on another machine)")

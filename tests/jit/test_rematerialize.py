"""Convolution columns are recomputed in the compiled backward, not kept from the forward.

Columns exist where a convolution goes through im2col (a grouped one here; the one-group conv2d
primitive reads its windows where they lie, in both directions, and makes none).

Oracle: eager training on the same weights and batches, bit for bit (the columns are copies of the
image's elements, so remaking them changes no bit), and the residual list of the training plan.
"""
from __future__ import annotations

import numpy as np

import kiln
from kiln import nn
from kiln.jit.backends.cpu import schedule

from jit_helpers import assert_bitwise


def _net():
    kiln.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8 * 4 * 4, 5))


def _train(compiled: bool, backend: str = "cpu") -> tuple[list, list, object]:
    model = _net()
    forward = kiln.compile(model, backend=backend) if compiled else model
    opt = kiln.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(4):
        x = kiln.tensor(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
        y = kiln.tensor(rng.integers(0, 5, 4))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy().copy() for p in model.parameters()], forward


def test_columns_are_remade_in_the_backward_and_training_equals_eager():
    want_losses, want_params, _ = _train(False)
    for backend in ("cpu", "interpret"):
        losses, params, compiled = _train(True, backend)
        assert losses == want_losses, backend
        for got, want in zip(params, want_params):
            assert_bitwise(got, want, f"parameters ({backend})")
        (entry,) = compiled.cache_entries
        producer = {n.out.id: n for n in entry.graph.nodes}
        residual_prims = {producer[v.id].prim.name for v in entry.graph.outputs[entry.n_outputs:] if v.id in producer}
        assert sum(n.prim.name == "conv2d" for n in entry.graph.nodes) == 1  # the one-group convolution
        chains = [n for n in entry.graph.nodes if n.prim.name == "unfold2d"]  # the grouped one's columns
        assert len(chains) == 1 and "unfold2d" not in residual_prims  # no residual is a column matrix...
        assert all(not any(u is v for v in entry.graph.outputs[entry.n_outputs:]) for u in
                   [n.out for n in entry.graph.nodes if n.prim.name == "reshape" and
                    producer.get(n.inputs[0].id) in chains])
        # ...the backward makes them again, once per grouped convolution
        assert sum(n.prim.name == "unfold2d" for n in entry.backward_graph.nodes) == len(chains)


def test_remade_columns_are_scheduled_at_their_use_not_hoisted(monkeypatch):
    """A large node made from graph inputs alone runs no earlier than the node before it (schedule.LATE_BYTES),
    so the remade columns of different convolutions are not live in the backward's arena at the same time."""
    def backward_arena_bytes() -> int:
        kiln.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=2),
                              nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=2), nn.ReLU(),
                              nn.Conv2d(16, 16, 3, padding=1, groups=2))
        compiled = kiln.compile(model)
        compiled(kiln.randn(8, 3, 32, 32)).sum().backward()
        (entry,) = compiled.cache_entries
        return entry.backward_plan.analysis.arena_bytes

    column_bytes = 16 * 9 * 8 * 32 * 32 * 4
    assert column_bytes >= schedule.LATE_BYTES
    at_use = backward_arena_bytes()
    monkeypatch.setattr(schedule, "LATE_BYTES", 1 << 62)  # hoisted into the first native segment, as before
    hoisted = backward_arena_bytes()
    assert at_use + column_bytes <= hoisted, (at_use, hoisted)

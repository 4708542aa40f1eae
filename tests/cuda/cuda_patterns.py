"""The fused patterns the CPU backend forms for real workloads, taken from kiln.compile itself.

`fused_kernels(name)` compiles one workload (forward and backward) with a backend object
that fuses each lowered graph exactly as the CPU backend's native plans do
(``fuse(graph, 1, 1)``), keeps the fused nodes (elementwise groups and row kernels), and
replays the graph with the interpreter. The CUDA tests render those nodes.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import kiln
import kiln.nn as nn
import kiln.nn.functional as F
from kiln.jit.backends.cpu.codegen import FusedElementwise
from kiln.jit.backends.cpu.fuse_graph import fuse
from kiln.jit.backends.cpu.rowcode import RowKernel
from kiln.jit.backends.interpret import Plan
from kiln.models.gpt import Block


class CaptureFused:
    """A backend object: lowers like the interpreter and records the CPU backend's fused nodes."""

    name = "capture-fused"

    def __init__(self) -> None:
        self.kernels: list[Any] = []
        self.graphs: list[Any] = []

    def lower(self, graph: Any) -> Plan:
        fused = fuse(graph, 1, 1)
        self.graphs.append(fused)
        self.kernels += [n.prim for n in fused.nodes if isinstance(n.prim, (FusedElementwise, RowKernel))]
        return Plan(graph)


def _mlp() -> tuple[Callable, tuple]:
    kiln.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    x, y = kiln.randn(16, 32), kiln.tensor(np.arange(16) % 10)
    return (lambda x, y: F.cross_entropy(model(x), y)), (x, y)


def _layernorm_gelu() -> tuple[Callable, tuple]:
    x = kiln.randn(8, 64, requires_grad=True)
    w, b = kiln.randn(64, requires_grad=True), kiln.randn(64, requires_grad=True)
    return (lambda x, w, b: F.gelu(F.layer_norm(x, (64,), w, b)).square().mean()), (x, w, b)


def _softmax() -> tuple[Callable, tuple]:
    x, t = kiln.randn(8, 50, requires_grad=True), kiln.randn(8, 50)
    return (lambda x, t: (F.softmax(x, dim=-1) * t).sum()), (x, t)


def _softmax_float64() -> tuple[Callable, tuple]:
    """Float64 graphs keep double math and storage in every CUDA storage mode."""
    x = kiln.randn(8, 50, dtype=kiln.float64, requires_grad=True)
    t = kiln.randn(8, 50, dtype=kiln.float64)
    return (lambda x, t: (F.log_softmax(x, dim=-1) * t).sum()), (x, t)


def _cross_entropy() -> tuple[Callable, tuple]:
    logits = kiln.randn(16, 100, requires_grad=True)
    y = kiln.tensor(np.arange(16) * 7 % 100)
    return (lambda logits, y: F.cross_entropy(logits, y)), (logits, y)


def _attention() -> tuple[Callable, tuple]:
    q, k, v = (kiln.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    mask = kiln.tensor(np.tril(np.ones((16, 16), bool)))

    def attend(q, k, v):
        scores = (q @ k.transpose(-2, -1)) * (1.0 / 8 ** 0.5)
        scores = scores.masked_fill(~mask, float("-inf"))
        return (F.softmax(scores, dim=-1) @ v).square().sum()

    return attend, (q, k, v)


def _gpt_block() -> tuple[Callable, tuple]:
    kiln.manual_seed(0)
    block = Block(32, 4)
    x = kiln.randn(2, 16, 32, requires_grad=True)
    return (lambda x: block(x).square().mean()), (x,)


WORKLOADS: dict[str, Callable[[], tuple[Callable, tuple]]] = {
    "mlp": _mlp, "layernorm_gelu": _layernorm_gelu, "softmax": _softmax, "softmax_float64": _softmax_float64,
    "cross_entropy": _cross_entropy,
    "attention": _attention, "gpt_block": _gpt_block,
}


def on_device(name: str, device: str) -> tuple[Callable, tuple]:
    """Workload `name` with its inputs (leaves keep requires_grad) and the modules it closes over on `device`."""
    fn, args = WORKLOADS[name]()
    for cell in getattr(fn, "__closure__", None) or ():
        if isinstance(cell.cell_contents, nn.Module):
            cell.cell_contents.to(device)
        elif isinstance(cell.cell_contents, kiln.Tensor):  # e.g. attention's mask
            cell.cell_contents = cell.cell_contents.to(device)
    moved = tuple(a.detach().to(device).requires_grad_(a.requires_grad) for a in args)
    return fn, moved


def fused_kernels(name: str) -> list[Any]:
    """The fused nodes (FusedElementwise / RowKernel primitives) of workload `name`, forward and backward."""
    fn, args = WORKLOADS[name]()
    capture = CaptureFused()
    loss = kiln.compile(fn, backend=capture)(*args)
    loss.backward()
    return capture.kernels


def kernel_inputs(values, rng) -> list[np.ndarray]:
    """Random arrays for a fused kernel's inputs: magnitudes in [0.5, 2] of either sign, or random bools."""
    out = []
    for v in values:
        shape = tuple(v.shape)
        if v.dtype.name == "bool":
            out.append(rng.random(shape) < 0.5)
        else:
            magnitude = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
            out.append(np.asarray(magnitude, v.dtype.np))
    return out

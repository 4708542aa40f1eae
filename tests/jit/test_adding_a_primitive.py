"""Adding a primitive touches only its own definition and, at most, the C renderer's table.

A toy elementwise op is defined here alone: its shape rule, NumPy kernel, VJP, its capability (`fuses`) and
its C spelling, either its own `c_expr` or an entry in the renderer's table. kiln.compile then fuses it into
generated native kernels, forward and backward, with eager's bits (docs/internals.md, "Adding a primitive").
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from jit_helpers import assert_bitwise

import kiln
from kiln.jit.backends import cpu
from kiln.jit.backends.render import C
from kiln.ops.elementwise import F, Unary
from kiln.ops.primitive import REGISTRY, bind

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")

CUBE_C = "({0} * {0} * {0})"
CUBED = re.compile(r"\((\w+) \* \1 \* \1\)")  # CUBE_C applied to a local of the generated C


@pytest.fixture
def kernel_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture(params=["own c_expr", "renderer table"])
def cube(request, monkeypatch):
    """The toy primitive x**3, spelled in C by its own `c_expr` or by an entry in the renderer's table."""

    class Cube(Unary):
        name = "toy_cube"
        fuses = True  # its C spelling computes the NumPy kernel's bits: fused kernels may hold it
        saves_inputs = (0,)
        c_expr = CUBE_C if request.param == "own c_expr" else None

        def kernel(self, xp, x):
            return x * x * x

        def vjp(self, g, inputs, node):
            (x,) = inputs
            return (F().mul(g, F().mul(F().mul(x, x), 3.0)),)

    if request.param == "renderer table":
        monkeypatch.setitem(C.ops, Cube.name, CUBE_C)
    yield REGISTRY[Cube.name]
    del REGISTRY[Cube.name]  # (defining the class registered it)


def test_a_new_primitive_fuses_into_native_kernels_with_eager_bits(kernel_cache, cube):
    def loss(x, w):
        h = bind(cube, (x * w,), {})
        return (h * 0.5 + x).sum()

    compiled = kiln.compile(loss, backend="cpu")
    rng = np.random.default_rng(0)
    x_np, w_np = (rng.standard_normal((64, 128)).astype(np.float32) for _ in range(2))
    for _ in range(2):  # a first call (the trace) and a replay
        grads = []
        for fn in (loss, compiled):
            x, w = kiln.tensor(x_np, requires_grad=True), kiln.tensor(w_np, requires_grad=True)
            out = fn(x, w)
            out.backward()
            grads.append((out.detach().numpy(), x.grad.numpy(), w.grad.numpy()))
        for eager, native, what in zip(*grads, ("loss", "x.grad", "w.grad")):
            assert_bitwise(native, eager, what)
    (entry,) = compiled.cache_entries
    forward = entry.forward_plan.source
    assert CUBED.search(forward), "the toy's C spelling is not in the generated forward kernel"
    assert re.search(r"fused_rows\[[^]]*toy_cube[^]]*\]", forward), "the toy did not fuse into the row kernel"


def test_the_capability_decides_fusion_not_the_name(kernel_cache, cube, monkeypatch):
    """The same primitive without `fuses` stays a NumPy step of the plan."""
    monkeypatch.setattr(type(cube), "fuses", False)

    def f(x):
        return bind(cube, (x,), {}) * 2.0 + 1.0

    compiled = kiln.compile(f, backend="cpu")
    x = kiln.tensor(np.linspace(-2, 2, 8192, dtype=np.float32))
    with kiln.no_grad():
        compiled(x)
        assert_bitwise(compiled(x).numpy(), f(x).numpy(), "no fusion")
    (entry,) = compiled.cache_entries
    assert not CUBED.search(entry.plan.source)

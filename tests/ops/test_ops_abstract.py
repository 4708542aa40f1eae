"""Every primitive's abstract (shape/dtype) rule agrees with what its kernel returns.

All op cases run forward, backward and double backward under a recording hook (the
tracer slot that `bind` reports to), and each recorded primitive call is re-checked
against `prim.abstract`. Every primitive in kiln.ops.REGISTRY must be exercised.
"""
from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

import kiln
from kiln.ops import REGISTRY, AbstractValue
from kiln.ops.primitive import bind, trace_state
from op_cases import CASES


class Recorder:
    """Stands in for the tracer: keeps (primitive, input avals, params, output aval) of each bind."""

    symbolic = False

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, prim: Any, inputs: tuple, params: dict, out: kiln.Tensor) -> None:
        avals = tuple(AbstractValue(tuple(t._data.shape), t.dtype) for t in inputs)
        self.calls.append((prim, avals, params, AbstractValue(tuple(out._data.shape), out.dtype)))

    def __getattr__(self, name: str) -> Any:  # on_detach, on_inplace, ...: nothing to do
        return lambda *args, **kwargs: None


def _exercise() -> None:
    for c in CASES:
        for dtype in ("float32", "float64"):
            rng = np.random.default_rng(zlib.crc32(c.id.encode()))
            xs = []
            for spec in c.inputs:
                a = spec.draw(rng, dtype)
                xs.append(kiln.tensor(a, requires_grad=bool(getattr(spec, "grad", False)) and c.grad))
            with np.errstate(all="ignore"):
                out = c.fn(kiln, *xs)
                outs = [o for o in (out if isinstance(out, (tuple, list)) else [out]) if o.requires_grad]
                leaves = [x for x in xs if x.requires_grad]
                if not outs or not leaves:
                    continue
                loss = sum((o * o).sum() for o in outs)
                grads = kiln.autograd.grad(loss, leaves, create_graph=dtype == "float64", allow_unused=True)
                if dtype == "float64":  # the VJPs of the VJPs too
                    used = [g for g in grads if g is not None and g.requires_grad]
                    if used:
                        kiln.autograd.grad(sum((g * g).sum() for g in used), leaves, allow_unused=True)
    kiln.randn(3, 5)
    kiln.rand(2, 2, dtype=kiln.float64)
    kiln.randint(0, 5, (4,))
    kiln.full((2, 3), 7)
    kiln.arange(0.0, 1.0, 0.3)
    kiln.arange(5, 0, -2)
    x = kiln.randn(2, 3)
    bind(REGISTRY["stop_gradient"], (x,), {})  # what Tensor.detach() traces to
    bind(REGISTRY["sum"], (x > 0,), {"axes": (1,), "keepdims": False})  # bool sums count
    bind(REGISTRY["relu"], (kiln.tensor([-1, 2], dtype=kiln.int32),), {})
    bind(REGISTRY["argmax"], (kiln.tensor(3.0),), {"axis": None, "keepdims": False})
    bind(REGISTRY["cumsum"], (kiln.tensor([[True, False]]),), {"axis": 1})
    kiln.multinomial(kiln.tensor([[0.2, 0.8], [0.5, 0.5]]), 3, replacement=True)
    kiln.multinomial(kiln.tensor([0.2, 0.3, 0.5]), 2)
    kiln.sign(kiln.tensor([-2, 0, 3]))
    kiln.flip(x, 0)
    (x > 0) & (x < 1)
    kiln.bernoulli(kiln.full((2, 3), 0.5))  # check_probability
    _exercise_all_reduce_mean(x)


def _exercise_all_reduce_mean(x) -> None:
    """DDP's gradient average, bound in a world of one (no MPI needed)."""
    import kiln.distributed as dist
    from kiln.ops.collective import all_reduce_mean

    joined = not dist.is_initialized()
    if joined:
        dist.init_process_group()
    try:
        all_reduce_mean(x, kiln.tensor(True))
    finally:
        if joined:
            dist.destroy_process_group()


@pytest.fixture(scope="module")
def recorded() -> list[tuple]:
    rec = Recorder()
    trace_state.tracer = rec
    try:
        _exercise()
    finally:
        trace_state.tracer = None
    return rec.calls


def test_every_primitive_is_exercised(recorded: list[tuple]) -> None:
    seen = {prim.name for prim, *_ in recorded}
    missing = sorted(set(REGISTRY) - seen)
    assert not missing, f"primitives never exercised by the op cases: {missing}"


def test_abstract_rules_match_kernels(recorded: list[tuple]) -> None:
    bad = []
    checked: set[tuple] = set()
    for prim, avals, params, out in recorded:
        key = (prim.name, avals, repr(sorted(params.items(), key=lambda kv: kv[0])))
        if key in checked:
            continue
        checked.add(key)
        try:
            rule = prim.abstract(*avals, **params)
        except Exception as exc:  # noqa: BLE001 - report every disagreement at once
            bad.append(f"{prim.name}{list(avals)} {params}: abstract raised {exc!r}")
            continue
        if tuple(rule.shape) != tuple(out.shape) or rule.dtype is not out.dtype:
            bad.append(f"{prim.name}{list(avals)} {params}: rule says {rule}, kernel gave {out}")
    assert not bad, "\n".join(bad[:20])
    assert len(checked) > 300


def test_abstract_rules_reject_bad_shapes() -> None:
    f32 = kiln.float32
    cases = [
        ("add", (AbstractValue((2, 3), f32), AbstractValue((4, 3), f32)), {}),
        ("matmul", (AbstractValue((2, 3), f32), AbstractValue((4, 5), f32)), {}),
        ("concat", (AbstractValue((2, 3), f32), AbstractValue((2, 4), f32)), {"axis": 0}),
        ("reshape", (AbstractValue((2, 3), f32),), {"shape": (4, 2)}),
        ("expand", (AbstractValue((3,), f32),), {"shape": (2, 4)}),
        ("permute", (AbstractValue((2, 3), f32),), {"perm": (0, 0)}),
        ("sum", (AbstractValue((2, 3), f32),), {"axes": (2,), "keepdims": False}),
        ("unfold2d", (AbstractValue((1, 1, 2, 2), f32),),
         {"kernel": (3, 3), "stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "pad_value": 0.0}),
    ]
    for name, avals, params in cases:
        with pytest.raises(kiln.ShapeError, match=name if name != "concat" else "concat"):
            REGISTRY[name].abstract(*avals, **params)
    with pytest.raises(TypeError, match="dtype"):
        REGISTRY["add"].abstract(AbstractValue((2,), f32), AbstractValue((2,), kiln.float64))

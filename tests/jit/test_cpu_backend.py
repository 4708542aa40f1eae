"""The CPU backend: elementwise fusion into generated C equals the NumPy interpreter."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F
from kiln.jit.api import trace_graph
from kiln.jit.backends import cpu, interpret
from kiln.jit.backends.cpu import elementwise_groups, toolchain
from kiln.jit.executor import gather_inputs
from kiln.models import gpt, lenet_5, mlp

pytestmark = pytest.mark.skipif(not cpu.available(), reason="no C compiler")


@pytest.fixture
def fuse_everything(monkeypatch, tmp_path):
    """Fuse even tiny arrays, and build kernels in a fresh cache directory."""
    monkeypatch.setattr(elementwise_groups, "MIN_ELEMENTS", 1)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return tmp_path


def _plans(fn, *args):
    graph = trace_graph(fn, *args)
    leaves = list(args)
    inputs = gather_inputs(graph.specs, leaves)
    return graph, inputs


def _special(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype(dtype)
    flat = data.reshape(-1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e-30, 1.0], dtype=dtype)
    flat[: min(len(specials), flat.size)] = specials[: flat.size]
    return kiln.tensor(data)


def _program(x, row, col):
    h = (x * 2.0 + row).relu()
    m = kiln.maximum(h, col) - kiln.minimum(x, 0.5)
    s = kiln.where(m > 1.0, m.sign() * m.abs().sqrt(), -m / (col + 3.0))
    return (s != s).float() + kiln.where(s == s, s, 0.0) * (x >= 0).to(x.dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_program_matches_the_interpreter_bit_for_bit(fuse_everything, dtype):
    x, row, col = _special((6, 5), dtype, 0), _special((5,), dtype, 1), _special((6, 1), dtype, 2)
    graph, inputs = _plans(_program, x, row, col)
    fused = cpu.fuse(graph)
    assert any(n.prim.name.startswith("fused") for n in fused.nodes)
    assert len(fused.nodes) < len(graph.nodes)
    want, _ = interpret.Plan(graph).run(inputs)
    got, _ = cpu.lower(graph).run(inputs)
    np.testing.assert_array_equal(got[0], want[0])  # NaN positions, signs and values alike


@pytest.mark.parametrize("shapes", [((4, 3, 5), (5,)), ((4, 3, 5), (4, 3, 1)), ((4, 3, 5), ()),
                                    ((4, 3, 5), (4, 1, 1)), ((4, 3, 5), (1, 3, 5))])
def test_every_index_form(fuse_everything, shapes):
    a, b = kiln.randn(*shapes[0]), kiln.randn(*shapes[1])
    fn = lambda a, b: (a * b + b).relu()  # noqa: E731
    graph, inputs = _plans(fn, a, b)
    got, _ = cpu.lower(graph).run(inputs)
    np.testing.assert_allclose(got[0], fn(a, b).numpy(), rtol=1e-6)


@pytest.mark.parametrize("shapes", [((4, 1, 5), (1, 3, 1)),  # (4,3,5) from two partial broadcasts
                                    ((3, 6, 7, 7), (1, 6, 1, 1)),  # a conv bias
                                    ((2, 3, 4, 2, 4, 2), (2, 3, 4, 1, 4, 1)),  # a pooling window's maximum
                                    ((5, 1, 3, 1), (1, 4, 1, 2)), ((3, 4, 1), (2, 1, 1, 5))])
def test_partial_broadcasts_fuse_through_strided_forms(fuse_everything, shapes):
    """Inputs broadcast along outer dims anywhere are read through an index computed per row."""
    a, b = _special(shapes[0], "float32", 3), _special(shapes[1], "float32", 4)
    fn = lambda a, b: ((a + b) * 2.0).relu() - b  # noqa: E731
    graph, inputs = _plans(fn, a, b)
    fused = cpu.fuse(graph)
    assert [n.prim.name for n in fused.nodes] == ["fused[add -> mul -> relu -> sub]"]
    assert any(f.startswith(elementwise_groups.STRIDED) for f in fused.nodes[0].prim.forms)
    got, _ = cpu.lower(graph).run(inputs)
    want, _ = interpret.Plan(graph).run(inputs)
    np.testing.assert_array_equal(got[0], want[0])


def test_plain_forms_are_preferred_to_strided_ones():
    assert elementwise_groups.choose_split([(4, 3, 5), (5,)], (4, 3, 5), strided=True) == (2, ["full", "row"])
    assert elementwise_groups.choose_split([(4, 3, 5), (4, 3, 1)], (4, 3, 5), strided=True) == (2, ["full", "col"])
    assert elementwise_groups.choose_split([(4, 1, 5), (1, 3, 1)], (4, 3, 5)) is None  # (strided forms not asked for)


@pytest.mark.parametrize("seed", range(40))
def test_strided_form_indexes_the_element_numpy_broadcasts(seed):
    """The strided index expression, evaluated for every output element, picks the element that
    NumPy's broadcasting puts there (random shapes up to 5-D with random broadcast dims)."""
    rng = np.random.default_rng(seed)
    out_shape = tuple(int(d) for d in rng.integers(1, 4, rng.integers(1, 6)))
    shape = tuple(d if rng.random() < 0.5 else 1 for d in out_shape)[int(rng.integers(0, 2)):]
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    want = np.broadcast_to(values, out_shape).reshape(-1)
    for split in range(len(out_shape) + 1):
        form = elementwise_groups.strided_form(shape, out_shape, split)
        if form is None:
            continue
        expression = re.sub(r"(\d+)u\b", r"\1", form[len(elementwise_groups.STRIDED):])  # C to Python
        expression = expression.replace("(unsigned)", "").replace("(long long)", "").replace("/", "//")
        inner = int(np.prod(out_shape[split:]))
        outer = int(np.prod(out_shape[:split]))
        got = [values.reshape(-1)[eval(expression, {"o": o, "j": j, "inner": inner})]  # noqa: S307
               for o in range(outer) for j in range(inner)]
        np.testing.assert_array_equal(got, want, err_msg=f"{shape} over {out_shape} split {split}: {form}")
    # every broadcast fits some split
    assert elementwise_groups.strided_form(shape, out_shape, len(out_shape)) is not None


def test_expand_is_read_through_its_input(fuse_everything):
    x = kiln.randn(8, 16)
    s = kiln.randn(8, 1)
    graph, inputs = _plans(lambda x, s: x * s.expand(8, 16) + 1.0, x, s)
    fused = cpu.fuse(graph)
    assert [n.prim.name for n in fused.nodes] == ["fused[expand -> mul -> add]"]
    got, _ = cpu.lower(graph).run(inputs)
    np.testing.assert_allclose(got[0], (x * s + 1.0).numpy(), rtol=1e-6)


def test_runtime_broadcast_change_falls_back_to_numpy(fuse_everything):
    x = kiln.randn(1, 6)
    f = kiln.compile(lambda x, b: (x + b) * 2.0, backend="cpu", dynamic_dims={0: {0: "B"}})
    b = kiln.randn(6)
    for batch in (1, 4):  # traced with B=1: x looked "full"; with B=4 it broadcasts differently
        x = kiln.randn(batch, 6)
        np.testing.assert_allclose(f(x, b).numpy(), ((x + b) * 2.0).numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "lenet", "gpt"])
def test_models_train_identically_on_the_cpu_backend(fuse_everything, name):
    kiln.manual_seed(0)
    if name == "mlp":
        model, x, y = mlp(12, (16,), 4), kiln.randn(5, 12), kiln.randint(0, 4, (5,))
    elif name == "lenet":
        model, x, y = lenet_5(), kiln.randn(2, 1, 32, 32), kiln.randint(0, 10, (2,))
    else:
        model, x, y = gpt(20, 1, 2, 8, 6), kiln.randint(0, 20, (2, 6)), kiln.randint(0, 20, (2, 6))
    model = model.double()
    if x.is_floating_point():
        x = x.double()  # a float64 model takes float64 inputs (layers don't promote, as in PyTorch)

    def loss(out):
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    compiled = kiln.compile(model, backend="cpu")
    for _ in range(2):
        model.zero_grad()
        eager = loss(model(x))
        eager.backward()
        want = [p.grad.numpy().copy() for p in model.parameters()]
        model.zero_grad()
        got = loss(compiled(x))
        got.backward()
        np.testing.assert_allclose(got.item(), eager.item(), rtol=1e-10)
        for p, w in zip(model.parameters(), want):
            np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-8, atol=1e-12)
    entry = compiled.cache_entries[0]
    assert any(n.prim.name.startswith("fused") for n in entry.backward_plan.graph.nodes)


def test_kernels_are_cached_on_disk(fuse_everything):
    x = kiln.randn(3, 3)
    graph, _ = _plans(lambda x: (x * 3.0).relu(), x)
    cpu.lower(graph)
    built = list((fuse_everything / "kernels").glob("*.so"))
    assert len(built) == 1
    toolchain._loaded.clear()
    cpu.lower(graph)  # loads the cached library, builds nothing new
    assert list((fuse_everything / "kernels").glob("*.so")) == built


def test_without_a_compiler_it_warns_once_and_interprets(fuse_everything, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/kiln-cc")
    monkeypatch.setattr(toolchain, "find_compiler", lambda: None)
    monkeypatch.setattr(cpu, "_warned", False)
    x = kiln.randn(3, 3)
    graph, inputs = _plans(lambda x: (x * 3.0).relu(), x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = cpu.lower(graph)
        cpu.lower(graph)
    assert sum("code generator is unavailable" in str(w.message) for w in caught) == 1
    assert not any(n.prim.name.startswith("fused") for n in plan.graph.nodes)
    np.testing.assert_allclose(plan.run(inputs)[0][0], (x * 3.0).relu().numpy())


def test_auto_backend_is_cpu_when_a_compiler_exists():
    f = kiln.compile(lambda x: x + 1)
    assert f.backend_name == "cpu"

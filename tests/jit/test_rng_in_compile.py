"""Random state changed (or read) inside a compiled function is a graph break; outside generators work.

Eager code reseeds, sets or reads the stream on every call; a compiled plan only replays its
random ops. Each case is compared with eager over several calls from the same starting seed
on both backends: with fullgraph=False it falls back to eager (one warning naming the call,
its file:line and the fix), with fullgraph=True it raises GraphBreakError.
"""
from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

import kiln
from kiln.jit.backends import BACKENDS, cpu
from kiln.jit.trace import GraphBreakError

_BACKENDS = ["interpret"] + (["cpu"] if "cpu" in BACKENDS and cpu.available() else [])
CALLS = 4


@pytest.fixture(params=_BACKENDS)
def backend(request):
    return request.param


def _values(out):
    if isinstance(out, (tuple, list)):
        return [_values(o) for o in out]
    return out.numpy().copy() if isinstance(out, kiln.Tensor) else out


def _assert_same(got, want) -> None:
    if isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
    elif isinstance(want, np.ndarray):
        np.testing.assert_array_equal(got, want)
    else:
        assert got == want


def _calls(fn, *args):
    """CALLS results of fn(*args) from seed 0, and the global stream's state afterwards."""
    kiln.manual_seed(0)
    out = [_values(fn(*args)) for _ in range(CALLS)]
    return out, kiln.get_rng_state()


def _compare(fn, backend, *args, fresh=None):
    """Run eager then compiled from the same seed; `fresh()` rebuilds outside state before each run.
    Returns the compiled function and the RuntimeWarnings the compiled calls gave."""
    if fresh is not None:
        args = fresh()
    want = _calls(fn, *args)
    f = kiln.compile(fn, backend=backend)
    if fresh is not None:
        args = fresh()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _calls(f, *args)
    _assert_same(got[0], want[0])
    assert got[1] == want[1]
    return f, [w for w in caught if issubclass(w.category, RuntimeWarning)]


def _line_of(fn, text) -> int:
    """The line of fn's source holding `text` (where the warning must point); `text` may also be
    (another function, text) for a call made in a helper."""
    if isinstance(text, tuple):
        fn, text = text
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ---- state changes inside: graph breaks ---------------------------------------------------
def reseeds(x):
    kiln.manual_seed(5)
    return x + kiln.rand(*x.shape)


def sets_state(x):
    kiln.set_rng_state((7, 8))
    return x + kiln.randn(*x.shape)


def seeded_generator_inside(x):
    g = kiln.Generator(3)
    return x + kiln.rand(*x.shape, generator=g)


def unseeded_generator_inside(x):
    g = kiln.Generator()
    return x + kiln.randn(*x.shape, generator=g)


def generator_seeded_inside(x):
    g = kiln.Generator()
    g.manual_seed(9)
    return x + kiln.rand(*x.shape, generator=g)


OUTSIDE = kiln.Generator(11)


def reseeds_an_outside_generator(x):
    OUTSIDE.manual_seed(4)
    return x + kiln.rand(*x.shape, generator=OUTSIDE)


def sets_an_outside_generators_state(x):
    OUTSIDE.set_state((4, 0))
    return x + kiln.rand(*x.shape, generator=OUTSIDE)


def _rewind(generator):
    generator.offset = 0  # (a store in a helper: the compiled function's own stores are guarded already)


def rewinds_an_outside_generator(x):
    _rewind(OUTSIDE)
    return x + kiln.rand(*x.shape, generator=OUTSIDE)


def returns_an_outside_generators_offset(x):
    return x + kiln.rand(*x.shape, generator=OUTSIDE), OUTSIDE.offset


def returns_the_state(x):
    return x + kiln.rand(*x.shape), kiln.get_rng_state()


def returns_the_initial_seed(x):
    return x * 2, kiln.initial_seed()


# (function, the call the message names, the text of the line it is on)
BREAKS = [
    (reseeds, "kiln.manual_seed()", "kiln.manual_seed(5)"),
    (sets_state, "kiln.set_rng_state()", "kiln.set_rng_state"),
    (seeded_generator_inside, "a kiln.Generator created inside", "generator=g"),
    (unseeded_generator_inside, "a kiln.Generator created inside", "generator=g"),
    (generator_seeded_inside, "a kiln.Generator created inside", "generator=g"),
    (reseeds_an_outside_generator, "Generator.manual_seed()", "OUTSIDE.manual_seed"),
    (sets_an_outside_generators_state, "Generator.set_state()", "OUTSIDE.set_state"),
    (rewinds_an_outside_generator, "setting Generator.offset", (_rewind, "generator.offset = 0")),
    (returns_an_outside_generators_offset, "reading Generator.offset", "OUTSIDE.offset"),
    (returns_the_state, "kiln.get_rng_state()", "kiln.get_rng_state()"),
    (returns_the_initial_seed, "kiln.initial_seed()", "kiln.initial_seed()"),
]


@pytest.mark.parametrize("fn, call, line", BREAKS, ids=[b[0].__name__ for b in BREAKS])
def test_rng_state_change_inside_falls_back_to_eager_and_warns_once(backend, fn, call, line):
    fresh = (lambda: (OUTSIDE.manual_seed(11), kiln.ones(3, 2))[1:]) if "outside" in fn.__name__ else None
    f, warned = _compare(fn, backend, kiln.ones(3, 2), fresh=fresh)
    assert f.stats.fallbacks == CALLS - 1 and f.stats.traces == 1
    assert len(warned) == 1, [str(w.message) for w in warned]
    text = str(warned[0].message)
    assert "falling back to eager" in text and call in text and "Fix:" in text
    assert f"{__file__}:{_line_of(fn, line)}" in text


@pytest.mark.parametrize("fn, call, line", BREAKS, ids=[b[0].__name__ for b in BREAKS])
def test_rng_state_change_inside_with_fullgraph_is_a_graph_break_error(backend, fn, call, line):
    f = kiln.compile(fn, fullgraph=True, backend=backend)
    with pytest.raises(GraphBreakError, match="random state: .*" + re.escape(call)):
        f(kiln.ones(3, 2))
    with pytest.raises(GraphBreakError, match=re.escape(f"{__file__}:{_line_of(fn, line)}")):
        f(kiln.ones(3, 2))


def test_seed_from_entropy_inside_is_a_graph_break(backend):
    def fn(x):
        kiln.seed()
        return x + kiln.rand(*x.shape)

    f = kiln.compile(fn, backend=backend)
    with pytest.warns(RuntimeWarning, match=r"kiln\.seed\(\)"):
        f(kiln.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        for _ in range(CALLS - 1):
            f(kiln.ones(3))
    assert f.stats.fallbacks == CALLS - 1
    with pytest.raises(GraphBreakError, match=r"kiln\.seed\(\)"):
        kiln.compile(fn, fullgraph=True, backend=backend)(kiln.ones(3))


# ---- generators made outside: one plan, equal to eager --------------------------------------
def test_closed_over_generator_advances_like_eager(backend):
    gen = kiln.Generator(21)

    def fn(x):
        return x + kiln.rand(*x.shape, generator=gen) + kiln.randn(2, generator=gen).sum()

    f, warned = _compare(fn, backend, kiln.zeros(5), fresh=lambda: (gen.manual_seed(21), kiln.zeros(5))[1:])
    assert warned == [] and f.stats.traces == 1 and f.stats.hits == CALLS - 1
    assert gen.get_state() == (21, CALLS * 12)  # 5 uniforms -> 8 slots, 2 normals -> 4 slots per call


def test_generator_passed_as_an_argument_advances_like_eager(backend):
    def fn(x, g):
        return x + kiln.randn(*x.shape, generator=g)

    gen = kiln.Generator(8)
    f, warned = _compare(fn, backend, kiln.zeros(4), gen, fresh=lambda: (kiln.zeros(4), gen.manual_seed(8)))
    assert warned == [] and f.stats.traces == 1


def test_generator_made_inside_but_never_drawn_from_is_fine(backend):
    def fn(x):
        g = kiln.Generator(1)
        g.manual_seed(2)
        return x + kiln.rand(*x.shape), g.get_state()

    f, warned = _compare(fn, backend, kiln.zeros(3))
    assert warned == [] and f.stats.traces == 1 and f.stats.fallbacks == 0


def test_state_changes_outside_the_compiled_function_are_seen(backend):
    f = kiln.compile(lambda x: x + kiln.rand(*x.shape), backend=backend)
    x = kiln.zeros(4)
    for seed in (1, 2, 1):
        kiln.manual_seed(seed)
        want = (x + kiln.rand(4)).numpy().copy()
        kiln.manual_seed(seed)
        np.testing.assert_array_equal(f(x).numpy(), want)
    kiln.set_rng_state((1, 4))
    want = (x + kiln.rand(4)).numpy().copy()
    kiln.set_rng_state((1, 4))
    np.testing.assert_array_equal(f(x).numpy(), want)
    assert f.stats.traces == 1

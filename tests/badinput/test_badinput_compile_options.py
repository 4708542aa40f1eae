"""Bad targets and options to kiln.compile / kiln.jit get a specific exception saying what was expected."""
from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln import nn


def fn(x):
    return x * 2


@pytest.mark.parametrize("target", [42, 3.5, "model", b"bytes", [fn], {"f": fn}, (fn,), kiln.ones(2)])
def test_non_callable_targets_are_type_errors_with_the_seed_message(target):
    with pytest.raises(TypeError) as info:
        kiln.compile(target)
    assert str(info.value) == f"kiln.compile() expects an nn.Module or a callable, got {type(target)}"


def test_module_class_instead_of_instance_is_a_type_error():
    with pytest.raises(TypeError, match=r"Linear.*class.*instance|instance.*Linear"):
        kiln.compile(nn.Linear)


@pytest.mark.parametrize("bad", [42, None, "f", kiln.ones(1)])
def test_jit_and_djit_reject_non_callables(bad):
    for make in (kiln.jit, kiln.djit, lambda f: kiln.jit(f, static=False)):
        if bad is None:
            assert callable(make(None))  # no target: a decorator
            continue
        with pytest.raises(TypeError, match="callable"):
            make(bad)


@pytest.mark.parametrize("passes, pattern", [
    (["CSE"], r"passes.*'CSE'"),
    ([None], r"passes.*None"),
    ("CSE", r"passes.*list.*str"),
    (42, r"passes.*list.*int"),
])
def test_non_callable_passes_are_type_errors(passes, pattern):
    with pytest.raises(TypeError, match=pattern):
        kiln.compile(fn, passes=passes)


def test_a_single_pass_object_is_accepted_as_a_pass_list():
    class Count:
        name = "Count"
        runs = 0

        def __call__(self, graph):
            Count.runs += 1
            return graph

    f = kiln.compile(fn, passes=Count())
    np.testing.assert_array_equal(f(kiln.ones(2)).numpy(), 2.0)
    assert Count.runs >= 1


def test_pass_returning_a_non_graph_is_a_type_error_naming_the_pass():
    class Broken:
        name = "Broken"

        def __call__(self, graph):
            return None

    f = kiln.compile(fn, passes=[Broken()])
    with pytest.raises(TypeError, match=r"Broken.*NoneType.*Graph"):
        f(kiln.ones(2))
    assert f.stats.cache_size == 0


@pytest.mark.parametrize("eviction", ["random", "LRU ", None, 1])
def test_bad_eviction_is_a_value_error_listing_the_choices(eviction):
    with pytest.raises(ValueError, match=r"'lru' or 'fifo'.*" + re.escape(repr(eviction))):
        kiln.compile(fn, eviction=eviction)


@pytest.mark.parametrize("backend", ["tpu", "CUDA!", None, 3])
def test_bad_backend_is_a_value_error_listing_the_choices(backend):
    with pytest.raises(ValueError) as info:
        kiln.compile(fn, backend=backend)
    message = str(info.value)
    assert repr(backend) in message and "'auto'" in message and "'interpret'" in message


@pytest.mark.parametrize("size", [0, -1, 2.5, "8", True, None.__class__])
def test_bad_cache_size_is_a_value_error(size):
    with pytest.raises(ValueError, match="positive int"):
        kiln.compile(fn, max_cache_entries=size)
    with pytest.raises(ValueError, match="positive int"):
        kiln.compile(fn, max_cache_size=size)


@pytest.mark.parametrize("flag", [1, "yes", None])
def test_fullgraph_must_be_a_bool(flag):
    with pytest.raises(TypeError, match="fullgraph must be True or False"):
        kiln.compile(fn, fullgraph=flag)


def test_unknown_compile_options_are_type_errors():
    with pytest.raises(TypeError, match="unexpected keyword argument 'mode'"):
        kiln.compile(fn, mode="max-autotune")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        nn.Linear(2, 2).compile(bogus=1)


def test_bad_options_are_reported_when_compiling_not_when_called():
    """A decorator with a bad option fails at decoration time, before any call."""
    with pytest.raises(ValueError, match="eviction"):
        @kiln.compile(eviction="mru")
        def g(x):
            return x

"""Pytrees: flatten/unflatten round trips, and compiled functions taking and returning them."""
from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import kiln
from kiln.jit.pytree import LEAF, TreeDef, flatten, tree_map, unflatten


class Pair(NamedTuple):
    first: object
    second: object


@dataclasses.dataclass
class Batch:
    x: object
    y: object
    meta: object = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: object
    b: object


@dataclasses.dataclass
class WithDerived:
    a: object
    n: int = 0
    derived: object = dataclasses.field(default=None, init=False)

    def __post_init__(self):
        self.derived = "computed"


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b


TREES = [
    (1, 2, 3),
    [1, [2, 3], ()],
    {"b": 1, "a": (2, 3)},
    Pair(1, [2, 3]),
    Batch(1, {"k": 2}, meta="m"),
    Frozen(1, 2),
    collections.OrderedDict([("z", 1), ("a", 2)]),
    {"outer": [Pair(1, Batch(2, 3)), {"inner": (4, [5])}], "none": None},
    (),
    [],
    {},
    7,
]


@pytest.mark.parametrize("tree", TREES, ids=lambda t: type(t).__name__)
def test_flatten_unflatten_round_trip(tree):
    leaves, td = flatten(tree)
    rebuilt = unflatten(td, leaves)
    assert _same(rebuilt, tree)
    assert td.num_leaves == len(leaves)
    # the same structure with other leaves
    other = unflatten(td, [f"leaf{i}" for i in range(len(leaves))])
    assert flatten(other)[1] == td


def test_leaf_order_is_depth_first_in_insertion_order():
    tree = {"b": (1, 2), "a": [3, Pair(4, 5)], "c": Batch(6, 7, 8)}
    assert flatten(tree)[0] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_treedefs_compare_by_structure():
    assert flatten((1, 2))[1] == flatten((3, 4))[1]
    assert hash(flatten((1, 2))[1]) == hash(flatten((3, 4))[1])
    assert flatten((1, 2))[1] != flatten([1, 2])[1]
    assert flatten((1, 2))[1] != flatten((1, 2, 3))[1]
    assert flatten({"a": 1})[1] != flatten({"b": 1})[1]
    assert flatten({"a": 1})[1] != flatten(collections.OrderedDict(a=1))[1]
    assert flatten(Pair(1, 2))[1] != flatten((1, 2))[1]
    assert flatten(Batch(1, 2))[1] != flatten(Frozen(1, 2))[1]
    assert flatten(5)[1] == LEAF


def test_treedef_repr():
    _, td = flatten({"a": (1, [2]), "p": Pair(3, 4)})
    assert repr(td) == "{'a': (*, [*]), 'p': Pair(*, *)}"


def test_dataclass_with_init_false_field_round_trips():
    w = WithDerived(1, 2)
    w.derived = "changed after init"
    leaves, td = flatten(w)
    assert leaves == [1, 2, "changed after init"]
    rebuilt = unflatten(td, leaves)
    assert isinstance(rebuilt, WithDerived)
    assert (rebuilt.a, rebuilt.n, rebuilt.derived) == (1, 2, "changed after init")


def test_defaultdict_round_trips_with_its_factory():
    d = collections.defaultdict(list, {"a": 1, "b": 2})
    leaves, td = flatten(d)
    rebuilt = unflatten(td, leaves)
    assert type(rebuilt) is collections.defaultdict and rebuilt == d
    assert rebuilt["missing"] == []


def test_is_leaf_stops_descent():
    leaves, td = flatten({"a": (1, 2), "b": [3]}, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), 3]
    assert unflatten(td, leaves) == {"a": (1, 2), "b": [3]}


def test_tree_map():
    assert tree_map(lambda v: v * 10, {"a": (1, 2), "b": Pair(3, [4])}) == {"a": (10, 20), "b": Pair(30, [40])}


def test_unflatten_needs_enough_leaves():
    _, td = flatten((1, 2, 3))
    with pytest.raises((StopIteration, RuntimeError, ValueError)):
        unflatten(td, [1, 2])


def test_treedef_type():
    assert isinstance(flatten([1])[1], TreeDef)


# ---- compiled functions take and return pytrees ------------------------------------------


def t(*values):
    return kiln.tensor(np.array(values, dtype=np.float32))


def close(a, b):
    np.testing.assert_allclose(a.numpy(), np.asarray(b, dtype=np.float32), rtol=1e-6)


def test_tuple_and_list_in_and_out():
    f = kiln.compile(lambda pair, items: ([pair[0] + pair[1]], (items[0] * items[1], items[2])))
    with kiln.no_grad():
        out = f((t(1, 2), t(3, 4)), [t(1), t(2), t(5)])
        assert isinstance(out, tuple) and isinstance(out[0], list) and isinstance(out[1], tuple)
        out = f((t(10, 20), t(1, 1)), [t(3), t(4), t(7)])
    close(out[0][0], [11, 21])
    close(out[1][0], [12])
    close(out[1][1], [7])
    assert f.stats.hits == 1


def test_dict_in_and_out():
    f = kiln.compile(lambda d: {"sum": d["a"] + d["b"], "diff": d["a"] - d["b"]})
    with kiln.no_grad():
        f({"a": t(1, 2), "b": t(3, 4)})
        out = f({"a": t(5, 5), "b": t(1, 2)})
    assert set(out) == {"sum", "diff"}
    close(out["sum"], [6, 7])
    close(out["diff"], [4, 3])
    assert f.stats.hits == 1


def test_ordered_dict_tensors_are_inputs():
    f = kiln.compile(lambda d: d["a"] * d["b"])
    with kiln.no_grad():
        f(collections.OrderedDict(a=kiln.zeros(2000), b=kiln.ones(2000)))
        a = kiln.zeros(2000)
        a._data[1000] = 7.0  # differs from the first call only where repr() shows "..."
        out = f(collections.OrderedDict(a=a, b=kiln.ones(2000)))
    assert out.numpy()[1000] == 7.0
    assert f.stats.hits == 1


def test_namedtuple_in_and_out():
    f = kiln.compile(lambda p: Pair(p.first * 2, p.second + p.first))
    with kiln.no_grad():
        f(Pair(t(1), t(2)))
        out = f(Pair(t(3), t(4)))
    assert isinstance(out, Pair)
    close(out.first, [6])
    close(out.second, [7])
    assert f.stats.hits == 1


def test_dataclass_in_and_out():
    def step(b: Batch) -> Batch:
        return Batch(x=b.x * 2, y=b.y + b.x, meta=b.meta)

    f = kiln.compile(step)
    with kiln.no_grad():
        f(Batch(t(1, 2), t(3, 4), meta="train"))
        out = f(Batch(t(5, 6), t(1, 1), meta="train"))
    assert isinstance(out, Batch) and out.meta == "train"
    close(out.x, [10, 12])
    close(out.y, [6, 7])
    assert f.stats.hits == 1


def test_nested_pytree_in_and_out():
    def f(tree):
        (a, b), d = tree["pair"], tree["more"]
        return {"out": [Pair(a + b, d["c"] * 2)], "n": tree["n"]}

    cf = kiln.compile(f)
    with kiln.no_grad():
        cf({"pair": (t(1), t(2)), "more": {"c": t(3)}, "n": 4})
        out = cf({"pair": (t(10), t(20)), "more": {"c": t(30)}, "n": 4})
    close(out["out"][0].first, [30])
    close(out["out"][0].second, [60])
    assert out["n"] == 4
    assert cf.stats.hits == 1


def test_static_leaves_are_part_of_the_key():
    f = kiln.compile(lambda x, opts: x * opts["k"])
    with kiln.no_grad():
        close(f(t(1, 2), {"k": 2}), [2, 4])
        close(f(t(1, 2), {"k": 3}), [3, 6])
        close(f(t(1, 2), {"k": 3}), [3, 6])
    assert (f.stats.misses, f.stats.hits) == (2, 1)


def test_a_new_dict_key_set_misses():
    f = kiln.compile(lambda d: sum(d.values()))
    with kiln.no_grad():
        close(f({"a": t(1), "b": t(2)}), [3])
        close(f({"a": t(1), "c": t(5)}), [6])
        close(f({"a": t(1), "b": t(2), "c": t(4)}), [7])
    assert f.stats.misses == 3


def test_keyword_arguments_are_inputs_not_constants():
    def f(x, *, bias, scale=2.0):
        return x * scale + bias

    cf = kiln.compile(f)
    with kiln.no_grad():
        close(cf(t(1, 2), bias=t(1, 1)), [3, 5])
        close(cf(t(1, 2), bias=t(10, 20)), [12, 24])
        close(cf(t(3, 4), bias=t(0, 0)), [6, 8])
        close(cf(t(1, 2), bias=t(0, 0), scale=3.0), [3, 6])
    assert (cf.stats.misses, cf.stats.hits) == (2, 2)


def test_pytree_outputs_carry_gradients():
    w = kiln.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    f = kiln.compile(lambda b: {"loss": (b.x * w).sum(), "aux": Pair(b.y * 2, b.x)})
    for _ in range(2):
        w.grad = None
        out = f(Batch(t(3, 4), t(5, 6)))
        out["loss"].backward()
        close(w.grad, [3, 4])
        close(out["aux"].first, [10, 12])
    assert f.stats.hits == 1


def test_an_input_returned_unchanged_is_the_same_tensor():
    f = kiln.compile(lambda d: (d["x"], d["x"] + 1))
    x = t(1, 2)
    with kiln.no_grad():
        f({"x": x})
        same, plus = f({"x": x})
    assert same is x
    close(plus, [2, 3])

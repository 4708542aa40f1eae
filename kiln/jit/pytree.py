"""Pytrees: flatten nested tuples, lists, dicts, namedtuples and dataclasses into leaves.

`flatten(tree)` returns the leaves and a hashable `TreeDef` that records the
structure; `unflatten(treedef, leaves)` rebuilds it. Tensors are leaves; other
leaves (ints, strings, None, ...) are kept as leaves too and the caller decides
which of them are static.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Hashable


class TreeDef:
    """The structure of a pytree: a node kind, its static metadata and its children."""

    __slots__ = ("kind", "meta", "children", "_hash")

    def __init__(self, kind: str, meta: Any, children: tuple["TreeDef", ...]):
        self.kind = kind
        self.meta = meta
        self.children = children
        self._hash = hash((kind, _hashable(meta), children))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TreeDef) and self._hash == other._hash and self.kind == other.kind
                and self.meta == other.meta and self.children == other.children)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind in ("dict", "odict", "defaultdict"):
            keys = self.meta[1] if self.kind == "defaultdict" else self.meta
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(keys, self.children))
            return "{" + inner + "}" if self.kind == "dict" else f"{self.kind}({{{inner}}})"
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "tuple":
            return f"({inner})"
        return f"{getattr(self.meta[0], '__name__', self.kind)}({inner})"

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)



def _hashable(meta: Any) -> Hashable:
    try:
        hash(meta)
        return meta
    except TypeError:
        return repr(meta)


LEAF = TreeDef("leaf", None, ())


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """Leaves of `tree` in order, and its structure."""
    leaves: list[Any] = []
    treedef = _flatten(tree, leaves, is_leaf)
    return leaves, treedef


def _flatten(x: Any, leaves: list, is_leaf: Callable | None) -> TreeDef:
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return LEAF
    t = type(x)
    if t is tuple:
        return TreeDef("tuple", None, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if t is list:
        return TreeDef("list", None, tuple(_flatten(c, leaves, is_leaf) for c in x))
    if t is dict:
        keys = tuple(x.keys())
        return TreeDef("dict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    if t is collections.OrderedDict:
        keys = tuple(x.keys())
        return TreeDef("odict", keys, tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    if t is collections.defaultdict:
        keys = tuple(x.keys())
        return TreeDef("defaultdict", (x.default_factory, keys),
                       tuple(_flatten(x[k], leaves, is_leaf) for k in keys))
    if _is_namedtuple(x):
        return TreeDef("namedtuple", (t,), tuple(_flatten(c, leaves, is_leaf) for c in x))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = tuple(f.name for f in dataclasses.fields(x))
        return TreeDef("dataclass", (t, names), tuple(_flatten(getattr(x, n), leaves, is_leaf) for n in names))
    if isinstance(x, (tuple, list)):  # other subclasses (e.g. max()'s (values, indices)): rebuilt as cls(items)
        return TreeDef("sequence", t, tuple(_flatten(c, leaves, is_leaf) for c in x))
    leaves.append(x)
    return LEAF


def unflatten(treedef: TreeDef, leaves: list[Any] | tuple) -> Any:
    """Rebuild a pytree of `treedef`'s structure from `leaves`."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    return out


def _unflatten(td: TreeDef, it: Any) -> Any:
    kind = td.kind
    if kind == "leaf":
        return next(it)
    children = [_unflatten(c, it) for c in td.children]
    if kind == "tuple":
        return tuple(children)
    if kind == "list":
        return children
    if kind == "dict":
        return dict(zip(td.meta, children))
    if kind == "odict":
        return collections.OrderedDict(zip(td.meta, children))
    if kind == "defaultdict":
        return collections.defaultdict(td.meta[0], zip(td.meta[1], children))
    if kind == "namedtuple":
        return td.meta[0](*children)
    if kind == "sequence":
        return td.meta(children)
    cls, names = td.meta
    return _build_dataclass(cls, dict(zip(names, children)))


def _build_dataclass(cls: type, values: dict[str, Any]) -> Any:
    """Rebuild a dataclass: init fields through __init__, the rest (init=False) set afterwards."""
    init = {f.name for f in dataclasses.fields(cls) if f.init}
    obj = cls(**{k: v for k, v in values.items() if k in init})
    for k, v in values.items():
        if k not in init:
            object.__setattr__(obj, k, v)  # works for frozen dataclasses too
    return obj


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    leaves, td = flatten(tree)
    return unflatten(td, [fn(x) for x in leaves])

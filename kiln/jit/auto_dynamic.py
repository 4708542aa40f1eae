"""Automatic dynamic dims: a tensor dim that changes size between calls becomes symbolic.

``kiln.compile(model)`` first compiles a plan for the exact shapes it sees. When a later call
differs from an earlier one only in some tensor dims (a sequence that grows during text
generation, a smaller last batch), those dims are marked dynamic, and that call traces once
more with them as symbolic sizes (as if ``dynamic_dims`` had named them). That one plan then
serves every other size, so a growing sequence costs two traces instead of one per length.
This is what PyTorch calls automatic dynamic shapes.

- The static plans already compiled keep serving their exact sizes: a call looks up its
  static key first, and only a miss tries the key with the dynamic dims.
- Sizes 0 and 1 stay concrete in keys and traces (`trace.dynamic_key_dim`): a dim of 1
  broadcasts, so a plan traced at size 1 gets its own static key.
- A trace that turns such a dim into a plain Python number (``float(x.shape[1])``) is
  specialized to that size anyway: the dim becomes static again, for good, with no warning
  (the warning about specializing is for dims the user named in ``dynamic_dims``).
- ``dynamic=False`` turns this off (each new size is a new plan); ``dynamic=True`` makes every
  dim of every tensor argument dynamic from the first call. ``dynamic_dims`` still names dims
  explicitly; an explicitly named dim keeps its name.

Dims are recorded per argument structure (pytree) and leaf index, with the leaf's rank: a call
whose leaf has another rank does not use them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from .cache import KEY_FIELDS, CacheKey
from .trace import dynamic_key_dim

LeafDims = dict[int, tuple[int, dict[int, str]]]  # leaf index -> (its rank, {dim: symbol name})


@dataclass(frozen=True)
class MarkedDim:
    """One dim made dynamic: where it is, its symbol, and the two sizes that showed it changes."""

    leaf: int
    dim: int
    name: str
    old: Any
    new: Any


def validate_dynamic(dynamic: Any) -> bool | None:
    """``dynamic`` as given (None, True or False), or a TypeError saying what is expected."""
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"dynamic must be None (automatic: a dim that changes size becomes symbolic), True "
                        f"(every dim symbolic from the first call) or False (a plan per size), got {dynamic!r}")
    return dynamic


class AutoDynamicDims:
    """The dims one compiled function has made dynamic, per argument structure."""

    def __init__(self, dynamic: bool | None, reserved: Iterable[str] = ()):
        self.mode = validate_dynamic(dynamic)
        self.by_structure: dict[Any, LeafDims] = {}
        self._reserved = set(reserved)  # names dynamic_dims uses: never reused for an automatic dim
        self._count = 0
        self._static: set[tuple[Any, int, int]] = set()  # (structure, leaf, dim) made static again

    @property
    def enabled(self) -> bool:
        return self.mode is not False

    def dims_for(self, structure: Any) -> LeafDims | None:
        """The dynamic dims recorded for calls of this argument structure, or None."""
        return self.by_structure.get(structure) if self.by_structure else None

    def mark_changed(self, key: CacheKey, earlier: Iterable[CacheKey | None]) -> list[MarkedDim]:
        """Mark the dims in which `key` differs from an earlier key of the same call signature (every
        other part of the key equal, each tensor of the same rank); returns the newly marked dims."""
        if not self.enabled:
            return []
        for other in earlier:
            if other is None or other == key:
                continue
            changed = _changed_dims(key, other)
            if changed:
                return self._mark(key, [(leaf, dim, old, new) for leaf, dim, new, old in changed])
        return []

    def mark_all(self, key: CacheKey) -> list[MarkedDim]:
        """``dynamic=True``: every dim of every tensor in `key` (those of size 0 and 1 stay concrete in keys)."""
        if self.mode is not True:
            return []
        return self._mark(key, [(leaf, dim, None, size) for leaf, shape, *_ in key.tensors
                                for dim, size in enumerate(shape) if isinstance(size, int)])

    def _mark(self, key: CacheKey, dims: list[tuple[int, int, Any, Any]]) -> list[MarkedDim]:
        recorded = self.by_structure.setdefault(key.structure, {})
        ranks = {leaf: len(shape) for leaf, shape, *_ in key.tensors}
        marked = []
        for leaf, dim, old, new in dims:
            if (key.structure, leaf, dim) in self._static:
                continue
            rank, names = recorded.setdefault(leaf, (ranks[leaf], {}))
            if rank != ranks[leaf] or dim in names:
                continue
            names[dim] = self._new_name()
            marked.append(MarkedDim(leaf, dim, names[dim], old, new))
        return marked

    def names(self) -> frozenset[str]:
        """Every symbol given to an automatic dim so far."""
        return frozenset(name for leaves in self.by_structure.values() for _, dims in leaves.values()
                         for name in dims.values())

    def unmark(self, names: set[str]) -> list[str]:
        """Make the dims behind `names` static again, for good (a trace specialized them to one size);
        returns explain() lines."""
        lines = []
        for structure, leaves in list(self.by_structure.items()):
            for leaf, (_, dims) in list(leaves.items()):
                for dim, name in list(dims.items()):
                    if name in names:
                        del dims[dim]
                        self._static.add((structure, leaf, dim))
                        lines.append(f"  static again: {name} (leaf {leaf}, dim {dim}) became a plain Python "
                                     "number while tracing, so plans are compiled per size for it")
                if not dims:
                    del leaves[leaf]
            if not leaves:
                del self.by_structure[structure]
        return lines

    def _new_name(self) -> str:
        while True:
            name = f"s{self._count}"
            self._count += 1
            if name not in self._reserved:
                return name


def widen(keyed: tuple[CacheKey, dict | None, dict], auto: LeafDims) -> tuple[CacheKey, dict | None, dict]:
    """A call's (key, sizes by symbol, leaf -> {dim: symbol}) with the automatic dims of `auto` made
    symbolic: each such dim of a tensor of the recorded rank, unless dynamic_dims already names it
    or its size is 0 or 1 (`trace.dynamic_key_dim`). Unchanged when no dim applies."""
    key, dims, dynamic = keyed
    tensors = list(key.tensors)
    sizes = dict(dims or {})
    named = {leaf: dict(d) for leaf, d in dynamic.items()}
    for k, (leaf, shape, *rest) in enumerate(tensors):
        recorded = auto.get(leaf)
        if recorded is None or recorded[0] != len(shape):
            continue
        shape = list(shape)
        for dim, name in recorded[1].items():
            size = shape[dim]
            if isinstance(size, int) and dynamic_key_dim(size):
                shape[dim] = name
                sizes[name] = size
                named.setdefault(leaf, {})[dim] = name
        tensors[k] = (leaf, tuple(shape), *rest)
    if len(sizes) == len(dims or {}):
        return keyed
    return key._replace(tensors=tuple(tensors)), sizes, named


def _changed_dims(new: CacheKey, old: CacheKey) -> list[tuple[int, int, Any, Any]]:
    """(leaf, dim, new size, old size) for each concrete dim that differs, when only sizes differ."""
    if any(getattr(new, f) != getattr(old, f) for f in KEY_FIELDS if f != "tensors"):
        return []
    if len(new.tensors) != len(old.tensors):
        return []
    out = []
    for (leaf, shape, *rest), (other_leaf, other_shape, *other_rest) in zip(new.tensors, old.tensors):
        if leaf != other_leaf or rest != other_rest or len(shape) != len(other_shape):
            return []
        out.extend((leaf, d, a, b) for d, (a, b) in enumerate(zip(shape, other_shape))
                   if a != b and isinstance(a, int))
    return out


def describe_marked(marked: list[MarkedDim], argument_of_leaf: Any) -> list[str]:
    """explain() lines for newly marked dims."""
    lines = []
    for m in marked:
        where = f"dim {m.dim} of argument {argument_of_leaf(m.leaf)}"
        why = f"its size changed ({m.old} -> {m.new})" if m.old is not None else "dynamic=True"
        special = (f"; this call's size {m.new} stays specialized, with a plan of its own"
                   if isinstance(m.new, int) and not dynamic_key_dim(m.new) else "")
        lines.append(f"  dynamic: {where} is now the symbolic size {m.name}, because {why}; one plan serves "
                     f"its other sizes (sizes 0 and 1 stay specialized){special}. kiln.compile(..., "
                     "dynamic=False) turns this off")
    return lines

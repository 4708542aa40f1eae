"""Plan cache: keys, LRU/FIFO eviction, statistics, and miss explanations."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

KEY_FIELDS = ("structure", "statics", "tensors", "aliasing", "grad_enabled", "module", "backend")


class CacheKey(NamedTuple):
    """Everything a compiled plan depends on. Two calls with equal keys share a plan."""

    structure: Any  # pytree structure of (args, kwargs)
    statics: tuple  # values of the non-tensor leaves
    tensors: tuple  # (leaf index, shape with symbolic dims, dtype, device, requires_grad) per tensor
    aliasing: tuple  # per tensor leaf: (first leaf holding the same tensor, first leaf sharing its memory)
    grad_enabled: bool
    module: tuple  # (structure version, training flags, param requires_grad flags) or ()
    backend: str


def describe_difference(new: CacheKey, old: CacheKey) -> list[str]:
    """Human-readable reasons why `new` missed an entry keyed `old`."""
    reasons = []
    for name in KEY_FIELDS:
        a, b = getattr(new, name), getattr(old, name)
        if a == b:
            continue
        if name == "tensors" and len(a) == len(b):
            for (i, sa, da, dva, ra), (_, sb, db, dvb, rb) in zip(a, b):
                if sa != sb:
                    reasons.append(f"tensor leaf {i}: shape {_shape(sb)} -> {_shape(sa)}")
                if da != db:
                    reasons.append(f"tensor leaf {i}: dtype {db} -> {da}")
                if dva != dvb:
                    reasons.append(f"tensor leaf {i}: device {dvb} -> {dva}")
                if ra != rb:
                    reasons.append(f"tensor leaf {i}: requires_grad {rb} -> {ra}")
        elif name == "module" and a and b:
            labels = ("module structure (params, buffers, submodules or hooks)", "training mode",
                      "module attributes", "parameter requires_grad")
            for label, x, y in zip(labels, a, b):
                if x == y:
                    continue
                if label == "module attributes":
                    old_attrs, new_attrs = dict(y), dict(x)
                    for attr in sorted(set(old_attrs) | set(new_attrs)):
                        if old_attrs.get(attr) != new_attrs.get(attr):
                            reasons.append(f"module attribute `{attr}` changed: "
                                           f"{_value(old_attrs.get(attr))} -> {_value(new_attrs.get(attr))}")
                else:
                    reasons.append(f"{label} changed")
        else:
            reasons.append(f"{name}: {_short(b)} -> {_short(a)}")
    return reasons or ["no cached entry"]


def changed_dims(new: CacheKey, old: CacheKey) -> list[tuple[int, int]]:
    """(tensor leaf, dim) pairs whose size differs, when only shapes differ."""
    if any(getattr(new, f) != getattr(old, f) for f in KEY_FIELDS if f != "tensors"):
        return []
    if len(new.tensors) != len(old.tensors):
        return []
    out = []
    for (i, sa, da, dva, ra), (_, sb, db, dvb, rb) in zip(new.tensors, old.tensors):
        if (da, dva, ra) != (db, dvb, rb) or len(sa) != len(sb):
            return []
        out.extend((i, d) for d, (x, y) in enumerate(zip(sa, sb)) if x != y)
    return out


def _value(key: Any) -> str:
    """A static key ("float", "2.0") shown as the value it stands for."""
    if isinstance(key, tuple) and len(key) == 2:
        return str(key[1])
    return "<unset>" if key is None else repr(key)


def _shape(s: tuple) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 80 else text[:77] + "..."


@dataclass
class CompilationStats:
    """Runtime statistics of a compiled function (seed 003), plus traces and evictions."""

    hits: int = 0
    misses: int = 0
    fallbacks: int = 0
    total_compile_time_ms: float = 0.0
    total_cached_exec_time_ms: float = 0.0
    cache_size: int = 0
    traces: int = 0
    evictions: int = 0
    miss_reasons: list = field(default_factory=list)  # the newest 100-200 misses' reasons

    @property
    def calls(self) -> int:
        return self.hits + self.misses + self.fallbacks

    def __repr__(self) -> str:
        return (f"CompilationStats(hits={self.hits}, misses={self.misses}, fallbacks={self.fallbacks}, "
                f"traces={self.traces}, evictions={self.evictions}, cache_size={self.cache_size}, "
                f"total_compile_time_ms={self.total_compile_time_ms:.2f}, "
                f"total_cached_exec_time_ms={self.total_cached_exec_time_ms:.2f})")


class PlanCache:
    """A bounded map from CacheKey to compiled entries with "lru" or "fifo" eviction."""

    def __init__(self, max_entries: int = 8, eviction: str = "lru"):
        if eviction not in ("lru", "fifo"):
            raise ValueError(f"eviction must be 'lru' or 'fifo', got {eviction!r}")
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
            raise ValueError(f"max_cache_entries must be a positive int, got {max_entries!r}")
        self.max_entries = max_entries
        self.eviction = eviction
        self._entries: OrderedDict[CacheKey, Any] = OrderedDict()
        self.lock = threading.RLock()

    def get(self, key: CacheKey) -> Any:
        with self.lock:
            entry = self._entries.get(key)
            if entry is not None and self.eviction == "lru":
                self._entries.move_to_end(key)
            return entry

    def put(self, key: CacheKey, entry: Any) -> list[CacheKey]:
        """Insert an entry; returns the keys evicted to make room."""
        with self.lock:
            evicted = []
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                old, _ = self._entries.popitem(last=False)
                evicted.append(old)
            return evicted

    def keys(self) -> list[CacheKey]:
        with self.lock:
            return list(self._entries)

    def values(self) -> list[Any]:
        with self.lock:
            return list(self._entries.values())

    def clear(self) -> None:
        with self.lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

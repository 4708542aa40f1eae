"""Plan cache: keys, LRU/FIFO eviction and statistics (misses are explained in misslog.py)."""
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


@dataclass
class CompilationStats:
    """Runtime statistics of a compiled function (hits, misses, fallbacks, timings, cache size), plus traces and evictions."""

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

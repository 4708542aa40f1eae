"""A plan's arena: one block of memory per thread for its intermediates, offsets assigned by liveness.

Every intermediate a native segment writes and no caller keeps gets a byte range in
the arena, fixed at lowering time. Two intermediates share bytes only when their live
ranges (the first step that writes one to the last step that reads it, or a view of it)
do not overlap. Offsets are multiples of ALIGN (64 bytes: a cache line, and a full
AVX-512 vector), so vector loads never split a line.

The arena is allocated once per thread that runs the plan (`ArenaPool`): two threads
calling one plan at the same time never share intermediates, and a call allocates
nothing for them (no page faults on fresh memory every call).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

ALIGN = 64


def _round_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


@dataclass(frozen=True)
class Interval:
    """A buffer's byte size and the range of schedule steps in which it is live (inclusive)."""

    key: Any
    nbytes: int
    first: int
    last: int


def assign_offsets(intervals: list[Interval]) -> tuple[dict, int]:
    """(key -> byte offset, total bytes): first fit, largest buffers first.

    A buffer goes at the lowest aligned offset that overlaps no already placed buffer
    whose live range meets its own.
    """
    offsets: dict = {}
    placed: list[tuple[int, int, Interval]] = []  # (start, end, interval)
    total = 0
    for iv in sorted(intervals, key=lambda iv: (-iv.nbytes, iv.first, str(iv.key))):
        size = _round_up(max(iv.nbytes, 1))
        busy = sorted((s, e) for s, e, other in placed if other.first <= iv.last and iv.first <= other.last)
        offset = 0
        for s, e in busy:
            if offset + size <= s:
                break
            offset = max(offset, e)
        offsets[iv.key] = offset
        placed.append((offset, offset + size, iv))
        total = max(total, offset + size)
    return offsets, total


class Arena:
    """One thread's block for one plan: its aligned base address and NumPy views into it."""

    def __init__(self, nbytes: int, views: dict[Any, tuple[int, tuple, np.dtype]]):
        self._block = np.empty(nbytes + ALIGN, np.uint8)
        start = self._block.ctypes.data
        shift = (-start) % ALIGN
        self.address = start + shift
        region = self._block[shift:shift + nbytes]
        self.views = {key: np.ndarray(shape, dtype, region, offset) for key, (offset, shape, dtype) in views.items()}


class ArenaPool:
    """The arena of the calling thread, made on its first call (see the module docstring)."""

    def __init__(self, make: Callable[[], Arena]):
        self._make = make
        self._local = threading.local()

    def get(self) -> Arena:
        arena = getattr(self._local, "arena", None)
        if arena is None:
            arena = self._local.arena = self._make()
        return arena

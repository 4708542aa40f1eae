"""A plan's arena: one block of memory per thread for its intermediates, offsets assigned by liveness.

Every intermediate a native segment writes and no caller keeps gets a byte range in
the arena, fixed at lowering time. Two intermediates share bytes only when their live
ranges (the first step that writes one to the last step that reads it, or a view of it)
do not overlap. Offsets are multiples of ALIGN (64 bytes: a cache line, and a full
AVX-512 vector), so vector loads never split a line.

The arena is allocated once per thread that runs the plan (`ArenaPool`): two threads
calling one plan at the same time never share intermediates, and a call allocates
nothing for them (no page faults on fresh memory every call).

A plan made for every size of its dynamic dims has offsets that are expressions of the sizes
(`assign_symbolic_offsets`), and its thread's arena grows to the largest call's need
(`GrowingArenaPool`); the call's sizes lie in its first bytes, where the segments read them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ....sizes import is_symbolic_number

ALIGN = 64


def round_up(n: Any) -> Any:
    """`n` bytes rounded up to a multiple of ALIGN (a symbolic size gives an expression)."""
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
        size = round_up(max(iv.nbytes, 1))
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


def assign_symbolic_offsets(intervals: list[Interval], start: int) -> tuple[dict, Any]:
    """(key -> byte offset, total bytes) for buffers some of whose sizes are symbolic (SymInts: a plan for every
    size of a dynamic dim), from byte `start` on.

    Offsets are expressions of the sizes, valid for every size, and their choice compares no two sizes: the
    buffers of plain sizes are placed as `assign_offsets` places them; after them, the buffers of each symbolic
    size (the same expression) share slots of that size by liveness, and the slots follow one another."""
    plain = [iv for iv in intervals if not is_symbolic_number(iv.nbytes)]
    offsets, total = assign_offsets(plain)
    offsets = {key: start + offset for key, offset in offsets.items()}
    end: Any = start + total
    by_size: dict[str, list[Interval]] = {}
    for iv in intervals:
        if is_symbolic_number(iv.nbytes):
            by_size.setdefault(str(iv.nbytes.expr), []).append(iv)
    for text in sorted(by_size):
        slots: list[int] = []  # per slot of this size: the last step its current buffer is live
        slot_of: dict[Any, int] = {}
        for iv in sorted(by_size[text], key=lambda iv: (iv.first, iv.last, str(iv.key))):
            free = next((k for k, last in enumerate(slots) if last < iv.first), None)
            if free is None:
                free = len(slots)
                slots.append(iv.last)
            slots[free] = iv.last
            slot_of[iv.key] = free
        size = round_up(by_size[text][0].nbytes)
        for key, k in slot_of.items():
            offsets[key] = end + k * size if k else end
        end = end + len(slots) * size
    return offsets, end


class Arena:
    """One thread's block for one plan: its aligned base address and NumPy views into it.

    A plan with symbolic sizes (`dims`: how many) sizes its arena per call and keeps the call's sizes in its
    first bytes (`self.dims`, int64), where its segments read them; its views are made per call (`view`)."""

    def __init__(self, nbytes: int, views: dict[Any, tuple[int, tuple, np.dtype]], dims: int = 0):
        self.nbytes = nbytes
        self._block = np.empty(nbytes + ALIGN, np.uint8)
        start = self._block.ctypes.data
        shift = (-start) % ALIGN
        self.address = start + shift
        self.region = self._block[shift:shift + nbytes]
        self.views = {key: np.ndarray(shape, dtype, self.region, offset) for key, (offset, shape, dtype) in views.items()}
        self.dims = self.region[:8 * dims].view(np.int64)

    def view(self, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        """The array of `shape` and `dtype` at byte `offset` (a plan with symbolic sizes, for one call)."""
        return np.ndarray(shape, dtype, self.region, offset)


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


class GrowingArenaPool:
    """The arena of the calling thread for a plan with symbolic sizes: made larger when a call needs more bytes
    than it has (`get(nbytes)`), kept otherwise."""

    def __init__(self, dims: int):
        self._dims = dims
        self._local = threading.local()

    def get(self, nbytes: int) -> Arena:
        arena = getattr(self._local, "arena", None)
        if arena is None or arena.nbytes < nbytes:  # (by half again at least: a sequence growing by one token
            # at a time would otherwise make a new arena at every call)
            grown = nbytes if arena is None else max(nbytes, arena.nbytes + arena.nbytes // 2)
            arena = self._local.arena = Arena(grown, {}, self._dims)
        return arena

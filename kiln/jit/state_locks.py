"""Replays that write state run one at a time per state tensor, as eager steps do.

A plan that updates a running stat, a step counter, a parameter or a ``.grad`` reads the old
value when it starts and writes the new one when it ends. Native code runs without Python's
GIL in between, so two threads replaying such plans at once would both read the old value and
one update would be lost (eager code does each in-place update under the GIL, so none is).

`ReplayLocks.hold` takes a lock for every tensor a replay writes, for the whole replay. The
locks are a fixed table indexed by the tensor's id: two replays that write a common tensor
exclude each other; replays of unrelated models still run concurrently (unless two of their
tensors share a slot, which only makes one wait). Slots are taken in ascending order, so two
replays cannot deadlock.
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

from .step_replay import grad_owner

_SLOTS = 64
_LOCKS = tuple(threading.Lock() for _ in range(_SLOTS))


def locks_of(tensors: Iterable[object]) -> tuple[Any, ...]:
    """The locks of `tensors`, in the order they are taken."""
    return tuple(_LOCKS[slot] for slot in sorted({(id(t) >> 4) % _SLOTS for t in tensors}))  # ids: multiples of 16


class _Held:
    """Holds `locks` for the duration of a ``with`` block."""

    __slots__ = ("locks",)

    def __init__(self, locks: tuple[Any, ...]):
        self.locks = locks

    def __enter__(self) -> None:
        taken = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        for lock in reversed(self.locks):
            lock.release()


_NOTHING = _Held(())


class ReplayLocks:
    """The locks the replays of one plan take: none for a plan that writes no state; worked out
    once when the tensors it writes are the same on every call (parameters, buffers, optimizer
    state), and per call when they are arguments."""

    def __init__(self, graph: Any, binding: Any = None):
        self.graph, self.binding = graph, binding
        self.writes = bool(graph.state_writes) or binding is not None
        self._per_call = any(w.kind == "arg" or w.kind == "grad" and w.ref[0] == "arg" for w in graph.state_writes) \
            or binding is not None and any(target[0] == "arg" for target, _ in binding.grad_sets)
        self._held: _Held | None = None

    def hold(self, leaves: list) -> _Held:
        """A context manager holding the locks of what this call's replay writes."""
        if not self.writes:
            return _NOTHING
        held = self._held
        if held is None:
            held = _Held(locks_of(written_by(self.graph, leaves, self.binding)))
            if not self._per_call:
                self._held = held
        return held


def written_by(graph: Any, leaves: list, binding: Any = None) -> list:
    """The tensors a replay of `graph` writes (for a state write into optimizer state or a
    ``.grad``, the parameter it belongs to stands for it: that entry may be replaced)."""
    out = []
    for write in graph.state_writes:
        kind, ref = write.kind, write.ref
        out.append(leaves[ref] if kind == "arg" else ref[1] if kind == "optstate" else
                   grad_owner(ref, leaves) if kind == "grad" else ref)
    if binding is not None:
        out += [grad_owner(target, leaves) for target, _ in binding.grad_sets]
        out += [param for (_, param, _), _, _ in binding.state_sets]
    return out

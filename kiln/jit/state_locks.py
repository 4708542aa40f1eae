"""Replays that write state run one at a time per state tensor, as eager steps do.

A plan that updates a running stat, a step counter, a parameter or a ``.grad`` reads the old
value when it starts and writes the new one when it ends. Native code runs without Python's
GIL in between, so two threads replaying such plans at once would both read the old value and
one update would be lost (eager code does each in-place update under the GIL, so none is).

`hold` takes a lock for every tensor a replay writes, for the whole replay. The
locks are a fixed table indexed by the tensor's id: two replays that write a common tensor
exclude each other; replays of unrelated models still run concurrently (unless two of their
tensors share a slot, which only makes one wait). Slots are taken in ascending order, so two
replays cannot deadlock.
"""
from __future__ import annotations

import threading
from contextlib import ExitStack
from typing import Any, Iterable

from .step_binding import grad_owner

_SLOTS = 64
_LOCKS = tuple(threading.Lock() for _ in range(_SLOTS))


def hold(tensors: Iterable[object]) -> ExitStack:
    """A context manager holding the locks of `tensors` (the state a replay writes)."""
    stack = ExitStack()
    for slot in sorted({(id(t) >> 4) % _SLOTS for t in tensors}):  # ids are multiples of 16
        stack.enter_context(_LOCKS[slot])
    return stack


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

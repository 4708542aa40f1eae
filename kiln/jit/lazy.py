"""Lazy execution for ``kiln.djit``: record ops, and run them as compiled plans when a value is needed.

During a djit call, `bind` hands each op to the call's `LazyRecorder` instead of running it.
The recorder works out the result's shape and dtype from the op's abstract rule and returns
a tensor holding a `PendingArray` (kiln/ops/pending.py). The user's Python runs as usual;
only tensor arithmetic is deferred. When Python needs a value (``if x.sum() > 0``,
``.item()``, ``print(x)``, NumPy conversion) or the call returns, the recorder *realizes*:

1. the pending ops form a graph whose inputs are the concrete arrays they read (arguments,
   parameters, earlier results) and whose outputs are the pending results still referenced
   somewhere (the rest are dead: passes drop them);
2. the graph's structure (each op, its params, which inputs and outputs, the input shapes
   and dtypes) keys a plan cache: the first time a structure is seen, its graph runs
   through the interpreter (NumPy kernels, no compile), so code that makes a new
   structure on every call costs what eager does; from the second time on, it runs a plan
   lowered by the function's backend (generated C), kept per structure;
3. the results become the tensors' arrays, and recording goes on with them as inputs.

Eager semantics are kept:

* random ops (dropout, ``randn``) and runtime checks (an index out of range) run at once,
  in program order, so RNG streams and error points are eager's;
* an in-place op realizes what is pending first (ops recorded before it read the old
  values), then writes into the real array;
* a view of a pending result is recomputed, after the plan runs, as a NumPy view of its
  realized base, so writes through one show in the other, as in eager;
* bits: the plan computes what eager computes (the compiler's contract: fused float32
  transcendentals within their ulp bounds, everything else bit for bit).

Ops on other devices, and calls while a trace is active, are not deferred.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..dtypes import from_numpy_dtype
from ..ops.pending import PendingArray
from ..ops.primitive import AbstractValue, Primitive, _mark_view
from ..trace_state import trace_state
from .backends.interpret import lower as interpret
from .ir import Graph, InputSpec, Node, Value, _param_item_key
from .trace import element_strides, user_location

_new = object.__new__
_grad_state = autograd._state


class Step:
    """One node of the trie of recorded op sequences: the ops recorded so far in a realization, as a path
    from `SegmentPlans.root`. Realizations end at a step, so (step, outputs) names a graph structure
    without hashing the whole sequence again."""

    __slots__ = ("children", "aval")

    def __init__(self, aval: AbstractValue | None = None) -> None:
        self.children: dict[tuple, Step] = {}
        self.aval = aval  # the shape and dtype of the result of the op that leads here


MAX_STEPS = 100_000  # trie nodes one djit function keeps before it starts over (a structure per call)


class SegmentPlans:
    """A djit function's plans, by the structure of the graph realized: interpreted the first time a
    structure is seen, compiled with `lower` from the second. `on_new(graph)` is told of each new one."""

    def __init__(self, lower: Callable[[Graph], Any], optimize: Callable[[Graph], Graph],
                 on_new: Callable[[Graph], None], stats: Any, lock: Any):
        self._lower = lower
        self._optimize = optimize
        self._on_new = on_new
        self._lock = lock
        self.stats = stats
        self.root = Step()
        self._steps = 0
        self.plans: dict[tuple, Any] = {}  # (step, outputs) -> a plan, or the graph seen once (not compiled)

    def step(self, at: Step, key: tuple, aval: AbstractValue) -> Step:
        """The child of `at` for an op with structural `key`, whose result is `aval` (made now if new)."""
        child = at.children.get(key)
        if child is None:
            with self._lock:
                if self._steps >= MAX_STEPS:  # start over rather than grow without bound
                    self.root, self._steps, self.plans = Step(), 0, {}
                    self.stats.cache_size = 0
                child = at.children[key] = Step(aval)
                self._steps += 1
        return child

    def run(self, key: tuple, build: Callable[[], Graph], inputs: list) -> list:
        """The output arrays of the graph `build()` makes (whose structure `key` names) on `inputs`."""
        with self._lock:
            entry = self.plans.get(key)
            if entry is None:
                built = build()
                graph = self._optimize(built)
                if graph.observed_strides is None:  # (the passes' copy: the inputs' layouts carry over)
                    kept = {v.id for v in graph.inputs}
                    graph.observed_strides = {k: s for k, s in (built.observed_strides or {}).items() if k in kept}
                self._on_new(graph)
                self.stats.misses += 1
                self.plans[key] = graph
                self.stats.cache_size = len(self.plans)
                plan = interpret(graph)
            else:
                self.stats.hits += 1
                if isinstance(entry, Graph):  # its second sight: worth compiling
                    entry = self.plans[key] = self._lower(entry)
                plan = entry
        outs, _writes = plan.run(inputs, None)
        return outs


# an op's record: (prim, refs, params, weakref to its PendingArray, weakref to its tensor, a view's input
# tensor or None); refs: >= 0 an earlier op's index, < 0 the concrete input in slot -1 - ref
_PRIM, _REFS, _PARAMS, _PENDING, _TENSOR, _SOURCE = range(6)

HOT_REALIZATIONS = 16
"""Realizations in one call past which each one's site is noted, for the djit warning about a value Python
needs inside a hot loop (frontends.py)."""


class LazyRecorder:
    """The ops one djit call has recorded and not yet run (see the module docstring)."""

    def __init__(self, plans: SegmentPlans):
        self.plans = plans
        self.ops: list[tuple] = []
        self.at = plans.root  # the trie step of the ops recorded so far
        self.inputs: list[np.ndarray] = []
        self._input_tensors: list[Any] = []  # kept alive, so their ids stay theirs while recorded
        self._slots: dict[int, int] = {}  # id(input tensor) -> its slot in `inputs`
        self.realizations = 0  # plans run in this call
        self.hot_sites: dict[str, int] = {}  # user file:line -> realizations there past HOT_REALIZATIONS

    # ---- recording (called by bind) ---------------------------------------------------------
    def defer(self, prim: Primitive, inputs: tuple, params: dict) -> Any:
        """A tensor holding the pending result of ``prim(*inputs, **params)``, or None when the op must run
        now (after its pending inputs are realized): see the module docstring."""
        if not inputs or prim.is_random or prim.is_check:  # (these run at once, in program order)
            self.realize_inputs(inputs)
            return None
        refs = []
        avals = []
        pending_input = False
        for t in inputs:
            data = t._data
            if data.__class__ is PendingArray:
                if data.value is None and data.recorder is self:
                    refs.append(data.index)
                    avals.append((data.shape, data.dtype))
                    pending_input = True
                    continue
                data = t._data = data.realize()
            if t._device._xp is not np:  # another device: not recorded
                self.realize_inputs(inputs)
                return None
            slot = self._slots.get(id(t))
            if slot is None:
                slot = self._slots[id(t)] = len(self.inputs)
                self.inputs.append(data)
                self._input_tensors.append(t)
            refs.append(-1 - slot)
            avals.append((data.shape, data.dtype))
        if prim.is_view and not pending_input:
            return None  # a view of real memory: NumPy makes it now, sharing memory as in eager
        key = (prim, tuple(refs), tuple(avals), fast_param_key(params) if params else ())
        step = self.at.children.get(key)  # the same op after the same ops: its result's shape is known
        if step is None:
            aval = prim.abstract(*[AbstractValue(shape, from_numpy_dtype(dtype)) for shape, dtype in avals], **params)
            step = self.plans.step(self.at, key, aval)
        aval = step.aval
        index = len(self.ops)
        pending = PendingArray(aval.shape, aval.dtype.np, self, index)
        out = _new(type(inputs[0]))
        out._data = pending
        out._device = inputs[0]._device
        if _grad_state.enabled and pending.dtype.kind in "fV":
            for t in inputs:
                if t.requires_grad:
                    out.requires_grad = True
                    out._node = autograd.Node(prim, inputs, params, out)
                    break
        # a view of one pending tensor is remade from its realized base; one with index tensors copies anyway
        source = inputs[0] if prim.is_view and len(inputs) == 1 else None
        self.ops.append((prim, key[1], params, weakref.ref(pending), weakref.ref(out), source))
        self.at = step
        return out

    def realize_inputs(self, inputs: tuple) -> None:
        """Compute what is pending when one of `inputs` is (so an op that runs now can read them)."""
        for t in inputs:
            if t._data.__class__ is PendingArray:
                t._data = t._data.realize()

    # ---- realizing --------------------------------------------------------------------------
    def realize(self) -> None:
        """Run every pending op that something still references, through the plan for this structure."""
        ops = self.ops
        if not ops:
            return
        alive = [i for i, op in enumerate(ops) if op[_PENDING]() is not None]
        needed: set[int] = set()
        for i in alive:
            while ops[i][_SOURCE] is not None:  # a view of a pending result: its base is the plan's output
                i = ops[i][_REFS][0]
            needed.add(i)
        outputs = sorted(needed)
        arrays: dict[int, np.ndarray] = {}
        if outputs:
            self.realizations += 1
            if self.realizations > HOT_REALIZATIONS:
                site = user_location()
                self.hot_sites[site] = self.hot_sites.get(site, 0) + 1
            key = (self.at, tuple(outputs))
            saved, trace_state.lazy = trace_state.lazy, None  # nothing the plan does is recorded
            try:
                results = self.plans.run(key, lambda: self._graph(outputs), self.inputs)
            finally:
                trace_state.lazy = saved
            arrays.update(zip(outputs, (_as_array(r) for r in results)))

        def value(i: int) -> np.ndarray:
            if i not in arrays:  # a view of a realized result, made now by NumPy from its base
                prim, refs, params = ops[i][:3]
                arrays[i] = _as_array(prim.kernel(np, value(refs[0]), **params))
            return arrays[i]

        self.ops, self.at = [], self.plans.root
        self.inputs, self._input_tensors, self._slots = [], [], {}
        for i in alive:
            op = ops[i]
            pending = op[_PENDING]()
            if pending is None:
                continue
            pending.value = value(i)
            tensor = op[_TENSOR]()
            if tensor is not None:
                tensor._data = pending.value
                if op[_SOURCE] is not None:
                    _mark_view(op[_PRIM], (op[_SOURCE],), pending.value, tensor, tensor._device)

    def _graph(self, outputs: list[int]) -> Graph:
        graph = Graph()
        values: list[Value] = []
        strides: dict[int, tuple[int, ...]] = {}  # (inputs read in another layout: a transposed weight)
        for slot, array in enumerate(self.inputs):
            v = Value(array.shape, from_numpy_dtype(array.dtype))
            graph.inputs.append(v)
            graph.specs.append(InputSpec("arg", slot))
            values.append(v)
            found = element_strides(array, v.shape)
            if found is not None:
                strides[v.id] = found
        graph.observed_strides = strides  # (a native plan's first variant expects them, see runtime.plan_for)
        made: list[Value] = []
        for prim, refs, params, *_ in self.ops:
            ins = [made[r] if r >= 0 else values[-1 - r] for r in refs]
            aval = prim.abstract(*[AbstractValue(v.shape, v.dtype) for v in ins], **params)
            out = Value(aval.shape, aval.dtype)
            graph.nodes.append(Node(prim, ins, params, out))
            made.append(out)
        graph.outputs = [made[j] for j in outputs]
        return graph


def fast_param_key(params: dict) -> tuple:
    """`ir.param_key` in insertion order, quicker for the plain values most params hold (ints, strings,
    bools, None, tuples of ints); as exact: floats by repr (0.0 and -0.0 differ), bools apart from ints."""
    items = []
    for k, v in params.items():
        c = v.__class__
        if c is int or c is str or v is None:
            items.append((k, v))
        elif c is bool:
            items.append((k, ("bool", v)))
        elif c is tuple and all(x.__class__ is int for x in v):
            items.append((k, v))
        else:
            items.append((k, _param_item_key(v)))
    return tuple(items)


def _as_array(x: Any) -> np.ndarray:
    return x if x.__class__ is np.ndarray else np.asarray(x)

"""Capturing a whole training step: ``.grad`` attributes, optimizer state and hyperparameters.

A compiled ``train_step`` calls ``optimizer.zero_grad()``, the forward pass, ``loss.backward()``
and ``optimizer.step()``. The backward pass runs eagerly while tracing and its VJPs are kiln
ops, so the gradients are ordinary traced values; the optimizer's update is written in kiln
ops too (its in-place updates of parameters and state tensors become state writes). What
the tracer does not see through tensors alone is collected here, for any optimizer:

- ``.grad``: the grad a step reads at entry (left by an earlier backward) becomes an input,
  guarded on being None or not; the grad each tensor holds at the end is set on every call;
- optimizer state (``optimizer.state[p][key]``): tensors present at entry are inputs read
  through their path (so ``load_state_dict`` is seen), updated in place as state writes;
  entries created by the step (lazily, on a first step) are set on every call; the plan
  is guarded on which entries exist, so the first step and later steps get their own plans;
- hyperparameters: numeric ``param_groups`` reads become `HyperScalar` s (kiln.jit.hyper),
  turned into plan inputs filled on every call; branches on them are guarded.

What cannot be replayed is a graph break with a fix: optimizer code that writes arrays
with NumPy, Python values in optimizer state that change, state made outside kiln ops,
and writes to ``param_groups`` inside the step.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_dtype
from ..tensor import Tensor
from .hyper import HyperInput, HyperScalar, HyperSource, StateSource, expr_text
from .ir import InputSpec, Value
from .step_replay import StepBinding, optimizer_signature
from .symbolic import is_symbolic
from .user_frames import user_location

_MISSING = object()


class _GradRecord:
    """A tensor whose ``.grad`` the step touched: its grad at entry, and whether it was read first."""

    __slots__ = ("tensor", "entry", "read_first")

    def __init__(self, tensor: Tensor, entry: Tensor | None, read_first: bool):
        self.tensor = tensor
        self.entry = entry
        self.read_first = read_first


class _OptimizerRecord:
    """An optimizer the step used, as it was when the step first touched it."""

    def __init__(self, optimizer: Any):
        self.optimizer = optimizer
        self.signature = optimizer_signature(optimizer)
        self.params = [p for g in optimizer.param_groups for p in dict.__getitem__(g, "params")]
        self.state: dict[int, dict[str, Any]] = {}  # id(param) -> its state entries at entry
        self.versions: list[tuple[Tensor, int]] = [(p, p._version) for p in self.params]
        for p in self.params:
            entries = optimizer.state.get(p)
            if entries:
                self.state[id(p)] = dict(entries)
                self.versions += [(v, v._version) for v in entries.values() if isinstance(v, Tensor)]


class StepCapture:
    """The trace-time half of whole-step capture; `finish` makes the plan's `StepBinding`."""

    def __init__(self, tracer: Any):
        self.tracer = tracer
        self.sources: list[HyperSource | StateSource] = []  # what the hyper inputs and guards read per call
        self._source_index: dict[tuple, int] = {}
        self.hyper_guards: dict[Any, tuple] = {}
        self._hyper_inputs: dict[tuple, Value] = {}
        self.hypers_seen = False
        self.grads: dict[int, _GradRecord] = {}
        self.optimizers: dict[int, _OptimizerRecord] = {}
        self.known: dict[int, InputSpec] = {}  # id(tensor) -> where it is read on each call
        self._counts: dict[tuple, tuple[HyperScalar, int]] = {}  # step counters advanced: (count now, version)
        self.backward_ran = False

    # ---- hyperparameters -------------------------------------------------------------
    def read_hyper(self, group: Any, key: str, value: Any) -> Any:
        """What ``group[key]`` gives inside the traced step (see kiln.jit.hyper)."""
        optimizer = group.optimizer
        self.register(optimizer)
        index = next((i for i, g in enumerate(optimizer.param_groups) if g is group), None)
        if index is None:  # a group its optimizer no longer holds: nothing to read on later calls
            self._break(f"a parameter group that {type(optimizer).__name__} no longer holds was read inside the "
                        "compiled function; its values would be baked into the plan. Fix: read options through "
                        "optimizer.param_groups")
            return value
        return self._hyper(HyperSource(optimizer, index, key), value)

    def _hyper(self, source: HyperSource, value: Any) -> Any:
        if isinstance(value, (bool, np.bool_)) or value is None or isinstance(value, str):
            self.add_hyper_guard(("==", ("src", self._source(source)), ("num", value)), True)
            return value
        if isinstance(value, (int, float, np.integer, np.floating)):
            self.hypers_seen = True
            return HyperScalar(value.item() if isinstance(value, np.generic) else value, ("src", self._source(source)))
        if isinstance(value, (tuple, list)) and source.item is None:
            items = [self._hyper(HyperSource(source.optimizer, source.group, source.key, i), v)
                     for i, v in enumerate(value)]
            return type(value)(items)
        self.add_hyper_guard(("==", ("src", self._source(source)), ("num", value)), True)  # anything else: exact
        return value

    def advance_count(self, optimizer: Any, param: Tensor, key: str) -> Any:
        """Add one in place to the step counter ``optimizer.state[param][key]`` (a 0-d tensor) and
        return the new count as a host number: for state present when the step began, a
        `HyperScalar` recomputed from the count at the start of each call plus the advances the
        step made before (a step may call ``optimizer.step()`` more than once); for state the step
        created, its traced value (a plan that creates the state runs only when it is absent, so
        it always starts the same)."""
        counter = optimizer.state[param][key]
        record = self.optimizers.get(id(optimizer))
        ident = (id(optimizer), id(param), key)
        if record is None or record.state.get(id(param), {}).get(key) is not counter:
            before: Any = float(counter._data)
        elif ident in self._counts:
            before, version = self._counts[ident]
            if counter._version != version:
                self._counter_written(optimizer, key)
        else:
            if self._written_by_trace(counter):
                self._counter_written(optimizer, key)
            index = self._source_index.get(ident)
            if index is None:
                index = self._source_index[ident] = len(self.sources)
                self.sources.append(StateSource(optimizer, param, key))
            self.hypers_seen = True
            before = HyperScalar(float(counter._data), ("src", index))
        counter.add_(1)
        after = before + 1
        if isinstance(after, HyperScalar):
            self._counts[ident] = (after, counter._version)
        return after

    def _counter_written(self, optimizer: Any, key: str) -> None:
        self._break(f"{type(optimizer).__name__} state {key!r}, a step counter, was written inside the compiled "
                    "function other than by optimizer.step(); a plan reads the count at the start of each call and "
                    "cannot follow that write. Fix: change step counters outside the compiled function")

    def _source(self, source: HyperSource) -> int:
        key = (id(source.optimizer), source.group, source.key, source.item)
        index = self._source_index.get(key)
        if index is None:
            index = self._source_index[key] = len(self.sources)
            self.sources.append(source)
        return index

    def write_hyper(self, group: Any, key: str) -> None:
        self._break(f"`{type(group.optimizer).__name__}.param_groups[...][{key!r}] = ...` at {user_location()} "
                    "inside a compiled function: the write would run only while tracing, and replays of the plan "
                    "would skip it. Fix: change hyperparameters outside the compiled function (lr_scheduler.step() "
                    "or a hand edit between calls is read fresh on every call, with no retrace)")

    def add_hyper_guard(self, expr: tuple, result: Any) -> None:
        try:
            self.hyper_guards.setdefault((expr, result), (expr, result))
        except TypeError:  # an unhashable exact value: keep it anyway
            self.hyper_guards[(id(expr), result)] = (expr, result)

    def bind_hyper_input(self, out: Tensor, params: dict) -> bool:
        """`out` = full(shape, HyperScalar): make it a plan input filled per call. False if it cannot be."""
        hyper = params["value"]
        shape = tuple(params["shape"])
        if is_symbolic(shape):
            return False
        dtype = get_dtype(params["dtype"]).np
        key = (hyper.expr, dtype.str, shape)
        value = self._hyper_inputs.get(key)
        if value is None:
            text = expr_text(hyper.expr, [s.name() for s in self.sources])
            self._hyper_inputs[key] = self.tracer.add_input(
                out, InputSpec("hyper", HyperInput(hyper.expr, dtype, shape, text), name=text))
        else:
            self.tracer._bind(out, value)
        return True

    def plain_params(self, params: dict) -> dict:
        """Static op params holding hyperparameters become their traced values, guarded exactly
        (only a tensor operand can be refilled per call)."""
        def plain(v: Any) -> Any:
            if isinstance(v, HyperScalar):
                return v._plain("op param")
            if isinstance(v, (tuple, list)) and any(isinstance(i, HyperScalar) for i in v):
                return type(v)(plain(i) for i in v)
            return v

        if not any(isinstance(v, HyperScalar) or (isinstance(v, (tuple, list)) and
                                                   any(isinstance(i, HyperScalar) for i in v))
                   for v in params.values()):
            return params
        return {k: plain(v) for k, v in params.items()}

    # ---- .grad -----------------------------------------------------------------------
    def grad_read(self, t: Tensor) -> Tensor | None:
        grad = t._grad
        if id(t) not in self.grads:
            self.grads[id(t)] = _GradRecord(t, grad, True)
            self.tracer.keep.append(t)
            target = self._target(t)
            if grad is not None and target is not None and id(grad) not in self.tracer.env:
                self.known[id(grad)] = InputSpec("grad", target)
        return grad

    def grad_write(self, t: Tensor) -> None:
        if id(t) not in self.grads:
            self.grads[id(t)] = _GradRecord(t, t._grad, False)
            self.tracer.keep.append(t)

    def _target(self, t: Tensor) -> tuple | None:
        """Where t is found on each call: ("arg", leaf) or ("tensor", t); None if the step creates it."""
        tracer = self.tracer
        index = tracer.inputs_by_tensor.get(id(t))
        if index is not None:
            spec = tracer.graph.specs[index]
            return ("arg", spec.ref) if spec.kind == "arg" else ("tensor", t)
        return None if id(t) in tracer.env else ("tensor", t)

    # ---- optimizers ------------------------------------------------------------------
    def register(self, optimizer: Any) -> None:
        """The step uses `optimizer`: remember its state at entry; its state tensors become path inputs."""
        if id(optimizer) in self.optimizers:
            return
        from ..optim.param_group import ParamGroup  # noqa: PLC0415 - kiln.optim imports kiln.jit lazily

        for i, group in enumerate(optimizer.param_groups):
            if not isinstance(group, ParamGroup):
                optimizer.param_groups[i] = ParamGroup(group, optimizer)
            elif group.optimizer is not optimizer:
                group.optimizer = optimizer
        record = self.optimizers[id(optimizer)] = _OptimizerRecord(optimizer)
        self.tracer.keep.append(optimizer)
        for p in record.params:
            for key, v in record.state.get(id(p), {}).items():
                if isinstance(v, Tensor) and id(v) not in self.tracer.env:
                    self.known[id(v)] = InputSpec("optstate", (optimizer, p, key), name=key)

    # ---- the end of the trace ----------------------------------------------------------
    def finish(self, n_user: int) -> StepBinding | None:
        """Check what the step did, append the values to set on each call to the graph's outputs,
        and return the binding (None when the step touched none of this)."""
        if not (self.grads or self.optimizers or self.sources or self.backward_ran):
            return None
        extra: list[Value] = []
        grad_guards, grad_sets = self._finish_grads(extra)
        state_sets = []
        for record in self.optimizers.values():
            state_sets += self._finish_optimizer(record, extra)
        self.tracer.graph.outputs = self.tracer.graph.outputs + extra
        return StepBinding(self.sources, list(self.hyper_guards.values()), grad_guards,
                           [(r.optimizer, r.signature) for r in self.optimizers.values()],
                           grad_sets, state_sets, n_user, self.backward_ran)

    def _finish_grads(self, extra: list) -> tuple[list, list]:
        guards, sets = [], []
        for record in self.grads.values():
            t = record.tensor
            target = self._target(t)
            if target is None:  # created by the step: its .grad lives and dies with it
                continue
            if record.read_first:
                entry = record.entry
                guards.append((target, None if entry is None else (entry._data.shape, entry._data.dtype)))
            final = t._grad
            if final is None:
                if record.entry is not None or not record.read_first:
                    sets.append((target, None))
            elif not (record.read_first and final is record.entry):  # (in-place changes are state writes)
                sets.append((target, len(extra)))
                extra.append(self.tracer.value_of(final))
        return guards, sets

    def _finish_optimizer(self, record: _OptimizerRecord, extra: list) -> list:
        optimizer = record.optimizer
        name = type(optimizer).__name__
        params = [p for g in optimizer.param_groups for p in dict.__getitem__(g, "params")]
        if len(params) != len(record.params) or any(a is not b for a, b in zip(params, record.params)):
            self._break(f"the parameters of {name} changed inside the compiled function; a plan cannot replay "
                        "that. Fix: add parameter groups outside the compiled function (the next call retraces)")
            return []
        sets = []
        for p in params:
            before = record.state.get(id(p), {})
            now = optimizer.state.get(p) or {}
            for key in before:
                if key not in now:
                    self._break(f"{name} state {key!r} was removed inside the compiled function; a plan cannot "
                                "replay that. Fix: change optimizer state outside the compiled function")
            for key, v in now.items():
                old = before.get(key, _MISSING)
                if isinstance(v, Tensor):
                    if v is old:
                        continue
                    if not self._made_by_kiln_ops(v):
                        self._break(f"{name} state {key!r} was created outside kiln ops (a NumPy array wrapped "
                                    "in a tensor) while tracing, so a compiled plan cannot create it on later calls. "
                                    "Fix: create optimizer state with kiln ops (kiln.zeros_like(p), "
                                    "p.grad.clone()) in _traced_update_group")
                        continue
                    sets.append(((optimizer, p, key), len(extra), v._device))
                    extra.append(self.tracer.value_of(v))
                elif old is _MISSING or not _same(old, v):
                    self._break(f"{name} state {key!r} holds a Python value ({v!r}) that the step changed; replays "
                                "of a compiled plan would not change it. Fix: keep counters and other changing "
                                "optimizer state in tensors updated with kiln ops (as the 'step' tensor of "
                                "kiln.optim.Adam is)")
        for t, version in record.versions:
            if t._version != version and not self._written_by_trace(t):
                self._break(f"{name}.step() changed parameters or optimizer state outside kiln ops (NumPy on tensor "
                            "arrays), which a compiled plan cannot replay. Fix: write the update with kiln ops "
                            "(in-place tensor methods such as p.add_(...), state made with kiln.zeros_like) in "
                            f"{name}._traced_update_group(group), as kiln.optim.SGD does")
                break
        return sets

    def _made_by_kiln_ops(self, t: Tensor) -> bool:
        """A tensor the trace computed (not a graph input that the step created by other means)."""
        tracer = self.tracer
        if id(t) not in tracer.env:
            return False
        index = tracer.inputs_by_tensor.get(id(t))
        return index is None or tracer.graph.specs[index].kind != "captured"

    def _written_by_trace(self, t: Tensor) -> bool:
        tracer = self.tracer
        index = tracer.inputs_by_tensor.get(id(t))
        return index is not None and tracer.env.get(id(t)) is not tracer.graph.inputs[index]

    def _break(self, message: str) -> None:
        self.tracer._break(f"{message}; " + self.tracer._eager_fallback())


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - values that cannot be compared are taken to differ
        return a is b

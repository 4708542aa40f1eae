"""`StepBinding`: what a compiled training step reads and writes outside its tensors, per call.

A trace that touches ``.grad`` attributes, optimizer state or hyperparameters (see
step_trace.py) leaves a binding on its plan. On every call the binding

- says whether the plan still fits (`stale_reason`): the hyperparameter guards
  (``momentum != 0``...), which ``.grad`` were None at entry, and each optimizer's
  parameters and state keys (state created lazily by the first step retraces once);
- reads the hyperparameters (`env`) that fill the plan's "hyper" inputs;
- after the plan ran, sets ``.grad`` attributes and new optimizer state entries to the
  plan's extra outputs (`apply`), as the eager step would have.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor
from .hyper import HyperSource, StateSource, compile_guards, evaluate, expr_text
from .misslog import MissReason


def grad_owner(target: tuple, leaves: list) -> Tensor:
    """The tensor whose ``.grad`` a target names: ("arg", leaf index) or ("tensor", tensor)."""
    kind, ref = target
    return leaves[ref] if kind == "arg" else ref


def optimizer_signature(optimizer: Any) -> tuple:
    """Which tensors each parameter group holds and which state keys each parameter has."""
    get = optimizer.state.get
    parts = []
    for group in optimizer.param_groups:
        params = dict.__getitem__(group, "params")
        parts.append(tuple(map(id, params)))
        parts.append(tuple(tuple(s) if (s := get(p)) else () for p in params))
    return tuple(parts)


def state_entry(path: tuple) -> Tensor:
    """``optimizer.state[param][key]`` for a path (optimizer, param, key)."""
    optimizer, param, key = path
    return optimizer.state[param][key]


def write_target(kind: str, ref: Any, leaves: list) -> Tensor:
    """The tensor a state write of `kind` copies into on this call."""
    if kind == "arg":
        return leaves[ref]
    if kind == "optstate":
        return state_entry(ref)
    if kind == "grad":
        return grad_owner(ref, leaves)._grad
    return ref


class StepBinding:
    """Guards, hyperparameter sources and attribute writes of one compiled step (see module doc)."""

    def __init__(self, sources: list[HyperSource | StateSource], hyper_guards: list, grad_guards: list,
                 optimizers: list, grad_sets: list, state_sets: list, n_user: int, backward_ran: bool):
        self.sources = sources
        self.hyper_guards = tuple(hyper_guards)  # (expr, traced result)
        self.grad_guards = tuple(grad_guards)  # (target, None or (shape, numpy dtype)) of .grad at entry
        self.optimizers = tuple(optimizers)  # (optimizer, optimizer_signature at entry)
        self.grad_sets = tuple(grad_sets)  # (target, extra output index or None for "set to None")
        self.state_sets = tuple(state_sets)  # ((optimizer, param, key), extra output index, device)
        self.n_user = n_user  # the plan's outputs after the user's are the extra outputs
        self.backward_ran = backward_ran
        self.effects = bool(grad_sets or state_sets or optimizers)
        self._guards_hold = compile_guards(self.hyper_guards)  # the guards' fast check (None: evaluate each)

    def env(self) -> list:
        """The current value of every hyperparameter source (the plan's hyper inputs read them)."""
        return [s.read() for s in self.sources]

    def optimizer_changed(self) -> Any:
        """Why an optimizer the step uses no longer looks as it did at the trace's entry (a MissReason:
        state a first step created, load_state_dict, a parameter added to a group), or None."""
        for optimizer, signature in self.optimizers:
            if optimizer_signature(optimizer) != signature:
                return _miss(f"{type(optimizer).__name__}'s parameters or state changed (state created "
                                  "by a first step, load_state_dict, a parameter added to a group)",
                                  "optimizer", type(optimizer).__name__)
        return None

    def stale_reason(self, leaves: list) -> Any:
        """Why the plan cannot serve this call (a MissReason), or None when it can."""
        changed = self.optimizer_changed()
        if changed is not None:
            return changed
        for target, expected in self.grad_guards:
            grad = grad_owner(target, leaves)._grad
            now = None if grad is None else (grad._data.shape, grad._data.dtype)
            if now != expected:
                what = "a tensor" if target[0] == "tensor" else f"argument leaf {target[1]}"
                return _miss(f"the .grad of {what} read by the step was {_grad_text(expected)} when traced, "
                                  f"now {_grad_text(now)}", "grad", what, _grad_text(expected), _grad_text(now))
        if self.hyper_guards:
            check = self._guards_hold
            if check is not None:
                try:
                    if check(self.env()):
                        return None
                except Exception:  # noqa: BLE001 - the check below names what failed
                    pass
            try:
                env = self.env()
            except (LookupError, AttributeError, TypeError) as exc:
                return _miss(f"a hyperparameter read by the step is gone ({type(exc).__name__}: {exc})",
                                  "hyperparameter")
            for expr, result in self.hyper_guards:
                try:
                    holds = evaluate(expr, env) == result
                except Exception:  # noqa: BLE001 - a comparison that fails now does not hold
                    holds = False
                if not holds:
                    names = [s.name() for s in self.sources]
                    text = expr_text(expr, names)
                    return _miss(f"hyperparameter guard `{text}` was {result} when traced, now is not "
                                      "(the optimizer takes another branch)", "hyperparameter", text, result,
                                      not result)
        return None

    def apply(self, extra: list, leaves: list, handed_out: set[int]) -> None:
        """Set ``.grad`` attributes and new optimizer state entries to this call's extra outputs.

        `handed_out` holds the ids of the arrays (memory owners) that tensors outside the plan
        already use (its inputs, the user's outputs): an output sharing memory with one of them,
        or with another extra output, is copied, so that no two tensors share memory as no two
        eager grads do.
        """
        for target, index in self.grad_sets:
            owner = grad_owner(target, leaves)
            owner._grad = None if index is None else _fresh(extra[index], owner._device, handed_out)
        for (optimizer, param, key), index, device in self.state_sets:
            optimizer.state[param][key] = _fresh(extra[index], device, handed_out)


def _miss(*args: Any) -> Any:
    return MissReason(*args)


def memory_owner(array: Any) -> Any:
    """The array that owns `array`'s memory (NumPy points every view's ``base`` at it)."""
    base = getattr(array, "base", None)
    return base if base is not None else array


def _fresh(array: Any, device: Any, handed_out: set[int]) -> Tensor:
    if type(array) is not np.ndarray and device.type == "cpu":
        array = np.asarray(array)
    owner = id(memory_owner(array))
    if owner in handed_out or not getattr(array.flags, "writeable", True):
        array = array.copy()
        owner = id(array)
    handed_out.add(owner)
    return Tensor._wrap(array, device)


def _grad_text(state: Any) -> str:
    if state is None:
        return "None"
    shape, dtype = state
    return f"a {np.dtype(dtype).name} tensor of shape {tuple(shape)}"

"""The Optimizer base class: parameter groups, per-parameter state, and state_dict I/O.

Updates happen in place on the parameters, so every module, closure and compiled plan
that holds a parameter sees the new values. Each update runs under ``kiln.no_grad()``.
Eagerly, `_update_group` works on raw arrays with in-place ufuncs and bumps the version
of every tensor it writes, which keeps autograd's saved-tensor checks (and the JIT's
version guards) correct. Inside a function compiled with kiln.compile, `step()` runs
`_traced_update_group` instead: the same update written in kiln ops, which the tracer
records into the plan (in-place updates of parameters and state become state writes,
hyperparameters read from `param_groups` become inputs read on every call; see
kiln.jit.step_trace). A subclass that writes `_update_group` in kiln ops needs nothing
more: the default `_traced_update_group` calls it.

Eagerly, the built-in optimizers run one generated C kernel per dtype for all parameters of
a group (kiln.optim.native_step), bit for bit equal to `_update_group`, which remains the
path for what the kernel does not take. The ``fused``/``foreach`` options choose: ``fused=None``
(the default) uses the kernel when a C compiler works, ``fused=False`` or ``foreach=False``
always uses NumPy, and ``fused=True`` requires the kernel.
"""
from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any, Callable, Iterable, Iterator, Union

import numpy as np

from ..autograd import enable_grad, no_grad
from ..ops.primitive import ShapeError
from ..trace_state import trace_state
from ..ops.quiet import quiet
from ..tensor import DataEpoch, Tensor
from .native_kernel import C_TYPES, compiler_problem
from .native_step import has_native_update, native_update_group
from .param_group import ParamGroup

ParamsT = Union[Iterable[Tensor], Iterable[dict[str, Any]], Iterable[tuple[str, Tensor]]]
StateDict = dict[str, Any]


class Optimizer:
    """Base class of all optimizers: subclasses validate options and implement `_update_group`.

    `params` is an iterable of tensors, of ``(name, tensor)`` pairs (as from
    ``module.named_parameters()``), or of dicts that each define a parameter group
    with its own options; options a group leaves out come from `defaults`.

    >>> w = kiln.zeros(3, requires_grad=True)
    >>> opt = kiln.optim.SGD([{"params": [w], "lr": 0.1}], momentum=0.9)
    >>> opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]
    (0.1, 0.9)
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]):
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                            f"or dicts, but got a single {type(params).__name__}; wrap it in a list")
        _reject_unordered(params)
        self.defaults: dict[str, Any] = dict(defaults)
        self.state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickling (and copy.deepcopy): the groups come back owned by this optimizer."""
        self.__dict__.update(state)
        for group in self.param_groups:
            if isinstance(group, ParamGroup):
                group.optimizer = self

    # ---- parameter groups ---------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own options (e.g. a lower lr for a backbone).

        >>> opt.add_param_group({"params": head.parameters(), "lr": 1e-2})
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise KeyError("param_group must have a 'params' entry listing its tensors")
        group = ParamGroup(param_group, self)
        params, names = _split_params(group["params"])
        group["params"] = params
        if names is not None:
            group["param_names"] = names
        for key, value in self.defaults.items():
            if key not in group:
                group[key] = value
        taken = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in taken for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self._validate_group(group)
        self.param_groups.append(group)

    def _validate_group(self, group: dict[str, Any]) -> None:
        """Raise ValueError for an out-of-range option; subclasses extend this."""
        _check_nonnegative(group, "lr", "learning rate")
        self._validate_fused(group)

    def _validate_fused(self, group: dict[str, Any]) -> None:
        """Check the ``foreach``/``fused`` options; ``fused=True`` needs a kernel for every parameter now."""
        foreach, fused = dict.get(group, "foreach"), dict.get(group, "fused")
        for key, value in (("foreach", foreach), ("fused", fused)):
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"{key} must be None, True or False, got {value!r}")
        if not fused:
            return
        if foreach:
            raise ValueError("`fused` and `foreach` cannot be `True` together: pass one of them")
        name = type(self).__name__
        if not has_native_update(self):
            raise ValueError(f"fused=True: {name} has no native update (a subclass with its own "
                             "_update_group updates in NumPy); leave fused=None")
        for p in dict.__getitem__(group, "params"):
            if type(p._data) is not np.ndarray or p._data.dtype not in C_TYPES:
                raise ValueError(f"fused=True requires float32 or float64 parameters on the CPU, got one of "
                                 f"dtype {p.dtype} on {p.device}; leave fused=None to update it in NumPy")
        problem = compiler_problem()
        if problem is not None:
            from ..jit.backends.cpu.toolchain import CompilerUnavailable  # noqa: PLC0415 - kiln.jit imports kiln.optim

            raise CompilerUnavailable(f"{name}(fused=True) needs a working C compiler, but {problem}; install "
                                      "gcc or clang (or set $CC), or pass fused=None to update in NumPy")

    def _uses_native(self, group: dict[str, Any]) -> bool:
        """Whether this eager step updates `group` through the native kernel (see the module doc)."""
        fused = dict.get(group, "fused")
        if fused is False or (fused is None and dict.get(group, "foreach") is False):
            return False
        if not has_native_update(self):
            return False
        if compiler_problem() is None:
            return True
        if fused:
            self._validate_fused(group)  # raises CompilerUnavailable, naming the fix
        return False

    # ---- gradients and steps ------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized tensors: to None (default), or to zeros."""
        tracer = trace_state.tracer
        if tracer is not None:
            self._traced_zero_grad(tracer, set_to_none)
            return
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if set_to_none:
                    p.grad = None
                elif g._base is None and g._node is None and g._data.flags.writeable:
                    g._data.fill(0)
                    g._bump_version()
                else:
                    # The engine hands out grads that may alias other grads or be read-only
                    # broadcasts; never write through them.
                    p.grad = Tensor._wrap(g._device.xp.zeros_like(g._data), g._device)

    def _traced_zero_grad(self, tracer: Any, set_to_none: bool) -> None:
        """zero_grad inside a compiled function, in kiln ops: setting None reads no grad (so the
        plan does not depend on whether grads were set), and zeros are a traced fill."""
        from ..functional.creation import zeros_like  # noqa: PLC0415 - kiln.functional imports kiln.optim's deps

        tracer.on_optimizer(self)
        for group in self.param_groups:
            for p in dict.__getitem__(group, "params"):
                if set_to_none:
                    p.grad = None
                    continue
                g = p.grad
                if g is None:
                    continue
                with no_grad():
                    if g._base is None and g._node is None and g._data.flags.writeable:
                        g.zero_()
                    else:
                        p.grad = zeros_like(g)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; return `closure()`'s loss if given.

        The closure (which re-evaluates the model and calls backward) runs with grad
        enabled; the update itself runs under ``kiln.no_grad()``. Inside a function
        compiled with kiln.compile the update is traced into the plan (`_traced_update_group`).
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        tracer = trace_state.tracer
        if getattr(self, "_checked_epoch", None) != DataEpoch.value:  # some tensor got another array
            self._check_state_shapes()
            self._checked_epoch = DataEpoch.value
        with no_grad():
            if tracer is None:
                _eager_update_groups(self)
            else:
                tracer.on_optimizer(self)
                for group in self.param_groups:
                    self._traced_update_group(group)
        return loss

    def _check_state_shapes(self) -> None:
        """State shaped like its parameter must still be: a parameter whose ``.data`` was replaced
        with another shape cannot be updated with the old state."""
        for g, group in enumerate(self.param_groups):
            for i, p in enumerate(dict.__getitem__(group, "params")):
                for key, value in (self.state.get(p) or {}).items():
                    if isinstance(value, Tensor) and value.ndim > 0 and tuple(value.shape) != tuple(p.shape):
                        raise ShapeError(
                            f"{type(self).__name__} state {key!r} of parameter {i} in param_groups[{g}] has shape "
                            f"{tuple(value.shape)}, but the parameter now has shape {tuple(p.shape)} (its .data "
                            "was replaced). Fix: drop its state to start it afresh (del optimizer.state[p]), or "
                            "create a new optimizer")

    def _eager_update_group(self, group: dict[str, Any]) -> None:
        """Update `group` through the native kernel where it can, and `_update_group` for the rest."""
        if not self._uses_native(group):
            self._update_group(group)
            return
        rest = native_update_group(self, group)
        if rest is None:
            self._update_group(group)
        elif rest:
            subgroup = dict(group)
            subgroup["params"] = rest
            self._update_group(subgroup)

    def _with_grads(self, group: dict[str, Any]) -> Iterator[tuple[Tensor, Tensor, dict[str, Any]]]:
        """(param, its grad, its state dict) for each parameter of `group` that has a gradient."""
        state = self.state
        for p in group["params"]:
            g = p.grad
            if g is not None:
                yield p, g, state[p]

    def _update_group(self, group: dict[str, Any]) -> None:
        """Apply one update to the parameters of `group` that have a gradient."""
        raise NotImplementedError(f"{type(self).__name__} must implement _update_group")

    def _traced_update_group(self, group: dict[str, Any]) -> None:
        """`_update_group` in kiln ops, run while kiln.compile traces a step (see the module doc).

        Read options as ``group["lr"]`` (inside a trace they are plan inputs, fresh on every
        call), update parameters and state with in-place tensor methods (``p.add_(...)``), and
        create state with kiln ops (``kiln.zeros_like(p)``). The default calls `_update_group`,
        which is right for a subclass whose update is already written in kiln ops; one that works
        on NumPy arrays is found out while tracing, and the step falls back to eager.
        """
        self._update_group(group)

    # ---- checkpointing ------------------------------------------------------------
    def state_dict(self) -> StateDict:
        """The optimizer's state in PyTorch's layout, with parameters replaced by indices.

        ``{"state": {index: {"exp_avg": Tensor, ...}}, "param_groups": [{"lr": ..., "params": [0, 1]}]}``.
        State tensors are the live ones (as in PyTorch): ``copy.deepcopy`` the result
        to keep a snapshot while training continues.
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: StateDict) -> None:
        """Load a `state_dict()` (kiln's or a PyTorch optimizer's) saved for the same parameter layout.

        Group options come from the saved groups; state tensors are copied and cast to
        their parameter's dtype and device.
        """
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            got = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict).__name__
            raise ValueError(f"optimizer state_dict must be a dict with keys 'state' and 'param_groups', got {got}")
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"loaded state dict has {len(saved_groups)} parameter groups, but the optimizer "
                             f"has {len(self.param_groups)}")
        for i, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            if len(group["params"]) != len(saved["params"]):
                raise ValueError(f"loaded state dict's parameter group {i} has {len(saved['params'])} parameters, "
                                 f"but the optimizer's group {i} has {len(group['params'])}")
        by_index = {i: p for group, saved in zip(self.param_groups, saved_groups)
                    for i, p in zip(saved["params"], group["params"])}

        state: defaultdict[Tensor, dict[str, Any]] = defaultdict(dict)
        for index, values in state_dict["state"].items():
            if index not in by_index:
                raise ValueError(f"loaded state dict has state for parameter index {index!r}, which is in "
                                 f"no parameter group (indices: {sorted(by_index)})")
            p = by_index[index]
            state[p] = {key: _load_state_value(p, index, key, value) for key, value in values.items()}

        groups = []
        for group, saved in zip(self.param_groups, saved_groups):
            new = ParamGroup({k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}, self)
            new["params"] = group["params"]
            for key, value in self.defaults.items():
                if key not in new:
                    new[key] = value
            self._validate_group(new)
            groups.append(new)
        self.state = state
        self.param_groups = groups

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k not in ("params", "param_names")]
        return "\n".join(lines + [")"])


# ---- helpers ------------------------------------------------------------------------
def _split_params(params: Any) -> tuple[list[Tensor], list[str] | None]:
    """A group's params as a list of leaf tensors, plus their names if given as (name, tensor) pairs."""
    if isinstance(params, Tensor):
        params = [params]
    _reject_unordered(params)
    params = list(params)
    names = None
    if params and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in params):
        names = [name for name, _ in params]
        params = [p for _, p in params]
    for p in params:
        if not isinstance(p, Tensor):
            raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
        if not p.is_leaf:
            raise ValueError("can't optimize a non-leaf Tensor; optimize the leaf it was computed from, "
                             "or detach() it and set requires_grad=True")
    if len({id(p) for p in params}) != len(params):
        raise ValueError("optimizer got a parameter group with duplicate parameters; each tensor may "
                         "appear once")
    return params, names


def _reject_unordered(params: Any) -> None:
    if isinstance(params, (set, frozenset)):
        raise TypeError("optimizer parameters need to be organized in ordered collections, but the "
                        "ordering of tensors in sets will change between runs; use a list instead")


def _check_nonnegative(group: dict[str, Any], key: str, what: str) -> None:
    """Raise ValueError naming the value unless ``group[key] >= 0``."""
    value = group[key]
    if not value >= 0:
        raise ValueError(f"Invalid {what}: {value} (expected {key} >= 0)")


def _load_state_value(p: Tensor, index: Any, key: str, value: Any) -> Any:
    """A private copy of one saved state entry; arrays become tensors like `p` (the step stays float32)."""
    arr = _host_array(value)
    if key == "step" and (arr is not None or isinstance(value, (int, float))):
        return Tensor._wrap(np.array(value if arr is None else arr, dtype=np.float32).reshape(()))
    if arr is None:
        return copy.deepcopy(value)
    if arr.shape != tuple(p.shape):
        raise ValueError(f"loaded state '{key}' for parameter {index} has shape {arr.shape}, but the "
                         f"parameter has shape {tuple(p.shape)}")
    return Tensor._wrap(p._device.xp.asarray(arr.astype(p._data.dtype, copy=False)), p._device)


def _host_array(value: Any) -> np.ndarray | None:
    """A NumPy copy of a kiln tensor, NumPy array or torch tensor; None for anything else."""
    if isinstance(value, Tensor):
        return np.array(value.detach().numpy())
    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch.Tensor
        return np.array(value.detach().cpu().numpy())
    return None


@quiet
def _eager_update_groups(opt: Optimizer) -> None:
    """Update every group eagerly; inf/NaN gradients give inf/NaN quietly, as in PyTorch (`quiet`
    sets NumPy's error state for the call at a fraction of the cost of ``np.errstate``)."""
    for group in opt.param_groups:
        opt._eager_update_group(group)

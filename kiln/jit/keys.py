"""Cache keys: what about a call decides which compiled plan may serve it.

A call's key holds the pytree structure of its arguments, the values of their
non-tensor leaves, each tensor's shape (dims named in ``dynamic_dims`` become
symbols), dtype, device and requires_grad, which leaves share a tensor or its
memory, grad mode, the module state and the guarded Python reads (see guards.py).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from .. import autograd
from ..tensor import Tensor
from .cache import CacheKey
from .dynamic_dims import check_tensor_dims
from .guards import ByIdentity
from .module_state import scalar_key
from .pytree import flatten
from .trace import dynamic_key_dim

DynamicDims = dict[int, dict[int, str]]


def static_key(x: Any) -> Any:
    """A hashable stand-in for a non-tensor argument leaf; equal stand-ins may share a plan."""
    if isinstance(x, float):
        return scalar_key(x)
    if type(x) is np.ndarray:  # its values are baked into the plan: key them all (an id can be reused,
        return ("ndarray", x.shape, x.dtype.str, x.tobytes())  # and repr elides the middle of big arrays)
    try:
        hash(x)
        return (type(x).__name__, x)
    except TypeError:  # an unknown container: its identity (held, so the id is not reused) and contents
        return (type(x).__name__, ByIdentity(x), repr(x))


def validate_dynamic_dims(spec: Any) -> DynamicDims:
    """``dynamic_dims`` as {argument index: {dim: name}}, or a ValueError saying what is wrong."""
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise ValueError(f"dynamic_dims must be a dict like {{0: {{0: 'batch'}}}}, got {type(spec).__name__}")
    out: DynamicDims = {}
    for arg, dims in spec.items():
        if not isinstance(arg, int) or isinstance(arg, bool) or arg < 0:
            raise ValueError(f"dynamic_dims keys must be non-negative argument indices, got {arg!r}")
        if not isinstance(dims, dict):
            raise ValueError(f"dynamic_dims[{arg}] must be a dict {{dim: 'name'}}, got {type(dims).__name__}")
        for d, name in dims.items():
            if not isinstance(d, int) or isinstance(d, bool) or not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"dynamic_dims[{arg}] must map dim indices to identifier names, got {d!r}: {name!r}")
        out[arg] = dict(dims)
    return out


class KeyBuilder:
    """Builds the `CacheKey` of each call of one compiled function."""

    def __init__(self, fn: Callable, dynamic_dims: DynamicDims, backend: str):
        self._fn = fn
        self.dynamic_dims = dynamic_dims
        self.backend = backend
        self._names: list[str] | None = None
        self._leaves_by_structure: dict[tuple, DynamicDims] = {}  # (treedef, positional count) -> dynamic_leaves

    def key(self, args: tuple, kwargs: dict, leaves: list, treedef: Any, guards: tuple | None,
            module: tuple) -> tuple[CacheKey, dict | None, DynamicDims]:
        """(the call's key, the sizes of its dynamic dims by name (None without dynamic dims), and
        leaf index -> {dim: name} for the tensors with dynamic dims, negative dims made positive).
        The dims made dynamic automatically are added by auto_dynamic.widen."""
        if not self.dynamic_dims:
            return self._static_key(leaves, treedef, guards, module), None, {}
        structure = (treedef, len(args))  # (which leaves dynamic_dims names follows from the call's structure)
        dyn_leaves = self._leaves_by_structure.get(structure)
        if dyn_leaves is None or not all(isinstance(leaves[i], Tensor) for i in dyn_leaves):  # (else it raises)
            dyn_leaves = self._leaves_by_structure[structure] = self.dynamic_leaves(args, kwargs)
        statics = []
        tensors = []
        aliasing = []
        seen: dict[int, int] = {}
        owners: dict[int, int] = {}  # id(memory owner) -> first leaf whose memory it holds
        dims: dict[str, int] | None = {} if dyn_leaves else None
        normalized: DynamicDims = {}
        sizes: dict[str, tuple[int, str]] = {}  # name -> (size, where) in this call
        for i, x in enumerate(leaves):
            if isinstance(x, Tensor):
                shape = x._data.shape
                dyn = dyn_leaves.get(i)
                if dyn:
                    dyn = normalized[i] = check_tensor_dims(dyn, shape, sizes, f"argument {arg_of_leaf(args, i)}")
                    for d, name in dyn.items():
                        dims[name] = shape[d]  # type: ignore[index]
                    shape = tuple(dyn[d] if d in dyn and dynamic_key_dim(s) else s for d, s in enumerate(shape))
                tensors.append((i, shape, x._data.dtype.str, str(x._device), x.requires_grad))
                owner = x._base if x._base is not None else x  # views of one tensor share memory
                aliasing.append((seen.setdefault(id(x), i), owners.setdefault(id(owner), i)))
            else:
                statics.append(static_key(x))
        if guards is not None:
            statics.append(guards)
        key = CacheKey(treedef, tuple(statics), tuple(tensors), tuple(aliasing),
                       autograd._state.enabled, module, self.backend)
        return key, dims, normalized

    def _static_key(self, leaves: list, treedef: Any, guards: tuple | None, module: tuple) -> CacheKey:
        """`key` without dynamic dims: every call of a compiled function builds one, so it is kept lean."""
        statics = []
        tensors = []
        aliasing = []
        seen: dict[int, int] = {}
        owners: dict[int, int] = {}
        for i, x in enumerate(leaves):
            if isinstance(x, Tensor):
                data = x._data
                device = x._device
                tensors.append((i, data.shape, data.dtype.str, device.type if device.index is None else str(device),
                                x.requires_grad))
                base = x._base
                aliasing.append((seen.setdefault(id(x), i), owners.setdefault(id(x if base is None else base), i)))
            else:
                statics.append(static_key(x))
        if guards is not None:
            statics.append(guards)
        return CacheKey(treedef, tuple(statics), tuple(tensors), tuple(aliasing), autograd._state.enabled, module,
                        self.backend)

    def dynamic_leaves(self, args: tuple, kwargs: dict) -> DynamicDims:
        """Leaf index -> {dim: name} for the tensors dynamic_dims names (positionally or by keyword)."""
        out: DynamicDims = {}
        offset = 0
        for index, arg in enumerate(args):
            n = len(flatten(arg)[0])
            if index in self.dynamic_dims:
                if not isinstance(arg, Tensor):
                    raise ValueError(f"dynamic_dims names argument {index}, which is a "
                                     f"{type(arg).__name__}, not a Tensor")
                out[offset] = self.dynamic_dims[index]
            offset += n
        missing = [index for index in self.dynamic_dims if index >= len(args)]
        if not missing:
            return out
        names = self.positional_names()
        where: dict[str, tuple[int, Any]] = {}  # keyword -> (its first leaf, its value)
        for name, value in kwargs.items():
            where[name] = (offset, value)
            offset += len(flatten(value)[0])
        for index in missing:
            if index >= len(names):
                raise ValueError(f"dynamic_dims names argument {index}, but the function was called with "
                                 f"{len(args)} positional argument(s)")
            if names[index] not in where:
                continue  # not passed: the call reports the missing argument (or uses the default)
            leaf, value = where[names[index]]
            if not isinstance(value, Tensor):
                raise ValueError(f"dynamic_dims names argument {index} ({names[index]!r}), which is a "
                                 f"{type(value).__name__}, not a Tensor")
            out[leaf] = self.dynamic_dims[index]
        return out

    def positional_names(self) -> list[str]:
        """Names of the parameters that can be passed by position or by keyword, in order."""
        if self._names is None:
            self._names = _positional_names(self._fn)
        return self._names


def _positional_names(fn: Callable) -> list[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read: only positional use is understood
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = []
    for p in params:
        if p.kind not in kinds:
            break
        names.append(p.name if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD else "")
    return names


def arg_of_leaf(args: tuple, leaf: int) -> int:
    """The positional argument a flattened leaf belongs to (-1 for keyword arguments)."""
    offset = 0
    for index, arg in enumerate(args):
        offset += len(flatten(arg)[0])
        if leaf < offset:
            return index
    return -1

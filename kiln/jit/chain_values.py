"""Re-reading a guarded chain without running user code, and keying what it leads to.

`evaluate` follows ``root.attr[key]...`` through instance and class dicts, module
registries, plain containers and ``os.environ``, and stops with `OPAQUE` where
going on would run user code (a property, a custom ``__getitem__``). `content_key`
turns the value into a hashable stand-in: scalars by value, tensors and modules
by identity, containers and small arrays by content within a budget; what is too
large or too deep for the budget raises `TooLarge`, so that the caller can say so.
"""
from __future__ import annotations

import builtins
import enum
import functools
import os
import types
from typing import Any

import numpy as np

from ..tensor import Tensor
from .module_state import SCALARS, scalar_key

CONTENT_LIMIT = 256  # values a content key may hold in all (items of nested containers count)
DEPTH_LIMIT = 4  # how deeply nested containers are keyed by content
ARRAY_LIMIT = 1024  # NumPy arrays up to this size are keyed by content


class Sentinel:
    """A marker value that prints as its name."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISSING = Sentinel("<missing>")  # the name or attribute does not exist (yet)
OPAQUE = Sentinel("<opaque>")  # reading it would run user code (a property, __getitem__, ...)


class ByIdentity:
    """An object by identity in a cache key. It holds a reference, so the id cannot be reused by a new
    object (which would make a stale plan look valid) while the key exists."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return type(other) is ByIdentity and other.obj is self.obj

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} at {id(self.obj):#x}>"


class TooLarge(Exception):
    """A value too large or too deeply nested to key by content; the message says what it is."""


# ---- following a chain ------------------------------------------------------------------------


def class_attribute(cls: type, name: str) -> Any:
    """`name` as found along the class's MRO (the raw descriptor), or MISSING."""
    for klass in cls.__mro__:
        value = klass.__dict__.get(name, MISSING)
        if value is not MISSING:
            return value
    return MISSING


def attr(obj: Any, name: str) -> Any:
    """obj.name when reading it runs no user code; else OPAQUE (MISSING when it does not exist)."""
    if isinstance(obj, Tensor):
        return OPAQUE
    if isinstance(obj, types.ModuleType):
        return obj.__dict__.get(name, MISSING)
    if name == "__class__":
        return type(obj)
    if isinstance(obj, functools.partial) and name in ("func", "args", "keywords"):
        return getattr(obj, name)
    from ..nn.module import Module  # noqa: PLC0415 - kiln.nn imports kiln.jit

    is_class = isinstance(obj, type)
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        d = None
    if name == "__dict__":
        return d if isinstance(d, dict) else (dict(d) if d is not None else MISSING)
    if isinstance(obj, Module) and d is not None:
        for registry in ("_parameters", "_buffers", "_modules"):
            found = d.get(registry)
            if found is not None and name in found:
                return found[name]
    cls = obj if is_class else type(obj)
    class_value = class_attribute(cls, name)
    if class_value is not MISSING and not is_class:
        kind = type(class_value)
        if kind is types.MemberDescriptorType:  # a __slots__ field
            try:
                return class_value.__get__(obj, cls)
            except AttributeError:
                return MISSING
        if hasattr(kind, "__set__") or hasattr(kind, "__delete__"):
            return OPAQUE  # a property or another data descriptor
    if not is_class and isinstance(d, dict) and name in d:
        return d[name]
    if class_value is MISSING:
        return MISSING
    if isinstance(class_value, staticmethod):
        return class_value.__func__
    if isinstance(class_value, classmethod):
        return types.MethodType(class_value.__func__, cls)
    if isinstance(class_value, types.FunctionType):
        return class_value if is_class else types.MethodType(class_value, obj)
    if hasattr(type(class_value), "__get__"):
        return OPAQUE  # other descriptors
    return class_value


def item(obj: Any, key: Any) -> Any:
    """obj[key] for plain containers and os.environ; MISSING when absent, else OPAQUE."""
    if type(obj) in (dict, list, tuple, types.MappingProxyType):
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            return MISSING
    if obj is os.environ:
        return os.environ.get(key, MISSING) if isinstance(key, str) else MISSING
    return OPAQUE


def default_of(func: Any, name: str) -> Any:
    """The current default of parameter `name` (read live: __defaults__ can be reassigned)."""
    code = func.__code__
    kwdefaults = func.__kwdefaults__ or {}
    if name in kwdefaults:
        return kwdefaults[name]
    defaults = func.__defaults__ or ()
    positional = code.co_varnames[:code.co_argcount]
    if name in positional:
        i = positional.index(name) - (len(positional) - len(defaults))
        if i >= 0:
            return defaults[i]
    return MISSING


def root_value(root: tuple, args: tuple, kwargs: dict) -> Any:
    """The value a chain starts from: a global, a closure cell, a bound object, an argument, a default."""
    kind = root[0]
    if kind == "global":
        value = root[1].get(root[2], MISSING)
        return builtins.__dict__.get(root[2], MISSING) if value is MISSING else value
    if kind == "cell":
        try:
            return root[1].cell_contents
        except ValueError:
            return MISSING
    if kind == "const":
        return root[1]
    if kind == "arg":
        _, position, name, func = root
        if position is not None and position < len(args):
            return args[position]
        if name in kwargs:
            return kwargs[name]
        return default_of(func, name)
    if kind == "default":
        return default_of(root[1], root[2])
    return MISSING


def evaluate(root: tuple, steps: tuple, args: tuple, kwargs: dict) -> Any:
    """The value a chain reads now (MISSING or OPAQUE where it cannot be read)."""
    value = root_value(root, args, kwargs)
    for kind, key in steps:
        if value is MISSING or value is OPAQUE:
            return value
        value = item(value, key) if kind == "item" else attr(value, key)
    return value


# ---- keying a value -----------------------------------------------------------------------------

_HASHABLE_SCALARS = (complex, bytes, enum.Enum, np.generic)
_CONTAINERS = (list, tuple, dict, set, frozenset, types.MappingProxyType)


def content_key(value: Any, modules: list) -> Any:
    """A hashable stand-in for `value`: equal stand-ins mean a plan that read it is still valid.

    Modules met on the way are appended to `modules` (their state is keyed separately).
    Raises TooLarge for containers over CONTENT_LIMIT values or DEPTH_LIMIT levels, and for
    NumPy arrays over ARRAY_LIMIT elements.
    """
    budget = [CONTENT_LIMIT]
    return _key(value, modules, budget, 0)


def _key(value: Any, modules: list, budget: list, depth: int) -> Any:
    if value is MISSING:
        return ("missing",)
    if isinstance(value, SCALARS):
        return scalar_key(value)
    if isinstance(value, Tensor):
        return ("tensor", ByIdentity(value), value.requires_grad)
    from ..nn.module import Module  # noqa: PLC0415

    if isinstance(value, Module):
        modules.append(value)
        return ("module", ByIdentity(value))
    kind = type(value)
    if kind in _CONTAINERS or value is os.environ:
        if depth >= DEPTH_LIMIT:
            raise TooLarge(f"a {kind.__name__} nested more than {DEPTH_LIMIT} levels deep")
        budget[0] -= len(value)
        if budget[0] < 0:
            raise TooLarge(f"a {kind.__name__} of {len(value)} items (with what it holds, over the "
                           f"{CONTENT_LIMIT} values kiln keys by content)")
        if kind in (set, frozenset):
            items = sorted((_key(v, modules, budget, depth + 1) for v in value), key=repr)
            return (kind.__name__, ByIdentity(value), tuple(items))
        pairs = value.items() if hasattr(value, "items") else enumerate(value)
        return (kind.__name__, ByIdentity(value) if kind is not tuple else None,
                tuple((k, _key(v, modules, budget, depth + 1)) for k, v in pairs))
    if kind is np.ndarray:
        if value.size > ARRAY_LIMIT:
            raise TooLarge(f"a NumPy array of {value.size} elements (kiln keys arrays of up to "
                           f"{ARRAY_LIMIT} by content)")
        return ("ndarray", value.shape, value.dtype.str, value.tobytes())
    if isinstance(value, _HASHABLE_SCALARS):
        return (kind.__name__, value)
    if kind is types.MethodType:
        return ("method", ByIdentity(value.__func__), ByIdentity(value.__self__))
    if kind is functools.partial:
        return ("partial", ByIdentity(value.func), _key(value.args, modules, budget, depth + 1),
                _key(value.keywords, modules, budget, depth + 1))
    jit_module = getattr(value, "_module", None) if is_compiled(value) else None
    if isinstance(jit_module, Module):
        modules.append(jit_module)
    return ("object", ByIdentity(value))


class Compiled:
    """The base class of kiln.compile's callables (`JITFunction`, `JITModule`): the readers here tell them
    apart by it, as function.py, which defines them, imports the readers."""


def is_compiled(value: Any) -> bool:
    """Whether `value` is a kiln.compile'd function or module."""
    return isinstance(value, Compiled)

"""Guards: the Python values a compiled plan baked in, re-read on every call.

Tracing runs the function once, so every Python value it reads becomes a constant
of the plan: closure and global scalars, attributes of config objects and modules
(``cfg.scale``, ``settings.EPS``), constant-key items (``flags["on"]``,
``weights[0]``), default arguments, attributes of ``self`` in methods, and the
training mode and structure of any nn.Module the function calls. The bytecode of
the function names these reads as chains ``root.attr[const]...``; `Guards`
finds them (following the plain Python helpers, methods, module forwards and
hooks the function reaches) and `Guards.key` re-reads them, without running user
code, so that a changed value retraces instead of replaying a stale plan.
"""
from __future__ import annotations

import builtins
import collections
import dataclasses
import dis
import functools
import os
import sysconfig
import threading
import types
from typing import Any, Callable

import numpy as np

from ..tensor import Tensor
from .module_state import SCALARS as _SCALARS, ModuleState, scalar_key

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for k, p in sysconfig.get_paths().items()
                       if k in ("stdlib", "platstdlib", "purelib", "platlib")})
_CONTAINER_LIMIT = 32  # lists, tuples and dicts up to this size are guarded item by item
_ARRAY_LIMIT = 1024  # NumPy arrays up to this size are guarded by content, larger ones by identity
_DEPTH_LIMIT = 8  # how many calls deep the analysis follows helpers


class _Sentinel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_MISSING = _Sentinel("<missing>")  # the name or attribute does not exist (yet)
_OPAQUE = _Sentinel("<opaque>")  # reading it would run user code (a property, __getitem__, ...)
_LOAD_FAST = ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW")
_LOAD_CONST = ("LOAD_CONST", "LOAD_SMALL_INT")
_UNGUARDED = (type, types.ModuleType, types.BuiltinFunctionType, types.BuiltinMethodType,
              types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
              types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType)


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


# ---- reading a chain without running user code ----------------------------------------------


def _attr(obj: Any, name: str) -> Any:
    """obj.name when it is plain data (instance or class dict, module registries); else _OPAQUE."""
    if isinstance(obj, Tensor):
        return _OPAQUE
    if isinstance(obj, types.ModuleType):
        return obj.__dict__.get(name, _MISSING)
    from ..nn.module import Module  # noqa: PLC0415

    is_class = isinstance(obj, type)
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        d = None
    if isinstance(obj, Module) and d is not None:
        for registry in ("_parameters", "_buffers", "_modules"):
            found = d.get(registry)
            if found is not None and name in found:
                return found[name]
    cls = obj if is_class else type(obj)
    class_value: Any = _MISSING
    for klass in cls.__mro__:
        class_value = klass.__dict__.get(name, _MISSING)
        if class_value is not _MISSING:
            break
    if class_value is not _MISSING and not is_class:
        kind = type(class_value)
        if kind is types.MemberDescriptorType:  # a __slots__ field
            try:
                return class_value.__get__(obj, cls)
            except AttributeError:
                return _MISSING
        if hasattr(kind, "__set__") or hasattr(kind, "__delete__"):
            return _OPAQUE  # a property or another data descriptor
    if not is_class and isinstance(d, dict) and name in d:
        return d[name]
    if class_value is _MISSING:
        return _MISSING
    if isinstance(class_value, types.FunctionType):
        return class_value if is_class else types.MethodType(class_value, obj)
    if hasattr(type(class_value), "__get__"):
        return _OPAQUE  # staticmethod, classmethod, other descriptors
    return class_value


def _item(obj: Any, key: Any) -> Any:
    if type(obj) in (dict, list, tuple):
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return _OPAQUE


def _root_value(root: tuple, args: tuple, kwargs: dict) -> Any:
    kind = root[0]
    if kind == "global":
        value = root[1].get(root[2], _MISSING)
        return builtins.__dict__.get(root[2], _MISSING) if value is _MISSING else value
    if kind == "cell":
        try:
            return root[1].cell_contents
        except ValueError:
            return _MISSING
    if kind == "const":
        return root[1]
    if kind == "arg":
        _, position, name, func = root
        if position is not None and position < len(args):
            return args[position]
        if name in kwargs:
            return kwargs[name]
        return _default(func, name)
    if kind == "default":
        return _default(root[1], root[2])
    return _MISSING


def _default(func: Any, name: str) -> Any:
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
    return _MISSING


def _evaluate(root: tuple, steps: tuple, args: tuple, kwargs: dict) -> Any:
    value = _root_value(root, args, kwargs)
    for kind, key in steps:
        if value is _MISSING or value is _OPAQUE:
            return value
        value = _item(value, key) if kind == "item" else _attr(value, key)
    return value


def _guard_of(value: Any, modules: list, depth: int = 0) -> Any:
    """A hashable stand-in for `value`: equal stand-ins mean the plan is still valid."""
    if isinstance(value, _SCALARS):
        return scalar_key(value)
    if isinstance(value, Tensor):
        return ("tensor", ByIdentity(value), value.requires_grad)
    from ..nn.module import Module  # noqa: PLC0415

    if isinstance(value, Module):
        modules.append(value)
        return ("module", ByIdentity(value))
    kind = type(value)
    if kind in (list, tuple, dict) and depth == 0 and len(value) <= _CONTAINER_LIMIT:
        items = value.items() if kind is dict else enumerate(value)
        return (kind.__name__, ByIdentity(value), tuple((k, _guard_of(v, modules, 1)) for k, v in items))
    if kind is np.ndarray:
        if value.size <= _ARRAY_LIMIT:
            return ("ndarray", value.shape, value.dtype.str, value.tobytes())
        return ("ndarray", ByIdentity(value))
    if kind is types.MethodType:
        return ("method", ByIdentity(value.__func__), ByIdentity(value.__self__))
    jit_module = getattr(value, "_module", None) if _is_jit(value) else None
    if isinstance(jit_module, Module):
        modules.append(jit_module)
    return ("object", ByIdentity(value))


def _is_pytree_node(x: Any) -> bool:
    """Containers kiln.jit.pytree flattens into the call's leaves."""
    return type(x) in (tuple, list, dict, collections.OrderedDict, collections.defaultdict) or \
        (isinstance(x, tuple) and hasattr(type(x), "_fields")) or \
        (dataclasses.is_dataclass(x) and not isinstance(x, type))


def _is_jit(value: Any) -> bool:
    from .function import JITFunction  # noqa: PLC0415

    return isinstance(value, JITFunction)


# ---- finding the chains in bytecode -----------------------------------------------------------


def _is_user_code(code: types.CodeType) -> bool:
    """Code outside kiln, the standard library and installed packages (its reads may change)."""
    filename = code.co_filename
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    return not path.startswith(_KILN_DIR) and not path.startswith(_LIBRARY_DIRS)


def _scan(code: types.CodeType, global_root: Callable[[str], tuple], cells: dict[str, tuple],
          locals_: dict[str, tuple]) -> list[tuple[tuple, tuple]]:
    """(root, steps) for each chain `name.attr[const]...` read in `code` and its nested code."""
    chains = []
    for kind, name, steps in _chains_in(code):
        if kind == "global":
            root = global_root(name)
        elif kind == "deref":
            root = cells.get(name)
        else:
            root = locals_.get(name)
        if root is not None:
            chains.append((root, steps))
    return chains


@functools.lru_cache(maxsize=2048)
def _chains_in(code: types.CodeType) -> tuple[tuple[str, str, tuple], ...]:
    """(load kind, name, steps) of each chain in `code`; nested code contributes its globals and the
    closure variables it shares with `code` (kind "global" / "deref"). Cached: bytecode never changes."""
    chains: list[tuple[str, str, tuple]] = []
    current: tuple[str, str] | None = None
    steps: list = []
    const: Any = _MISSING
    for ins in dis.get_instructions(code):
        op = ins.opname
        if current is not None:
            if op in ("LOAD_ATTR", "LOAD_METHOD") and const is _MISSING:
                steps.append(("attr", ins.argval))
                continue
            if op in _LOAD_CONST and const is _MISSING:
                const = ins.argval
                continue
            if const is not _MISSING and (op == "BINARY_SUBSCR" or (op == "BINARY_OP" and ins.argrepr == "[]")):
                try:
                    hash(const)
                except TypeError:
                    pass
                else:
                    steps.append(("item", const))
                    const = _MISSING
                    continue
            chains.append((*current, tuple(steps)))
            current, steps, const = None, [], _MISSING
        if op in ("LOAD_GLOBAL", "LOAD_NAME"):
            current = ("global", ins.argval)
        elif op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
            current = ("deref", ins.argval) if ins.argval in code.co_freevars else None
        elif op in _LOAD_FAST:
            current = ("fast", ins.argval)
        elif op.startswith("LOAD_FAST") and isinstance(ins.argval, tuple) and ins.argval:
            current = ("fast", ins.argval[-1])  # 3.13's LOAD_FAST_LOAD_FAST: the last name is on top
    if current is not None:
        chains.append((*current, tuple(steps)))
    for const_value in code.co_consts:
        if isinstance(const_value, types.CodeType):  # lambdas, comprehensions, inner functions
            chains.extend(c for c in _chains_in(const_value)
                          if c[0] == "global" or (c[0] == "deref" and c[1] in code.co_freevars))
    return tuple(chains)


class _Analysis:
    """One pass over a function and everything it reaches; collects the chains worth guarding."""

    def __init__(self, covered: set[int], root: Any = None):
        self.covered = covered  # ids of modules the caller keys already (a JITModule's tree)
        self.root_id = id(root) if root is not None else None  # a JITModule's module: its hooks run outside
        self.chains: dict[tuple, tuple[tuple, tuple]] = {}
        self.seen: set[tuple] = set()

    def add(self, root: tuple, steps: tuple) -> None:
        signature = (root[0], id(root[1]) if root[0] != "arg" else root[1], root[2], steps)
        self.chains.setdefault(signature, (root, steps))

    def function(self, fn: Any, args: tuple = (), kwargs: dict | None = None, top: bool = False,
                 depth: int = 0) -> None:
        """Analyse a callable; at the top level its parameters are roots read from the call's args."""
        if depth > _DEPTH_LIMIT:
            return
        bound: Any = _MISSING
        if isinstance(fn, functools.partial):
            self.function(fn.func, depth=depth + 1)
            return
        if isinstance(fn, types.MethodType):
            bound, fn = fn.__self__, fn.__func__
        if _is_jit(fn):
            module = fn.__dict__.get("_module")
            if module is not None:
                self.module(module, depth + 1)
            self.function(fn._fn, depth=depth + 1)
            return
        if not isinstance(fn, types.FunctionType):
            call = getattr(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType) and not isinstance(fn, type):
                bound, fn = fn, call
            else:
                return
        from ..nn.module import Module  # noqa: PLC0415

        if isinstance(bound, Module):  # a forward: its submodules' forwards and hooks run inside the trace
            self.module(bound, depth + 1)
        code = fn.__code__
        if not _is_user_code(code):
            return
        marker = (id(code), id(bound))
        if marker in self.seen:
            return
        self.seen.add(marker)
        globals_ = fn.__globals__
        cells = {name: ("cell", cell, name) for name, cell in zip(code.co_freevars, fn.__closure__ or ())}
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        locals_: dict[str, tuple] = {}
        offset = 0
        if bound is not _MISSING and params:
            locals_[params[0]] = ("const", bound, params[0])
            offset = 1
        if top:
            for i, name in enumerate(params[offset:], start=offset):
                position = i - offset if i < code.co_argcount else None
                locals_[name] = ("arg", position, name, fn)
        for name in list(code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]) + \
                list(code.co_varnames[offset:code.co_argcount]):
            if _default(fn, name) is not _MISSING:
                self.consider(("default", fn, name), (), args, kwargs or {}, depth)
        for root, steps in _scan(code, lambda name: ("global", globals_, name), cells, locals_):
            self.consider(root, steps, args, kwargs or {}, depth)

    def consider(self, root: tuple, steps: tuple, args: tuple, kwargs: dict, depth: int) -> None:
        """Keep the chain (or the prefix of it that can be read safely) if its value may change."""
        from ..nn.module import Module  # noqa: PLC0415

        value = _root_value(root, args, kwargs)
        for n, (kind, key) in enumerate(steps):
            if value is _MISSING:
                break
            if root[0] == "arg" and _is_pytree_node(value):
                return  # the argument's leaves are part of the cache key already
            if isinstance(value, Tensor):
                steps = steps[:n]
                break
            if isinstance(value, Module):
                self.keep(root, steps[:n], value, depth)
                if kind == "attr" and self._covered_by_module_key(value, key):
                    return
            nxt = _item(value, key) if kind == "item" else _attr(value, key)
            if nxt is _OPAQUE:
                steps = steps[:n]
                break
            value = nxt
        self.keep(root, steps, value, depth)

    @staticmethod
    def _covered_by_module_key(module: Any, name: str) -> bool:
        """Registries are covered by the structure version, plain scalars by the module state."""
        d = module.__dict__
        if any(name in d[r] for r in ("_parameters", "_buffers", "_modules")):
            return True
        return name in d and not name.startswith("_") and isinstance(d[name], _SCALARS)

    def keep(self, root: tuple, steps: tuple, value: Any, depth: int) -> None:
        from ..nn.module import Module  # noqa: PLC0415

        if root[0] == "arg" and not steps and not isinstance(value, Module) and not _is_jit(value):
            return  # a plain argument is part of the cache key already
        if value is _MISSING or isinstance(value, (_SCALARS, Tensor, np.ndarray)):
            self.add(root, steps)
        elif isinstance(value, Module):
            if id(value) not in self.covered or root[0] != "const":
                self.add(root, steps)
            self.module(value, depth + 1)
        elif isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or _is_jit(value):
            func = value.__func__ if isinstance(value, types.MethodType) else value
            if isinstance(func, types.FunctionType) and not _is_user_code(func.__code__):
                return  # kiln's, the standard library's or a package's function: it does not change
            self.add(root, steps)
            self.function(value, depth=depth + 1)
        elif isinstance(value, _UNGUARDED):
            return
        else:  # containers and other objects: by content (small containers) or identity
            self.add(root, steps)
            if type(value) in (list, tuple, dict) and len(value) <= _CONTAINER_LIMIT:
                for item in (value.values() if type(value) is dict else value):
                    if isinstance(item, Module):
                        self.module(item, depth + 1)
            elif callable(value):
                self.function(value, depth=depth + 1)

    def module(self, module: Any, depth: int) -> None:
        """A module runs inside the trace: its user-written forwards and hooks are read too."""
        if depth > _DEPTH_LIMIT:
            return
        for m in module.modules():
            marker = ("module", id(m))
            if marker in self.seen:
                continue
            self.seen.add(marker)
            forward = type(m).__dict__.get("forward") or getattr(type(m), "forward", None)
            if isinstance(forward, types.FunctionType) and _is_user_code(forward.__code__):
                self.function(types.MethodType(forward, m), depth=depth + 1)
            if id(m) == self.root_id:
                continue
            for hook in list(m._forward_pre_hooks.values()) + list(m._forward_hooks.values()):
                self.function(hook, depth=depth + 1)


class Guards:
    """The guarded reads of one compiled function; `key(args, kwargs)` goes into its cache key.

    `covered` is a module whose whole tree the caller keys itself (a JITModule's module).
    """

    def __init__(self, fn: Callable, covered: Any = None):
        self._fn = fn
        self._covered_root = covered
        self._covered: set[int] = set()
        self._chains: tuple | None = None
        self._signature_id = 0
        self._signatures: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._modules = ModuleState()

    def refresh(self, args: tuple, kwargs: dict) -> bool:
        """Re-find the chains (values they lead through may have changed); True if they did."""
        covered = {id(m) for m in self._covered_root.modules()} if self._covered_root is not None else set()
        analysis = _Analysis(covered, self._covered_root)
        analysis.function(self._fn, args, kwargs, top=True)
        signature = tuple(analysis.chains)
        with self._lock:
            changed = self._chains is None or signature_id_of(self._signatures, signature) != self._signature_id
            self._signature_id = signature_id_of(self._signatures, signature)
            self._chains = tuple(analysis.chains.values())
            self._covered = covered
        return changed

    def key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The current values of every guarded read (None when the function reads nothing guarded)."""
        if self._chains is None:
            self.refresh(args, kwargs)
        chains = self._chains
        if not chains:
            return None
        modules: list = []
        values = []
        for root, steps in chains:
            try:
                values.append(_guard_of(_evaluate(root, steps, args, kwargs), modules))
            except Exception as exc:  # noqa: BLE001 - a guard never breaks the call; it just misses
                values.append(("error", type(exc).__name__))
        covered = self._covered
        modules = [m for m in modules if id(m) not in covered]
        return ("guards", self._signature_id, tuple(values), self._module_state(modules) if modules else ())

    def describe(self, new: tuple, old: tuple) -> list:
        """Which guarded reads differ between two keys' statics (empty when not just the guards differ)."""
        from .misslog import MissReason  # noqa: PLC0415 - misslog imports the cache, which imports nothing here

        a, b = _guard_part(new), _guard_part(old)
        if a is None or b is None or new[:-1] != old[:-1]:
            return []
        if a[1] != b[1]:
            return [MissReason("the Python values the function reads moved (a helper, method or module was "
                               "rebound)", "guard set")]
        chains = self._chains or ()
        reasons = []
        if len(chains) == len(a[2]) == len(b[2]):
            for (root, steps), x, y in zip(chains, a[2], b[2]):
                if x != y:
                    name = chain_name(root, steps)
                    reasons.append(MissReason(f"`{name}` changed: {_show(y)} -> {_show(x)}", "guard", name,
                                              _show(y), _show(x)))
        if a[3] != b[3]:
            reasons.append(MissReason("a module the function uses changed (training mode, attributes, structure "
                                      "or requires_grad)", "module"))
        return reasons

    def _module_state(self, modules: list) -> tuple:
        """Structure, training flags, plain scalar attributes and requires_grad of the modules' trees."""
        return self._modules.key(modules)


def _guard_part(statics: tuple) -> tuple | None:
    last = statics[-1] if statics else None
    return last if isinstance(last, tuple) and len(last) == 4 and last[0] == "guards" else None


def chain_name(root: tuple, steps: tuple) -> str:
    """The read as the user wrote it: `cfg.scale`, `flags['on']`, `self.k`, `default of f(k)`."""
    kind = root[0]
    if kind == "default":
        text = f"default of {getattr(root[1], '__name__', '?')}({root[2]})"
    else:
        text = str(root[2])
    for step, key in steps:
        text += f".{key}" if step == "attr" else f"[{key!r}]"
    return text


def _show(guard: Any) -> str:
    if not isinstance(guard, tuple) or not guard:
        return repr(guard)
    kind = guard[0]
    if kind == "float":
        return guard[1]
    if kind in ("int", "bool", "str", "NoneType") and len(guard) == 2:
        return repr(guard[1])
    if kind == "tensor":
        return "a tensor" + (" requiring grad" if guard[2] else "")
    if kind == "object":
        return f"a {type(guard[1].obj).__name__} object"
    return {"missing": "(missing)", "module": "a module", "method": "a method"}.get(kind, f"a {kind}")


def signature_id_of(table: dict[tuple, int], signature: tuple) -> int:
    """A small int naming a chain set; a set seen before gets its old number back."""
    found = table.get(signature)
    if found is None:
        found = table[signature] = len(table) + 1
    return found

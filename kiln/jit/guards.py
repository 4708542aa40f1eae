"""Guards: the Python values a compiled plan baked in, re-read on every call.

Tracing runs the function once, so every Python value it reads becomes a constant
of the plan: closure and global scalars, attributes of config objects and modules
(``cfg.scale``, ``settings.EPS``), constant-key items (``flags["on"]``,
``weights[0]``, ``os.environ["MODE"]``), containers read with computed keys,
``getattr``/``vars``/``__dict__`` reads, default arguments, attributes of ``self``
and of its class, ``functools.partial`` arguments, and the training mode and
structure of any nn.Module the function calls. `read_scan` finds these reads in
the bytecode of the function and of the helpers, methods (static, class and
``super()`` ones too), module forwards and hooks it reaches; `Guards.key` re-reads
them without running user code, so a changed value retraces instead of replaying
a stale plan.

What cannot be guarded is said, never guessed: a property or other descriptor
(reading it runs user code), a container or array too large to key by content,
a call whose result differs per call (``random``, ``time``), and Python side
effects (``log.append(x)``, ``print``, attribute stores), which run while tracing
and never on a replay. Each becomes a `Note`: a one-time warning naming the read,
where it is, and the fix (a GraphBreakError with ``fullgraph=True``). The table of
what is guarded and what is warned about is in docs/guards.md.
"""
from __future__ import annotations

import builtins
import collections
import dataclasses
import functools
import os
import random
import sysconfig
import threading
import time
import types
from typing import Any, Callable, NamedTuple

import numpy as np

from ..tensor import LeafHookEpoch, Tensor
from .module_state import SCALARS as _SCALARS, ModuleState
from .pytree import flatten
from .bytecode_reads import MUTATORS, scan
from .chain_values import MISSING, OPAQUE, ByIdentity, TooLarge, attr, class_attribute, content_key, default_of, \
    evaluate, is_compiled, item, root_value

__all__ = ["ByIdentity", "Guards", "Note", "chain_name"]

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_LIBRARY_DIRS = tuple({os.path.abspath(p) + os.sep for k, p in sysconfig.get_paths().items()
                       if k in ("stdlib", "platstdlib", "purelib", "platlib")})
_DEPTH_LIMIT = 8  # how many calls deep the analysis follows helpers
_UNGUARDED = (type, types.ModuleType, types.BuiltinFunctionType, types.BuiltinMethodType,
              types.MethodWrapperType, types.WrapperDescriptorType, types.MethodDescriptorType,
              types.ClassMethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType)
_EFFECTFUL_BUILTINS = {id(builtins.print): "print(...)", id(builtins.input): "input(...)",
                       id(builtins.setattr): "setattr(...)", id(builtins.delattr): "delattr(...)",
                       id(builtins.exec): "exec(...)"}
_NONDETERMINISTIC_MODULES = ("random", "time", "datetime", "uuid", "secrets", "numpy.random")
_FIX_READ = ("Fix: pass it as an argument, or keep it in a tensor that is an input (tensors are read fresh "
             "on every call).")


class Note(NamedTuple):
    """Something the analysis cannot guard: `tag` (one warning per tag) and the message."""

    tag: str
    message: str


def _is_pytree_node(x: Any) -> bool:
    """Containers kiln.jit.pytree flattens into the call's leaves."""
    return type(x) in (tuple, list, dict, collections.OrderedDict, collections.defaultdict) or \
        (isinstance(x, tuple) and hasattr(type(x), "_fields")) or \
        (dataclasses.is_dataclass(x) and not isinstance(x, type))


def _is_user_code(code: types.CodeType) -> bool:
    """Code outside kiln, the standard library and installed packages (its reads may change)."""
    filename = code.co_filename
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    return not path.startswith(_KILN_DIR) and not path.startswith(_LIBRARY_DIRS)


def _nondeterministic(value: Any) -> bool:
    """A function whose result differs from call to call (random, time, uuid, NumPy's global RNG)."""
    owner = getattr(value, "__self__", None)
    if isinstance(owner, (random.Random, np.random.RandomState, np.random.Generator)):
        return True
    if value in (time.time, time.perf_counter, time.monotonic, time.time_ns, time.process_time, os.urandom):
        return True
    module = getattr(value, "__module__", None) or ""
    return callable(value) and any(module == m or module.startswith(m + ".") for m in _NONDETERMINISTIC_MODULES)


def _user_descriptor(obj: Any, name: str) -> Any:
    """The property or descriptor of user code behind obj.name (None for kiln's and libraries' own)."""
    cls = obj if isinstance(obj, type) else type(obj)
    raw = class_attribute(cls, name)
    if raw is MISSING:
        return None
    getter = getattr(raw, "fget", None) or getattr(type(raw), "__get__", None)
    code = getattr(getter, "__code__", None)
    return raw if code is not None and _is_user_code(code) else None


class _Analysis:
    """One pass over a function and everything it reaches: the chains worth guarding, and notes."""

    def __init__(self, covered: set[int], root: Any = None):
        self.covered = covered  # ids of modules the caller keys already (a JITModule's tree)
        self.root_id = id(root) if root is not None else None  # a JITModule's module: its hooks run outside
        self.chains: dict[tuple, tuple[tuple, tuple, str]] = {}  # signature -> (root, steps, where read)
        self.seen: set[tuple] = set()
        self.notes: dict[str, Note] = {}
        self.where = ""  # file:line of the read being considered
        self.optimizers: dict[int, Any] = {}  # optimizers whose state or param_groups the function reaches

    def add(self, root: tuple, steps: tuple) -> None:
        signature = (root[0], id(root[1]) if root[0] != "arg" else root[1], root[2], steps)
        self.chains.setdefault(signature, (root, steps, self.where))

    def note(self, tag: str, message: str) -> None:
        self.notes.setdefault(tag, Note(tag, message))

    def function(self, fn: Any, args: tuple = (), kwargs: dict | None = None, top: bool = False,
                 depth: int = 0) -> None:
        """Analyse a callable; at the top level its parameters are roots read from the call's args."""
        if depth > _DEPTH_LIMIT:
            return
        bound: Any = MISSING
        if isinstance(fn, functools.partial):
            self.add(("const", fn, "partial"), (("attr", "args"),))
            self.add(("const", fn, "partial"), (("attr", "keywords"),))
            self.function(fn.func, depth=depth + 1)
            return
        if isinstance(fn, types.MethodType):
            bound, fn = fn.__self__, fn.__func__
        if is_compiled(fn):
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
        self._function_body(fn, bound, args, kwargs or {}, top, depth)

    def _function_body(self, fn: types.FunctionType, bound: Any, args: tuple, kwargs: dict, top: bool,
                       depth: int) -> None:
        code = fn.__code__
        cells = {name: ("cell", cell, name) for name, cell in zip(code.co_freevars, fn.__closure__ or ())}
        params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        locals_: dict[str, tuple] = {}
        offset = 0
        if bound is not MISSING and params:
            locals_[params[0]] = ("const", bound, params[0])
            offset = 1
            self._class_reads(bound, params[0], code, depth)
        for i, name in enumerate(params[offset:], start=offset):
            position = i - offset if i < code.co_argcount else None
            if top:
                locals_[name] = ("arg", position, name, fn)
        for name in list(code.co_varnames[code.co_argcount:code.co_argcount + code.co_kwonlyargcount]) + \
                list(code.co_varnames[offset:code.co_argcount]):
            if default_of(fn, name) is not MISSING:
                self.consider(("default", fn, name), (), args, kwargs, depth)
        reads, effects = scan(code)
        for read in reads:
            root = self._root(read, fn.__globals__, cells, locals_)
            if root is not None:
                self.where = f"{code.co_filename}:{read.line}"
                self.consider(root, read.steps, args, kwargs, depth)
        for effect in effects:
            root = self._root(effect, fn.__globals__, cells, locals_)
            if root is not None or effect.kind in ("global", "deref"):
                self._side_effect(root, effect, f"{code.co_filename}:{effect.line}", args, kwargs)

    @staticmethod
    def _root(read: Any, globals_: dict, cells: dict, locals_: dict) -> tuple | None:
        if read.kind == "global":
            return ("global", globals_, read.name)
        if read.kind == "deref":
            return cells.get(read.name)
        return locals_.get(read.name)

    def _class_reads(self, bound: Any, self_name: str, code: types.CodeType, depth: int) -> None:
        """`type(self).X`, `self.__class__.X` and `super().method(...)`: class attributes and the
        base classes' methods of the names the code uses."""
        if isinstance(bound, type):
            return
        cls = type(bound)
        uses_super = "super" in code.co_names or "__class__" in code.co_freevars
        for name in code.co_names:
            raw = class_attribute(cls, name)
            if raw is MISSING:
                continue
            if not isinstance(raw, (types.FunctionType, staticmethod, classmethod, property)) and \
                    not hasattr(type(raw), "__get__") and not isinstance(raw, _UNGUARDED):
                self.add(("const", bound, self_name), (("attr", "__class__"), ("attr", name)))
            if uses_super:
                for klass in cls.__mro__[1:]:
                    method = klass.__dict__.get(name)
                    if isinstance(method, types.FunctionType):
                        self.function(types.MethodType(method, bound), depth=depth + 1)

    def _side_effect(self, root: tuple | None, effect: Any, where: str, args: tuple, kwargs: dict) -> None:
        """A store or mutating call through a chain that outlives the call (not a local object)."""
        if root is not None:
            optimizer = _through_optimizer(root, effect.steps, args, kwargs)
            if optimizer is not None:  # optimizer state and param_groups: the step capture checks the write
                self.optimizers.setdefault(id(optimizer), optimizer)
                return
            target = evaluate(root, effect.steps, args, kwargs)
            if isinstance(target, Tensor) or target is MISSING and effect.steps:
                return  # tensor writes are traced; a chain into nothing is a local detail
            if isinstance(target, types.ModuleType):
                return  # `kiln.add(x, y)`, `np.sort(a)`: a module's function, not a container's mutator
        self.note(f"effect {where} {effect.what}", (
            f"`{effect.what}` at {where} is a Python side effect inside a compiled function: it runs while "
            "tracing, and replays of the compiled plan skip it. Fix: move it out of the compiled function, "
            "or return the value and act on it outside."))

    def consider(self, root: tuple, steps: tuple, args: tuple, kwargs: dict, depth: int) -> None:
        """Keep the chain (or the prefix of it that can be read safely) if its value may change."""
        from ..nn.module import Module  # noqa: PLC0415

        value = root_value(root, args, kwargs)
        for n, (kind, key) in enumerate(steps):
            if value is MISSING:
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
            if kind == "attr" and key in _OPTIMIZER_CAPTURED and _is_optimizer(value):
                self.optimizers.setdefault(id(value), value)  # read per call by the step capture, not baked in
                return
            nxt = item(value, key) if kind == "item" else attr(value, key)
            if nxt is OPAQUE:
                if kind == "attr":
                    self._opaque_attribute(value, key, chain_name(root, steps[:n + 1]))
                steps = steps[:n]
                break
            value = nxt
        self.keep(root, steps, value, depth)

    def _opaque_attribute(self, obj: Any, name: str, spelled: str) -> None:
        descriptor = _user_descriptor(obj, name)
        if descriptor is None:
            return
        what = "a property" if isinstance(descriptor, property) else f"a {type(descriptor).__name__} descriptor"
        self.note(f"read {self.where} {spelled}", (
            f"`{spelled}` at {self.where} is {what} of {type(obj).__name__}: kiln does not run user code to "
            "re-check it, so the value it gave while tracing is baked into the compiled plan and later changes "
            f"will not be seen. {_FIX_READ}"))

    @staticmethod
    def _covered_by_module_key(module: Any, name: str) -> bool:
        """Registries are covered by the structure version, plain scalars by the module state."""
        d = module.__dict__
        if any(name in d[r] for r in ("_parameters", "_buffers", "_modules")):
            return True
        return name in d and not name.startswith("_") and isinstance(d[name], _SCALARS)

    def keep(self, root: tuple, steps: tuple, value: Any, depth: int) -> None:
        from ..nn.module import Module  # noqa: PLC0415

        if root[0] == "arg" and not steps and not isinstance(value, Module) and not is_compiled(value):
            return  # a plain argument is part of the cache key already
        if callable(value) and not isinstance(value, (Module, type)) and not is_compiled(value):
            if id(value) in _EFFECTFUL_BUILTINS:
                self.note(f"effect {self.where} {_EFFECTFUL_BUILTINS[id(value)]}", (
                    f"`{_EFFECTFUL_BUILTINS[id(value)]}` at {self.where} is a Python side effect inside a "
                    "compiled function: it runs while tracing, and replays of the compiled plan skip it. Fix: "
                    "move it out of the compiled function, or return the value and act on it outside."))
                return
            if _nondeterministic(value):
                name = chain_name(root, steps)
                self.note(f"call {self.where} {name}", (
                    f"`{name}(...)` at {self.where} returns a different value on each call, but it runs only "
                    "while tracing: the value it gave then is baked into the compiled plan. Fix: draw random "
                    "numbers with kiln ops (kiln.rand, kiln.randn, dropout), or pass the value as an argument."))
                return
        if value is MISSING or isinstance(value, (_SCALARS, Tensor, np.ndarray)):
            self.add(root, steps)
            if isinstance(value, Tensor):
                self.tensor_hooks(value, depth)
        elif isinstance(value, Module):
            if id(value) not in self.covered or root[0] != "const":
                self.add(root, steps)
            self.module(value, depth + 1)
        elif isinstance(value, (types.FunctionType, types.MethodType, functools.partial)) or is_compiled(value):
            func = value.__func__ if isinstance(value, types.MethodType) else value
            if isinstance(func, types.FunctionType) and not _is_user_code(func.__code__):
                return  # kiln's, the standard library's or a package's function: it does not change
            self.add(root, steps)
            self.function(value, depth=depth + 1)
        elif isinstance(value, _UNGUARDED):
            return
        else:  # containers and other objects: by content (within a budget) or identity
            self.add(root, steps)
            if type(value) in (list, tuple, dict):
                self.members(value, depth + 1)
            elif callable(value):
                self.function(value, depth=depth + 1)

    def members(self, container: Any, depth: int) -> None:
        """What a container read by content holds and the function may call (``ACTS[name](x)``, a
        computed key): its modules and user functions are read too, nested containers included."""
        from ..nn.module import Module  # noqa: PLC0415

        if depth > _DEPTH_LIMIT:
            return
        for member in (container.values() if type(container) is dict else container):
            if isinstance(member, Module):
                self.module(member, depth + 1)
            elif type(member) in (list, tuple, dict):
                self.members(member, depth + 1)
            elif callable(member) and not isinstance(member, (type, *_UNGUARDED)):
                self.function(member, depth=depth + 1)  # functions, methods, partials, callable objects

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
            for p in m._parameters.values():
                if p is not None:
                    self.tensor_hooks(p, depth)
            if id(m) == self.root_id:
                continue
            for hook in list(m._forward_pre_hooks.values()) + list(m._forward_hooks.values()):
                self.function(hook, depth=depth + 1)

    def tensor_hooks(self, t: Tensor, depth: int) -> None:
        """The gradient hooks of a leaf tensor run inside a compiled backward: their reads are
        guarded like the function's own (which hooks exist is keyed by `LeafHookEpoch`)."""
        for hook in (t._hooks or []) + (t._post_accumulate_hooks or []):
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
        self.notes: dict[str, Note] = {}  # what the last analysis could not guard, and oversized values
        self.optimizers: tuple = ()  # optimizers the function reaches: the trace captures their state at entry

    def refresh(self, args: tuple, kwargs: dict) -> bool:
        """Re-find the chains (values they lead through may have changed); True if they did."""
        covered = {id(m) for m in self._covered_root.modules()} if self._covered_root is not None else set()
        analysis = _Analysis(covered, self._covered_root)
        analysis.function(self._fn, args, kwargs, top=True)
        for leaf in flatten((args, kwargs))[0]:  # the arguments' own gradient hooks
            if isinstance(leaf, Tensor):
                analysis.tensor_hooks(leaf, 0)
        for optimizer in list(analysis.optimizers.values()):
            for group in optimizer.param_groups:
                for p in dict.get(group, "params", ()):
                    analysis.tensor_hooks(p, 0)
        signature = tuple(analysis.chains)
        with self._lock:
            changed = self._chains is None or signature_id_of(self._signatures, signature) != self._signature_id
            self._signature_id = signature_id_of(self._signatures, signature)
            self._chains = tuple(analysis.chains.values())
            self._covered = covered
            self.optimizers = tuple(analysis.optimizers.values())
            kept = {tag: note for tag, note in self.notes.items() if tag.startswith("too large")}
            self.notes = {**kept, **analysis.notes}
        return changed

    def key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The current values of every guarded read (None when the function reads nothing guarded)."""
        if self._chains is None:
            self.refresh(args, kwargs)
        chains = self._chains
        hooks = LeafHookEpoch.value
        if not chains:
            return None if hooks == 0 else ("guards", self._signature_id, (), (), hooks)
        modules: list = []
        values = []
        for root, steps, where in chains:
            try:
                value = evaluate(root, steps, args, kwargs)
                values.append(content_key(value, modules))
            except TooLarge as exc:  # keyed by identity, and said once: its contents are not seen
                values.append(("too large", ByIdentity(value)))
                self._too_large(chain_name(root, steps), where, str(exc))
            except Exception as exc:  # noqa: BLE001 - a guard never breaks the call; it just misses
                values.append(("error", type(exc).__name__))
        covered = self._covered
        modules = [m for m in modules if id(m) not in covered]
        return ("guards", self._signature_id, tuple(values), self._module_state(modules) if modules else (), hooks)

    def _too_large(self, name: str, where: str, what: str) -> None:
        tag = f"too large {name}"
        if tag not in self.notes:
            with self._lock:
                self.notes[tag] = Note(tag, (
                    f"`{name}` (read at {where}) is {what}, too large to guard by content: the compiled plan "
                    "sees it being rebound but not changes to its contents, which it may have baked in. "
                    f"{_FIX_READ}"))

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
            for (root, steps, _), x, y in zip(chains, a[2], b[2]):
                if x != y:
                    name = chain_name(root, steps)
                    reasons.append(MissReason(f"`{name}` changed: {_show(y)} -> {_show(x)}", "guard", name,
                                              _show(y), _show(x)))
        if a[3] != b[3]:
            reasons.append(MissReason("a module the function uses changed (training mode, attributes, structure "
                                      "or requires_grad)", "module"))
        if a[4] != b[4]:
            reasons.append(MissReason("a gradient hook was registered on or removed from a leaf tensor (hooks run "
                                      "inside a compiled backward)", "hooks"))
        return reasons

    def _module_state(self, modules: list) -> tuple:
        """Structure, training flags, plain scalar attributes and requires_grad of the modules' trees."""
        return self._modules.key(modules)


def _guard_part(statics: tuple) -> tuple | None:
    last = statics[-1] if statics else None
    return last if isinstance(last, tuple) and len(last) == 5 and last[0] == "guards" else None


_OPTIMIZER_CAPTURED = ("param_groups", "state")  # an optimizer's attributes a trace reads through its capture


def _is_optimizer(value: Any) -> bool:
    from ..optim.optimizer import Optimizer  # noqa: PLC0415 - kiln.optim is imported after kiln.jit

    return isinstance(value, Optimizer)


def _through_optimizer(root: tuple, steps: tuple, args: tuple, kwargs: dict) -> Any:
    """The optimizer whose ``state`` or ``param_groups`` a chain goes through, else None. A trace
    reads those through its step capture (kiln.jit.step_trace): hyperparameters on every call,
    state through its path, and a write the plan cannot replay is a graph break, so neither is a
    baked read nor a silent side effect."""
    value = root_value(root, args, kwargs)
    for kind, key in steps:
        if kind == "attr" and key in _OPTIMIZER_CAPTURED and _is_optimizer(value):
            return value
        if value is MISSING or value is OPAQUE:
            return None
        value = item(value, key) if kind == "item" else attr(value, key)
    return None


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

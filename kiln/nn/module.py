"""`Module`: the base class of every layer and model, with PyTorch's API.

A Module owns three ordered registries: ``_parameters`` (Parameters), ``_buffers``
(plain tensors such as BatchNorm's running stats) and ``_modules`` (children).
Attribute assignment routes Parameters, Modules and known buffers into them.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping

from .. import autograd
from ..device import Device, get_device, is_device_spec
from ..dtypes import get_dtype
from ..tensor import DataEpoch, Tensor
from .hooks import RemovableHandle
from .parameter import Parameter
from .state_dict import IncompatibleKeys, load_state_dict_into

# A process-wide clock: every structural change stamps the changed module with a fresh,
# larger value, so the newest stamp in a module tree changes whenever the tree does.
_structure_clock = itertools.count(1)


def _compile(module: "Module", **kwargs: Any) -> Any:
    """`kiln.compile`, put here by `register_compile` when kiln.jit loads (it imports this module)."""
    raise RuntimeError("Module.compile() needs kiln.jit, which registers kiln.compile when it loads; import kiln")


def register_compile(compile_fn: Callable[..., Any]) -> None:
    """Make `Module.compile` call `compile_fn` (kiln.jit.api does, with kiln.compile)."""
    global _compile
    _compile = compile_fn


class MutationEpoch:
    """A process-wide counter bumped by any change to any module: attributes, registries,
    hooks or training mode. The JIT re-derives a module's cache-key fields only when it moved."""

    value = 0

    @classmethod
    def bump(cls) -> None:
        cls.value += 1

_REGISTRIES = ("_parameters", "_buffers", "_modules")


class Module:
    """Base class for all neural-network layers and models.

    Subclasses set up parameters and child modules in ``__init__`` (after calling
    ``super().__init__()``) and compute in ``forward``. Call the module, not
    ``forward``, so that hooks run.

    Structure version: every module carries ``_structure_version``, an int stamped
    from a process-wide increasing clock whenever a parameter, buffer or submodule
    is added, replaced or removed, or a forward hook is added or removed.
    ``structure_version()`` is the largest stamp in the module tree; it changes
    whenever the tree's structure does, so a compiler can key its cache on it.
    (Changing parameter *values*, e.g. by an optimizer step, does not change it.)

    >>> class Net(kiln.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = kiln.nn.Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> Net()(kiln.randn(3, 4)).shape
    (3, 2)
    """

    training: bool
    _structure_version: int

    def __init__(self) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", OrderedDict())
        setattr_(self, "_buffers", OrderedDict())
        setattr_(self, "_non_persistent_buffers", set())
        setattr_(self, "_modules", OrderedDict())
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_hooks_with_kwargs", set())
        setattr_(self, "_structure_version", next(_structure_clock))

    # ---- calling ------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function; '
            "define forward(self, ...) in the subclass"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._forward_pre_hooks and not self._forward_hooks:
            return self.forward(*args, **kwargs)
        return self._call_with_hooks(args, kwargs)

    def _call_with_hooks(self, args: tuple, kwargs: dict) -> Any:
        args, kwargs = self._run_forward_pre_hooks(args, kwargs)
        output = self.forward(*args, **kwargs)
        return self._run_forward_hooks(args, kwargs, output)

    def _run_forward_pre_hooks(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Run the pre-hooks in order; return the (possibly replaced) args and kwargs.

        Callers that run ``forward`` some other way (the JIT) use this and
        `_run_forward_hooks` so hooks behave exactly as in ``__call__``.
        """
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError("a forward pre-hook registered with with_kwargs=True must "
                                           f"return None or an (args, kwargs) pair, got {type(result).__name__}")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        return args, kwargs

    def _run_forward_hooks(self, args: tuple, kwargs: dict, output: Any) -> Any:
        """Run the forward hooks in order; return the (possibly replaced) output."""
        for hook_id, hook in list(self._forward_hooks.items()):
            if hook_id in self._hooks_with_kwargs:
                result = hook(self, args, kwargs, output)
            else:
                result = hook(self, args, output)
            if result is not None:
                output = result
        return output

    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Run ``hook(module, args)`` before forward; a non-None return replaces the args.

        A non-tuple return is wrapped in a 1-tuple. With ``with_kwargs=True`` the hook is
        ``hook(module, args, kwargs)`` and may return a new ``(args, kwargs)`` pair.
        """
        return self._add_hook(self._forward_pre_hooks, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                              with_kwargs: bool = False) -> RemovableHandle:
        """Run ``hook(module, args, output)`` after forward; a non-None return replaces the output.

        With ``with_kwargs=True`` the hook is ``hook(module, args, kwargs, output)``.
        """
        return self._add_hook(self._forward_hooks, hook, prepend, with_kwargs)

    def _add_hook(self, hooks: OrderedDict, hook: Callable, prepend: bool, with_kwargs: bool) -> RemovableHandle:
        if not callable(hook):
            raise TypeError(f"hook must be callable, got {type(hook).__name__}")
        handle = RemovableHandle(hooks, on_change=self._bump_structure)
        hooks[handle.id] = hook
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        if with_kwargs:
            self._hooks_with_kwargs.add(handle.id)
        self._bump_structure()
        return handle

    # ---- structure version ----------------------------------------------------------
    def _bump_structure(self) -> None:
        object.__setattr__(self, "_structure_version", next(_structure_clock))
        MutationEpoch.bump()

    def __setstate__(self, state: dict) -> None:
        # Unpickled or deep-copied: take a fresh stamp, since a stamp from another process
        # could exceed this process's clock and hide later changes from structure_version().
        self.__dict__.update(state)
        self._bump_structure()

    def structure_version(self) -> int:
        """The newest structure stamp in this module tree (see the class docstring)."""
        return max(m._structure_version for _, m in self.named_modules(remove_duplicate=False))

    # ---- registration ---------------------------------------------------------------
    def _check_new_name(self, name: Any, kind: str, registry: str) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {kind} before Module.__init__() call; "
                                 f"call super().__init__() first in {type(self).__name__}.__init__")
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if name == "" or "." in name:
            raise KeyError(f'{kind} name must be non-empty and contain no ".", got {name!r}')
        if hasattr(self, name) and name not in getattr(self, registry):
            raise KeyError(f"attribute '{name}' already exists on {type(self).__name__}; "
                           f"pick another name for the {kind}")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a Parameter (or None, a declared-but-absent parameter) under `name`."""
        self._check_new_name(name, "parameter", "_parameters")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            "(kiln.nn.Parameter or None required); wrap it: nn.Parameter(tensor)")
        self._parameters[name] = param
        self._bump_structure()

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a non-learnable tensor (e.g. running stats); persistent buffers go into state_dict."""
        self._check_new_name(name, "buffer", "_buffers")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            "(kiln.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)
        self._bump_structure()

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under `name` (None declares an absent child)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass; "
                            f"cannot add it as submodule '{name}'")
        self._check_new_name(name, "module", "_modules")
        self._modules[name] = module
        self._bump_structure()

    register_module = add_module

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call; "
                                     f"call super().__init__() first in {type(self).__name__}.__init__")
            self._forget(name, keep="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(kiln.nn.Parameter or None expected); wrap it: nn.Parameter(tensor)")
            self.register_parameter(name, None)
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign a submodule before Module.__init__() call; "
                                     f"call super().__init__() first in {type(self).__name__}.__init__")
            self._forget(name, keep="_modules")
            self._modules[name] = value
            self._bump_structure()
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                "(kiln.nn.Module or None expected)")
            self._modules[name] = None
            self._bump_structure()
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(kiln.Tensor or None expected)")
            if value is not self._buffers[name]:
                self._buffers[name] = value
                self._bump_structure()
        else:
            object.__setattr__(self, name, value)
        MutationEpoch.bump()

    def _forget(self, name: str, keep: str) -> None:
        """Drop `name` from the plain attributes and every registry but `keep`."""
        self.__dict__.pop(name, None)
        for registry in _REGISTRIES:
            if registry != keep:
                getattr(self, registry).pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 f"(did {type(self).__name__}.__init__ call super().__init__()?)")
        for registry in _REGISTRIES:
            found = d[registry]
            if name in found:
                return found[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in _REGISTRIES:
            found = self.__dict__.get(registry)
            if found is not None and name in found:
                del found[name]
                self._non_persistent_buffers.discard(name)
                self._bump_structure()
                return
        object.__delattr__(self, name)
        MutationEpoch.bump()

    def __dir__(self) -> list[str]:
        names = set(super().__dir__())
        for registry in _REGISTRIES:
            names.update(getattr(self, registry).keys())
        return sorted(names)

    # ---- traversal ----------------------------------------------------------------
    def named_modules(self, memo: set[int] | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """(qualified name, module) for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is None:
                continue
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """(name, module) for the direct children, each module once."""
        seen: set[int] = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, registry: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        modules = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                   if recurse else [(prefix, self)])
        for mod_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(qualified name, Parameter); a parameter shared by two modules is listed once."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)  # type: ignore[misc]

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(qualified name, buffer tensor), persistent or not."""
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        """The descendant at dotted path `target` ("" is self)."""
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule '{part}' "
                                     f"(looking up '{target}')")
            module = child
        return module

    def get_parameter(self, target: str) -> Parameter:
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if module._parameters.get(name) is None:
            raise AttributeError(f"{type(module).__name__} has no parameter '{name}' (looking up '{target}')")
        return module._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        path, _, name = target.rpartition(".")
        module = self.get_submodule(path)
        if module._buffers.get(name) is None:
            raise AttributeError(f"{type(module).__name__} has no buffer '{name}' (looking up '{target}')")
        return module._buffers[name]

    # ---- modes and grads --------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and all descendants (affects Dropout, BatchNorm)."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be a bool, got {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        MutationEpoch.bump()
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the grads of all parameters: to None (default) or to zeros."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach()
                with autograd.no_grad():
                    p.grad.zero_()

    # ---- state dict -------------------------------------------------------------------
    def state_dict(self, *, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> OrderedDict[str, Tensor]:
        """Parameters and persistent buffers by qualified name, sharing memory with the module.

        Tensors are detached unless ``keep_vars=True``. Tied weights appear under every name.
        """
        out: OrderedDict[str, Tensor] = OrderedDict() if destination is None else destination  # type: ignore[assignment]
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(destination=out, prefix=f"{prefix}{name}.", keep_vars=keep_vars)
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the existing parameters and buffers, in place and without grad.

        Values may be kiln tensors, NumPy arrays or anything ``numpy.asarray`` accepts
        (a CPU torch tensor, for example). Existing tensor objects are kept, so an
        optimizer holding them stays valid. Raises RuntimeError listing missing keys,
        unexpected keys (both only when `strict`) and shape mismatches (always).
        Returns ``(missing_keys, unexpected_keys)``.
        """
        return load_state_dict_into(self, state_dict, strict)

    # ---- dtype and device -------------------------------------------------------------
    def _apply(self, fn: Callable[[Tensor], Tensor]) -> Module:
        """Convert every parameter, grad and buffer with `fn`, keeping the tensor objects."""
        with autograd.no_grad():
            for module in self.modules():
                for t in itertools.chain(module._parameters.values(), module._buffers.values()):
                    if t is None:
                        continue
                    _replace_data(t, fn(t))
                    if t.grad is not None:
                        _replace_data(t.grad, fn(t.grad))
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """Move to a device and/or cast floating-point tensors: ``m.to(kiln.float64)``, ``m.to("cpu")``."""
        dtype, device = _parse_to_args(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, got {dtype.name}")

        def convert(t: Tensor) -> Tensor:
            out = t
            if dtype is not None and t.is_floating_point() and t.dtype != dtype:
                out = out.to(dtype)
            if device is not None and out.device != device:
                out = out.to(device)
            return out

        return self._apply(convert)

    def float(self) -> Module:
        """Cast floating-point parameters and buffers to float32, in place: ``model.float()``."""
        return self.to("float32")

    def double(self) -> Module:
        """Cast floating-point parameters and buffers to float64, in place: ``model.double()``."""
        return self.to("float64")

    def half(self) -> Module:
        """Cast floating-point parameters and buffers to float16, in place: ``model.half()``."""
        return self.to("float16")

    def bfloat16(self) -> Module:
        """Cast floating-point parameters and buffers to bfloat16, in place: ``model.bfloat16()``.

        Needs the optional ml_dtypes package (``pip install 'kiln[bfloat16]'``); without it this
        raises TypeError naming the install command. Integer buffers keep their dtype.
        """
        return self.to("bfloat16")

    def cpu(self) -> Module:
        return self.to("cpu")

    def cuda(self) -> Module:
        return self.to("cuda")

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn(module)`` on every descendant (children first) and then on self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def compile(self, **kwargs: Any) -> Any:
        """``kiln.compile(self, **kwargs)``: a JITModule that traces and caches this module."""
        return _compile(self, **kwargs)

    # ---- printing -----------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr; override in layers."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + _indent(repr(child), 2) for name, child in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                body = extra_lines[0]
            else:
                body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{self._get_name()}({body})"


def _indent(text: str, spaces: int) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * spaces + line for line in rest])


def _replace_data(t: Tensor, new: Tensor) -> None:
    """Make `t` hold `new`'s array (dtype/device change) while keeping its identity."""
    if new is t:
        return
    DataEpoch.replaced(t, new._data, new._device)
    t._data = new._data
    t._device = new._device
    t._bump_version()


def _parse_to_args(args: tuple, kwargs: dict) -> tuple[Any, Device | None]:
    dtype = kwargs.pop("dtype", None)
    device = kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"Module.to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            dtype, device = arg.dtype, arg.device
        elif is_device_spec(arg):
            device = arg
        else:
            dtype = arg
    return (get_dtype(dtype) if dtype is not None else None,
            get_device(device) if device is not None else None)

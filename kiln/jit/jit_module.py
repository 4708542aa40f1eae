"""`JITModule`: a compiled nn.Module that still looks like the module.

Params and buffers are read fresh each call (so ``optimizer.step()`` is seen without
recompiling); the module's own hooks run around the plan; attribute access,
``train()``/``eval()``, ``parameters()`` and ``state_dict()`` go through to the module.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from ..trace_state import trace_state
from .function import JITFunction
from .guards import Guards


class JITModule(JITFunction):
    """A compiled nn.Module: params and buffers are read fresh each call; hooks run around the plan."""

    def __init__(self, module: Any, **kwargs: Any):
        object.__setattr__(self, "_module", module)
        super().__init__(module.forward, **kwargs)
        self._owner = module  # even when forward is not a plain method bound to it
        self._guards = Guards(module.forward, covered=module)  # the module tree is keyed by _module_key
        self.__name__ = type(module).__name__
        self._log.name = self.__name__
        self._initialized = True  # from now on, new public attributes are the module's

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module
        if trace_state.tracer is not None:
            return module(*args, **kwargs)
        if module._forward_pre_hooks:
            args, kwargs = module._run_forward_pre_hooks(args, kwargs)
        out = super().__call__(*args, **kwargs)
        if module._forward_hooks:
            out = module._run_forward_hooks(args, kwargs, out)
        return out

    def _target(self) -> Callable:
        return self._module.forward  # read each time: a user may rebind forward

    # ---- delegation to the wrapped module -----------------------------------------------
    @property
    def module(self) -> Any:
        return self._module

    def __getattr__(self, name: str) -> Any:
        module = self.__dict__.get("_module")
        if module is None:
            raise AttributeError(name)
        value = getattr(module, name)
        if callable(value) and getattr(value, "__self__", None) is module:
            return self._keep_wrapped(value)
        return value

    def _keep_wrapped(self, method: Callable) -> Callable:
        """A module method that returns the module (to, float, requires_grad_...) returns this JITModule."""
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self if result is self._module else result

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_") or name in type(self).__dict__ or name in JITFunction.__dict__ \
                or name in self.__dict__ or "_initialized" not in self.__dict__:
            object.__setattr__(self, name, value)
        else:
            setattr(self._module, name, value)

    def train(self, mode: bool = True) -> "JITModule":
        self._module.train(mode)
        return self

    def eval(self) -> "JITModule":
        self._module.eval()
        return self

    def __repr__(self) -> str:
        return f"JITModule({self._module!r})"

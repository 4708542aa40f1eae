"""Kernels run with NumPy's floating-point warnings off: inf and NaN come back quietly, as in PyTorch.

``log(0)`` is ``-inf``, ``0/0`` is NaN and ``exp(1000)`` is ``inf`` in PyTorch, without a
word; NumPy would print a RuntimeWarning for each (and the idiom ``x + mask.log()``
would warn on every call). Every primitive's kernel is wrapped by `quiet` (see
`Primitive.__init_subclass__`), so eager ops, autograd, the interpreter backend and
constant folding agree with the compiled C kernels, which never warn.

On NumPy 2 the wrapper sets NumPy's error-state context variable directly (a fraction
of the cost of entering ``np.errstate``, which matters on the eager hot path); older
NumPy versions use ``np.errstate``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

try:
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
except ImportError:  # NumPy < 2
    _ERRSTATE = None

if _ERRSTATE is not None:
    with np.errstate(all="ignore"):
        _IGNORE_ALL = _ERRSTATE.get()


def quiet(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel` with NumPy's divide/overflow/underflow/invalid warnings off while it runs."""
    if getattr(kernel, "_kiln_quiet", False):
        return kernel
    if _ERRSTATE is None:
        @functools.wraps(kernel)
        def run(*args: Any, **kwargs: Any) -> Any:
            with np.errstate(all="ignore"):
                return kernel(*args, **kwargs)
    else:
        set_state, reset_state = _ERRSTATE.set, _ERRSTATE.reset

        @functools.wraps(kernel)
        def run(*args: Any, **kwargs: Any) -> Any:
            token = set_state(_IGNORE_ALL)
            try:
                return kernel(*args, **kwargs)
            finally:
                reset_state(token)

    run._kiln_quiet = True  # type: ignore[attr-defined]
    return run

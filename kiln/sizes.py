"""What counts as a size or a scalar when a shape may hold symbolic dims.

Under ``dynamic_dims`` tracing, ``x.shape[0]`` is a `kiln.jit.symbolic.SymInt`. It is
deliberately *not* an ``int`` subclass: CPython and NumPy read an int subclass's value
in C without calling any of its methods (``range(B)``, ``np.zeros(B)``), which would
bake the traced size into a plan silently. So code that accepts sizes asks these
helpers instead of ``isinstance(d, int)``. This module has no imports, so every layer
of kiln can use it.
"""
from __future__ import annotations

from typing import Any


class SymbolicNumber:
    """Base class of kiln.jit.symbolic's SymInt (`integral` True) and SymFloat."""

    __slots__ = ()
    integral: bool = False


def is_symbolic_number(x: Any) -> bool:
    """True for a SymInt or SymFloat."""
    return isinstance(x, SymbolicNumber)


def is_int(x: Any) -> bool:
    """True for a Python int (not a bool) or a symbolic size (SymInt)."""
    if isinstance(x, int):
        return not isinstance(x, bool)
    return isinstance(x, SymbolicNumber) and x.integral


def is_real(x: Any) -> bool:
    """True for a Python int or float (not a bool), or a SymInt/SymFloat."""
    if isinstance(x, (int, float)):
        return not isinstance(x, bool)
    return isinstance(x, SymbolicNumber)


def concrete(x: Any) -> Any:
    """The traced value behind a SymInt/SymFloat, as a plain number, WITHOUT specializing the
    plan; other values pass through. For kiln's own bookkeeping only (shape checks, dummy
    arrays that compute a shape): the caller promises the value is not baked into a plan."""
    return x.value if isinstance(x, SymbolicNumber) else x


def concrete_all(x: Any) -> Any:
    """`concrete` applied through tuples, lists and slices."""
    if isinstance(x, SymbolicNumber):
        return x.value
    if isinstance(x, tuple):
        return tuple(concrete_all(i) for i in x)
    if isinstance(x, list):
        return [concrete_all(i) for i in x]
    if isinstance(x, slice):
        return slice(concrete_all(x.start), concrete_all(x.stop), concrete_all(x.step))
    return x

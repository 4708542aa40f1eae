"""The globals a ``weights_only`` load may rebuild from a pickled checkpoint.

A pickle names the classes and functions that rebuild its objects ("globals"), and unpickling
calls them. ``kiln.load(f)`` (``weights_only=True``, the default) rebuilds a pickled object only
when every global it names is allowed: kiln's plain data types (below) plus the ones allowed
here. Tensors and NumPy arrays need no global: kiln stores them outside the pickle.

>>> kiln.serialization.add_safe_globals([MyNet, kiln.nn.Linear])
>>> model = kiln.load("model.pt")
>>> with kiln.serialization.safe_globals([MyNet, kiln.nn.Linear]):
...     model = kiln.load("model.pt")
"""
from __future__ import annotations

import builtins
import collections
from typing import Any, Iterable

import numpy as np

from ..device import Device
from ..dtypes import get_dtype

__all__ = ["add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals", "allowed_globals",
           "global_name", "DEFAULT_SAFE_GLOBALS"]

# Plain data types that rebuild values without running code from the file.
DEFAULT_SAFE_GLOBALS: tuple[Any, ...] = (
    collections.OrderedDict, collections.Counter, collections.defaultdict, collections.deque,
    builtins.dict, builtins.list, builtins.set, builtins.frozenset, builtins.tuple, builtins.int, builtins.float,
    builtins.bool, builtins.str, builtins.complex, builtins.slice, builtins.range,
    np.dtype, np.float64(0).__reduce__()[0],  # NumPy dtypes and scalars (the latter rebuilt by numpy's `scalar`)
    get_dtype, Device,  # kiln dtypes and devices
)

_allowed: list[Any] = []  # what the user allowed: objects, or (object, "module.Name") pairs


def global_name(obj: Any) -> str:
    """The name a pickle gives a class or function: ``module.QualName``."""
    return f"{obj.__module__}.{obj.__qualname__}"


def _checked(entries: Any, caller: str) -> list[Any]:
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Iterable):
        raise TypeError(f"{caller} expects a list of classes or functions, got {type(entries).__name__}; "
                        "e.g. add_safe_globals([MyNet])")
    out = list(entries)
    for entry in out:
        obj, name = entry if isinstance(entry, tuple) and len(entry) == 2 else (entry, None)
        if isinstance(obj, str):
            raise TypeError(f"{caller}: got the string {obj!r}; pass the class or function itself (e.g. MyNet, not "
                            "'MyNet'), or a (class, 'module.Name') pair for a class saved under another name")
        if name is None and not (hasattr(obj, "__module__") and hasattr(obj, "__qualname__")):
            raise TypeError(f"{caller}: {obj!r} ({type(obj).__name__}) is not a class or function; pass classes "
                            "and functions, or (object, 'module.Name') pairs")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{caller}: the pair {entry!r} needs a str name second, e.g. (MyNet, 'train.MyNet')")
    return out


def add_safe_globals(safe_globals: list[Any]) -> None:
    """Allow these classes and functions in pickled checkpoints loaded with ``weights_only=True``.

    An entry is a class or function, or a ``(obj, "module.Name")`` pair for one the file names
    differently (a class that moved since the file was saved). Allow only code you trust: an
    allowed class is called with arguments taken from the file.

    >>> kiln.serialization.add_safe_globals([MyNet, kiln.nn.Linear])
    """
    _allowed.extend(_checked(safe_globals, "add_safe_globals"))


def get_safe_globals() -> list[Any]:
    """The classes and functions (or pairs) allowed so far with add_safe_globals or safe_globals.

    >>> kiln.serialization.get_safe_globals()
    []
    """
    return list(_allowed)


def clear_safe_globals() -> None:
    """Forget every global allowed with add_safe_globals (kiln's plain data types stay allowed).

    >>> kiln.serialization.clear_safe_globals()
    """
    _allowed.clear()


class safe_globals:
    """Allow these globals only inside a ``with`` block (see add_safe_globals).

    >>> with kiln.serialization.safe_globals([MyNet, kiln.nn.Linear]):
    ...     model = kiln.load("model.pt")
    """

    def __init__(self, safe_globals: list[Any]):
        self.safe_globals = _checked(safe_globals, "safe_globals")
        self._before: list[Any] = []

    def __enter__(self) -> None:
        self._before = list(_allowed)
        _allowed.extend(self.safe_globals)

    def __exit__(self, *exc_info: Any) -> None:
        _allowed[:] = self._before


def allowed_globals() -> dict[str, Any]:
    """Every allowed global by the name a pickle gives it: kiln's defaults, then the user's."""
    out = {global_name(obj): obj for obj in DEFAULT_SAFE_GLOBALS}
    for entry in _allowed:
        obj, name = entry if isinstance(entry, tuple) and len(entry) == 2 else (entry, global_name(entry))
        out[name] = obj
    return out

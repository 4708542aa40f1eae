"""What the eager core's lower modules use at run time but cannot import: the Tensor class and kiln.functional.

The eager core is layered. At the bottom are devices and the autograd graph (device.py, autograd.py); above them
the primitives (kiln/ops), then the Tensor class (tensor.py), then the functional ops (kiln/functional). Lower
modules still use upper ones at run time: the autograd engine makes gradient tensors, a primitive's
vector-Jacobian product is written in functional ops. An import of the upper module would close a cycle, so each
upper module installs itself here when it is imported (importing kiln imports them all before any op runs), and
the lower ones read it here when they run. This module imports nothing of kiln, so no import cycle runs through
it (tests/structure/test_import_cycles.py).
"""
from __future__ import annotations

from types import ModuleType
from typing import Any

Tensor: Any = None
"""kiln.tensor.Tensor (installed by kiln/tensor.py)."""
tensor: Any = None
"""kiln.tensor.tensor, the factory (installed by kiln/tensor.py)."""

_functional: ModuleType | None = None


def install_functional(module: ModuleType) -> None:
    """Make `module` (kiln.functional) the namespace `functional()` returns."""
    global _functional
    _functional = module


def functional() -> ModuleType:
    """kiln.functional (installed when it was imported, which importing kiln does first)."""
    if _functional is None:
        raise RuntimeError("kiln.functional is not imported yet: import kiln before running its ops")
    return _functional

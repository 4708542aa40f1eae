"""The functional ops, for the code below them that calls them at run time.

Primitives' vector-Jacobian products (kiln/ops) and the gradient sums (gradient_sum.py) are written in kiln's
functional ops, but kiln.functional is built on top of them: it imports the primitives, so they cannot import
it. kiln.functional installs itself here when it is imported, and that code reaches it through `functional()`.
This module imports nothing of kiln, so it stays out of every import cycle.
"""
from __future__ import annotations

from types import ModuleType

_module: ModuleType | None = None


def install(module: ModuleType) -> None:
    """Make `module` (kiln.functional) the namespace `functional()` returns."""
    global _module
    _module = module


def functional() -> ModuleType:
    """kiln.functional (installed when it was imported, which importing kiln does first)."""
    if _module is None:
        raise RuntimeError("kiln.functional is not imported yet: import kiln before running its ops")
    return _module

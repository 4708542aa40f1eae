"""Where eager `cross_entropy` may hand large logits to compiled plans.

The implementation lives with the compiler (kiln/jit/eager_plans.py), which installs it here when kiln.jit
is imported: the eager core does not import the compiler, and this module imports nothing of kiln, so no
import cycle runs between them.
"""
from __future__ import annotations

from typing import Any, Callable

_hook: Callable[..., Any] | None = None


def install(hook: Callable[..., Any] | None) -> None:
    """Set the function `compiled_cross_entropy` defers to (None: eager cross-entropy never runs compiled)."""
    global _hook
    _hook = hook


def compiled_cross_entropy(decomposed: Callable, input: Any, target: Any, weight: Any,  # noqa: A002
                           ignore_index: int, reduction: str, label_smoothing: float) -> Any:
    """The loss through compiled plans, or None where the installed hook (or its absence) leaves the call to
    the NumPy paths. `decomposed` is the loss in primitives, with `cross_entropy`'s arguments."""
    if _hook is None:
        return None
    return _hook(decomposed, input, target, weight, ignore_index, reduction, label_smoothing)

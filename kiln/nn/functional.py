"""``kiln.nn.functional`` (``import kiln.nn.functional as F``): every functional op of kiln.

The same functions as ``kiln.<name>``: math, shapes, creation, activations,
layers and losses, plus ``pad``.
"""
from ..functional import *  # noqa: F403
from ..functional import __all__ as _all
from ..functional.padding import pad

__all__ = list(_all) + ["pad"]

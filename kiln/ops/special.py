"""Primitives that exist for the compiler: stop_gradient (what detach() traces to)."""
from __future__ import annotations

from .primitive import Primitive


class StopGradient(Primitive):
    """Identity on values; blocks gradients (the traced form of Tensor.detach)."""

    name = "stop_gradient"
    is_view = identity = True

    def abstract(self, x):
        return x

    def kernel(self, xp, x):
        return x

    def view_strides(self, shape, strides, offset):
        return shape, strides, offset

    def vjp(self, g, inputs, node):
        return (None,)

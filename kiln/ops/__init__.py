"""Primitives: one module per family; `REGISTRY` maps each name to its instance."""
from . import checks, creation, elementwise, linalg, movement, random_ops, reduce, special, window  # noqa: F401 (registers)
from .primitive import REGISTRY, AbstractValue, Primitive, ShapeError, bind

__all__ = ["REGISTRY", "AbstractValue", "Primitive", "ShapeError", "bind"]

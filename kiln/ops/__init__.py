"""Primitives: one module per family; `REGISTRY` maps each name to its instance."""
from . import checks, collective, creation, elementwise, linalg, movement, multinomial, random_ops, reduce, sort, special, window  # noqa: F401,E501 (registers)
from . import bitwise, conv, exp_log, scatter, trig  # noqa: F401 (registers)
from .primitive import REGISTRY, AbstractValue, Primitive, ShapeError, bind

__all__ = ["REGISTRY", "AbstractValue", "Primitive", "ShapeError", "bind"]

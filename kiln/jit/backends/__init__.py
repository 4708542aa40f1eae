"""Backends lower an optimized graph to a runnable Plan. `interpret` is the reference."""
from .interpret import Plan, lower

BACKENDS = {"interpret": lower}


def get_backend(name: str):
    """The lowering function for a backend name ("auto" picks the best available)."""
    if name == "auto":
        name = "interpret"
    try:
        return name, BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: expected one of {['auto', *BACKENDS]}") from None


__all__ = ["BACKENDS", "Plan", "get_backend", "lower"]

"""One walk over module trees: what a compiled plan depends on besides tensor data.

A plan bakes in each module's structure (which params, buffers, submodules and
hooks exist), its training flag and its plain scalar attributes (``self.scale``),
and differentiates exactly the parameters that required grad when it was traced.
`ModuleState` reads all of that in one walk; both the cache key of a compiled
module and the guards of a compiled function use it. The walk reruns only when
some module changed (`MutationEpoch` moved); requires_grad is re-read every call.
"""
from __future__ import annotations

from typing import Any

SCALARS = (int, float, bool, str, type(None))


def scalar_key(x: Any) -> Any:
    """A hashable key for a Python scalar (floats by repr, so that 0.0 and -0.0, or nan, differ)."""
    return ("float", repr(x)) if isinstance(x, float) else (type(x).__name__, x)


class ModuleState:
    """The key part of a set of module trees, cached until some module changes."""

    def __init__(self) -> None:
        self._cached: tuple | None = None

    def key(self, roots: list) -> tuple:
        """(newest structure stamp, training flags, scalar attributes by path, requires_grad flags)."""
        epoch = _epoch().value
        ids = tuple(map(id, roots))
        cached = self._cached
        if cached is None or cached[0] != epoch or cached[1] != ids:
            version, training, attributes, params = walk(roots)
            cached = self._cached = (epoch, ids, version, training, attributes, params)
        return (cached[2], cached[3], cached[4], tuple([p.requires_grad for p in cached[5]]))


_mutation_epoch: Any = None


def _epoch() -> Any:
    """kiln.nn's MutationEpoch (imported on first use: kiln.nn imports kiln.jit)."""
    global _mutation_epoch  # noqa: PLW0603 - a one-time lazy import
    if _mutation_epoch is None:
        from ..nn.module import MutationEpoch  # noqa: PLC0415

        _mutation_epoch = MutationEpoch
    return _mutation_epoch


def walk(roots: list) -> tuple[int, tuple, tuple, list]:
    """(newest structure stamp, training flags, plain scalar attributes by dotted path, parameters)."""
    version = 0
    training: list = []
    attributes: list = []
    params: list = []
    seen: set[int] = set()
    stack = [(f"{i}." if len(roots) > 1 else "", m) for i, m in reversed(list(enumerate(roots)))]
    while stack:
        path, m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        version = max(version, m._structure_version)
        training.append(m.training)
        for name, value in m.__dict__.items():  # plain Python attributes the forward may read
            if not name.startswith("_") and name != "training" and isinstance(value, SCALARS):
                attributes.append((path + name, scalar_key(value)))
        params.extend(p for p in m._parameters.values() if p is not None)
        stack.extend((f"{path}{n}.", c) for n, c in m._modules.items() if c is not None)
    return version, tuple(training), tuple(attributes), params

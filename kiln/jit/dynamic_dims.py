"""Checking the dims that ``dynamic_dims`` names against one call's tensors.

``kiln.compile(fn, dynamic_dims={0: {0: "B"}, 1: {-1: "B"}})`` says: dim 0 of argument 0
and the last dim of argument 1 have a size that may change between calls, and the two
are the same size "B". `check_dynamic_dims` validates that for one call, as a pure
function of the spec and the shapes: negative dims count from the end (``-1`` is the
last dim, as in PyTorch and JAX), a dim outside ``-ndim..ndim-1`` is a ValueError, and
so is one name given to dims of different sizes in one call (a name is one size).
"""
from __future__ import annotations

from typing import Callable, Mapping

DimNames = Mapping[int, str]


def _argument(index: int) -> str:
    return f"argument {index}"


def check_tensor_dims(names: DimNames, shape: tuple, sizes: dict[str, tuple[int, str]], what: str) -> dict[int, str]:
    """The dims named for one tensor of shape `shape`, negative ones made positive.

    `sizes` maps each name seen so far in this call to (its size, where it was seen) and is
    updated in place; `what` describes the tensor in messages ("argument 0").
    Raises ValueError for a dim out of range, a dim named twice (``{0: "B", -2: "T"}`` on
    a 2-d tensor), or a name already seen with another size.
    """
    ndim = len(shape)
    normalized: dict[int, str] = {}
    for dim, name in names.items():
        if isinstance(dim, bool) or not isinstance(dim, int) or not -ndim <= dim < ndim:
            valid = f"valid dims are {-ndim}..{ndim - 1}" if ndim else "a 0-d tensor has no dims"
            raise ValueError(f"dynamic_dims names dim {dim!r} of {what}, which has shape {tuple(shape)}: {valid} "
                             "(negative dims count from the end). Fix: name a dim the tensor has.")
        d = dim % ndim
        if d in normalized:
            raise ValueError(f"dynamic_dims names dim {d} of {what} twice ({normalized[d]!r} and {name!r}; "
                             f"{dim} is dim {d} of shape {tuple(shape)}). Fix: name each dim once.")
        size = int(shape[d])
        here = f"dim {d} of {what}"
        seen = sizes.get(name)
        if seen is not None and seen[0] != size:
            raise ValueError(f"dynamic_dims uses the name {name!r} for dims of different sizes in one call: "
                             f"{seen[1]} has size {seen[0]}, {here} has size {size}. One name stands for one "
                             f"size. Fix: give these dims different names (e.g. {name!r} and {name + '2'!r}), "
                             "or pass tensors whose sizes agree.")
        sizes.setdefault(name, (size, here))
        normalized[d] = name
    return normalized


def check_dynamic_dims(spec: Mapping[int, DimNames], shapes: Mapping[int, tuple],
                       describe: Callable[[int], str] = _argument) -> tuple[dict[int, dict[int, str]], dict[str, int]]:
    """Validate the dims `spec` names for one call; returns (normalized spec, size of each name).

    `spec` maps a tensor's index (an argument index, or a flattened leaf index) to
    ``{dim: name}``; `shapes` maps the same index to that tensor's shape in this call;
    `describe(index)` names the tensor in messages (default "argument {index}"). An index
    with no shape (an argument this call does not pass) is skipped.

    >>> check_dynamic_dims({0: {-1: "T"}, 1: {0: "B", 1: "T"}}, {0: (2, 7), 1: (4, 7)})
    ({0: {1: 'T'}, 1: {0: 'B', 1: 'T'}}, {'T': 7, 'B': 4})

    Raises ValueError when a dim is out of range (``-5`` on a 2-d tensor), when one dim is
    named twice, or when one name is given to dims of different sizes.
    """
    sizes: dict[str, tuple[int, str]] = {}
    normalized = {index: check_tensor_dims(names, tuple(shapes[index]), sizes, describe(index))
                  for index, names in spec.items() if index in shapes}
    return normalized, {name: size for name, (size, _) in sizes.items()}

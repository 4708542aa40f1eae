"""ParameterList and ParameterDict: registered collections of parameters, as in PyTorch.

Each holds its parameters as its own (``parameters()``, ``state_dict()`` under keys ``"0"``, ``"1"``, ...
or the dict's keys, ``.to()``, optimizers). A plain tensor put in one becomes a `Parameter`, as PyTorch
does.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from ..tensor import Tensor
from .module import Module
from .parameter import Parameter


def _as_parameter(value: Any, where: str) -> Parameter:
    if isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise TypeError(f"{where} expects tensors or nn.Parameter, got {type(value).__name__}; "
                    "hold other objects in a plain list or dict attribute")


class ParameterList(Module):
    """A list of parameters the owning module sees (named "0", "1", ...); it has no forward.

    >>> weights = kiln.nn.ParameterList([kiln.nn.Parameter(kiln.randn(4, 4)) for _ in range(3)])
    >>> len(weights), weights[0].shape
    """

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        if values is not None:
            self.extend(values)

    def _key(self, idx: int) -> str:
        n = len(self._parameters)
        if not isinstance(idx, int):
            raise TypeError(f"ParameterList indices must be integers or slices, got {type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for ParameterList of length {n}")
        return str(idx % n)

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[self._key(idx)]

    def __setitem__(self, idx: int, value: Any) -> None:
        self.register_parameter(self._key(idx), _as_parameter(value, "ParameterList"))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def __iadd__(self, values: Iterable[Any]) -> "ParameterList":
        return self.extend(values)

    def __dir__(self) -> list[str]:
        return [k for k in super().__dir__() if not k.isdigit()]

    def append(self, value: Any) -> "ParameterList":
        """Add `value` (a tensor becomes a Parameter) at the end."""
        self.register_parameter(str(len(self)), _as_parameter(value, "ParameterList.append"))
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        if isinstance(values, Tensor) or not isinstance(values, Iterable):
            raise TypeError(f"ParameterList.extend expects an iterable of tensors, got {type(values).__name__}")
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [{p.dtype.name} of size {tuple(p.shape)}]"
                         for k, p in self._parameters.items())


class ParameterDict(Module):
    """A dict of parameters (insertion-ordered) the owning module sees, under their keys.

    >>> heads = kiln.nn.ParameterDict({"scale": kiln.nn.Parameter(kiln.ones(8)), "shift": kiln.zeros(8)})
    >>> list(heads.keys()), type(heads["shift"]).__name__
    """

    def __init__(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        if key not in self._parameters:
            raise KeyError(f"ParameterDict has no key {key!r}; keys are {list(self._parameters)}")
        return self._parameters[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.register_parameter(key, _as_parameter(value, "ParameterDict"))

    def __delitem__(self, key: str) -> None:
        self[key]  # noqa: B018 - the KeyError names the keys there are
        del self._parameters[key]
        self._bump_structure()

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __contains__(self, key: object) -> bool:
        return key in self._parameters

    def keys(self) -> Iterable[str]:
        return self._parameters.keys()

    def items(self) -> Iterable[tuple[str, Parameter]]:
        return self._parameters.items()

    def values(self) -> Iterable[Parameter]:
        return self._parameters.values()

    def get(self, key: str, default: Any = None) -> Any:
        return self._parameters.get(key, default)

    def pop(self, key: str) -> Parameter:
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        self._parameters.clear()
        self._bump_structure()

    def update(self, parameters: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> None:
        pairs = parameters.items() if isinstance(parameters, Mapping) else parameters
        for key, value in pairs:
            self[key] = value

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [{p.dtype.name} of size {tuple(p.shape)}]"
                         for k, p in self._parameters.items())

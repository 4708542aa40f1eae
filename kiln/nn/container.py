"""Containers: Sequential (a pipeline), ModuleList and ModuleDict (registered collections)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Iterable, Iterator, Mapping, overload

from .module import Module


def _check_module(value: Any, where: str) -> Module:
    if not isinstance(value, Module):
        raise TypeError(f"{where} expects nn.Module instances, got {type(value).__name__}")
    return value


class _IndexedModules(Module):
    """Shared integer-indexed storage of Sequential and ModuleList: children named "0", "1", ..."""

    def _index(self, idx: int) -> str:
        n = len(self._modules)
        if not isinstance(idx, int):
            raise TypeError(f"{type(self).__name__} indices must be integers or slices, got {type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for {type(self).__name__} of length {n}")
        return list(self._modules.keys())[idx % n]

    def _renumber(self, modules: Iterable[Module]) -> None:
        self._modules.clear()
        for i, m in enumerate(modules):
            self._modules[str(i)] = m
        self._bump_structure()

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __setitem__(self, idx: int, module: Module) -> None:
        self._modules[self._index(idx)] = _check_module(module, type(self).__name__)
        self._bump_structure()

    def __delitem__(self, idx: int | slice) -> None:
        items = list(self._modules.values())
        if isinstance(idx, slice):
            del items[idx]
        else:
            del items[list(self._modules.keys()).index(self._index(idx))]
        self._renumber(items)

    def append(self, module: Module) -> "_IndexedModules":
        self.add_module(str(len(self)), _check_module(module, type(self).__name__ + ".append"))
        return self

    def extend(self, modules: Iterable[Module]) -> "_IndexedModules":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, _check_module(module, type(self).__name__ + ".insert"))
        self._renumber(items)

    def pop(self, index: int = -1) -> Module:
        module = self[index]
        del self[index]
        return module

    def __dir__(self) -> list[str]:
        return [k for k in super().__dir__() if not k.isdigit()]


class Sequential(_IndexedModules):
    """Calls its modules in order, feeding each one's output to the next.

    >>> model = kiln.nn.Sequential(kiln.nn.Linear(4, 8), kiln.nn.ReLU(), kiln.nn.Linear(8, 2))
    >>> model[0], len(model), model[1:]
    """

    def __init__(self, *args: Module | Mapping[str, Module]) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], (OrderedDict, dict)):
            for name, module in args[0].items():
                self.add_module(name, _check_module(module, "Sequential"))
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), _check_module(module, "Sequential"))

    @overload
    def __getitem__(self, idx: int) -> Module: ...

    @overload
    def __getitem__(self, idx: slice) -> "Sequential": ...

    def __getitem__(self, idx: int | slice) -> Module:
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return self._modules[self._index(idx)]

    def __add__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise TypeError(f"can only add a Sequential to a Sequential, got {type(other).__name__}")
        return Sequential(*self, *other)

    def forward(self, input: Any) -> Any:  # noqa: A002
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(_IndexedModules):
    """A list of modules whose parameters the owning module sees; it has no forward.

    >>> layers = kiln.nn.ModuleList([kiln.nn.Linear(8, 8) for _ in range(3)])
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    @overload
    def __getitem__(self, idx: int) -> Module: ...

    @overload
    def __getitem__(self, idx: slice) -> "ModuleList": ...

    def __getitem__(self, idx: int | slice) -> Module:
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[self._index(idx)]

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        self.extend(modules)
        return self

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList([*self, *other])


class ModuleDict(Module):
    """A dict of modules (insertion-ordered) whose parameters the owning module sees.

    >>> heads = kiln.nn.ModuleDict({"cls": kiln.nn.Linear(8, 10), "reg": kiln.nn.Linear(8, 1)})
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict has no key {key!r}; keys are {list(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, _check_module(module, "ModuleDict"))

    def __delitem__(self, key: str) -> None:
        del self._modules[key]
        self._bump_structure()

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        return self._modules.values()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def clear(self) -> None:
        self._modules.clear()
        self._bump_structure()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        pairs = modules.items() if isinstance(modules, Mapping) else modules
        for key, module in pairs:
            self[key] = module

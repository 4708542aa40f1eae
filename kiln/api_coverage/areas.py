"""The areas of PyTorch's public API that training code uses, and where kiln keeps each one.

An `Area` lists PyTorch's public names in one namespace (it needs torch installed) and says
whether kiln has the same name in its counterpart. Names kiln leaves out on purpose are in
`REFUSED`, each with the reason.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Area:
    """One namespace: its title, PyTorch's module, kiln's module, and which of its names count."""

    key: str
    title: str
    torch_module: str
    kiln_module: str
    keep: Callable[[str, Any], bool]
    qualifier: str  # how uses are spelled in code: "torch.nn.Linear" -> qualifier "torch.nn"; "" for methods

    def torch_names(self) -> list[str]:
        """The area's public names in the installed PyTorch, sorted."""
        module = _resolve(self.torch_module)
        names = getattr(module, "__all__", None) if self.key in ("torch", "data") else None
        names = names if names is not None else dir(module)
        return sorted({n for n in names if not n.startswith("_") and self.keep(n, getattr(module, n, None))})

    def kiln_has(self, name: str) -> bool:
        """Whether kiln has `name` in this area's counterpart."""
        return hasattr(_resolve(self.kiln_module), name)


def _resolve(path: str) -> Any:
    """A module, or a class inside one ("torch.Tensor")."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, attr = path.rpartition(".")
        return getattr(importlib.import_module(module), attr)


def _function(name: str, value: Any) -> bool:
    return callable(value) and not inspect.isclass(value) and not inspect.ismodule(value)


def _callable(name: str, value: Any) -> bool:
    return callable(value) and not inspect.ismodule(value)


def _tensor_member(name: str, value: Any) -> bool:
    return value is not None


def _module_class(name: str, value: Any) -> bool:
    import torch  # noqa: PLC0415 - only the generator needs torch

    return inspect.isclass(value) and issubclass(value, torch.nn.Module)


def _optimizer_class(name: str, value: Any) -> bool:
    import torch  # noqa: PLC0415

    return inspect.isclass(value) and issubclass(value, torch.optim.Optimizer) and value is not torch.optim.Optimizer


def _scheduler_class(name: str, value: Any) -> bool:
    import torch  # noqa: PLC0415

    base = torch.optim.lr_scheduler.LRScheduler
    return inspect.isclass(value) and (issubclass(value, base) or name == "ReduceLROnPlateau") and \
        value is not base and not name.startswith("_")


def _data_name(name: str, value: Any) -> bool:
    return value is not None and not inspect.ismodule(value)


AREAS: tuple[Area, ...] = (
    Area("torch", "`torch.*` functions and classes", "torch", "kiln", _callable, "torch"),
    Area("tensor", "`Tensor` methods and properties", "torch.Tensor", "kiln.Tensor", _tensor_member, ""),
    Area("nn", "`torch.nn` modules", "torch.nn", "kiln.nn", _module_class, "torch.nn"),
    Area("functional", "`torch.nn.functional`", "torch.nn.functional", "kiln.nn.functional", _function,
         "torch.nn.functional"),
    Area("optim", "`torch.optim` optimizers", "torch.optim", "kiln.optim", _optimizer_class, "torch.optim"),
    Area("lr_scheduler", "`torch.optim.lr_scheduler`", "torch.optim.lr_scheduler", "kiln.optim.lr_scheduler",
         _scheduler_class, "torch.optim.lr_scheduler"),
    Area("data", "`torch.utils.data`", "torch.utils.data", "kiln.utils.data", _data_name, "torch.utils.data"),
)

# Names kiln leaves out on purpose: area key -> {name: reason}.
_STORAGE = ("kiln tensors hold NumPy (or CuPy) arrays, not strided storage addressed by pointer and "
            "offset; use .numpy() to reach the memory")
REFUSED: dict[str, dict[str, str]] = {
    "tensor": {name: _STORAGE for name in ("data_ptr", "storage", "untyped_storage", "storage_offset",
                                           "set_", "_typed_storage", "storage_type")},
}

"""`DataParallel`: PyTorch's single-process wrapper, run on one device.

Without a GPU the wrapped module runs as it is (as in PyTorch on a CPU-only machine). With
GPUs it runs on ``device_ids[0]``: the module is moved there at wrap time and the tensor
inputs at each call. kiln does not split a batch over several GPUs in one process; when
several are named it warns once and uses the first. ``DistributedDataParallel`` (one
process per GPU) is how kiln trains on several.

>>> model = nn.DataParallel(nn.Linear(4, 2))
>>> model(kiln.randn(8, 4)).shape
(8, 2)
>>> list(model.state_dict())
['module.weight', 'module.bias']
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

from ...device import Device, gpu_count
from ...tensor import Tensor
from ..module import Module

_warned_several = False


def _device_index(spec: Any) -> int:
    """A GPU index from an int, "cuda:N", a kiln.device or a torch.device."""
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    index = getattr(spec, "index", None)
    if isinstance(spec, str) and spec.startswith("cuda"):
        index = int(spec.partition(":")[2] or 0)
    if index is None and str(spec) == "cuda":
        index = 0
    if not isinstance(index, int):
        raise ValueError(f"DataParallel: device ids must be GPU indices (ints) or CUDA devices, got {spec!r}")
    return index


def _to_device(tree: Any, device: Device) -> Any:
    """`tree` (tuples, lists and dicts of tensors and other values) with every tensor on `device`."""
    if isinstance(tree, Tensor):
        return tree.to(device)
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a named tuple
        return type(tree)(*(_to_device(v, device) for v in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(_to_device(v, device) for v in tree)
    if isinstance(tree, dict):
        return {k: _to_device(v, device) for k, v in tree.items()}
    return tree


class DataParallel(Module):
    """Wrap `module` as PyTorch's ``nn.DataParallel`` does; kiln runs it on one device.

    ``.module`` is the wrapped module, so state-dict keys start with ``module.`` as in PyTorch.
    `module` may also be a compiled module (``kiln.compile(model)``). `device_ids` default to
    every GPU; `output_device` and `dim` are kept for compatibility (one device: no gather).
    """

    def __init__(self, module: Any, device_ids: Sequence[Any] | None = None, output_device: Any = None,
                 dim: int = 0) -> None:
        super().__init__()
        inner = module if isinstance(module, Module) else getattr(module, "_module", None)
        if not isinstance(inner, Module):
            raise TypeError(f"DataParallel expects an nn.Module or a compiled module (kiln.compile(model)), got "
                            f"{type(module).__name__}")
        self.module = inner
        object.__setattr__(self, "_call", module)
        self.dim = dim
        count = gpu_count()
        if count == 0:
            self.device_ids: list[int] = []
            self.output_device = None
            return
        ids = list(range(count)) if device_ids is None else [_device_index(d) for d in device_ids]
        self.device_ids = ids
        self.output_device = _device_index(output_device) if output_device is not None else (ids[0] if ids else None)
        if len(ids) > 1:
            _warn_several(ids)
        if ids:
            inner.to(f"cuda:{ids[0]}")

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Run the wrapped module, with the tensor inputs moved to ``device_ids[0]`` when there is a GPU."""
        if not self.device_ids:
            return self._call(*inputs, **kwargs)
        device = Device("cuda", self.device_ids[0])
        return self._call(*_to_device(inputs, device), **_to_device(kwargs, device))


def _warn_several(ids: list[int]) -> None:
    global _warned_several
    if _warned_several:
        return
    _warned_several = True
    warnings.warn(f"DataParallel: kiln runs the module on one GPU (cuda:{ids[0]}), not split over device_ids "
                  f"{ids}. To train on several GPUs, use kiln.nn.parallel.DistributedDataParallel with one "
                  "process per GPU", stacklevel=3)

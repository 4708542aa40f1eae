"""`Parameter`: a Tensor that a Module registers as a learnable weight."""
from __future__ import annotations

from typing import Any

from ..tensor import Tensor, _init_from_array, tensor


class Parameter(Tensor):
    """A leaf tensor that requires grad (by default) and that Modules list in ``parameters()``.

    The parameter shares memory with `data` when `data` is a Tensor, as in PyTorch.

    >>> w = kiln.nn.Parameter(kiln.zeros(3, 4))
    >>> w.requires_grad, w.is_leaf
    (True, True)
    """

    def __init__(self, data: Any = None, requires_grad: bool = True):
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            data = tensor(data)
        _init_from_array(self, data._data, data._device, False)
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce__(self):  # pickle and copy.deepcopy keep the Parameter type
        return (Parameter, (tensor(self.detach()), self.requires_grad))

    def __deepcopy__(self, memo: dict) -> "Parameter":
        if id(self) in memo:
            return memo[id(self)]
        out = Parameter(tensor(self.detach()), self.requires_grad)
        if self.grad is not None:
            out.grad = tensor(self.grad.detach())
        memo[id(self)] = out
        return out


def is_parameter(obj: Any) -> bool:
    """True when `obj` is an nn.Parameter."""
    return isinstance(obj, Parameter)

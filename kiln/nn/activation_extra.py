"""More activation layers: ELU, CELU, SELU, GLU, Hardtanh, ReLU6, Hardswish, Hardsigmoid, Mish,
Softsign, Tanhshrink, Threshold, LogSigmoid, Hardshrink, Softshrink, RReLU (a random slope) and
PReLU (a learned slope), thin wrappers over kiln.functional.

``inplace`` is accepted for PyTorch compatibility and ignored (always out of place).
"""
from __future__ import annotations

from typing import Any

from ..functional import activations as _act
from ..functional import activations_extra as _more
from ..functional.creation import empty
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter


def _inplace(inplace: bool) -> str:
    return ", inplace=True" if inplace else ""


class ELU(Module):
    """x for x > 0, else alpha * (exp(x) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _act.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace(self.inplace)}"


class CELU(Module):
    """x for x > 0, else alpha * (exp(x / alpha) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.celu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}{_inplace(self.inplace)}"


class SELU(Module):
    """scale * elu(x, alpha) with the self-normalizing constants."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.selu(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GLU(Module):
    """Gated linear unit: halves a, b of `dim`; a * sigmoid(b).

    >>> kiln.nn.GLU()(kiln.randn(4, 6)).shape
    (4, 3)
    """

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Hardtanh(Module):
    """x clamped to [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None) -> None:
        super().__init__()
        min_val = min_val if min_value is None else min_value
        max_val = max_val if max_value is None else max_value
        if not max_val > min_val:
            raise ValueError(f"{type(self).__name__}: max_val must be greater than min_val, got min_val={min_val}, "
                             f"max_val={max_val}")
        self.min_val = min_val
        self.max_val = max_val
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _act.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace(self.inplace)}"


class ReLU6(Hardtanh):
    """min(max(x, 0), 6).

    >>> kiln.nn.ReLU6()(kiln.tensor([-1.0, 7.0])).tolist()
    [0.0, 6.0]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.relu6(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class _Pointwise(Module):
    """A parameter-free activation taking only ``inplace``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardswish(_Pointwise):
    """x * relu6(x + 3) / 6."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.hardswish(input)


class Hardsigmoid(_Pointwise):
    """relu6(x + 3) / 6."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.hardsigmoid(input)


class Mish(_Pointwise):
    """x * tanh(softplus(x))."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _act.mish(input)


class Softsign(Module):
    """x / (1 + |x|)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.softsign(input)


class Tanhshrink(Module):
    """x - tanh(x)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.tanhshrink(input)


class Threshold(Module):
    """x where x > threshold, else `value`."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold = threshold
        self.value = value
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.threshold(input, self.threshold, self.value)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}{_inplace(self.inplace)}"


class PReLU(Module):
    """x for x > 0, else a * x with a learned slope a: one shared, or one per channel (dim 1).

    ``weight`` has shape (num_parameters,), filled with `init`.

    >>> kiln.nn.PReLU(3)(kiln.randn(2, 3, 4)).shape
    (2, 3, 4)
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_parameters = num_parameters
        self.init = init
        self.weight = Parameter(empty(num_parameters, dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.constant_(self.weight, self.init)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class LogSigmoid(Module):
    """log(sigmoid(x)), computed without overflow.

    >>> kiln.nn.LogSigmoid()(kiln.tensor([-1000.0])).tolist()
    [-1000.0]
    """

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.logsigmoid(input)


class Hardshrink(Module):
    """x where |x| > lambd, else 0.

    >>> kiln.nn.Hardshrink(0.5)(kiln.tensor([-1.0, 0.25])).tolist()
    [-1.0, 0.0]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Module):
    """x moved towards 0 by lambd (x - lambd above lambd, x + lambd below -lambd), else 0.

    >>> kiln.nn.Softshrink(0.5)(kiln.tensor([-1.0, 0.25])).tolist()
    [-0.5, 0.0]
    """

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = lambd

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.softshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class RReLU(Module):
    """Randomized leaky ReLU: x for x > 0, else a * x.

    In training mode each element draws its slope a uniformly from [lower, upper) (kiln's
    global random stream, so compiled calls replay eager's draws); in eval mode
    a = (lower + upper) / 2.

    >>> kiln.nn.RReLU(0.1, 0.3).eval()(kiln.tensor([-2.0, 3.0])).tolist()
    [-0.4000000059604645, 3.0]
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False) -> None:
        super().__init__()
        self.lower = lower
        self.upper = upper
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return _more.rrelu(input, self.lower, self.upper, self.training)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}{_inplace(self.inplace)}"

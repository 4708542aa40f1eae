"""`autocast`: PyTorch's mixed-precision region, which in kiln records the request and casts nothing.

kiln runs every op in the dtype of its inputs. Inside ``with kiln.autocast(...)`` that
stays so, on the CPU and on the GPU: the region and its dtype are recorded (see
`is_autocast_enabled`, `get_autocast_dtype`) so PyTorch training scripts run unchanged,
and results equal those computed without autocast. On the CPU this is deliberate: NumPy
and BLAS have no fast float16/bfloat16 matrix multiply, so casting would make training
slower and less accurate. To compute in lower precision, cast the model and inputs
yourself (``model.to(kiln.float16)``).
"""
from __future__ import annotations

import functools
import threading
import warnings
from typing import Any, Callable, TypeVar

from ..device import SUPPORTED, UNSUPPORTED, cuda_is_available
from ..dtypes import DType, get_dtype

F = TypeVar("F", bound=Callable[..., Any])

LOW_PRECISION = ("float16", "bfloat16")
DEFAULT_DTYPE = {"cpu": "bfloat16", "cuda": "float16"}


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: dict[str, list[tuple[bool, str]]] = {}


_state = _State()


def _dtype_name(dtype: Any) -> str:
    """The dtype's name ("bfloat16" too where ml_dtypes is missing: autocast never makes such arrays)."""
    if isinstance(dtype, DType):
        return dtype.name
    text = str(dtype).replace("torch.", "")
    if text in LOW_PRECISION:
        return text
    return get_dtype(dtype).name


class autocast:  # noqa: N801 - PyTorch's name
    """A region (``with``) or function (decorator) in which PyTorch would compute in lower precision.

    kiln casts nothing (see the module docstring): results are those of the inputs'
    dtypes. `device_type` is "cpu" or "cuda"; `dtype` defaults to bfloat16 on the CPU and
    float16 on CUDA. As in PyTorch, a CUDA region without a GPU, or a dtype autocast
    does not support, warns and is disabled.

    >>> with kiln.autocast(device_type="cpu", dtype=kiln.bfloat16):
    ...     loss = F.cross_entropy(model(x), y)
    >>> @kiln.autocast("cpu", enabled=False)
    ... def evaluate(x): ...
    """

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise TypeError(f"autocast expects device_type as a str such as 'cpu' or 'cuda', got "
                            f"{type(device_type).__name__}; for a device object pass device.type")
        if device_type not in SUPPORTED and device_type not in UNSUPPORTED:
            raise ValueError(f"autocast: unknown device_type {device_type!r}; expected 'cpu' or 'cuda'")
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast expects enabled to be a bool, got {type(enabled).__name__}")
        self.device = device_type
        self.fast_dtype = _dtype_name(dtype) if dtype is not None else DEFAULT_DTYPE.get(device_type, "float16")
        self._cache_enabled = cache_enabled
        if enabled and device_type in UNSUPPORTED:
            warnings.warn(f"kiln.autocast: device_type {device_type!r} is not supported by kiln; autocast is "
                          "disabled. Use device_type='cpu'.", UserWarning, stacklevel=2)
            enabled = False
        if enabled and device_type == "cuda" and not cuda_is_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling autocast; "
                          "pass enabled=kiln.cuda.is_available() or device_type='cpu'.", UserWarning, stacklevel=2)
            enabled = False
        if enabled and self.fast_dtype not in LOW_PRECISION:
            warnings.warn(f"In {device_type} autocast, but the target dtype {self.fast_dtype} is not supported "
                          f"(expected one of {LOW_PRECISION}). Disabling autocast.", UserWarning, stacklevel=2)
            enabled = False
        self._enabled = enabled

    def __enter__(self) -> autocast:
        _state.stack.setdefault(self.device, []).append((self._enabled, self.fast_dtype))
        return self

    def __exit__(self, *exc: Any) -> None:
        _state.stack[self.device].pop()

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)

        return run  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"autocast(device_type={self.device!r}, dtype={self.fast_dtype}, enabled={self._enabled})"


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    """Whether the innermost autocast region for `device_type` is enabled (False outside any)."""
    stack = _state.stack.get(device_type)
    return bool(stack) and stack[-1][0]


def get_autocast_dtype(device_type: str) -> Any:
    """The dtype the innermost autocast region for `device_type` asked for (the default one outside any)."""
    from .. import dtypes  # noqa: PLC0415

    stack = _state.stack.get(device_type)
    name = stack[-1][1] if stack else DEFAULT_DTYPE.get(device_type, "float16")
    return getattr(dtypes, name, name)

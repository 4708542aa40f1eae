"""``Tensor.data`` and ``format(tensor, spec)``: two PyTorch habits that training scripts rely on.

``p.data`` is a detached alias of p: it shares p's memory (and version counter), so
``p.data.mul_(0.5)`` changes p without recording autograd history, and ``p.data = t``
makes p hold t's data. ``f"{loss:.4f}"`` formats a 0-d tensor as its Python number.
"""
from __future__ import annotations

from typing import Any

from .trace_state import trace_state
from .tensor import DataEpoch, Tensor


def get_data(self: Tensor) -> Tensor:
    """A detached alias of this tensor: same memory, no autograd history; in-place updates go through.

    >>> with_grad = kiln.ones(3, requires_grad=True)
    >>> with_grad.data.mul_(0.5)            # with_grad is now [0.5, 0.5, 0.5]
    """
    return self.detach()


def set_data(self: Tensor, value: Tensor) -> None:
    """Make this tensor hold `value`'s data (shared, not copied): its shape and dtype may change."""
    if not isinstance(value, Tensor):
        raise TypeError(f"Tensor.data must be set to a kiln.Tensor, got {type(value).__name__}; wrap it first, "
                        "e.g. p.data = kiln.tensor(value)")
    if self.requires_grad and not value.is_floating_point():
        raise TypeError(f"Tensor.data: this tensor requires grad, so its data must be floating point, got "
                        f"{value.dtype.name}; convert with .float(), or set requires_grad=False first")
    tracer = trace_state.tracer
    if tracer is not None:
        _break_trace(tracer)
    DataEpoch.replaced(self, value._data, value._device)
    self._data = value._data
    self._device = value._device
    self._base = None  # no longer a view of whatever it viewed before
    self._bump_version()


def _break_trace(tracer: Any) -> None:
    """Replacing a tensor's data is a Python side effect a compiled plan cannot replay: a graph break."""
    from .jit.trace import GraphBreakError, user_location  # noqa: PLC0415 - only while tracing

    message = (f"`tensor.data = ...` at {user_location()} replaces a tensor's data, which a compiled plan "
               "cannot replay. Fix: set .data outside the compiled function, or copy values in with "
               "tensor.copy_(new) under kiln.no_grad().")
    if getattr(tracer, "fullgraph", False):
        raise GraphBreakError(message)
    if getattr(tracer, "graph_break", None) is None:
        tracer.graph_break = message


def format_tensor(self: Tensor, spec: str) -> str:
    """``format(t, spec)``: a 0-d tensor formats as its number (``f"{loss:.4f}"``); others need an empty spec."""
    if self.ndim == 0:
        return format(self.item(), spec)
    if not spec:
        return str(self)
    raise TypeError(f"unsupported format string {spec!r} for a tensor of shape {tuple(self.shape)}: a format spec "
                    f"applies to 0-d tensors only. Fix: format one element as f'{{t.item():{spec}}}' (a "
                    "one-element tensor), or the values as a list: t.tolist()")

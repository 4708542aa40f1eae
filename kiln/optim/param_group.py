"""`ParamGroup`: one optimizer parameter group, a dict that knows its optimizer.

Outside kiln.compile it is a plain dict. While a compiled function is traced, its reads
report to the tracer, which turns numeric options (``lr``, ``momentum``, ``betas``...) into
plan inputs read fresh on every call and guards the others (``nesterov``, ``amsgrad``), so
an ``lr_scheduler.step()`` or a hand edit between calls takes effect without retracing
(see kiln.jit.hyper). A write inside the traced function would run only while tracing, so
it is a graph break.
"""
from __future__ import annotations

from typing import Any

from ..trace_state import trace_state


class ParamGroup(dict):
    """A parameter group: ``params`` plus its options, with the optimizer that owns it.

    >>> group = opt.param_groups[0]
    >>> group["lr"] = 0.01   # seen by the next call of a compiled step, with no retrace
    """

    __slots__ = ("optimizer",)

    def __init__(self, values: dict, optimizer: Any = None):
        super().__init__(values)
        self.optimizer = optimizer

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        tracer = trace_state.tracer
        if tracer is None or self.optimizer is None:
            return value
        if key == "params":  # the optimizer is in use: its state is read through its path from now on
            tracer.on_optimizer(self.optimizer)
            return value
        return tracer.step_capture().read_hyper(self, key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        """``group[key]`` if present (read like a subscript), else `default`."""
        return self[key] if key in self else default

    def __setitem__(self, key: Any, value: Any) -> None:
        tracer = trace_state.tracer
        if tracer is not None and self.optimizer is not None:
            tracer.step_capture().write_hyper(self, key)
        dict.__setitem__(self, key, value)

    def __reduce__(self) -> tuple:
        """Copies and pickles hold the options only; the optimizer that takes the group in owns it."""
        return (ParamGroup, (dict(self),))

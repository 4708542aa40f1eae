"""`OneCycleLR`: the 1cycle policy, warming the lr up to a peak and annealing it far below the start.

Momentum (SGD's ``momentum``, or ``beta1`` of Adam-style ``betas``) moves the other way:
high while the lr is low, lowest at the peak.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from .lr_base import LRScheduler
from .optimizer import Optimizer


def _per_group(name: str, optimizer: Optimizer, value: float | Sequence[float]) -> list[float]:
    """One value per param group: a list/tuple must have exactly that many."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"expected {n} values for {name} (one per param group), got {len(value)}")
        return list(value)
    return [value] * n


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"Expected positive integer {name}, but got {value!r}")
    return value


class OneCycleLR(LRScheduler):
    """The 1cycle policy, stepped once per batch for `total_steps` (or ``epochs * steps_per_epoch``) batches.

    The lr rises from ``max_lr / div_factor`` to `max_lr` over the first `pct_start` of the
    steps, then falls to ``max_lr / div_factor / final_div_factor`` ("cos" or "linear"
    annealing). With `three_phase`, it first comes back down to the start value
    symmetrically and only then falls to the minimum. With `cycle_momentum` the momentum
    (or ``betas[0]``) goes from `max_momentum` to `base_momentum` and back, inversely.
    The per-group values are kept in each param group (``initial_lr``, ``max_lr``,
    ``min_lr``, ``max_momentum``, ``base_momentum``), as in PyTorch. Stepping past
    `total_steps` raises ValueError.

    >>> sched = OneCycleLR(opt, max_lr=0.01, epochs=10, steps_per_epoch=len(loader))
    >>> for epoch in range(10):
    ...     for batch in loader:
    ...         train_step(batch); sched.step()
    """

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | Sequence[float] = 0.85, max_momentum: float | Sequence[float] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if total_steps is not None:
            self.total_steps = _positive_int(total_steps, "total_steps")
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = _positive_int(epochs, "epochs") * _positive_int(steps_per_epoch, "steps_per_epoch")
        else:
            raise ValueError("OneCycleLR needs total_steps, or both epochs and steps_per_epoch")
        if not isinstance(pct_start, float) or not 0.0 <= pct_start <= 1.0:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        self.three_phase = three_phase
        warm_end = float(pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        # each phase: (last step, lr key at its start, lr key at its end, momentum keys likewise)
        if three_phase:
            self._phases = [
                (warm_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                (last, "initial_lr", "min_lr", "max_momentum", "max_momentum"),
            ]
        else:
            self._phases = [
                (warm_end, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                (last, "max_lr", "min_lr", "base_momentum", "max_momentum"),
            ]

        if last_epoch == -1:
            for peak, group in zip(_per_group("max_lr", optimizer, max_lr), optimizer.param_groups):
                group["initial_lr"] = peak / div_factor
                group["max_lr"] = peak
                group["min_lr"] = group["initial_lr"] / final_div_factor

        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(f"optimizer must support momentum or beta1 with `cycle_momentum` option enabled; "
                                 f"{type(optimizer).__name__} has neither (pass cycle_momentum=False)")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                highs = _per_group("max_momentum", optimizer, max_momentum)
                lows = _per_group("base_momentum", optimizer, base_momentum)
                for high, low, group in zip(highs, lows, optimizer.param_groups):
                    self._set_momentum(group, high)
                    group["max_momentum"] = high
                    group["base_momentum"] = low
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        """The lrs for step `last_epoch` (and, with `cycle_momentum`, it sets each group's momentum)."""
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is {self.total_steps}; "
                             "make total_steps (or epochs * steps_per_epoch) cover every scheduler.step()")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr_from, lr_to, mom_from, mom_to) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lrs.append(self._anneal(group[lr_from], group[lr_to], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[mom_from], group[mom_to], pct))
                    break
                start = end
        return lrs

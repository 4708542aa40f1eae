"""`ReduceLROnPlateau`: lower the lr when a watched metric has stopped improving."""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

from .lr_base import LRScheduler
from .optimizer import Optimizer


class ReduceLROnPlateau(LRScheduler):
    """Multiply each group's lr by `factor` once the metric passed to ``step(metric)`` has not
    improved for more than `patience` epochs; then wait `cooldown` epochs before counting again.

    "Improved" means below the best so far (``mode="min"``) or above it (``"max"``) by more
    than `threshold`, relative to the best (``threshold_mode="rel"``) or absolute (``"abs"``).
    An lr never goes below `min_lr` (one value, or one per group), and changes smaller than
    `eps` are skipped.

    >>> sched = ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2)
    >>> for epoch in range(100):
    ...     train(); val_loss = validate(); sched.step(val_loss)
    """

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | Sequence[float] = 0, eps: float = 1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if not factor < 1.0:
            raise ValueError(f"Factor should be < 1.0, got factor={factor}")
        self.optimizer = optimizer
        self.factor = factor
        n = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != n:
                raise ValueError(f"expected {n} min_lrs (one per param group), got {len(min_lr)}")
            self.default_min_lr: float | None = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * n
        self.patience = patience
        self.cooldown = cooldown
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = [group["lr"] for group in optimizer.param_groups]
        self._check_mode()
        self.best = self.mode_worse
        self.num_bad_epochs = 0
        self.cooldown_counter = 0

    def _check_mode(self) -> None:
        if self.mode not in ("min", "max"):
            raise ValueError(f"mode {self.mode!r} is unknown: expected 'min' or 'max'")
        if self.threshold_mode not in ("rel", "abs"):
            raise ValueError(f"threshold mode {self.threshold_mode!r} is unknown: expected 'rel' or 'abs'")
        self.mode_worse = math.inf if self.mode == "min" else -math.inf

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        """Whether metric value `a` counts as an improvement over `best`."""
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel" else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel" else best + self.threshold)

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record this epoch's metric (a number or 0-d tensor) and lower the lrs if it has plateaued."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn("passing an epoch to scheduler.step() is deprecated; call step(metric) once per epoch",
                          UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad epochs during the cooldown don't count
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def _reduce_lr(self) -> None:
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(f"the optimizer now has {len(groups)} param groups but min_lr lists "
                                   f"{len(self.min_lrs)}; give one min_lr per group")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for group, floor in zip(groups, self.min_lrs):
            old = float(group["lr"])
            new = max(old * self.factor, floor)
            if old - new > self.eps:
                group["lr"] = new

    def get_lr(self) -> list[float]:
        return self._current_lrs()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)
        self._check_mode()

"""The base learning-rate scheduler and the schedulers with a formula per epoch (see lr_scheduler.py).

The formulas are PyTorch's, including its chainable (recursive) forms, so two
schedulers on one optimizer compose as they do there. Call ``scheduler.step()``
after ``optimizer.step()``.
"""
from __future__ import annotations

import math
import types
import warnings
from bisect import bisect_right
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

from .optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses implement `get_lr` (the lrs for ``last_epoch``).

    Creating a scheduler performs its first step, setting each group's lr for epoch 0.
    ``last_epoch=-1`` starts fresh; another value resumes and needs each group's
    ``initial_lr`` (saved in the optimizer's state_dict).

    >>> sched = kiln.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    >>> for epoch in range(100):
    ...     train_one_epoch(); sched.step()
    >>> sched.get_last_lr()
    """

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                                   f"with last_epoch={last_epoch}; load the optimizer's state_dict first, or "
                                   "pass last_epoch=-1 for a fresh schedule")
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """The step a scheduler takes when created: it sets each group's lr for `last_epoch` + 1."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The lr of each param group for the current `last_epoch`."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_lr")

    def get_last_lr(self) -> list[float]:
        """The lrs this scheduler set most recently, one per param group."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one epoch and set the new lrs. (`epoch` jumps there, as PyTorch's deprecated form.)"""
        self._step_count += 1
        if epoch is not None:
            warnings.warn("passing an epoch to scheduler.step() is deprecated; call step() once per epoch",
                          UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        """Set the lrs for the next epoch, or (by the closed form where there is one) for `epoch`."""
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)

    def _current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch); one function, or one per param group.

    >>> sched = LambdaLR(opt, lr_lambda=lambda epoch: 0.95 ** epoch)
    """

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
                 last_epoch: int = -1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas (one per param group), but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        """As the base, but lambdas are saved only as the attributes of callable objects."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, attrs in zip(self.lr_lambdas, saved):
            if attrs is not None:
                fn.__dict__.update(attrs)


class StepLR(LRScheduler):
    """Multiply the lr by `gamma` every `step_size` epochs.

    >>> sched = StepLR(opt, step_size=30, gamma=0.1)  # lr 0.05 for epochs 0-29, 0.005 for 30-59, ...
    """

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if not isinstance(step_size, int) or step_size < 1:
            raise ValueError(f"Invalid step_size: {step_size!r} (expected a positive int)")
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by `gamma` at each epoch listed in `milestones`.

    >>> sched = MultiStepLR(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer: Optimizer, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch not in self.milestones:
            return self._current_lrs()
        factor = self.gamma ** self.milestones[self.last_epoch]
        return [lr * factor for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect_right(milestones, self.last_epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by `gamma` every epoch.

    >>> sched = ExponentialLR(opt, gamma=0.95)
    """

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor * lr`` to ``end_factor * lr`` over `total_iters` epochs.

    >>> sched = LinearLR(opt, start_factor=0.1, total_iters=5)  # a 5-epoch warmup
    """

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"Invalid start_factor: {start_factor} (expected 0 < start_factor <= 1)")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"Invalid end_factor: {end_factor} (expected 0 <= end_factor <= 1)")
        if not isinstance(total_iters, int) or total_iters < 1:
            raise ValueError(f"Invalid total_iters: {total_iters!r} (expected a positive int)")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._current_lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        span = self.end_factor - self.start_factor
        factor = 1.0 + span / (self.total_iters * self.start_factor + (self.last_epoch - 1) * span)
        return [lr * factor for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        done = min(self.total_iters, self.last_epoch) / self.total_iters
        span = self.end_factor - self.start_factor
        return [base * (self.start_factor + span * done) for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiply the lr by `factor` for the first `total_iters` epochs, then use it unchanged.

    >>> sched = ConstantLR(opt, factor=0.5, total_iters=4)  # half the lr for epochs 0-3
    """

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"Invalid factor: {factor} (expected 0 <= factor <= 1)")
        if not isinstance(total_iters, int) or total_iters < 0:
            raise ValueError(f"Invalid total_iters: {total_iters!r} (expected a non-negative int)")
        self.factor = factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0:
            return [lr * self.factor for lr in self._current_lrs()]
        if self.last_epoch != self.total_iters:
            return self._current_lrs()
        return [lr / self.factor for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        scale = self.factor if self.last_epoch < self.total_iters else 1.0
        return [base * scale for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Anneal the lr along a cosine from its initial value to `eta_min` over `T_max` epochs.

    ``lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``, computed
    recursively as PyTorch does; past `T_max` it rises again (period ``2 * T_max``).

    >>> sched = CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):  # noqa: N803
        if not T_max > 0:
            raise ValueError(f"Invalid T_max: {T_max!r} (expected a positive number of epochs)")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, T, low = self.last_epoch, self.T_max, self.eta_min  # noqa: N806
        if self._is_initial:
            return self._current_lrs()
        if self._step_count == 1 and t > 0:  # resumed: no previous lr to recurse from
            return [low + (base - low) * (1 + math.cos(t * math.pi / T)) / 2 for base in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:  # leaving the minimum: the recursion would divide by zero
            return [lr + (base - low) * (1 - math.cos(math.pi / T)) / 2
                    for lr, base in zip(self._current_lrs(), self.base_lrs)]
        ratio = (1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
        return [ratio * (lr - low) + low for lr in self._current_lrs()]

    def _get_closed_form_lr(self) -> list[float]:
        low = self.eta_min
        return [low + (base - low) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]

"""Schedulers made of schedulers: `SequentialLR` (one after another) and `ChainedScheduler` (all at once)."""
from __future__ import annotations

from bisect import bisect_right
from typing import Any, Sequence

from .lr_plateau import ReduceLROnPlateau
from .lr_base import LRScheduler
from .optimizer import Optimizer


def _check_children(owner: str, optimizer: Optimizer | None, schedulers: Sequence[Any]) -> None:
    if len(schedulers) < 1:
        raise ValueError(f"{owner} expects at least one scheduler, but got none")
    for i, sched in enumerate(schedulers):
        if not hasattr(sched, "optimizer"):
            raise TypeError(f"{owner}: the scheduler at index {i} ({type(sched).__name__}) has no optimizer; "
                            "pass lr schedulers")
        if isinstance(sched, ReduceLROnPlateau):
            raise ValueError(f"{owner} does not support ReduceLROnPlateau (its step() needs the metric), but got "
                             f"one at index {i}; step it yourself alongside")
        if optimizer is not None and sched.optimizer is not optimizer:
            raise ValueError(f"{owner} expects all schedulers to belong to the same optimizer, but the "
                             f"{type(sched).__name__} at index {i} has another one")


class SequentialLR(LRScheduler):
    """Run `schedulers` one after another, switching at the epochs in `milestones`.

    At a milestone the next scheduler starts from its own epoch 0 (on the optimizer's
    ``initial_lr``), as in PyTorch.

    >>> warmup = LinearLR(opt, start_factor=0.01, total_iters=100)
    >>> decay = CosineAnnealingLR(opt, T_max=900)
    >>> sched = SequentialLR(opt, schedulers=[warmup, decay], milestones=[100])
    """

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1):
        _check_children(type(self).__name__, optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR expects one milestone fewer than schedulers, but got "
                             f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:  # the schedulers' constructors stepped the lrs: start over
            group["lr"] = group["initial_lr"]
        self._undo_initial_steps(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _undo_initial_steps(self, sched: Any) -> None:
        children = getattr(sched, "_schedulers", None)
        if children is not None:
            for child in children:
                self._undo_initial_steps(child)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self) -> None:  # type: ignore[override]
        """Advance one epoch with the scheduler whose stretch of epochs this is."""
        self.last_epoch += 1
        index = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[index]
        if index > 0 and self._milestones[index - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """This scheduler's attributes, with each child's state_dict in place of the child."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        children = state.pop("_schedulers")
        self.__dict__.update(state)
        for sched, child_state in zip(self._schedulers, children):
            sched.load_state_dict(child_state)


class ChainedScheduler(LRScheduler):
    """Step every scheduler in `schedulers` on each step, so their effects multiply (e.g. warmup times decay).

    >>> sched = ChainedScheduler([ConstantLR(opt, factor=0.1, total_iters=2), ExponentialLR(opt, gamma=0.9)])
    """

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None):
        if len(schedulers) < 1:
            raise ValueError("ChainedScheduler expects at least one scheduler, but got none")
        optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        _check_children(type(self).__name__, optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = [group["lr"] for group in optimizer.param_groups]

    def step(self) -> None:  # type: ignore[override]
        for sched in self._schedulers:
            sched.step()
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        children = state.pop("_schedulers")
        self.__dict__.update(state)
        for sched, child_state in zip(self._schedulers, children):
            sched.load_state_dict(child_state)

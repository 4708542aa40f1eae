"""Learning-rate schedulers, PyTorch's ``torch.optim.lr_scheduler``: set each param group's ``lr`` once per
epoch (or step).

The formulas are PyTorch's, including its chainable (recursive) forms, so two schedulers on one
optimizer compose as they do there. Call ``scheduler.step()`` after ``optimizer.step()``. The base class
and the closed-form schedulers live in lr_base.py, those with more machinery in files of their own;
this module gathers their names, as PyTorch's does.
"""
from __future__ import annotations

from .lr_base import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR, LRScheduler, MultiStepLR,
                      StepLR)
from .lr_one_cycle import OneCycleLR
from .lr_plateau import ReduceLROnPlateau
from .lr_sequential import ChainedScheduler, SequentialLR

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR", "ConstantLR",
           "CosineAnnealingLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "ChainedScheduler"]

"""Optimizers and learning-rate schedulers, PyTorch-style.

>>> import kiln.optim
>>> opt = kiln.optim.AdamW(model.parameters(), lr=3e-4)
>>> sched = kiln.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
"""
from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamw import AdamW
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "LBFGS", "lr_scheduler"]

"""Pipelines chosen by mode, and GenericCompiler (the generic cleanup passes looped to a fixpoint)."""
from __future__ import annotations

from .arith import ArithmeticElimination
from .base import Looped, Pipeline
from .constant_fold import ConstantFold
from .cse import CSE
from .dce import DeadNodeElim
from .nograd import NoGradStrip
from .rewrite import SubRewrite


class GenericCompiler(Looped):
    """Hardware-agnostic cleanup: ConstantFold, ArithmeticElimination, CSE, DeadNodeElim to a fixpoint."""

    def __init__(self) -> None:
        super().__init__(Pipeline([ConstantFold(), ArithmeticElimination(), SubRewrite(), CSE(), DeadNodeElim()],
                                  name="GenericCompiler"))
        self.name = "GenericCompiler"


def inference_pipeline(user_passes: list | None = None) -> Pipeline:
    """No gradients: strip them, then clean up."""
    return Pipeline([NoGradStrip(), GenericCompiler(), *(user_passes or []), DeadNodeElim()], name="inference")


def training_pipeline(user_passes: list | None = None) -> Pipeline:
    """Gradients kept: the forward and backward graphs each get the generic cleanup."""
    return Pipeline([GenericCompiler(), *(user_passes or []), DeadNodeElim()], name="training")

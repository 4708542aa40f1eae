"""Distribution loss layers: KLDivLoss, PoissonNLLLoss, GaussianNLLLoss, CTCLoss."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..tensor import Tensor
from .loss import _Loss


class KLDivLoss(_Loss):
    """KL divergence of the target from log-probabilities `input`; ``log_target=True`` takes
    log-probability targets. Use ``reduction='batchmean'`` for the per-sample KL divergence.

    >>> logp = kiln.nn.functional.log_softmax(kiln.randn(4, 5), 1)
    >>> kiln.nn.KLDivLoss(reduction="batchmean")(logp, kiln.full((4, 5), 0.2))
    """

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def _allowed_reductions(self) -> tuple[str, ...]:
        return ("mean", "batchmean", "sum", "none")

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class PoissonNLLLoss(_Loss):
    """Negative log-likelihood of counts under a Poisson with rate exp(input) (``log_input``) or input.

    >>> kiln.nn.PoissonNLLLoss()(kiln.randn(5), kiln.tensor([0.0, 1, 2, 3, 4]))
    """

    def __init__(self, log_input: bool = True, full: bool = False, size_average: bool | None = None,
                 eps: float = 1e-8, reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_input = log_input
        self.full = full
        self.eps = eps

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        return F.poisson_nll_loss(log_input, target, log_input=self.log_input, full=self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    """Negative log-likelihood of the target under N(input, var), with variances clamped at `eps`.

    >>> kiln.nn.GaussianNLLLoss()(kiln.randn(4, 2), kiln.randn(4, 2), kiln.ones(4, 1))
    """

    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__(reduction=reduction)
        self.full = full
        self.eps = eps

    def forward(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:  # noqa: A002
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class CTCLoss(_Loss):
    """Connectionist temporal classification loss of label sequences under per-frame log-probabilities.

    >>> ctc = kiln.nn.CTCLoss()
    >>> log_probs = kiln.nn.functional.log_softmax(kiln.randn(12, 2, 5), 2)
    >>> ctc(log_probs, kiln.tensor([[1, 2, 2], [3, 4, 0]]), [12, 10], [3, 2])
    """

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False) -> None:
        super().__init__(reduction=reduction)
        self.blank = blank
        self.zero_infinity = zero_infinity

    def forward(self, log_probs: Tensor, targets: Tensor, input_lengths: Any, target_lengths: Any) -> Tensor:
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                          self.zero_infinity)

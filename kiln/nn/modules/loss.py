"""``kiln.nn.modules.loss``: the classes PyTorch defines in ``torch.nn.modules.loss``."""
from ..loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss,
                    SmoothL1Loss)
from ..loss import _Loss, _WeightedLoss  # noqa: F401 - private bases scripts import from here
from ..loss_margin import (
    CosineEmbeddingLoss, HingeEmbeddingLoss, MarginRankingLoss, MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss, MultiMarginLoss, SoftMarginLoss, TripletMarginLoss,
    TripletMarginWithDistanceLoss,
)
from ..loss_probabilistic import CTCLoss, GaussianNLLLoss, KLDivLoss, PoissonNLLLoss

__all__ = [
    "BCELoss", "BCEWithLogitsLoss", "CTCLoss", "CosineEmbeddingLoss", "CrossEntropyLoss",
    "GaussianNLLLoss", "HingeEmbeddingLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss",
    "MarginRankingLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss",
    "PoissonNLLLoss", "SmoothL1Loss", "SoftMarginLoss", "TripletMarginLoss",
    "TripletMarginWithDistanceLoss",
]

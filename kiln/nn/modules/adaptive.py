"""``kiln.nn.modules.adaptive``: the classes PyTorch defines in ``torch.nn.modules.adaptive``."""
from ..adaptive import AdaptiveLogSoftmaxWithLoss

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

"""``kiln.nn.modules.flatten``: the classes PyTorch defines in ``torch.nn.modules.flatten``."""
from ..flatten import Flatten, Unflatten

__all__ = ["Flatten", "Unflatten"]

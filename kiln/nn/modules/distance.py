"""``kiln.nn.modules.distance``: the classes PyTorch defines in ``torch.nn.modules.distance``."""
from ..distance import CosineSimilarity, PairwiseDistance

__all__ = ["CosineSimilarity", "PairwiseDistance"]

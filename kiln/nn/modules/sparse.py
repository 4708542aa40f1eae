"""``kiln.nn.modules.sparse``: the classes PyTorch defines in ``torch.nn.modules.sparse``."""
from ..sparse import Embedding

__all__ = ["Embedding"]

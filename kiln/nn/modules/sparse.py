"""``kiln.nn.modules.sparse``: the classes PyTorch defines in ``torch.nn.modules.sparse``."""
from ..embedding_bag import EmbeddingBag
from ..sparse import Embedding

__all__ = ["Embedding", "EmbeddingBag"]

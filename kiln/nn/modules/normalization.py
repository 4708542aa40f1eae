"""``kiln.nn.modules.normalization``: the classes PyTorch defines in ``torch.nn.modules.normalization``."""
from ..normalization import GroupNorm, LayerNorm, RMSNorm

__all__ = ["GroupNorm", "LayerNorm", "RMSNorm"]

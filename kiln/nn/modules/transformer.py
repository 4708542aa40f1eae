"""``kiln.nn.modules.transformer``: the classes PyTorch defines in ``torch.nn.modules.transformer``."""
from ..transformer import (
    Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
)

__all__ = [
    "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerEncoderLayer",
]

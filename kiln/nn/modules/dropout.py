"""``kiln.nn.modules.dropout``: the classes PyTorch defines in ``torch.nn.modules.dropout``."""
from ..dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from ..dropout import _DropoutNd  # noqa: F401 - a private base scripts import from here

__all__ = ["AlphaDropout", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout"]

"""``kiln.nn.modules.upsampling``: the classes PyTorch defines in ``torch.nn.modules.upsampling``."""
from ..upsample import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]

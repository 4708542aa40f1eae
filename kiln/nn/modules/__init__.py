"""``kiln.nn.modules``: PyTorch's import paths for kiln's layers.

Scripts written for PyTorch import layers from ``torch.nn.modules.<file>``; each submodule here
re-exports the kiln classes PyTorch defines in that file, and this package re-exports them all.

>>> from kiln.nn.modules.linear import Linear
>>> from kiln.nn.modules.loss import _Loss
"""
from . import (activation, adaptive, batchnorm, container, conv, distance, dropout, flatten,  # noqa: F401
               instancenorm, linear, loss, module, normalization, padding, pixelshuffle, pooling, rnn, sparse,
               transformer, upsampling)
from .activation import (
    CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish,
    MultiheadAttention, PReLU, ReLU, ReLU6, RReLU, SiLU, Sigmoid, Softmax, Softmax2d, Softmin, Softplus, Softshrink,
    Softsign, Tanh, Tanhshrink, Threshold,
)
from .adaptive import AdaptiveLogSoftmaxWithLoss
from .batchnorm import BatchNorm1d, BatchNorm2d
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .distance import CosineSimilarity, PairwiseDistance
from .dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from .flatten import Flatten, Unflatten
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .linear import Bilinear, Identity, Linear
from .loss import (
    BCELoss, BCEWithLogitsLoss, CTCLoss, CosineEmbeddingLoss, CrossEntropyLoss, GaussianNLLLoss,
    HingeEmbeddingLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, MarginRankingLoss, MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss, MultiMarginLoss, NLLLoss, PoissonNLLLoss, SmoothL1Loss, SoftMarginLoss,
    TripletMarginLoss, TripletMarginWithDistanceLoss,
)
from .module import Module
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .padding import (
    CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d, ReflectionPad1d,
    ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d,
    ZeroPad3d,
)
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .rnn import GRU, GRUCell, LSTM, LSTMCell, RNN, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding, EmbeddingBag
from .transformer import (
    Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
)
from .upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = [
    "AdaptiveAvgPool2d", "AdaptiveLogSoftmaxWithLoss", "AlphaDropout", "AvgPool2d", "BCELoss",
    "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "Bilinear", "CTCLoss", "Conv1d", "Conv2d",
    "ConvTranspose1d", "ConvTranspose2d", "CosineEmbeddingLoss", "CosineSimilarity", "CrossEntropyLoss",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Embedding", "FeatureAlphaDropout", "Flatten",
    "GELU", "GRU", "GRUCell", "GaussianNLLLoss", "GroupNorm", "HingeEmbeddingLoss", "HuberLoss",
    "Identity", "KLDivLoss", "L1Loss", "LSTM", "LSTMCell", "LayerNorm", "LeakyReLU", "Linear",
    "LogSoftmax", "MSELoss", "MarginRankingLoss", "MaxPool2d", "Module", "ModuleDict", "ModuleList",
    "ParameterDict", "ParameterList",
    "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "MultiheadAttention",
    "NLLLoss", "PairwiseDistance", "PoissonNLLLoss", "RMSNorm", "RNN", "RNNBase", "RNNCell",
    "RNNCellBase", "ReLU", "Sequential", "SiLU", "Sigmoid", "SmoothL1Loss", "SoftMarginLoss", "Softmax",
    "Softplus", "Tanh", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "TransformerEncoder", "TransformerEncoderLayer", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "Unflatten", "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
    "CELU", "ELU", "GLU", "SELU", "Hardsigmoid", "Hardswish", "Hardtanh", "Mish", "PReLU", "ReLU6", "Softsign",
    "Tanhshrink", "Threshold", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "CircularPad1d",
    "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ReflectionPad1d",
    "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d",
    "ZeroPad2d", "ZeroPad3d", "PixelShuffle", "PixelUnshuffle", "EmbeddingBag",
    "Hardshrink", "LogSigmoid", "RReLU", "Softmax2d", "Softmin", "Softshrink",
]

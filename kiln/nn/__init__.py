"""``kiln.nn``: Modules, layers, losses and initializers with PyTorch's names and semantics.

>>> import kiln.nn as nn
>>> model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
>>> loss = nn.CrossEntropyLoss()(model(kiln.randn(32, 784)), kiln.randint(0, 10, (32,)))
"""
from . import functional, grad, init, utils
from .activation import (GELU, LeakyReLU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Softmax2d, Softmin, Softplus,
                         Tanh)
from .activation_extra import (CELU, ELU, GLU, RReLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LogSigmoid,
                               Mish, PReLU, ReLU6, Softshrink, Softsign, Tanhshrink, Threshold)
from .adaptive import AdaptiveLogSoftmaxWithLoss
from .attention import MultiheadAttention
from .batchnorm import BatchNorm1d, BatchNorm2d
from .container import ModuleDict, ModuleList, Sequential
from .parameter_container import ParameterDict, ParameterList
from .conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from .distance import CosineSimilarity, PairwiseDistance
from .embedding_bag import EmbeddingBag
from .dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from .flatten import Flatten, Unflatten
from .hooks import RemovableHandle
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .linear import Bilinear, Identity, Linear
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss)
from .loss_margin import (CosineEmbeddingLoss, HingeEmbeddingLoss, MarginRankingLoss, MultiLabelMarginLoss,
                          MultiLabelSoftMarginLoss, MultiMarginLoss, SoftMarginLoss, TripletMarginLoss,
                          TripletMarginWithDistanceLoss)
from .loss_probabilistic import CTCLoss, GaussianNLLLoss, KLDivLoss, PoissonNLLLoss
from .module import Module
from .normalization import GroupNorm, LayerNorm, RMSNorm
from .padding import (CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d,
                      ReflectionPad1d, ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d,
                      ReplicationPad3d, ZeroPad1d, ZeroPad2d, ZeroPad3d)
from .parallel import DataParallel
from .parameter import Parameter
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from .rnn import GRU, LSTM, RNN, RNNBase
from .rnn_cell import GRUCell, LSTMCell, RNNCell, RNNCellBase
from .sparse import Embedding
from .state_dict import IncompatibleKeys
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)
from .upsample import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from . import modules  # noqa: E402 - kiln.nn.modules.<sub>, PyTorch's import paths for the classes above

__all__ = [
    "functional", "grad", "init", "utils", "Module", "Parameter", "RemovableHandle", "IncompatibleKeys",
    "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Identity", "Linear", "Bilinear", "Conv1d", "Conv2d",
    "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "Unflatten", "ReLU", "LeakyReLU", "GELU",
    "SiLU", "Tanh", "Sigmoid", "Softplus", "Softmax", "LogSoftmax", "Dropout", "LayerNorm", "BatchNorm1d",
    "BatchNorm2d", "Embedding", "MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCEWithLogitsLoss",
    "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "ConvTranspose1d",
    "ConvTranspose2d", "GroupNorm", "RMSNorm", "Transformer", "TransformerDecoder", "TransformerDecoderLayer",
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "modules",
    "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout",
    "BCELoss", "HuberLoss", "SmoothL1Loss", "KLDivLoss", "PoissonNLLLoss", "GaussianNLLLoss", "CTCLoss",
    "SoftMarginLoss", "MarginRankingLoss", "HingeEmbeddingLoss", "CosineEmbeddingLoss", "MultiLabelSoftMarginLoss",
    "MultiLabelMarginLoss", "MultiMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss",
    "AdaptiveLogSoftmaxWithLoss", "PairwiseDistance", "CosineSimilarity",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
    "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d",
    "PReLU", "PixelShuffle", "PixelUnshuffle", "EmbeddingBag", "DataParallel", "ELU", "CELU", "SELU", "GLU",
    "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Mish", "Softsign", "Tanhshrink", "Threshold", "parallel",
    "LogSigmoid", "Softmin", "Softshrink", "Hardshrink", "RReLU", "Softmax2d",
]

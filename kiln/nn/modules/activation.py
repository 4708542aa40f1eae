"""``kiln.nn.modules.activation``: the classes PyTorch defines in ``torch.nn.modules.activation``."""
from ..activation import GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softplus, Tanh
from ..attention import MultiheadAttention

__all__ = [
    "GELU", "LeakyReLU", "LogSoftmax", "MultiheadAttention", "ReLU", "SiLU", "Sigmoid", "Softmax",
    "Softplus", "Tanh",
]

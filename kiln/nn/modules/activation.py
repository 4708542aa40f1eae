"""``kiln.nn.modules.activation``: the classes PyTorch defines in ``torch.nn.modules.activation``."""
from ..activation import GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softmax2d, Softmin, Softplus, Tanh
from ..activation_extra import (CELU, ELU, GLU, RReLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LogSigmoid,
                                Mish, PReLU, ReLU6, Softshrink, Softsign, Tanhshrink, Threshold)
from ..attention import MultiheadAttention

__all__ = [
    "CELU", "ELU", "GELU", "GLU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSoftmax", "Mish",
    "MultiheadAttention", "PReLU", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softmax", "Softplus", "Softsign",
    "Tanh", "Tanhshrink", "Threshold", "Hardshrink", "LogSigmoid", "RReLU", "Softmax2d", "Softmin", "Softshrink",
]

"""``kiln.nn.modules.activation``: the classes PyTorch defines in ``torch.nn.modules.activation``."""
from ..activation import GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Softplus, Tanh
from ..activation_extra import (CELU, ELU, GLU, SELU, Hardsigmoid, Hardswish, Hardtanh, Mish, PReLU, ReLU6, Softsign,
                                Tanhshrink, Threshold)
from ..attention import MultiheadAttention

__all__ = [
    "CELU", "ELU", "GELU", "GLU", "Hardsigmoid", "Hardswish", "Hardtanh", "LeakyReLU", "LogSoftmax", "Mish",
    "MultiheadAttention", "PReLU", "ReLU", "ReLU6", "SELU", "SiLU", "Sigmoid", "Softmax", "Softplus", "Softsign",
    "Tanh", "Tanhshrink", "Threshold",
]

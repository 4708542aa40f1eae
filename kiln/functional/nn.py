"""The neural-network functional ops (the body of ``kiln.nn.functional``)."""
from .conv_transpose import conv_transpose1d, conv_transpose2d
from .interpolate import interpolate
from .normalization import group_norm, rms_norm
from .activations import elu, gelu, hardtanh, leaky_relu, log_softmax, mish, silu, softmax, softplus
from .layers import (adaptive_avg_pool2d, avg_pool2d, batch_norm, bilinear, conv1d, conv2d, dropout,
                     embedding, fold2d, layer_norm, linear, max_pool2d, one_hot,
                     scaled_dot_product_attention, unfold2d)
from .losses import (binary_cross_entropy, binary_cross_entropy_with_logits, cross_entropy, l1_loss,
                     mse_loss, nll_loss, smooth_l1_loss)
from .shape import pad

__all__ = [
    "elu", "gelu", "hardtanh", "leaky_relu", "log_softmax", "mish", "silu", "softmax", "softplus",
    "adaptive_avg_pool2d", "avg_pool2d", "batch_norm", "bilinear", "conv1d", "conv2d", "dropout",
    "embedding", "fold2d", "layer_norm", "linear", "max_pool2d", "one_hot",
    "scaled_dot_product_attention", "unfold2d", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cross_entropy", "l1_loss", "mse_loss", "nll_loss",
    "smooth_l1_loss", "pad", "conv_transpose1d", "conv_transpose2d", "interpolate", "group_norm", "rms_norm",
]

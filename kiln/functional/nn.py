"""The neural-network functional ops (the body of ``kiln.nn.functional``)."""
from .conv_transpose import conv_transpose1d, conv_transpose2d
from .distance import cosine_similarity, normalize, pairwise_distance
from .dropouts import alpha_dropout, dropout1d, dropout2d, dropout3d, feature_alpha_dropout
from .interpolate import interpolate
from .normalization import group_norm, rms_norm
from .activations import elu, gelu, hardtanh, leaky_relu, log_softmax, mish, silu, softmax, softplus
from .activations_extra import (celu, glu, hardsigmoid, hardswish, prelu, relu6, selu, softsign, tanhshrink,
                                threshold)
from .embeddingbag import embedding_bag
from .instancenorm import instance_norm
from .layers import (adaptive_avg_pool2d, avg_pool2d, batch_norm, bilinear, conv1d, conv2d, dropout,
                     embedding, fold2d, layer_norm, linear, max_pool2d, one_hot,
                     scaled_dot_product_attention, unfold2d)
from .losses import cross_entropy, nll_loss
from .losses_ctc import ctc_loss
from .losses_margin import (cosine_embedding_loss, hinge_embedding_loss, margin_ranking_loss, multi_margin_loss,
                            multilabel_margin_loss, multilabel_soft_margin_loss, soft_margin_loss)
from .losses_pointwise import (binary_cross_entropy, binary_cross_entropy_with_logits, huber_loss, l1_loss,
                               mse_loss, smooth_l1_loss)
from .losses_probabilistic import gaussian_nll_loss, kl_div, poisson_nll_loss
from .losses_triplet import triplet_margin_loss, triplet_margin_with_distance_loss
from .padding import pad
from .pixelshuffle import pixel_shuffle, pixel_unshuffle

__all__ = [
    "elu", "gelu", "hardtanh", "leaky_relu", "log_softmax", "mish", "silu", "softmax", "softplus",
    "adaptive_avg_pool2d", "avg_pool2d", "batch_norm", "bilinear", "conv1d", "conv2d", "dropout",
    "embedding", "fold2d", "layer_norm", "linear", "max_pool2d", "one_hot",
    "scaled_dot_product_attention", "unfold2d", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "cross_entropy", "l1_loss", "mse_loss", "nll_loss",
    "smooth_l1_loss", "pad", "conv_transpose1d", "conv_transpose2d", "interpolate", "group_norm", "rms_norm",
    "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "huber_loss", "kl_div", "poisson_nll_loss", "gaussian_nll_loss", "soft_margin_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "cosine_embedding_loss", "multilabel_soft_margin_loss", "multilabel_margin_loss",
    "multi_margin_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss", "ctc_loss",
    "pairwise_distance", "cosine_similarity", "normalize",
    "celu", "glu", "hardsigmoid", "hardswish", "prelu", "relu6", "selu", "softsign", "tanhshrink", "threshold",
    "embedding_bag", "instance_norm", "pixel_shuffle", "pixel_unshuffle",
]

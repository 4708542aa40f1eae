"""TransformerEncoderLayer and TransformerEncoder with PyTorch's parameter names."""
from __future__ import annotations

import copy
from typing import Any, Callable

from .. import functional as F
from ..tensor import Tensor
from .attention import MultiheadAttention
from .container import ModuleList
from .dropout import Dropout
from .linear import Linear
from .module import Module
from .normalization import LayerNorm

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu}


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and LayerNorm.

    Post-norm (``norm_first=False``, the default): ``x = norm1(x + sa(x)); x = norm2(x + ff(x))``.
    Pre-norm: ``x = x + sa(norm1(x)); x = x + ff(norm2(x))``. Submodules are named as
    in PyTorch (self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2),
    so state dicts are interchangeable.

    >>> layer = kiln.nn.TransformerEncoderLayer(d_model=64, nhead=4, batch_first=True)
    >>> layer(kiln.randn(2, 10, 64)).shape
    (2, 10, 64)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[[Tensor], Tensor] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        factory = {"dtype": dtype, "device": device}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first, **factory)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if isinstance(activation, str):
            if activation not in _ACTIVATIONS:
                raise ValueError(f"activation should be 'relu' or 'gelu' (or a callable), got {activation!r}")
            activation = _ACTIVATIONS[activation]
        self.activation = activation  # a Module here is registered as a child, as in PyTorch
        self.batch_first = batch_first

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                  is_causal: bool) -> Tensor:
        out = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                             need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(out)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """A stack of `num_layers` deep copies of `encoder_layer`, then an optional final norm."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x

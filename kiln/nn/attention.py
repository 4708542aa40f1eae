"""MultiheadAttention with PyTorch's parameters (in_proj_weight, in_proj_bias, out_proj) and masks."""
from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from ..functional.creation import empty, ones
from ..functional.math import add, matmul, mean, mul
from ..functional.shape import chunk, masked_fill, reshape, squeeze, transpose, triu, unsqueeze
from ..ops.primitive import ShapeError
from ..tensor import Tensor
from . import init
from .linear import Linear
from .module import Module
from .parameter import Parameter


class MultiheadAttention(Module):
    """Multi-head attention: softmax(Q K^T / sqrt(d) + mask) V over `num_heads` heads.

    Inputs are (L, N, E) for query and (S, N, E) for key/value, or batch first
    ((N, L, E)) with ``batch_first=True``, or unbatched (L, E). Masks follow
    PyTorch: in a bool `attn_mask` (L, S) or (N*num_heads, L, S), and in a bool
    `key_padding_mask` (N, S), True means "do not attend"; float masks are added
    to the scores. ``is_causal=True`` without an `attn_mask` applies a causal
    mask (PyTorch requires the mask itself in that case).

    forward returns ``(output, weights)``: weights are the attention probabilities
    averaged over heads, (N, L, S), or per head with ``average_attn_weights=False``,
    or None with ``need_weights=False``.

    >>> mha = kiln.nn.MultiheadAttention(64, 8, batch_first=True)
    >>> x = kiln.randn(2, 10, 64)
    >>> out, w = mha(x, x, x); out.shape, w.shape
    ((2, 10, 64), (2, 10, 10))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be positive, got {embed_dim} and {num_heads}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        factory = {"dtype": dtype, "device": device}
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, **factory))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = Parameter(empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = Parameter(empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)

    # ---- forward ------------------------------------------------------------------------
    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ShapeError(f"MultiheadAttention: query, key and value must all be 3-D (batched) or 2-D "
                             f"(unbatched), got shapes {tuple(query.shape)}, {tuple(key.shape)}, "
                             f"{tuple(value.shape)}")
        same_qkv = query is key and key is value
        if not batched:
            query, key, value = (unsqueeze(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = unsqueeze(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (transpose(t, 0, 1) for t in (query, key, value))
        q, k, v = self._project(query, key, value, same_qkv)  # (N, H, L|S, D)
        n, length, src_len = q.shape[0], q.shape[2], k.shape[2]

        scores = matmul(mul(q, 1.0 / math.sqrt(self.head_dim)), transpose(k, -2, -1))  # (N, H, L, S)
        scores = self._apply_masks(scores, attn_mask, key_padding_mask, is_causal, n, length, src_len)
        weights = F.softmax(scores, -1)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout, True)
        out = reshape(transpose(matmul(weights, v), 1, 2), (n, length, self.embed_dim))
        out = self.out_proj(out)

        if not batched:
            out = squeeze(out, 0)
        elif not self.batch_first:
            out = transpose(out, 0, 1)
        if not need_weights:
            return out, None
        if average_attn_weights:
            weights = mean(weights, 1)
        return out, (squeeze(weights, 0) if not batched else weights)

    def _project(self, query: Tensor, key: Tensor, value: Tensor, same_qkv: bool) -> tuple[Tensor, Tensor, Tensor]:
        """Input projections, split into heads: each (N, num_heads, seq, head_dim)."""
        e = self.embed_dim
        if query.shape[-1] != e:
            raise ShapeError(f"MultiheadAttention: expected query with embed_dim {e} features, got shape "
                             f"{tuple(query.shape)}")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
            raise ShapeError(f"MultiheadAttention: key and value must share batch and sequence dims with each "
                             f"other and the batch dim with query, got query {tuple(query.shape)}, key "
                             f"{tuple(key.shape)}, value {tuple(value.shape)} (batch-first view)")
        b = self.in_proj_bias
        bq, bk, bv = chunk(b, 3, 0) if b is not None else (None, None, None)
        if self._qkv_same_embed_dim and same_qkv:
            q, k, v = chunk(F.linear(query, self.in_proj_weight, b), 3, -1)
        elif self._qkv_same_embed_dim:
            wq, wk, wv = chunk(self.in_proj_weight, 3, 0)
            q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
        else:
            q = F.linear(query, self.q_proj_weight, bq)
            k = F.linear(key, self.k_proj_weight, bk)
            v = F.linear(value, self.v_proj_weight, bv)
        return tuple(transpose(reshape(t, (t.shape[0], t.shape[1], self.num_heads, self.head_dim)), 1, 2)
                     for t in (q, k, v))  # type: ignore[return-value]

    def _apply_masks(self, scores: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None,
                     is_causal: bool, n: int, length: int, src_len: int) -> Tensor:
        if attn_mask is None and is_causal:
            attn_mask = triu(ones(length, src_len, dtype="bool", device=scores.device), 1)
        if attn_mask is not None:
            if attn_mask.ndim == 2:
                if tuple(attn_mask.shape) != (length, src_len):
                    raise ShapeError(f"MultiheadAttention: the 2-D attn_mask has shape {tuple(attn_mask.shape)}, "
                                     f"expected (L, S) = {(length, src_len)}")
            elif attn_mask.ndim == 3:
                expected = (n * self.num_heads, length, src_len)
                if tuple(attn_mask.shape) != expected:
                    raise ShapeError(f"MultiheadAttention: the 3-D attn_mask has shape {tuple(attn_mask.shape)}, "
                                     f"expected (N * num_heads, L, S) = {expected}")
                attn_mask = reshape(attn_mask, (n, self.num_heads, length, src_len))
            else:
                raise ShapeError(f"MultiheadAttention: attn_mask must be 2-D or 3-D, got shape "
                                 f"{tuple(attn_mask.shape)}")
            scores = _add_mask(scores, attn_mask)
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (n, src_len):
                raise ShapeError(f"MultiheadAttention: key_padding_mask has shape {tuple(key_padding_mask.shape)}, "
                                 f"expected (N, S) = {(n, src_len)}")
            scores = _add_mask(scores, reshape(key_padding_mask, (n, 1, 1, src_len)))
        return scores


def _add_mask(scores: Tensor, mask: Tensor) -> Tensor:
    """Bool masks block where True (-inf); float masks are added."""
    if mask.dtype.name == "bool":
        return masked_fill(scores, mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise TypeError(f"MultiheadAttention: masks must be bool or floating point, got {mask.dtype.name}")
    return add(scores, mask)

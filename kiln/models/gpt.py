"""A small GPT: a decoder-only causal transformer language model (nanoGPT's layout).

Module tree and state-dict names::

    wte (Embedding vocab x d)   wpe (Embedding block_size x d)   drop (Dropout)
    blocks.{i}.ln_1 (LayerNorm)
    blocks.{i}.attn.c_attn (Linear d -> 3d: q, k, v)   blocks.{i}.attn.c_proj (Linear d -> d)
    blocks.{i}.ln_2 (LayerNorm)
    blocks.{i}.mlp.c_fc (Linear d -> 4d)   blocks.{i}.mlp.c_proj (Linear 4d -> d)
    ln_f (LayerNorm)   head (Linear d -> vocab, no bias; not tied to wte)
"""
from __future__ import annotations

import math

from .. import functional as F
from .. import nn
from ..functional.creation import arange
from ..tensor import Tensor


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t attends to positions <= t."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_head:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_head ({n_head})")
        self.n_head = n_head
        self.dropout = dropout
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=-1)
        q, k, v = (h.reshape(b, t, self.n_head, c // self.n_head).transpose(1, 2) for h in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0,
                                           is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Linear(d, 4d) -> GELU(tanh) -> Linear(4d, d) -> Dropout."""

    def __init__(self, d_model: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d_model, 4 * d_model)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, d_model: int, n_head: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head, dropout)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token + learned position embeddings, `n_layer` pre-LN blocks, final LayerNorm, linear head.

    Weights start as in GPT-2: N(0, 0.02) for Linear and Embedding weights, zero biases,
    and N(0, 0.02 / sqrt(2 * n_layer)) for the residual projections (``c_proj``).
    """

    def __init__(self, vocab: int, n_layer: int, n_head: int, d_model: int, block_size: int,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab = vocab
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self._init_weights(n_layer)

    def _init_weights(self, n_layer: int) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, 0.0, 0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    def forward(self, idx: Tensor) -> Tensor:
        """idx: int64 token ids (B, T) with T <= block_size -> logits (B, T, vocab)."""
        if idx.ndim != 2 or idx.dtype.is_floating_point:
            raise TypeError(f"GPT expects int64 token ids of shape (B, T), got {idx.dtype.name} of shape "
                            f"{tuple(idx.shape)}")
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"GPT: sequence length {t} exceeds block_size {self.block_size}; crop the input "
                             f"to the last {self.block_size} tokens")
        pos = arange(t, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def gpt(vocab: int, n_layer: int, n_head: int, d_model: int, block_size: int, dropout: float = 0.0) -> GPT:
    """A small causal transformer language model: ``forward(idx (B, T) int64) -> logits (B, T, vocab)``.

    >>> model = kiln.models.gpt(vocab=65, n_layer=2, n_head=4, d_model=64, block_size=32)
    >>> model(kiln.randint(0, 65, (8, 32))).shape
    (8, 32, 65)
    """
    return GPT(vocab, n_layer, n_head, d_model, block_size, dropout)

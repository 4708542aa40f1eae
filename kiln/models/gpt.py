"""A small GPT: a decoder-only causal transformer language model (nanoGPT's layout).

Module tree and state-dict names::

    wte (Embedding vocab x d)   wpe (Embedding block_size x d)   drop (Dropout)
    blocks.{i}.ln_1 (LayerNorm)
    blocks.{i}.attn.c_attn (Linear d -> 3d: q, k, v)   blocks.{i}.attn.c_proj (Linear d -> d)
    blocks.{i}.ln_2 (LayerNorm)
    blocks.{i}.mlp.c_fc (Linear d -> 4d)   blocks.{i}.mlp.c_proj (Linear 4d -> d)
    ln_f (LayerNorm)   head (Linear d -> vocab, no bias; not tied to wte)

Generation (`GPT.generate`) keeps a key/value cache per layer (`KVCache`, set up by
`GPT.setup_caches`): the prompt runs once, then each new token runs alone, attending to the
cached keys and values of every position before it. The caches are fixed-size buffers written
at the positions given by ``input_pos`` (a tensor), so a compiled decode step has the same
shapes at every position and is one plan.
"""
from __future__ import annotations

import math
from typing import Any

from .. import functional as F
from .. import nn
from ..autograd import no_grad
from ..functional.creation import arange, zeros
from ..functional.sampling import multinomial
from ..functional.shape import cat
from ..functional.sorting import topk
from ..tensor import Tensor


class KVCache(nn.Module):
    """The keys and values of one attention layer for positions ``0 .. max_len - 1``: buffers `k`
    and `v` of shape (batch, n_head, max_len, head_dim), zero until written (not in the state dict)."""

    def __init__(self, batch_size: int, n_head: int, max_len: int, head_dim: int, dtype: Any = "float32",
                 device: Any = None) -> None:
        super().__init__()
        shape = (batch_size, n_head, max_len, head_dim)
        self.register_buffer("k", zeros(*shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", zeros(*shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write `k` and `v` (batch, n_head, len(input_pos), head_dim) at positions `input_pos` (in
        place) and return the whole cache (keys, values)."""
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


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
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, input_pos: Tensor | None = None) -> Tensor:
        """x (B, T, d) -> (B, T, d). With `input_pos` (the T positions of x, int64), the keys and values
        go into `kv_cache` and x attends to every cached position up to its own."""
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=-1)
        q, k, v = (h.reshape(b, t, self.n_head, c // self.n_head).transpose(1, 2) for h in (q, k, v))
        dropout_p = self.dropout if self.training else 0.0
        if input_pos is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
        else:
            if self.kv_cache is None:
                raise RuntimeError("CausalSelfAttention: input_pos needs a key/value cache; call "
                                   "GPT.setup_caches(batch_size) first")
            k, v = self.kv_cache.update(input_pos, k, v)
            visible = arange(k.shape[2], device=x.device).unsqueeze(0) <= input_pos.unsqueeze(1)  # (T, max_len)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=dropout_p)
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

    def forward(self, x: Tensor, input_pos: Tensor | None = None) -> Tensor:
        x = x + self.attn(self.ln_1(x), input_pos)
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

    def setup_caches(self, batch_size: int, max_len: int | None = None) -> None:
        """Give every attention layer a zeroed `KVCache` for `batch_size` sequences of up to `max_len`
        (default: block_size) positions, in the model's dtype and device; replaces any earlier caches."""
        max_len = self.block_size if max_len is None else max_len
        if not 0 < max_len <= self.block_size:
            raise ValueError(f"GPT.setup_caches: max_len must be in 1..block_size ({self.block_size}), got {max_len}")
        weight = self.wte.weight
        for block in self.blocks:
            attn = block.attn
            head_dim = attn.c_proj.weight.shape[0] // attn.n_head
            attn.kv_cache = KVCache(batch_size, attn.n_head, max_len, head_dim, weight.dtype, weight.device)

    def forward(self, idx: Tensor, input_pos: Tensor | None = None) -> Tensor:
        """idx: int64 token ids (B, T) with T <= block_size -> logits (B, T, vocab).

        With `input_pos`, the positions of idx's T tokens (int64, shape (T,)), attention reads and
        writes the key/value caches (`setup_caches`): the prompt with ``arange(T)``, then each new
        token with its own position.
        """
        if idx.ndim != 2 or idx.dtype.is_floating_point:
            raise TypeError(f"GPT expects int64 token ids of shape (B, T), got {idx.dtype.name} of shape "
                            f"{tuple(idx.shape)}")
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"GPT: sequence length {t} exceeds block_size {self.block_size}; crop the input "
                             f"to the last {self.block_size} tokens")
        if input_pos is None:
            pos = arange(t, device=idx.device)
        elif tuple(input_pos.shape) != (t,) or input_pos.dtype.is_floating_point:
            raise TypeError(f"GPT: input_pos must hold the {t} positions of idx's tokens (int64, shape ({t},)), "
                            f"got {input_pos.dtype.name} of shape {tuple(input_pos.shape)}")
        else:
            pos = input_pos
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x, input_pos)
        return self.head(self.ln_f(x))

    @no_grad()
    def generate(self, idx: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 *, use_cache: bool = True, compile: bool = False) -> Tensor:  # noqa: A002 - as kiln.compile
        """`idx` (B, T) followed by `max_new_tokens` tokens drawn one at a time: (B, T + max_new_tokens).

        Each token is drawn from ``softmax(logits / temperature)`` of the last position, keeping only
        the `top_k` likeliest tokens when given; ``temperature=0`` takes the likeliest token (greedy).
        Put the model in eval() mode first, or dropout stays on, as in PyTorch.

        With `use_cache` (and while the whole sequence fits in block_size) the prompt runs once and
        each new token runs alone against the key/value caches (`setup_caches`, made here for idx's
        batch). Without it, or beyond block_size, every step reruns the last block_size tokens.
        `compile=True` runs those forwards through ``kiln.compile(self)`` (made once and kept): a
        cached decode step is then one compiled plan at every position.
        """
        if temperature < 0:
            raise ValueError(f"GPT.generate: temperature must be >= 0 (0 is greedy), got {temperature}")
        forward = self._compiled_forward() if compile else self
        b, t = idx.shape
        if use_cache and t + max_new_tokens <= self.block_size:
            caches = [block.attn.kv_cache for block in self.blocks]
            if any(c is None or c.k.shape[0] != b or c.k.shape[2] < t + max_new_tokens for c in caches):
                self.setup_caches(b)
            logits = forward(idx, arange(t, device=idx.device))
            for step in range(max_new_tokens):
                token = self._sample(logits[:, -1, :], temperature, top_k)
                idx = cat([idx, token], 1)
                if step + 1 < max_new_tokens:
                    logits = forward(token, arange(t + step, t + step + 1, device=idx.device))
            return idx
        for _ in range(max_new_tokens):
            logits = forward(idx[:, -self.block_size:])
            idx = cat([idx, self._sample(logits[:, -1, :], temperature, top_k)], 1)
        return idx

    @staticmethod
    def _sample(logits: Tensor, temperature: float, top_k: int | None) -> Tensor:
        """One token id per row of `logits` (B, vocab): (B, 1)."""
        if temperature == 0:
            return logits.argmax(-1, keepdim=True)
        logits = logits / temperature
        if top_k is not None:
            kth = topk(logits, min(top_k, logits.shape[-1]))[0][:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return multinomial(F.softmax(logits, dim=-1), num_samples=1)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_compiled", None)  # generate's compiled forward: made again when needed, never copied or saved
        return state

    def _compiled_forward(self) -> Any:
        compiled = self.__dict__.get("_compiled")
        if compiled is None:
            from ..jit.api import compile as compile_  # noqa: PLC0415 - the jit imports kiln.models' siblings
            compiled = compile_(self)
            object.__setattr__(self, "_compiled", compiled)  # not a submodule: stays out of state_dict
        return compiled


def gpt(vocab: int, n_layer: int, n_head: int, d_model: int, block_size: int, dropout: float = 0.0) -> GPT:
    """A small causal transformer language model: ``forward(idx (B, T) int64) -> logits (B, T, vocab)``.

    >>> model = kiln.models.gpt(vocab=65, n_layer=2, n_head=4, d_model=64, block_size=32)
    >>> model(kiln.randint(0, 65, (8, 32))).shape
    (8, 32, 65)
    """
    return GPT(vocab, n_layer, n_head, d_model, block_size, dropout)

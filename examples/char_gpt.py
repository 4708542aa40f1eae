"""Train a character-level GPT on examples/data/tiny_text.txt, then sample text from it.

    python examples/char_gpt.py                      # about a minute on a laptop CPU
    python examples/char_gpt.py --steps 3 --d-model 16 --layers 1 --block-size 16 --sample-chars 20

The model is built from stock layers (nn.Embedding, nn.TransformerEncoder with a causal mask,
nn.Linear) and compiled with kiln.compile for training. Sampling keeps the --top-k likeliest
characters, draws one with kiln.multinomial, and runs each new character alone against a
key/value cache per layer (`cached_forward`, compiled too: one plan for every position).
"""
import argparse
from pathlib import Path

import kiln
import kiln.nn.functional as F
from kiln import nn

TEXT = Path(__file__).parent / "data" / "tiny_text.txt"


class CharGPT(nn.Module):
    def __init__(self, vocab_size, block_size, d_model=64, n_head=4, n_layer=2, dropout=0.1):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_head, 4 * d_model, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok_emb(idx) + self.pos_emb(kiln.arange(t))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        return self.head(self.blocks(x, mask=mask, is_causal=True))


def load_text(path=TEXT):
    text = path.read_text()
    chars = sorted(set(text))
    return kiln.tensor([chars.index(c) for c in text]), chars


def get_batch(data, batch_size, block_size, generator=None):
    starts = kiln.randint(len(data) - block_size, (batch_size,), generator=generator).tolist()
    x = kiln.stack([data[i:i + block_size] for i in starts])
    y = kiln.stack([data[i + 1:i + 1 + block_size] for i in starts])
    return x, y


def loss_fn(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def cached_forward(model, idx, pos, caches):
    """The model's eval forward of tokens idx (B, t) at positions pos (t,), its attention taken apart
    to write their keys and values into caches[layer] (B, heads, block_size, d / heads) in place."""
    b, t = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(pos)
    visible = kiln.arange(model.block_size).unsqueeze(0) <= pos.unsqueeze(1)  # (t, block_size)
    for layer, (keys, values) in zip(model.blocks.layers, caches):
        attn, d = layer.self_attn, x.shape[-1]
        q, k, v = F.linear(layer.norm1(x), attn.in_proj_weight, attn.in_proj_bias).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, attn.num_heads, -1).transpose(1, 2) for z in (q, k, v))
        keys.index_copy_(2, pos, k)
        values.index_copy_(2, pos, v)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
        x = x + attn.out_proj(y.transpose(1, 2).reshape(b, t, d))
        x = x + layer.linear2(layer.activation(layer.linear1(layer.norm2(x))))
    return model.head(model.blocks.norm(x))


def sample(logits, top_k):
    top, _ = kiln.topk(logits, min(top_k, logits.shape[-1]))
    logits[logits < top[:, [-1]]] = -float("inf")
    return kiln.multinomial(F.softmax(logits, dim=-1), num_samples=1)


@kiln.no_grad()
def generate(model, idx, new_chars, top_k, step=None):
    """idx (B, t) and new_chars sampled tokens: through the caches and `step` (default cached_forward)
    while the text fits in block_size, else rerunning the last block_size tokens for each."""
    b, t = idx.shape
    if t + new_chars > model.block_size:
        for _ in range(new_chars):
            idx = kiln.cat([idx, sample(model(idx[:, -model.block_size:])[:, -1, :], top_k)], dim=1)
        return idx
    step = step or (lambda *args: cached_forward(model, *args))
    heads = model.blocks.layers[0].self_attn.num_heads
    shape = (b, heads, model.block_size, model.head.in_features // heads)
    caches = [(kiln.zeros(*shape), kiln.zeros(*shape)) for _ in model.blocks.layers]
    logits = step(idx, kiln.arange(t), caches)
    for i in range(new_chars):
        if i:
            logits = step(idx[:, -1:], kiln.arange(t + i - 1, t + i), caches)
        idx = kiln.cat([idx, sample(logits[:, -1, :], top_k)], dim=1)
    return idx


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("steps", 600), ("batch-size", 32), ("block-size", 64), ("d-model", 64), ("heads", 4),
                          ("layers", 2), ("top-k", 5), ("sample-chars", 63), ("seed", 0)]:
        p.add_argument(f"--{name}", type=int, default=default)  # past block_size - 1, sampling is uncached
    p.add_argument("--lr", type=float, default=3e-3)
    args = p.parse_args()

    kiln.manual_seed(args.seed)
    data, chars = load_text()
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    model = CharGPT(len(chars), args.block_size, args.d_model, args.heads, args.layers)
    opt = kiln.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    compiled = kiln.compile(model)  # traced on the first step, replayed on the others

    for step in range(args.steps):
        x, y = get_batch(train_data, args.batch_size, args.block_size)
        loss = loss_fn(compiled, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  train loss {loss:.4f}")

    model.eval()
    with kiln.no_grad():
        val_loss = loss_fn(compiled, *get_batch(val_data, args.batch_size, args.block_size))
    print(f"val loss {val_loss:.4f}")
    start = kiln.tensor([[chars.index("\n")]])
    step = kiln.compile(lambda idx, pos, caches: cached_forward(model, idx, pos, caches))
    text = generate(model, start, args.sample_chars, args.top_k, step)
    print("sample:\n" + "".join(chars[i] for i in text[0].tolist()))


if __name__ == "__main__":
    main()

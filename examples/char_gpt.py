"""Train a character-level GPT on examples/data/tiny_text.txt, then sample text from it.

    python examples/char_gpt.py                      # about a minute on a laptop CPU
    python examples/char_gpt.py --steps 3 --d-model 16 --layers 1 --block-size 16 --sample-chars 20

The model is built from stock layers (nn.Embedding, nn.TransformerEncoder with a causal mask,
nn.Linear), the model is compiled with kiln.compile for training, and sampling keeps the
--top-k likeliest characters and draws the next one with kiln.multinomial.
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


@kiln.no_grad()
def generate(model, idx, new_chars, top_k):
    for _ in range(new_chars):
        logits = model(idx[:, -model.block_size:])[:, -1, :]
        top, _ = kiln.topk(logits, min(top_k, logits.shape[-1]))
        logits[logits < top[:, [-1]]] = -float("inf")
        idx = kiln.cat([idx, kiln.multinomial(F.softmax(logits, dim=-1), num_samples=1)], dim=1)
    return idx


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--sample-chars", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
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
    sample = generate(model, start, args.sample_chars, args.top_k)
    print("sample:\n" + "".join(chars[i] for i in sample[0].tolist()))


if __name__ == "__main__":
    main()

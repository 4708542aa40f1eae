"""Train an LSTM character language model on examples/data/tiny_text.txt and report perplexity.

    python examples/lstm_lm.py                       # seconds on a laptop CPU
    python examples/lstm_lm.py --epochs 1 --hidden 16 --layers 1 --seq-len 8   # a tiny run

The text is cut into --batch-size parallel streams and read --seq-len characters at a time;
the LSTM's state carries over from one chunk to the next, detached (truncated backpropagation
through time). The whole training step (forward, backward, gradient clipping, AdamW) is one
kiln.compile'd function. Perplexity is exp(mean cross-entropy) on the held-out last 10% of the text.
"""
import argparse
import math
from pathlib import Path

import kiln
import kiln.nn.functional as F
from kiln import nn

TEXT = Path(__file__).parent / "data" / "tiny_text.txt"


class LSTMLM(nn.Module):
    def __init__(self, vocab_size, emb_size=32, hidden_size=128, num_layers=2, dropout=0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_size)
        self.lstm = nn.LSTM(emb_size, hidden_size, num_layers, batch_first=True,
                            dropout=dropout if num_layers > 1 else 0.0)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden_size, vocab_size)

    def forward(self, x, state=None):
        out, state = self.lstm(self.embed(x), state)
        return self.head(self.drop(out)), state


def load_text(path=TEXT):
    text = path.read_text()
    chars = sorted(set(text))
    return kiln.tensor([chars.index(c) for c in text]), chars


def batchify(data, batch_size):
    """(N,) character ids -> (batch_size, N // batch_size): one contiguous stream per row."""
    n = len(data) // batch_size
    return data[:n * batch_size].reshape(batch_size, n)


def chunks(streams, seq_len):
    """(input, target) chunks of seq_len steps: the target is the input shifted by one."""
    for i in range(0, streams.shape[1] - seq_len, seq_len):
        yield streams[:, i:i + seq_len], streams[:, i + 1:i + 1 + seq_len]


def init_state(model, batch_size):
    """Zero (h, c) for a batch: each (num_layers, batch_size, hidden_size)."""
    shape = (model.lstm.num_layers, batch_size, model.lstm.hidden_size)
    return kiln.zeros(shape), kiln.zeros(shape)


def loss_fn(model, x, y, state):
    logits, state = model(x, state)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)), state


def make_train_step(model, opt, clip):
    def train_step(x, y, state):
        opt.zero_grad()
        loss, (h, c) = loss_fn(model, x, y, state)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss, (h.detach(), c.detach())
    return kiln.compile(train_step)  # the whole step, forward to optimizer update, as one plan


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    kiln.manual_seed(args.seed)
    data, chars = load_text()
    n = int(0.9 * len(data))
    train, val = batchify(data[:n], args.batch_size), data[n:].reshape(1, -1)  # val: one stream
    if train.shape[1] <= args.seq_len:
        p.error(f"--batch-size {args.batch_size} streams of {train.shape[1]} characters are too short "
                f"for --seq-len {args.seq_len}; use smaller values")
    model = LSTMLM(len(chars), hidden_size=args.hidden, num_layers=args.layers)
    opt = kiln.optim.AdamW(model.parameters(), lr=args.lr)
    train_step = make_train_step(model, opt, args.clip)

    for epoch in range(1, args.epochs + 1):
        model.train()
        state, losses = init_state(model, args.batch_size), []
        for x, y in chunks(train, args.seq_len):
            loss, state = train_step(x, y, state)
            losses.append(loss.item())
        model.eval()
        with kiln.no_grad():
            val_loss, _ = loss_fn(model, val[:, :-1], val[:, 1:], init_state(model, 1))
        print(f"epoch {epoch}  train loss {sum(losses) / len(losses):.4f}  val loss {val_loss:.4f}  "
              f"val ppl {math.exp(val_loss.item()):.2f}")


if __name__ == "__main__":
    main()

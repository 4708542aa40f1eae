"""Training steps written the way public PyTorch projects write them, for kiln and torch alike.

Each program is a function of the library (``kiln`` or ``torch``, whose APIs match) that
builds its model, optimizer and a fixed batch and returns a loop running `n` eager training
steps: forward, loss, backward, (clipping,) optimizer step. The same code runs on both, as a
user runs a script with ``import kiln as torch``.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np

Loop = Callable[[int], None]


@dataclass(frozen=True)
class Program:
    """A named training step and the project it is modelled on."""

    name: str
    like: str
    build: Callable[[ModuleType], Loop]


def _ints(high: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape)


def _floats(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def word_lm(lib: ModuleType, vocab: int = 5000, size: int = 200, layers: int = 2, bptt: int = 35,
            batch: int = 20) -> Loop:
    """An LSTM word language model: embedding, 2-layer LSTM, decoder; SGD with gradient clipping."""
    nn = lib.nn
    lib.manual_seed(0)
    encoder, rnn, decoder = nn.Embedding(vocab, size), nn.LSTM(size, size, layers, dropout=0.2), nn.Linear(size, vocab)
    params = list(encoder.parameters()) + list(rnn.parameters()) + list(decoder.parameters())
    opt = lib.optim.SGD(params, lr=20)
    x, y = lib.tensor(_ints(vocab, (bptt, batch), 1)), lib.tensor(_ints(vocab, (bptt * batch,), 2))
    hidden = [(lib.zeros(layers, batch, size), lib.zeros(layers, batch, size))]

    def loop(n: int) -> None:
        for _ in range(n):
            h = tuple(t.detach() for t in hidden[0])
            opt.zero_grad()
            out, h = rnn(encoder(x), h)
            loss = nn.functional.cross_entropy(decoder(out).view(-1, vocab), y)
            loss.backward()
            nn.utils.clip_grad_norm_(params, 0.25)
            opt.step()
            hidden[0] = h
    return loop


def mnist_cnn(lib: ModuleType, batch: int = 64) -> Loop:
    """Two convolutions, max-pooling, dropout and two linear layers on 28x28 images; Adadelta."""
    nn, F = lib.nn, lib.nn.functional
    lib.manual_seed(0)
    conv1, conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
    drop1, drop2 = nn.Dropout(0.25), nn.Dropout(0.5)
    fc1, fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)
    model = nn.ModuleList([conv1, conv2, fc1, fc2])
    opt = lib.optim.Adadelta(model.parameters(), lr=1.0)
    x, y = lib.tensor(_floats((batch, 1, 28, 28), 1)), lib.tensor(_ints(10, (batch,), 2))

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            h = F.max_pool2d(F.relu(conv2(F.relu(conv1(x)))), 2)
            h = F.relu(fc1(lib.flatten(drop1(h), 1)))
            loss = F.nll_loss(F.log_softmax(fc2(drop2(h)), dim=1), y)
            loss.backward()
            opt.step()
    return loop


def vae(lib: ModuleType, batch: int = 128) -> Loop:
    """A variational autoencoder of 784-400-20 MLPs with the reparameterization trick; Adam."""
    nn, F = lib.nn, lib.nn.functional
    lib.manual_seed(0)
    fc1, fc21, fc22, fc3, fc4 = nn.Linear(784, 400), nn.Linear(400, 20), nn.Linear(400, 20), \
        nn.Linear(20, 400), nn.Linear(400, 784)
    model = nn.ModuleList([fc1, fc21, fc22, fc3, fc4])
    opt = lib.optim.Adam(model.parameters(), lr=1e-3)
    x = lib.tensor(np.random.default_rng(1).random((batch, 784)).astype(np.float32))

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            h = F.relu(fc1(x))
            mu, logvar = fc21(h), fc22(h)
            z = mu + lib.randn_like(mu) * lib.exp(0.5 * logvar)
            recon = lib.sigmoid(fc4(F.relu(fc3(z))))
            bce = F.binary_cross_entropy(recon, x, reduction="sum")
            kld = -0.5 * lib.sum(1 + logvar - mu.pow(2) - logvar.exp())
            (bce + kld).backward()
            opt.step()
    return loop


def char_transformer(lib: ModuleType, vocab: int = 65, d: int = 128, heads: int = 4, layers: int = 2,
                     block: int = 64, batch: int = 16) -> Loop:
    """A character transformer: embeddings, a causal nn.TransformerEncoder, a linear head; AdamW."""
    nn, F = lib.nn, lib.nn.functional
    lib.manual_seed(0)
    tok, pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
    layer = nn.TransformerEncoderLayer(d, heads, 4 * d, 0.1, activation="gelu", batch_first=True, norm_first=True)
    blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False) if lib.__name__ == "torch" else \
        nn.TransformerEncoder(layer, layers)
    head = nn.Linear(d, vocab)
    model = nn.ModuleList([tok, pos, blocks, head])
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4)
    x, y = lib.tensor(_ints(vocab, (batch, block), 1)), lib.tensor(_ints(vocab, (batch, block), 2))
    mask = nn.Transformer.generate_square_subsequent_mask(block)

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            h = blocks(tok(x) + pos(lib.arange(block)), mask=mask, is_causal=True)
            loss = F.cross_entropy(head(h).view(-1, vocab), y.view(-1))
            loss.backward()
            opt.step()
    return loop


def gcn(lib: ModuleType, nodes: int = 2000, words: int = 500, hidden: int = 16, classes: int = 7) -> Loop:
    """A two-layer graph convolutional network on a sparse normalized adjacency; Adam."""
    nn, F = lib.nn, lib.nn.functional
    lib.manual_seed(0)
    rng = np.random.default_rng(1)
    edges = rng.integers(0, nodes, (2, nodes * 4))
    adj = lib.sparse_coo_tensor(lib.tensor(edges), lib.tensor(np.full(edges.shape[1], 0.2, np.float32)),
                                (nodes, nodes)).coalesce()
    features = lib.tensor((rng.random((nodes, words)) < 0.02).astype(np.float32))
    labels = lib.tensor(_ints(classes, (nodes,), 2))
    w1, w2 = nn.Parameter(lib.randn(words, hidden) * 0.1), nn.Parameter(lib.randn(hidden, classes) * 0.1)
    opt = lib.optim.Adam([w1, w2], lr=0.01, weight_decay=5e-4)

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            h = F.dropout(F.relu(lib.spmm(adj, features @ w1)), 0.5)
            loss = F.nll_loss(F.log_softmax(lib.spmm(adj, h @ w2), dim=1), labels)
            loss.backward()
            opt.step()
    return loop


PROGRAMS: tuple[Program, ...] = (
    Program("word LSTM LM (5k vocab, 2x200, bptt 35, batch 20)", "pytorch/examples word_language_model", word_lm),
    Program("MNIST CNN (batch 64)", "pytorch/examples mnist", mnist_cnn),
    Program("VAE 784-400-20 (batch 128)", "pytorch/examples vae", vae),
    Program("char transformer (2 layers, d 128, T 64, batch 16)", "nanoGPT / makemore", char_transformer),
    Program("GCN (2000 nodes, 500 features)", "pytorch/examples gcn", gcn),
)

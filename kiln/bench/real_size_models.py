"""The models of the `real-sizes` workload, written once for kiln and torch alike.

Every builder takes the library module `lib` (``kiln`` or ``torch``, whose APIs match) and
returns a `Setup`: model, inputs, and `make_step(forward)`, one step (forward, loss, backward,
optimizer) calling `forward` in place of the model, so the same step runs with the model, with
``kiln.compile(model)`` or ``torch.compile(model)``, and compiles whole (``kiln.compile(step)``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

Step = Callable[..., Any]


@dataclass
class Setup:
    """A model, its step's inputs, and a step built around a forward function."""

    model: Any
    inputs: list
    make_step: Callable[[Callable], Step]
    train: bool = True
    carry: int = 0  # the last `carry` inputs are replaced by the step's outputs after the loss


# The sizes people train at, and a small version of each for tests (same code, smaller numbers).
FULL = {"resnet": {"width": 64, "blocks": (2, 2, 2, 2), "batch": 32, "image": 32},
        "gpt": {"vocab": 512, "d": 384, "heads": 6, "layers": 4, "block": 128, "batch": 16},
        "lstm": {"vocab": 10000, "size": 256, "layers": 2, "bptt": 35, "batch": 20}}
SMALL = {"resnet": {"width": 4, "blocks": (1, 1, 1, 1), "batch": 2, "image": 8},
         "gpt": {"vocab": 32, "d": 16, "heads": 2, "layers": 1, "block": 8, "batch": 2},
         "lstm": {"vocab": 50, "size": 8, "layers": 2, "bptt": 4, "batch": 2}}


def _ints(high: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, high, shape)


def resnet18(lib: ModuleType, width: int = 64, blocks: tuple = (2, 2, 2, 2), classes: int = 10) -> Any:
    """ResNet-18 for CIFAR: a 3x3 stem conv, no max-pool, BasicBlocks of widths w, 2w, 4w, 8w,
    BatchNorm, global average pooling and a linear classifier."""
    nn, F = lib.nn, lib.nn.functional

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            out = F.relu(self.bn1(self.conv1(x)))
            return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width)
            layers, cin = [], width
            for i, count in enumerate(blocks):
                cout = width * 2 ** i
                for j in range(count):
                    layers.append(BasicBlock(cin, cout, 2 if i > 0 and j == 0 else 1))
                    cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool, self.linear = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

        def forward(self, x: Any) -> Any:
            out = self.layers(F.relu(self.bn1(self.conv1(x))))
            return self.linear(lib.flatten(self.pool(out), 1))

    return ResNet()


def gpt(lib: ModuleType, vocab: int, d: int, heads: int, layers: int, block: int) -> Any:
    """A GPT: token and position embeddings, pre-norm blocks of causal self-attention written with
    plain ops (q @ k^T, masked_fill with a causal mask, softmax; dropout 0, so none) and a 4x GELU
    MLP, a linear head."""
    nn, F = lib.nn, lib.nn.functional

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.register_buffer("mask", lib.tril(lib.ones(block, block)).view(1, 1, block, block))

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.qkv(x).split(c, dim=2)
            q, k, v = (h.view(b, t, heads, c // heads).transpose(1, 2) for h in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // heads) ** 0.5)
            att = F.softmax(att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf")), dim=-1)
            return self.proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(), nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1]))
            return self.head(self.ln_f(self.blocks(x)))

    return GPT()


def lstm_lm(lib: ModuleType, vocab: int, size: int, layers: int) -> Any:
    """An LSTM language model: embedding, nn.LSTM, linear decoder (pytorch/examples word_language_model)."""
    nn = lib.nn

    class LSTMLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.rnn = nn.Embedding(vocab, size), nn.LSTM(size, size, layers)
            self.decoder = nn.Linear(size, vocab)

        def forward(self, x: Any, h: Any, c: Any) -> tuple:
            out, (h, c) = self.rnn(self.encoder(x), (h, c))
            return self.decoder(out), h, c

    return LSTMLM()


def _classifier_step(lib: ModuleType, opt: Any) -> Callable[[Callable], Step]:
    """make_step for a model whose logits meet integer targets in cross-entropy (over every position)."""
    def make_step(forward: Callable) -> Step:
        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            logits = forward(x)
            loss = lib.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
            return loss
        return step
    return make_step


def resnet_train(lib: ModuleType, sizes: dict, train: bool = True) -> Setup:
    """ResNet-18 training step (cross-entropy, SGD lr 0.1 momentum 0.9), or with `train=False`
    its inference: eval mode, run by the caller under no_grad."""
    s = sizes["resnet"]
    lib.manual_seed(0)
    model = resnet18(lib, s["width"], s["blocks"])
    x = lib.tensor(np.random.default_rng(1).standard_normal((s["batch"], 3, s["image"], s["image"]), np.float32))
    if not train:
        model.eval()
        return Setup(model, [x], lambda forward: forward, train=False)
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Setup(model, [x, lib.tensor(_ints(10, (s["batch"],), 2))], _classifier_step(lib, opt))


resnet_infer = functools.partial(resnet_train, train=False)


def gpt_train(lib: ModuleType, sizes: dict) -> Setup:
    """GPT training step: cross-entropy over every position, AdamW lr 3e-4."""
    s = sizes["gpt"]
    lib.manual_seed(0)
    model = gpt(lib, s["vocab"], s["d"], s["heads"], s["layers"], s["block"])
    opt = lib.optim.AdamW(model.parameters(), lr=3e-4)
    x = lib.tensor(_ints(s["vocab"], (s["batch"], s["block"]), 1))
    y = lib.tensor(_ints(s["vocab"], (s["batch"], s["block"]), 2))
    return Setup(model, [x, y], _classifier_step(lib, opt))


def lstm_train(lib: ModuleType, sizes: dict) -> Setup:
    """LSTM LM training step (truncated BPTT): cross-entropy, clip_grad_norm_ 0.25, SGD lr 20."""
    s = sizes["lstm"]
    lib.manual_seed(0)
    model = lstm_lm(lib, s["vocab"], s["size"], s["layers"])
    params = list(model.parameters())
    opt = lib.optim.SGD(params, lr=20)
    x = lib.tensor(_ints(s["vocab"], (s["bptt"], s["batch"]), 1))
    y = lib.tensor(_ints(s["vocab"], (s["bptt"] * s["batch"],), 2))
    h0 = lib.zeros(s["layers"], s["batch"], s["size"])

    def make_step(forward: Callable) -> Step:
        def step(x: Any, y: Any, h: Any, c: Any) -> tuple:
            opt.zero_grad()
            out, h, c = forward(x, h.detach(), c.detach())
            loss = lib.nn.functional.cross_entropy(out.view(-1, out.shape[-1]), y)
            loss.backward()
            lib.nn.utils.clip_grad_norm_(params, 0.25)
            opt.step()
            return loss, h.detach(), c.detach()
        return step

    return Setup(model, [x, y, h0, h0.clone()], make_step, carry=2)


@dataclass(frozen=True)
class Workload:
    """A named setup builder; `text` formats its sizes (FULL[family] or SMALL[family]) for the table."""

    name: str
    build: Callable[[ModuleType, dict], Setup]
    family: str
    text: str

    def label(self, sizes: dict) -> str:
        return self.text.format(**sizes[self.family])


WORKLOADS = (Workload("resnet18-train", resnet_train, "resnet", "ResNet-18 train B={batch} {image}x{image}"),
             Workload("resnet18-infer", resnet_infer, "resnet", "ResNet-18 inference B={batch} {image}x{image}"),
             Workload("gpt-train", gpt_train, "gpt", "GPT {layers}L d={d} T={block} B={batch} vocab {vocab}"),
             Workload("lstm-train", lstm_train, "lstm", "LSTM LM {layers}x{size} vocab {vocab} T={bptt} B={batch}"))


def kiln_weights(workload: Workload, sizes: dict) -> dict:
    """The kiln model's initial state as NumPy arrays, to seed the torch twin."""
    import kiln  # noqa: PLC0415

    return {k: v.detach().numpy().copy() for k, v in workload.build(kiln, sizes).model.state_dict().items()}


def build(lib: ModuleType, workload: Workload, sizes: dict, weights: dict | None = None) -> Setup:
    """The workload's setup in `lib`, its model loaded with `weights` when given."""
    setup = workload.build(lib, sizes)
    if weights is not None:
        to_tensor = lib.from_numpy if hasattr(lib, "from_numpy") else lib.tensor
        setup.model.load_state_dict({k: to_tensor(v.copy()) for k, v in weights.items()})
    return setup


def make_call(lib: ModuleType, setup: Setup, column: str) -> Callable[[], Any] | None:
    """One step of `setup` as `column` runs it (None where the column does not apply); returns the loss."""
    if column.endswith("eager"):
        step = setup.make_step(setup.model)
    elif column == "kiln whole step":
        if not setup.train:
            return None
        step = lib.compile(setup.make_step(setup.model))
    else:
        step = setup.make_step(lib.compile(setup.model))
    inputs = list(setup.inputs)

    def call() -> Any:
        if setup.train:
            out = step(*inputs)
        else:
            with lib.no_grad():
                out = step(*inputs)
        if setup.carry:
            inputs[len(inputs) - setup.carry:] = out[1:]
            return out[0]
        return out
    return call

"""Workload `compile`: kiln.compile against kiln eager, PyTorch eager and torch.compile.

For each model (MLP 784-256-256-10 batch 128, LeNet-5 batch 64, a small GPT) it
times one training step (forward, cross_entropy, backward, SGD-momentum update)
and one inference forward under no_grad, in milliseconds. Ratios are against
kiln eager and against PyTorch eager. torch.compile is included with
``--torch-compile`` (its first compile takes a while on a 2-core machine).
"""
from __future__ import annotations

import argparse
import platform
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from ..jit.backends.cpu import simd
from .peers import import_torch
from .report import Table, fmt, fmt_ratio, write_json
from .threads import numpy_blas_threads
from .timing import Loop, measure

NAME = "compile"
DESCRIPTION = "training step and inference of MLP/LeNet-5/GPT: kiln eager vs kiln.compile vs PyTorch"
LR, MOMENTUM = 0.01, 0.9


@dataclass(frozen=True)
class ModelSpec:
    """How to build a model and a batch in both libraries with identical weights."""

    name: str
    kiln_model: Callable[[], Any]
    torch_model: Callable[[ModuleType, Any], Any]
    batch: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
    flatten_logits: bool = False


def _mlp() -> Any:
    from ..models import mlp  # noqa: PLC0415

    return mlp(784, (256, 256), 10)


def _lenet() -> Any:
    from ..models import lenet_5  # noqa: PLC0415

    return lenet_5()


def _gpt() -> Any:
    from ..models import gpt  # noqa: PLC0415

    return gpt(vocab=64, n_layer=2, n_head=4, d_model=64, block_size=32)


def _torch_twin(torch: ModuleType, kiln_model: Any, name: str) -> Any:
    """A PyTorch module with kiln_model's architecture and weights."""
    tnn = torch.nn
    if name == "mlp":
        model = tnn.Sequential(tnn.Linear(784, 256), tnn.ReLU(), tnn.Linear(256, 256), tnn.ReLU(),
                               tnn.Linear(256, 10))
    elif name == "lenet5":
        from collections import OrderedDict  # noqa: PLC0415

        model = tnn.Sequential(OrderedDict([
            ("conv1", tnn.Conv2d(1, 6, 5)), ("act1", tnn.ReLU()), ("pool1", tnn.MaxPool2d(2)),
            ("conv2", tnn.Conv2d(6, 16, 5)), ("act2", tnn.ReLU()), ("pool2", tnn.MaxPool2d(2)),
            ("flatten", tnn.Flatten()), ("fc1", tnn.Linear(400, 120)), ("act3", tnn.ReLU()),
            ("fc2", tnn.Linear(120, 84)), ("act4", tnn.ReLU()), ("fc3", tnn.Linear(84, 10))]))
    else:
        model = _torch_gpt(torch, vocab=64, n_layer=2, n_head=4, d=64, block_size=32)
    state = {k: torch.from_numpy(v.detach().numpy().copy()) for k, v in kiln_model.state_dict().items()}
    model.load_state_dict(state)
    return model


def _torch_gpt(torch: ModuleType, vocab: int, n_layer: int, n_head: int, d: int, block_size: int) -> Any:
    tnn, F = torch.nn, torch.nn.functional

    class Attention(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn, self.c_proj = tnn.Linear(d, 3 * d), tnn.Linear(d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=-1)
            q, k, v = (h.reshape(b, t, n_head, c // n_head).transpose(1, 2) for h in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class MLP(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc, self.c_proj = tnn.Linear(d, 4 * d), tnn.Linear(4 * d, d)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = tnn.LayerNorm(d), Attention(), tnn.LayerNorm(d), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(vocab, d), tnn.Embedding(block_size, d)
            self.blocks = tnn.ModuleList([Block() for _ in range(n_layer)])
            self.ln_f, self.head = tnn.LayerNorm(d), tnn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT()


SPECS = [
    ModelSpec("mlp", _mlp, None, lambda r: (r.standard_normal((128, 784)).astype(np.float32),
                                             r.integers(0, 10, 128))),
    ModelSpec("lenet5", _lenet, None, lambda r: (r.standard_normal((64, 1, 32, 32)).astype(np.float32),
                                                  r.integers(0, 10, 64))),
    ModelSpec("gpt", _gpt, None, lambda r: (r.integers(0, 64, (16, 32)), r.integers(0, 64, (16, 32))),
              flatten_logits=True),
]


def _kiln_loops(spec: ModelSpec, compiled: bool) -> tuple[Loop, Loop, Any]:
    import kiln  # noqa: PLC0415

    kiln.manual_seed(0)
    model = spec.kiln_model()
    x_np, y_np = spec.batch(np.random.default_rng(0))
    x, y = kiln.tensor(x_np), kiln.tensor(y_np)
    run = kiln.compile(model) if compiled else model
    opt = kiln.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def train(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            out = run(x)
            if spec.flatten_logits:
                out, target = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            else:
                target = y
            kiln.functional.cross_entropy(out, target).backward()
            opt.step()

    def infer(n: int) -> None:
        with kiln.no_grad():
            for _ in range(n):
                run(x)

    return train, infer, model


def _torch_loops(torch: ModuleType, spec: ModelSpec, kiln_model: Any, compiled: bool) -> tuple[Loop, Loop]:
    model = _torch_twin(torch, kiln_model, spec.name)
    x_np, y_np = spec.batch(np.random.default_rng(0))
    x, y = torch.from_numpy(x_np), torch.from_numpy(np.asarray(y_np))
    run = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def train(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            out = run(x)
            if spec.flatten_logits:
                out, target = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            else:
                target = y
            torch.nn.functional.cross_entropy(out, target).backward()
            opt.step()

    def infer(n: int) -> None:
        with torch.no_grad():
            for _ in range(n):
                run(x)

    return train, infer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=15, help="timed samples per case (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warmup samples (default 3)")
    parser.add_argument("--models", default="mlp,lenet5,gpt", help="comma-separated subset of mlp,lenet5,gpt")
    parser.add_argument("--torch-compile", action="store_true", help="also time torch.compile (slow to build)")
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    threads = numpy_blas_threads()
    torch = import_torch(num_threads=threads)
    wanted = [s for s in SPECS if s.name in args.models.split(",")]
    columns = ["kiln eager", "kiln.compile"]
    if torch is not None:
        columns += ["torch eager"] + (["torch.compile"] if args.torch_compile else [])
    table = Table(["case", "unit", *columns, "compile/eager", "compile/torch"])
    results: dict[str, dict] = {}
    for spec in wanted:
        eager_train, eager_infer, kiln_model = _kiln_loops(spec, compiled=False)
        comp_train, comp_infer, _ = _kiln_loops(spec, compiled=True)
        loops = {"kiln eager": (eager_train, eager_infer), "kiln.compile": (comp_train, comp_infer)}
        if torch is not None:
            loops["torch eager"] = _torch_loops(torch, spec, kiln_model, compiled=False)
            if args.torch_compile:
                try:
                    loops["torch.compile"] = _torch_loops(torch, spec, kiln_model, compiled=True)
                except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
                    print(f"torch.compile unavailable for {spec.name}: {exc}")
        for case, index in (("train step", 0), ("inference", 1)):
            medians = {}
            for column in columns:
                if column not in loops:
                    continue
                timing = measure(loops[column][index], number=None, repeat=args.repeat, warmup=args.warmup)
                medians[column] = timing.median * 1e3
            name = f"{spec.name} {case}"
            results[name] = medians
            eager, comp = medians.get("kiln eager"), medians.get("kiln.compile")
            peer = medians.get("torch eager")
            table.add_row([name, "ms", *[fmt(medians.get(c)) for c in columns],
                       fmt_ratio(comp / eager if eager and comp else None),
                       fmt_ratio(comp / peer if peer and comp else None)])
    print(f"compile: median of {args.repeat} samples after {args.warmup} warmup samples; "
          f"python {platform.python_version()}, BLAS threads {threads}")
    print(f"cpu: {simd.describe()}")
    print(table.render())
    print("\ncompile/eager < 1 means kiln.compile is faster than kiln eager; compile/torch compares with "
          "PyTorch eager.")
    if args.json:
        write_json(args.json, {"workload": NAME, "results_ms": results})
    return 0

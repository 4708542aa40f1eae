"""Workload `eager-overhead`: the fixed cost of kiln's eager mode next to PyTorch eager.

Three cases, each timed as a median over samples after a warmup:
  * ``x + y`` on float32[4] with x requiring grad (autograd records a node), in µs per op;
  * the same add with no tensor requiring grad, in µs per op;
  * one training step of MLP 784-256-256-10 (ReLU, batch 128): forward, cross_entropy,
    backward and an SGD-momentum update, in ms per step.

Tiny ops measure pure framework overhead (dispatch, autograd bookkeeping); the MLP
step shows how much of it survives when BLAS does real work.
"""
from __future__ import annotations

import argparse
import platform
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

import numpy as np

from .peers import import_torch
from .report import NOISY_NOTE, Table, fmt_ratio, fmt_timing, is_noisy, write_json
from .threads import numpy_blas_threads
from .timing import Loop, Timing, measure

NAME = "eager-overhead"
DESCRIPTION = "per-op overhead (tiny add, with/without grad) and one MLP training step, vs PyTorch"

MLP_SIZES = (784, 256, 256, 10)
BATCH = 128
LR, MOMENTUM = 0.01, 0.9


@dataclass(frozen=True)
class Case:
    """One measured case: how to build each library's loop, and how to time and show it."""

    name: str
    unit: str  # "us" or "ms"
    number: int  # calls per timed sample
    kiln: Callable[[], Loop]
    torch: Callable[[ModuleType], Loop]

    @property
    def scale(self) -> float:
        return {"us": 1e-6, "ms": 1e-3}[self.unit]


# ---- tiny elementwise op ----------------------------------------------------------
def _add_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)


def kiln_add(requires_grad: bool) -> Loop:
    import kiln  # noqa: PLC0415

    a, b = _add_inputs()
    x, y = kiln.tensor(a, requires_grad=requires_grad), kiln.tensor(b)

    def loop(n: int) -> None:
        for _ in range(n):
            x + y

    return loop


def torch_add(torch: ModuleType, requires_grad: bool) -> Loop:
    a, b = _add_inputs()
    x, y = torch.tensor(a, requires_grad=requires_grad), torch.tensor(b)

    def loop(n: int) -> None:
        for _ in range(n):
            x + y

    return loop


# ---- MLP training step ------------------------------------------------------------
def _mlp_data() -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """A fixed batch and PyTorch-style initial weights: (x, labels, [(W (out, in), b (out,)), ...])."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, MLP_SIZES[0])).astype(np.float32)
    labels = rng.integers(0, MLP_SIZES[-1], BATCH).astype(np.int64)
    layers = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        bound = 1.0 / np.sqrt(fan_in)
        layers.append((rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32),
                       rng.uniform(-bound, bound, fan_out).astype(np.float32)))
    return x, labels, layers


def kiln_has_nn_and_optim() -> bool:
    """True once kiln.nn (Linear, Sequential, ReLU) and kiln.optim (SGD) exist."""
    try:
        import kiln.nn as nn  # noqa: PLC0415
        import kiln.optim as optim  # noqa: PLC0415
    except ImportError:
        return False
    return all(hasattr(nn, name) for name in ("Linear", "ReLU", "Sequential")) and hasattr(optim, "SGD")


def kiln_mlp_step() -> Loop:
    """kiln's MLP step: kiln.nn + kiln.optim when they exist, else functional ops + a NumPy SGD."""
    return _kiln_mlp_step_nn() if kiln_has_nn_and_optim() else _kiln_mlp_step_functional()


def kiln_mlp_implementation() -> str:
    if kiln_has_nn_and_optim():
        return "kiln.nn.Sequential(Linear, ReLU) + kiln.optim.SGD"
    return "kiln.functional (linear, relu, cross_entropy) + hand-written NumPy SGD (kiln.nn/optim not found)"


def _kiln_mlp_step_nn() -> Loop:
    import kiln  # noqa: PLC0415
    import kiln.nn as nn  # noqa: PLC0415
    import kiln.optim as optim  # noqa: PLC0415

    x_np, y_np, layers = _mlp_data()
    modules: list = []
    for w, b in layers:
        linear = nn.Linear(w.shape[1], w.shape[0])
        with kiln.no_grad():
            linear.weight.copy_(kiln.tensor(w))
            linear.bias.copy_(kiln.tensor(b))
        modules += [linear, nn.ReLU()]
    model = nn.Sequential(*modules[:-1])
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = kiln.tensor(x_np), kiln.tensor(y_np)

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            loss = kiln.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

    return loop


def _kiln_mlp_step_functional() -> Loop:
    import kiln  # noqa: PLC0415
    import kiln.functional as F  # noqa: N812, PLC0415

    x_np, y_np, layers = _mlp_data()
    params = [(kiln.tensor(w, requires_grad=True), kiln.tensor(b, requires_grad=True)) for w, b in layers]
    flat = [p for pair in params for p in pair]
    velocity = [np.zeros_like(p._data) for p in flat]
    x, y = kiln.tensor(x_np), kiln.tensor(y_np)

    def loop(n: int) -> None:
        for _ in range(n):
            for p in flat:
                p.grad = None
            h = x
            for i, (w, b) in enumerate(params):
                h = F.linear(h, w, b)
                if i < len(params) - 1:
                    h = F.relu(h)
            loss = F.cross_entropy(h, y)
            loss.backward()
            with kiln.no_grad():
                for p, v in zip(flat, velocity):
                    v *= MOMENTUM
                    v += p.grad._data
                    p._data -= LR * v

    return loop


def torch_mlp_step(torch: ModuleType) -> Loop:
    x_np, y_np, layers = _mlp_data()
    modules: list = []
    for w, b in layers:
        linear = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(w))
            linear.bias.copy_(torch.from_numpy(b))
        modules += [linear, torch.nn.ReLU()]
    model = torch.nn.Sequential(*modules[:-1])
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

    return loop


CASES = (
    Case("x + y, float32[4], x.requires_grad", "us", 2000,
         lambda: kiln_add(True), lambda torch: torch_add(torch, True)),
    Case("x + y, float32[4], no grad", "us", 2000,
         lambda: kiln_add(False), lambda torch: torch_add(torch, False)),
    Case(f"MLP {'-'.join(map(str, MLP_SIZES))} train step, batch {BATCH}", "ms", 1,
         kiln_mlp_step, torch_mlp_step),
)


# ---- command line -----------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=30, help="timed samples per case (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warmup samples per case (default 5)")
    parser.add_argument("--number", type=int, default=None,
                        help="calls per sample for the tiny-op cases (default 2000)")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch column")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers to PATH as JSON")


def run(args: argparse.Namespace) -> int:
    """Measure every case for kiln and (when importable) torch, print a table, maybe write JSON."""
    import kiln  # noqa: PLC0415

    for flag in ("repeat", "number"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise SystemExit(f"kiln.bench: --{flag} must be >= 1, got {value}")
    if args.warmup < 0:
        raise SystemExit(f"kiln.bench: --warmup must be >= 0, got {args.warmup}")

    threads = numpy_blas_threads()
    torch = None if args.no_torch else import_torch(num_threads=threads)
    env = {
        "python": platform.python_version(), "numpy": np.__version__, "kiln": kiln.__version__,
        "torch": torch.__version__ if torch else None, "machine": platform.machine(),
        "numpy_blas_threads": threads, "torch_threads": torch.get_num_threads() if torch else None,
        "kiln_mlp": kiln_mlp_implementation(),
    }
    print(f"{NAME}: median of {args.repeat} samples after {args.warmup} warmup samples")
    print(f"  kiln {env['kiln']}, numpy {env['numpy']} (BLAS threads: {threads}), python {env['python']}")
    if torch is not None:
        print(f"  torch {env['torch']} (threads: {env['torch_threads']}, set to match numpy)")
    else:
        why = "--no-torch" if args.no_torch else "not importable; pip install torch to add it"
        print(f"  torch: skipped ({why})")
    print(f"  kiln MLP step: {env['kiln_mlp']}")
    sys.stdout.flush()

    table = Table(["case", "unit", "kiln", "torch", "kiln/torch"])
    results = []
    noisy = False
    for case in CASES:
        number = args.number if (args.number is not None and case.number > 1) else case.number
        kiln_time = measure(case.kiln(), number=number, repeat=args.repeat, warmup=args.warmup)
        torch_time: Timing | None = None
        if torch is not None:
            torch_time = measure(case.torch(torch), number=number, repeat=args.repeat, warmup=args.warmup)
        k = kiln_time.median / case.scale
        t = torch_time.median / case.scale if torch_time else None
        ratio = k / t if t else None
        unit = "µs" if case.unit == "us" else case.unit
        table.add_row([case.name, unit, fmt_timing(kiln_time, case.scale), fmt_timing(torch_time, case.scale),
                       fmt_ratio(ratio)])
        noisy = noisy or is_noisy(kiln_time) or is_noisy(torch_time)
        results.append({"case": case.name, "unit": case.unit, "kiln": kiln_time.as_dict(case.scale),
                        "torch": torch_time.as_dict(case.scale) if torch_time else None,
                        "ratio_kiln_over_torch": ratio})
    print()
    print(table.render())
    print("\nkiln/torch < 1 means kiln is faster. Medians; see --json for min/max/IQR.")
    if noisy:
        print(NOISY_NOTE)
    if args.json:
        try:
            path = write_json(args.json, {"workload": NAME, "env": env, "results": results})
        except OSError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {path}")
    return 0

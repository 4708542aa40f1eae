"""The demo run: train the CNN on the bundled digits, report accuracy and speed, save artifacts."""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import kiln
import kiln.functional as F  # noqa: N812
from kiln.data import DataLoader, load_digits

from .artifacts import DemoError, prepare_out_dir, save_plot, save_weights
from .model import ARCHITECTURE, build_model, build_optimizer, describe_stack, set_lr
from .progress import make_progress

TARGET_ACCURACY = 0.97
Log = Callable[[str], None]


@dataclass
class DemoConfig:
    """Settings of one demo run (the CLI flags, plus the training recipe)."""

    epochs: int = 15
    eager: bool = False
    backend: str = "auto"
    out: str = "kiln-demo"
    batch_size: int = 64
    lr: float = 0.1  # peak learning rate of the cosine schedule
    momentum: float = 0.9
    seed: int = 0
    ranks: int = 1  # > 1: this process is one rank of an MPI job (kiln demo --ranks N starts it)


@dataclass
class DemoResult:
    """What the run measured and where it saved things."""

    test_accuracy: float
    step_ms: float  # median time of one training step (forward, loss, backward, update)
    total_s: float
    mode: str
    weights: Path
    plot: Path | None
    compare: dict[str, float] = field(default_factory=dict)  # eager/compiled ms per step, when compiled
    history: dict[str, list[float]] = field(default_factory=dict)


def choose_forward(model: Any, config: DemoConfig, log: Log) -> tuple[Any, str]:
    """The callable to train with: kiln.compile(model) when available and not --eager, else the model."""
    if config.eager:
        return model, "eager (--eager)"
    if not hasattr(kiln, "compile"):
        return model, "eager (kiln.compile is not available yet)"
    try:
        return kiln.compile(model, backend=config.backend), f"compiled (kiln.compile, backend={config.backend!r})"
    except Exception as exc:  # noqa: BLE001 - the demo must still run; say what happened
        log(f"warning: kiln.compile failed ({type(exc).__name__}: {exc}); training eagerly")
        return model, "eager (kiln.compile failed)"


def train_step(forward: Any, optimizer: Any, images: kiln.Tensor, labels: kiln.Tensor) -> float:
    """One SGD step; returns the batch loss."""
    optimizer.zero_grad()
    loss = F.cross_entropy(forward(images), labels)
    loss.backward()
    optimizer.step()
    return loss.item()


def accuracy(forward: Any, images: kiln.Tensor, labels: kiln.Tensor) -> float:
    with kiln.no_grad():
        predicted = forward(images).argmax(-1)
    return float((predicted == labels).float().mean().item())


def time_forward_backward(forward: Any, model: Any, batches: list, repeat: int = 3) -> float:
    """Median ms of forward + loss + backward over `batches` (weights untouched; grads cleared)."""
    times = []
    for _ in range(repeat):
        for images, labels in batches:
            start = time.perf_counter()
            F.cross_entropy(forward(images), labels).backward()
            times.append(time.perf_counter() - start)
    for p in model.parameters():
        p.grad = None
    return 1e3 * statistics.median(times)


def _quiet(line: str) -> None:
    """The log of ranks other than 0: silent."""


class _NoProgress:
    """The progress bar of ranks other than 0: silent."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def join_world(config: DemoConfig) -> Any:
    """Join the MPI job this rank was started in; the `kiln.distributed` module."""
    import kiln.distributed as dist  # noqa: PLC0415
    from kiln.distributed.mpi import launched_world_size  # noqa: PLC0415

    size = launched_world_size()
    if size != config.ranks:
        raise DemoError(f"ranks={config.ranks} but this process was started as one of {size}; start the "
                        f"distributed demo with `python -m kiln demo --ranks {config.ranks}`")
    dist.init_process_group()
    return dist


def run_demo(config: DemoConfig, log: Log = print) -> DemoResult:
    """Train, evaluate, time and save; `log` receives the report lines.

    With ``config.ranks > 1`` this process is one rank of an MPI job: each rank trains a
    DistributedDataParallel copy on its DistributedSampler shard (batch_size per rank), and
    only rank 0 logs and saves.
    """
    start = time.perf_counter()
    dist = join_world(config) if config.ranks > 1 else None
    rank0 = dist is None or dist.get_rank() == 0
    if not rank0:
        log = _quiet
    out = prepare_out_dir(config.out) if rank0 else Path(config.out)  # fail fast on a bad --out
    kiln.manual_seed(config.seed)
    train_x, train_y = load_digits("train")
    test_x, test_y = load_digits("test")
    sampler = None
    if dist is not None:
        sampler = dist.DistributedSampler(range(len(train_y)), shuffle=True, seed=config.seed)
        loader = DataLoader((train_x, train_y), batch_size=config.batch_size, sampler=sampler)
    else:
        loader = DataLoader((train_x, train_y), batch_size=config.batch_size, shuffle=True, seed=config.seed)
    model = build_model()
    forward, mode = choose_forward(model, config, log)
    if dist is not None:
        forward = dist.DistributedDataParallel(forward)
        mode += f", DistributedDataParallel on {dist.get_world_size()} ranks"
    optimizer = build_optimizer(model, lr=config.lr, momentum=config.momentum)
    log(f"kiln demo: a small CNN on the UCI handwritten digits ({len(train_y)} train / {len(test_y)} test "
        f"images, 8x8, 10 classes)")
    log(f"  model: {ARCHITECTURE} ({describe_stack(model, optimizer)})")
    per_rank = " per rank" if dist is not None else ""
    log(f"  training: {config.epochs} epochs x {len(loader)} steps, batch {config.batch_size}{per_rank}, "
        f"SGD momentum {config.momentum}, cosine lr from {config.lr}; mode: {mode}")

    history: dict[str, list[float]] = {"loss": [], "test_acc": []}
    step_times: list[float] = []
    total_steps, step = config.epochs * len(loader), 0
    for epoch in range(1, config.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        bar = make_progress(len(loader), f"epoch {epoch}/{config.epochs}") if rank0 else _NoProgress()
        epoch_start, seen = time.perf_counter(), 0
        for images, labels in loader:
            set_lr(optimizer, 0.5 * config.lr * (1 + math.cos(math.pi * step / total_steps)))
            t0 = time.perf_counter()
            try:
                loss = train_step(forward, optimizer, images, labels)
            except Exception as exc:  # noqa: BLE001 - a compiler failure should not end the demo
                if forward is model or dist is not None:  # ranks must not diverge: fail loudly
                    raise
                log(f"warning: the compiled step failed ({type(exc).__name__}: {exc}); continuing eagerly")
                forward, mode = model, "eager (the compiled step failed)"
                loss = train_step(forward, optimizer, images, labels)
            step_times.append(time.perf_counter() - t0)
            step += 1
            seen += len(labels)
            history["loss"].append(loss)
            bar.set_postfix_str(f"loss {loss:.3f}, {seen / (time.perf_counter() - epoch_start):.0f} img/s")
            bar.update(1)
        bar.close()
        acc = accuracy(forward, test_x, test_y)
        history["test_acc"].append(acc)
        epoch_loss = statistics.fmean(history["loss"][-len(loader):])
        log(f"epoch {epoch:>2}/{config.epochs}  loss {epoch_loss:.4f}  test accuracy {100 * acc:.1f}%  "
            f"{seen / (time.perf_counter() - epoch_start):.0f} img/s")

    compare: dict[str, float] = {}
    if forward is not model and dist is None:
        batches = [batch for batch, _ in zip(loader, range(5))]
        compare = {"eager_ms": time_forward_backward(model, model, batches),
                   "compiled_ms": time_forward_backward(forward, model, batches)}
    if not rank0:
        dist.barrier()  # rank 0 saves; every rank leaves together
        dist.destroy_process_group()
        return DemoResult(history["test_acc"][-1], 1e3 * statistics.median(step_times),
                          time.perf_counter() - start, mode, out, None, compare, history)
    weights, weights_note = save_weights(model.state_dict(), out)
    plot = save_plot(history, out)
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()

    step_ms = 1e3 * statistics.median(step_times)
    result = DemoResult(history["test_acc"][-1], step_ms, time.perf_counter() - start, mode, weights, plot,
                        compare, history)
    verdict = "reached" if result.test_accuracy >= TARGET_ACCURACY else "below"
    log(f"test accuracy: {100 * result.test_accuracy:.1f}% ({verdict} the {100 * TARGET_ACCURACY:.0f}% target)")
    log(f"time per training step: {step_ms:.2f} ms (median of {len(step_times)} steps, {mode})")
    if compare:
        log(f"forward+backward per step: eager {compare['eager_ms']:.2f} ms, compiled "
            f"{compare['compiled_ms']:.2f} ms ({compare['eager_ms'] / compare['compiled_ms']:.2f}x)")
    log(f"weights: {weights} ({weights_note})")
    if plot is not None:
        log(f"plot: {plot}")
    else:
        log("plot: skipped, matplotlib is not installed (pip install matplotlib, or pip install -e \".[demo]\")")
    log(f"total time: {result.total_s:.1f} s")
    return result

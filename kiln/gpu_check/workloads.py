"""The GPU targets' workloads, timed for kiln.compile, torch eager and torch.compile on one device.

| workload | target on the GPU |
| --- | --- |
| 2 pre-norm transformer blocks, fwd+bwd, B8 T128 D256 H4 and B32 T512 D768 H12 | <= 1.0x torch.compile |
| LayerNorm+GELU 16384x4096, float32 and bfloat16 | <= 1.5x the device's copy of the same bytes |
| MLP 784-256-256-10 train step, B=128, whole step compiled | <= 0.5x torch eager |

`run_all(device, small)` builds each for `device` ("cuda", or "cpu" to rehearse with `small`
sizes) and returns one `Result` per workload: median milliseconds per column, or the error that
stopped it (the next workload still runs).
"""
from __future__ import annotations

import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

Loop = Callable[[], Any]


@dataclass
class Result:
    """One workload's medians (ms per call, by column), its target, and the errors met."""

    name: str
    target: str
    ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


def _sync(device: str) -> Callable[[], None]:
    """Waits for the device's queued work (kiln's CuPy stream and torch's), nothing on the CPU."""
    if device == "cpu":
        return lambda: None
    import kiln  # noqa: PLC0415

    def sync() -> None:
        kiln.cuda.synchronize()
        torch = _torch()
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()
    return sync


def _torch() -> Any:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return None
    return torch


def _time(call: Loop, sync: Callable[[], None], repeat: int, per_sample: int) -> float:
    """Median ms per call over `repeat` samples of `per_sample` calls, after two warm-up samples."""
    for _ in range(2):
        call()
    sync()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(per_sample):
            call()
        sync()
        samples.append((time.perf_counter() - start) / per_sample * 1e3)
    return statistics.median(samples)


def _measure(result: Result, columns: dict[str, Callable[[], Loop]], device: str, repeat: int,
             per_sample: int, log: list[str]) -> None:
    """Build and time each column; a column that fails records its error and the rest go on.

    On a GPU, kiln's column is then profiled once more: its kernels by total GPU time go to
    `PROFILES` (the check writes them to profile.log).
    """
    sync = _sync(device)
    for column, build in columns.items():
        try:
            call = build()
            result.ms[column] = _time(call, sync, repeat, per_sample)
            if column == "kiln.compile" and device != "cpu":
                details = getattr(call, "details", None)
                PROFILES.append(f"== {result.name}: {result.ms[column]:.3f} ms per call\n{_kernel_table(call, sync)}"
                                + (f"\n{details()}" if details else ""))
        except Exception as exc:  # noqa: BLE001 - the report names every failure; the check goes on
            result.errors[column] = f"{type(exc).__name__}: {exc}"
            log.append(f"== {result.name} / {column}\n{traceback.format_exc()}")


PROFILES: list[str] = []  # kernel tables of kiln's columns, one text per workload


def _kernel_table(call: Loop, sync: Callable[[], None], calls: int = 5) -> str:
    """The GPU kernels of `calls` calls (CuPy's and kiln's too: CUPTI sees the whole process), by total time."""
    torch = _torch()
    if torch is None:
        return "no torch: no profiler"
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        sync()
    return prof.key_averages().table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=70)


def _torch_columns(columns: dict[str, Callable[[], Loop]], torch_call: Callable[[bool], Callable[[], Loop]],
                   with_torch_compile: bool) -> None:
    """Add "torch eager" (and "torch.compile") from `torch_call(compiled)`."""
    columns["torch eager"] = torch_call(False)
    if with_torch_compile:
        columns["torch.compile"] = torch_call(True)


# ---- two pre-norm transformer blocks, forward and backward ------------------------------------
def transformer_blocks(device: str, batch: int, seq: int, d: int, heads: int, repeat: int, log: list[str],
                       with_torch_compile: bool) -> Result:
    import kiln  # noqa: PLC0415

    result = Result(f"2 transformer blocks B{batch} T{seq} D{d} H{heads}, fwd+bwd", "kiln.compile <= 1.0x torch.compile")
    layer = dict(d_model=d, nhead=heads, dim_feedforward=4 * d, dropout=0.0, activation="gelu",
                 batch_first=True, norm_first=True)
    x_np = np.random.default_rng(0).standard_normal((batch, seq, d)).astype(np.float32)
    kiln.manual_seed(0)
    model = kiln.nn.Sequential(kiln.nn.TransformerEncoderLayer(**layer), kiln.nn.TransformerEncoderLayer(**layer))
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    model.to(device)

    def kiln_call() -> Loop:
        compiled, x = kiln.compile(model), kiln.tensor(x_np).to(device)

        def call() -> None:
            model.zero_grad(set_to_none=True)
            out = compiled(x)
            (out * out).mean().backward()
        return call

    columns: dict[str, Callable[[], Loop]] = {"kiln.compile": kiln_call}
    torch = _torch()
    if torch is not None:
        def torch_call(compiled: bool) -> Callable[[], Loop]:
            def build() -> Loop:
                tmodel = torch.nn.Sequential(torch.nn.TransformerEncoderLayer(**layer),
                                             torch.nn.TransformerEncoderLayer(**layer))
                tmodel.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
                tmodel.to(device)
                run = torch.compile(tmodel) if compiled else tmodel
                tx = torch.from_numpy(x_np).to(device)

                def call() -> None:
                    tmodel.zero_grad(set_to_none=True)
                    out = run(tx)
                    (out * out).mean().backward()
                return call
            return build

        _torch_columns(columns, torch_call, with_torch_compile)
    _measure(result, columns, device, repeat, 1, log)
    return result


# ---- LayerNorm + GELU, inference ----------------------------------------------------------------
def layer_norm_gelu(device: str, rows: int, cols: int, dtype: str, repeat: int, log: list[str],
                    with_torch_compile: bool) -> Result:
    import kiln  # noqa: PLC0415
    import kiln.functional as F  # noqa: PLC0415

    result = Result(f"LayerNorm+GELU {rows}x{cols} {dtype}", "kiln.compile <= 1.5x the device copy")
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((rows, cols)).astype(np.float32)
    kdtype = getattr(kiln, dtype)

    def kiln_tensors() -> tuple:
        x = kiln.tensor(x_np).to(kdtype).to(device)
        w = kiln.ones(cols, dtype=kdtype).to(device)
        b = kiln.zeros(cols, dtype=kdtype).to(device)
        return x, w, b

    def kiln_call() -> Loop:
        x, w, b = kiln_tensors()
        compiled = kiln.compile(lambda x: F.gelu(F.layer_norm(x, (cols,), w, b)))

        def call() -> Any:
            return compiled(x)
        call.details = lambda: (f"input storage on the device: {x._data.dtype}\n"  # type: ignore[attr-defined]
                                + compiled.explain(graphs=True))
        return call

    def copy_call() -> Loop:
        data = kiln_tensors()[0]._data  # the device array: its own copy is the floor for one read and one write
        return data.copy

    columns: dict[str, Callable[[], Loop]] = {"kiln.compile": kiln_call, "device copy": copy_call}
    torch = _torch()
    if torch is not None:
        def torch_call(compiled: bool) -> Callable[[], Loop]:
            def build() -> Loop:
                tdtype = getattr(torch, dtype)
                tx = torch.from_numpy(x_np).to(device=device, dtype=tdtype)
                tw = torch.ones(cols, device=device, dtype=tdtype)
                tb = torch.zeros(cols, device=device, dtype=tdtype)

                def fn(x: Any) -> Any:
                    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (cols,), tw, tb))
                run = torch.compile(fn) if compiled else fn
                return lambda: run(tx)
            return build

        _torch_columns(columns, torch_call, with_torch_compile)
    _measure(result, columns, device, repeat, 5, log)
    return result


# ---- MLP training step, the whole step compiled ----------------------------------------------------
def mlp_train_step(device: str, batch: int, repeat: int, log: list[str]) -> Result:
    import kiln  # noqa: PLC0415

    result = Result(f"MLP 784-256-256-10 train step B={batch}, whole step compiled", "kiln <= 0.5x torch eager")
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch, 784)).astype(np.float32)
    y_np = rng.integers(0, 10, batch)
    sizes = (784, 256, 256, 10)

    def kiln_call() -> Loop:
        kiln.manual_seed(0)
        layers: list = []
        for i in range(3):
            layers.append(kiln.nn.Linear(sizes[i], sizes[i + 1]))
            if i < 2:
                layers.append(kiln.nn.ReLU())
        model = kiln.nn.Sequential(*layers).to(device)
        opt = kiln.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x, y = kiln.tensor(x_np).to(device), kiln.tensor(y_np).to(device)

        @kiln.compile
        def step(x: Any, y: Any) -> Any:
            opt.zero_grad()
            loss = kiln.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return lambda: step(x, y)

    columns: dict[str, Callable[[], Loop]] = {"kiln.compile": kiln_call}
    torch = _torch()
    if torch is not None:
        def torch_call() -> Loop:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                        torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            tx, ty = torch.from_numpy(x_np).to(device), torch.from_numpy(y_np).to(device)

            def call() -> None:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(tx), ty).backward()
                opt.step()
            return call

        columns["torch eager"] = torch_call
    _measure(result, columns, device, repeat, 10, log)
    return result


def run_all(device: str, small: bool, log: list[str], repeat: int = 15) -> list[Result]:
    """Every workload on `device`: the issue's sizes, or tiny ones with `small` (a CPU rehearsal)."""
    on_gpu = device != "cpu"
    torch = _torch()
    with_torch_compile = on_gpu and torch is not None  # a CPU rehearsal skips Inductor's minutes of compiling
    blocks = [(2, 16, 32, 2)] if small else [(8, 128, 256, 4), (32, 512, 768, 12)]
    norms = (64, 128) if small else (16384, 4096)
    results = [transformer_blocks(device, *shape, repeat, log, with_torch_compile) for shape in blocks]
    results += [layer_norm_gelu(device, *norms, dtype, repeat, log, with_torch_compile)
                for dtype in ("float32", "bfloat16")]
    results.append(mlp_train_step(device, 16 if small else 128, repeat, log))
    return results

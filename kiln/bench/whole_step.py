"""Workload `whole-step`: a whole training step compiled as one plan, against its targets.

The MLP 784-256-256-10 with SGD (momentum 0.9) at batch 1, 16 and 128, and the
`kiln.models.gpt` of the `compile` workload with AdamW, each as

- kiln eager: zero_grad, forward, cross_entropy, backward, step, all eager;
- compiled module: ``kiln.compile(model)``, loss and optimizer eager (the common pattern);
- whole step: ``kiln.compile(train_step)`` with all of it inside (one plan);
- torch eager, and jax.jit of the same SGD-momentum step (when installed).

Targets: whole step B=1 <= 0.5x jax.jit; whole step B=16 and the compiled
module B=16 at least 5x and 4x faster than kiln eager; whole step B=128 <= 0.8x torch
eager; the GPT whole step (AdamW) <= 0.8x torch eager. Run it with OPENBLAS_CORETYPE
and OPENBLAS_L2_SIZE unset. Times are medians; "*" marks a noisy one.
"""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from . import isolate
from .compiled import LR, MOMENTUM, SPECS, _torch_twin
from .peers import import_torch
from .report import NOISY_NOTE, Table, fmt_timing, is_noisy, write_json
from .threads import numpy_blas_threads
from .timing import Loop, Timing, measure

NAME = "whole-step"
DESCRIPTION = "a whole training step compiled as one plan (MLP SGD B=1/16/128, GPT AdamW) vs eager, torch, jax"
COLUMNS = ["kiln eager", "compiled module", "whole step", "torch eager", "jax.jit"]
KILN_COLUMNS = ("kiln eager", "compiled module", "whole step")  # timed without torch or jax (isolate.py)
BATCHES = (1, 16, 128)
# (case, column compared, peer column, limit): the column's median <= limit x the peer's
TARGETS = [("MLP SGD B=1", "whole step", "jax.jit", 0.5), ("MLP SGD B=16", "whole step", "kiln eager", 0.2),
           ("MLP SGD B=16", "compiled module", "kiln eager", 0.25),
           ("MLP SGD B=128", "whole step", "torch eager", 0.8), ("GPT AdamW", "whole step", "torch eager", 0.8)]


def _kiln_loop(model_name: str, batch: tuple, mode: str, adamw: bool) -> tuple[Loop, Any]:
    import kiln  # noqa: PLC0415

    spec = next(s for s in SPECS if s.name == model_name)
    kiln.manual_seed(0)
    model = spec.kiln_model()
    x, y = kiln.tensor(batch[0]), kiln.tensor(batch[1])
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-3) if adamw else \
        kiln.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    forward = kiln.compile(model) if mode == "compiled module" else model

    def train_step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        out = forward(x)
        loss = kiln.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    step = kiln.compile(train_step) if mode == "whole step" else train_step

    def loop(n: int) -> None:
        for _ in range(n):
            step(x, y)

    loop.step = step  # type: ignore[attr-defined] - for checks of the compiled step's stats
    return loop, model


def _torch_loop(torch: ModuleType, model_name: str, kiln_model: Any, batch: tuple, adamw: bool) -> Loop:
    model = _torch_twin(torch, kiln_model, model_name)
    x, y = torch.from_numpy(batch[0]), torch.from_numpy(np.asarray(batch[1]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if adamw else \
        torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def loop(n: int) -> None:
        for _ in range(n):
            opt.zero_grad()
            out = model(x)
            torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
            opt.step()

    return loop


def _jax_loop(jax: ModuleType, kiln_model: Any, batch: tuple) -> Loop:
    """The same SGD-momentum step of the MLP in jax.jit (PyTorch's momentum formula)."""
    jnp = jax.numpy
    layers = [m for m in kiln_model if hasattr(m, "weight")]
    params = [(jnp.asarray(m.weight.detach().numpy()), jnp.asarray(m.bias.detach().numpy())) for m in layers]
    bufs = jax.tree_util.tree_map(jnp.zeros_like, params)
    x, y = jnp.asarray(batch[0]), jnp.asarray(batch[1])

    def loss_fn(ps: Any, x: Any, y: Any) -> Any:
        for i, (w, b) in enumerate(ps):
            x = x @ w.T + b
            if i < len(ps) - 1:
                x = jax.nn.relu(x)
        logp = jax.nn.log_softmax(x)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    @jax.jit
    def step(ps: Any, bs: Any, x: Any, y: Any) -> tuple:
        loss, grads = jax.value_and_grad(loss_fn)(ps, x, y)
        bs = jax.tree_util.tree_map(lambda b, g: MOMENTUM * b + g, bs, grads)
        ps = jax.tree_util.tree_map(lambda p, b: p - LR * b, ps, bs)
        return ps, bs, loss

    state = [params, bufs]

    def loop(n: int) -> None:
        ps, bs = state
        loss = None
        for _ in range(n):
            ps, bs, loss = step(ps, bs, x, y)
        jax.block_until_ready(loss)
        state[:] = [ps, bs]

    loop.state = state  # type: ignore[attr-defined] - [params, momentum buffers], for checks
    return loop


def _import_jax() -> ModuleType | None:
    try:
        import jax  # noqa: PLC0415
    except Exception:  # noqa: BLE001 - a broken install is as good as none
        return None
    return jax


def _cases(torch: ModuleType | None, jax: ModuleType | None) -> list[tuple[str, str, Callable[[], dict]]]:
    def mlp(batch_size: int) -> Callable[[], dict]:
        def build() -> dict:
            rng = np.random.default_rng(0)
            batch = (rng.standard_normal((batch_size, 784)).astype(np.float32), rng.integers(0, 10, batch_size))
            loops = {}
            for mode in ("kiln eager", "compiled module", "whole step"):
                loops[mode], model = _kiln_loop("mlp", batch, mode, adamw=False)
            if torch is not None:
                loops["torch eager"] = _torch_loop(torch, "mlp", model, batch, adamw=False)
            if jax is not None:
                loops["jax.jit"] = _jax_loop(jax, model, batch)
            return loops
        return build

    def gpt() -> dict:
        spec = next(s for s in SPECS if s.name == "gpt")
        batch = spec.batch(np.random.default_rng(0))
        loops = {}
        for mode in ("kiln eager", "compiled module", "whole step"):
            loops[mode], model = _kiln_loop("gpt", batch, mode, adamw=True)
        if torch is not None:
            loops["torch eager"] = _torch_loop(torch, "gpt", model, batch, adamw=True)
        return loops

    return [(f"MLP SGD B={b}", "us" if b == 1 else "ms", mlp(b)) for b in BATCHES] + [("GPT AdamW", "ms", gpt)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=15, help="timed samples per case (default 15)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed warmup samples (default 3)")
    parser.add_argument("--json", metavar="PATH", help="write the numbers as JSON")
    isolate.add_side_argument(parser)
    isolate.add_timings_json_argument(parser)


def _time(cases: list, columns: Sequence[str], args: argparse.Namespace) -> dict[str, dict[str, Timing]]:
    """{case: {column: Timing}} for the `columns` each case's builder gives."""
    timings: dict[str, dict[str, Timing]] = {}
    for name, _unit, build in cases:
        loops = build()
        timings[name] = {c: measure(loops[c], number=None, repeat=args.repeat, warmup=args.warmup)
                         for c in columns if c in loops}
    return timings


def run(args: argparse.Namespace) -> int:
    from . import machine  # noqa: PLC0415

    threads = numpy_blas_threads()
    if args.side == "kiln":  # the child of an `all` run: kiln's columns only, no torch or jax imported
        isolate.write_kiln_side(args.timings_json, _time(_cases(None, None), KILN_COLUMNS, args))
        return 0
    separate = args.side == "all" and not args.same_process
    kiln_timings = isolate.kiln_side(NAME, ["--repeat", str(args.repeat), "--warmup", str(args.warmup)]) \
        if separate else {}
    torch, jax = import_torch(num_threads=threads), _import_jax()
    here = [c for c in COLUMNS if c not in KILN_COLUMNS] if args.side == "peers" or separate else COLUMNS
    peer_timings = _time(_cases(torch, jax), here, args)
    table = Table(["case", "unit", *COLUMNS])
    medians: dict[str, dict[str, float]] = {}
    noisy = False
    for name, unit, _build in _cases(torch, jax):
        timings = {**kiln_timings.get(name, {}), **peer_timings.get(name, {})}
        noisy |= any(is_noisy(t) for t in timings.values())
        scale = 1e-6 if unit == "us" else 1e-3
        medians[name] = {c: t.median for c, t in timings.items()}
        table.add_row([name, unit, *[fmt_timing(timings.get(c), scale) for c in COLUMNS]])
    targets = Table(["case", "measured", "target", "ratio", "verdict"])
    results = {"medians_s": medians, "targets": []}
    for case, column, peer, limit in TARGETS:
        mine, other = medians.get(case, {}).get(column), medians.get(case, {}).get(peer)
        ratio = mine / other if mine and other else None
        verdict = "-" if ratio is None else ("met" if ratio <= limit else "MISSED")
        targets.add_row([case, column, f"<= {limit:g}x {peer}", "-" if ratio is None else f"{ratio:.2f}x", verdict])
        results["targets"].append({"case": case, "column": column, "peer": peer, "limit": limit, "ratio": ratio})
    for line in machine.describe(threads, torch, jax):
        print(line)
    print(f"whole-step: median of {args.repeat} samples after {args.warmup} warmup samples")
    if separate:
        print("kiln's columns timed in a separate process without torch or jax, as a kiln user's process runs "
              "(see kiln/bench/isolate.py); --same-process times them here")
    print(table.render())
    print(targets.render())
    if noisy:
        print(NOISY_NOTE)
    if args.json:
        write_json(args.json, {"workload": NAME, "results": results})
    return 0

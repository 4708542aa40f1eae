"""The workloads of the code-generator targets, built for each library with identical weights.

Each builder returns ``{column: loop}`` for the libraries present (`Peers`): "kiln eager",
"kiln.compile", "torch eager", "torch.compile", "jax.jit" and, for the memory-bound case,
"memcpy" (one copy of the input: the floor for an op that reads and writes it once).
A loop runs its operation n times and waits for the result (jax's `block_until_ready`).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import numpy as np

from .compiled import SPECS, _kiln_loops, _torch_loops
from .timing import Loop

LN_SHAPE = (4096, 1024)
MLP_SIZES = (784, 256, 256, 10)
BLOCK = dict(batch=8, seq=128, d_model=256, nhead=4, dim_feedforward=1024)


@dataclass(frozen=True)
class Peers:
    """The optional libraries to time beside kiln (None when not installed or not asked for)."""

    torch: ModuleType | None
    jax: ModuleType | None
    torch_compile: bool


def _repeat(fn: Callable[[], Any]) -> Loop:
    def loop(n: int) -> None:
        for _ in range(n):
            fn()
    return loop


def _jax_loop(jax: ModuleType, fn: Callable, *args: Any) -> Loop:
    def loop(n: int) -> None:
        out = None
        for _ in range(n):
            out = fn(*args)
        jax.block_until_ready(out)
    return loop


def _torch_compiled(torch: ModuleType, fn: Any) -> Any:
    return torch.compile(fn)


def _torch_columns(peers: Peers, fn: Callable[[Any], Any], x: Any) -> dict[str, Loop]:
    """"torch eager" (and "torch.compile" when asked for) loops computing fn(x)."""
    loops = {"torch eager": _repeat(lambda: fn(x))}
    if peers.torch_compile:
        compiled = _torch_compiled(peers.torch, fn)
        loops["torch.compile"] = _repeat(lambda: compiled(x))
    return loops


# ---- LayerNorm + tanh-GELU, inference ------------------------------------------------------
def layer_norm_gelu(peers: Peers) -> dict[str, Loop]:
    import kiln  # noqa: PLC0415
    import kiln.functional as F  # noqa: PLC0415

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(LN_SHAPE).astype(np.float32)
    w_np = (1 + 0.1 * rng.standard_normal(LN_SHAPE[1])).astype(np.float32)
    b_np = (0.1 * rng.standard_normal(LN_SHAPE[1])).astype(np.float32)
    x, w, b = kiln.tensor(x_np), kiln.tensor(w_np), kiln.tensor(b_np)

    def kiln_fn(x: Any) -> Any:
        return F.gelu(F.layer_norm(x, (LN_SHAPE[1],), w, b), approximate="tanh")

    compiled = kiln.compile(kiln_fn)
    copy_out = np.empty_like(x_np)
    loops = {"kiln eager": _repeat(lambda: kiln_fn(x)), "kiln.compile": _repeat(lambda: compiled(x)),
             "memcpy": _repeat(lambda: np.copyto(copy_out, x_np))}
    torch = peers.torch
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(a) for a in (x_np, w_np, b_np))

        def torch_fn(x: Any) -> Any:
            return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (LN_SHAPE[1],), tw, tb),
                                            approximate="tanh")

        loops.update(_torch_columns(peers, torch_fn, tx))
    jax = peers.jax
    if jax is not None:
        jnp = jax.numpy
        jx, jw, jb = (jnp.asarray(a) for a in (x_np, w_np, b_np))

        @jax.jit
        def jax_fn(x: Any) -> Any:
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return jax.nn.gelu((x - mu) * jax.lax.rsqrt(var + 1e-5) * jw + jb, approximate=True)

        loops["jax.jit"] = _jax_loop(jax, jax_fn, jx)
    return loops


# ---- MLP 784-256-256-10 inference at batch 1 ------------------------------------------------
def mlp_inference_b1(peers: Peers) -> dict[str, Loop]:
    import kiln  # noqa: PLC0415
    from ..models import mlp  # noqa: PLC0415

    kiln.manual_seed(0)
    model = mlp(MLP_SIZES[0], MLP_SIZES[1:-1], MLP_SIZES[-1])
    x_np = np.random.default_rng(0).standard_normal((1, MLP_SIZES[0])).astype(np.float32)
    x = kiln.tensor(x_np)
    compiled = kiln.compile(model)

    def no_grad(fn: Callable[[], Any]) -> Loop:
        def loop(n: int) -> None:
            with kiln.no_grad():
                for _ in range(n):
                    fn()
        return loop

    loops = {"kiln eager": no_grad(lambda: model(x)), "kiln.compile": no_grad(lambda: compiled(x))}
    weights = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in model.modules()
               if isinstance(m, kiln.nn.Linear)]
    torch = peers.torch
    if torch is not None:
        layers: list = []
        for i, (w, b) in enumerate(weights):
            lin = torch.nn.Linear(w.shape[1], w.shape[0])
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(w))
                lin.bias.copy_(torch.from_numpy(b))
            layers += [lin] + ([torch.nn.ReLU()] if i < len(weights) - 1 else [])
        tmodel, tx = torch.nn.Sequential(*layers), torch.from_numpy(x_np)

        def torch_loop(run: Any) -> Loop:
            def loop(n: int) -> None:
                with torch.no_grad():
                    for _ in range(n):
                        run(tx)
            return loop

        loops["torch eager"] = torch_loop(tmodel)
        if peers.torch_compile:
            loops["torch.compile"] = torch_loop(_torch_compiled(torch, tmodel))
    jax = peers.jax
    if jax is not None:
        jnp = jax.numpy
        params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in weights]

        @jax.jit
        def jax_fn(params: Any, x: Any) -> Any:
            for i, (w, b) in enumerate(params):
                x = x @ w.T + b
                if i < len(params) - 1:
                    x = jax.nn.relu(x)
            return x

        loops["jax.jit"] = _jax_loop(jax, jax_fn, params, jnp.asarray(x_np))
    return loops


# ---- training steps of the `compile` workload's models (compiled module, eager loss/optimizer)
def model_train_step(name: str) -> Callable[[Peers], dict[str, Loop]]:
    spec = next(s for s in SPECS if s.name == name)

    def build(peers: Peers) -> dict[str, Loop]:
        eager_train, _, kiln_model = _kiln_loops(spec, compiled=False)
        compiled_train, _, _ = _kiln_loops(spec, compiled=True)
        loops = {"kiln eager": eager_train, "kiln.compile": compiled_train}
        if peers.torch is not None:
            loops["torch eager"] = _torch_loops(peers.torch, spec, kiln_model, compiled=False)[0]
            if peers.torch_compile:
                loops["torch.compile"] = _torch_loops(peers.torch, spec, kiln_model, compiled=True)[0]
        return loops

    return build


# ---- two pre-norm transformer blocks, forward and backward ------------------------------------
def transformer_blocks(peers: Peers) -> dict[str, Loop]:
    import kiln  # noqa: PLC0415

    kiln.manual_seed(0)
    cfg = BLOCK
    layer = dict(d_model=cfg["d_model"], nhead=cfg["nhead"], dim_feedforward=cfg["dim_feedforward"],
                 dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    model = kiln.nn.Sequential(kiln.nn.TransformerEncoderLayer(**layer), kiln.nn.TransformerEncoderLayer(**layer))
    x_np = np.random.default_rng(0).standard_normal((cfg["batch"], cfg["seq"], cfg["d_model"])).astype(np.float32)
    x = kiln.tensor(x_np)

    def kiln_loop(run: Any) -> Loop:
        params = list(model.parameters())

        def loop(n: int) -> None:
            for _ in range(n):
                for p in params:
                    p.grad = None
                out = run(x)
                (out * out).mean().backward()
        return loop

    loops = {"kiln eager": kiln_loop(model), "kiln.compile": kiln_loop(kiln.compile(model))}
    torch = peers.torch
    if torch is not None:
        tmodel = torch.nn.Sequential(torch.nn.TransformerEncoderLayer(**layer),
                                     torch.nn.TransformerEncoderLayer(**layer))
        tmodel.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy())
                                for k, v in model.state_dict().items()})
        tx = torch.from_numpy(x_np)

        def torch_loop(run: Any) -> Loop:
            def loop(n: int) -> None:
                for _ in range(n):
                    tmodel.zero_grad(set_to_none=True)
                    out = run(tx)
                    (out * out).mean().backward()
            return loop

        loops["torch eager"] = torch_loop(tmodel)
        if peers.torch_compile:
            loops["torch.compile"] = torch_loop(_torch_compiled(torch, tmodel))
    return loops

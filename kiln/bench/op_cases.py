"""The single-op cases of the `targets` workload, on one 4096x1024 float32 input, built for each library.

softmax over the last dim, exact (erf) GELU, and cross-entropy's loss with its gradient w.r.t.
the logits (4096 rows of 1024 classes). Every library gets the same data (`inputs`). Each
builder returns ``{column: loop}`` as those of target_cases.py do.
"""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import numpy as np

from .target_cases import Peers, _jax_loop, _repeat, _torch_columns, _torch_compiled
from .timing import Loop

SHAPE = (4096, 1024)


def inputs() -> tuple[np.ndarray, np.ndarray]:
    """The input or logits (SHAPE, float32) and the class targets (SHAPE[0], int64) of every library."""
    rng = np.random.default_rng(0)
    return rng.standard_normal(SHAPE).astype(np.float32), rng.integers(0, SHAPE[1], SHAPE[0])


def kiln_softmax(x: Any) -> Any:
    import kiln.functional as F  # noqa: PLC0415

    return F.softmax(x, dim=-1)


def kiln_gelu(x: Any) -> Any:
    import kiln.functional as F  # noqa: PLC0415

    return F.gelu(x, approximate="none")


def kiln_cross_entropy(x: Any, t: Any) -> Any:
    import kiln.functional as F  # noqa: PLC0415

    return F.cross_entropy(x, t)


def softmax(peers: Peers) -> dict[str, Loop]:
    return _one_input(peers, kiln_softmax, lambda torch, x: torch.softmax(x, dim=-1),
                      lambda jax, x: jax.nn.softmax(x, axis=-1))


def gelu(peers: Peers) -> dict[str, Loop]:
    return _one_input(peers, kiln_gelu, lambda torch, x: torch.nn.functional.gelu(x, approximate="none"),
                      lambda jax, x: jax.nn.gelu(x, approximate=False))


def _one_input(peers: Peers, kiln_fn: Callable[[Any], Any], torch_fn: Callable[[ModuleType, Any], Any],
               jax_fn: Callable[[ModuleType, Any], Any]) -> dict[str, Loop]:
    """Loops computing fn(x), inference only; `torch_fn` and `jax_fn` take their library first."""
    import kiln  # noqa: PLC0415

    x_np, _ = inputs()
    x = kiln.tensor(x_np)
    compiled = kiln.compile(kiln_fn)
    loops = {"kiln eager": _repeat(lambda: kiln_fn(x)), "kiln.compile": _repeat(lambda: compiled(x))}
    torch = peers.torch
    if torch is not None:
        tx = torch.from_numpy(x_np)

        def torch_op(x: Any) -> Any:
            return torch_fn(torch, x)

        loops.update(_torch_columns(peers, torch_op, tx))
    jax = peers.jax
    if jax is not None:
        loops["jax.jit"] = _jax_loop(jax, jax.jit(lambda x: jax_fn(jax, x)), jax.numpy.asarray(x_np))
    return loops


def _gradient_loop(loss_fn: Callable[[Any, Any], Any], x: Any, t: Any) -> Loop:
    """A loop computing loss_fn(x, t) and its gradient w.r.t. `x` (a kiln or torch tensor), grad cleared first."""
    def loop(n: int) -> None:
        for _ in range(n):
            x.grad = None
            loss_fn(x, t).backward()
    return loop


def cross_entropy_fwd_bwd(peers: Peers) -> dict[str, Loop]:
    """Loops computing the mean cross-entropy of the logits and its gradient w.r.t. them."""
    import kiln  # noqa: PLC0415

    x_np, t_np = inputs()
    x, t = kiln.tensor(x_np, requires_grad=True), kiln.tensor(t_np)
    loops = {"kiln eager": _gradient_loop(kiln_cross_entropy, x, t),
             "kiln.compile": _gradient_loop(kiln.compile(kiln_cross_entropy), x, t)}
    torch = peers.torch
    if torch is not None:
        tx, tt = torch.from_numpy(x_np.copy()).requires_grad_(), torch.from_numpy(t_np)

        def torch_loss(x: Any, t: Any) -> Any:
            return torch.nn.functional.cross_entropy(x, t)

        loops["torch eager"] = _gradient_loop(torch_loss, tx, tt)
        if peers.torch_compile:
            loops["torch.compile"] = _gradient_loop(_torch_compiled(torch, torch_loss), tx, tt)
    jax = peers.jax
    if jax is not None:
        jnp = jax.numpy

        def jax_loss(x: Any, t: Any) -> Any:
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(x), t[:, None], axis=-1))

        loops["jax.jit"] = _jax_loop(jax, jax.jit(jax.value_and_grad(jax_loss)), jnp.asarray(x_np), jnp.asarray(t_np))
    return loops

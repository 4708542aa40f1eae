"""Helper for nn tests: a module compiled with kiln.compile gives eager's outputs and gradients."""
from __future__ import annotations

from typing import Any

import numpy as np

import kiln
from kiln.nn.utils.rnn import PackedSequence

TOL = {"float32": (1e-5, 1e-6), "float64": (1e-10, 1e-12)}


def tensors_in(tree: Any) -> list[kiln.Tensor]:
    """The tensors in nested tuples, lists, dicts and PackedSequences, in order."""
    if isinstance(tree, kiln.Tensor):
        return [tree]
    if isinstance(tree, PackedSequence):
        return [tree.data]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in tensors_in(v)]
    if isinstance(tree, (tuple, list)):
        return [t for v in tree for t in tensors_in(v)]
    return []


def _run(fn: Any, model: kiln.nn.Module, args: tuple, kwargs: dict, seed: int) -> tuple[list, list]:
    """Outputs and gradients (parameters, then inputs that require grad) of one forward and backward."""
    model.zero_grad()
    leaves = [t for t in tensors_in((args, kwargs)) if t.requires_grad]
    for t in leaves:
        t.grad = None
    outs = [o for o in tensors_in(fn(*args, **kwargs)) if o.dtype.is_floating_point]
    rng = np.random.default_rng(seed)
    loss = None
    for o in outs:
        term = (o * kiln.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype)).sum()
        loss = term if loss is None else loss + term
    loss.backward()
    grads = [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]
    grads += [None if t.grad is None else t.grad.numpy().copy() for t in leaves]
    return [o.detach().numpy().copy() for o in outs], grads


def check_compiled(model: kiln.nn.Module, *args: Any, dtype: str = "float64", calls: int = 2,
                   **kwargs: Any) -> Any:
    """Compare kiln.compile(model) with eager on `calls` calls (the trace, then replays).

    Outputs, parameter gradients and input gradients must agree; the compiled calls must
    not fall back to eager. The RNG state is reset before each side, so dropout masks agree.
    Returns the compiled module (for stats checks).
    """
    compiled = kiln.compile(model)
    rtol, atol = TOL[dtype]
    for call in range(calls):
        state = kiln.get_rng_state()
        want_out, want_grads = _run(model, model, args, kwargs, call)
        kiln.set_rng_state(state)
        got_out, got_grads = _run(compiled, model, args, kwargs, call)
        assert len(got_out) == len(want_out)
        for i, (g, w) in enumerate(zip(got_out, want_out)):
            assert g.shape == w.shape, (i, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {i}, call {call}")
        for i, (g, w) in enumerate(zip(got_grads, want_grads)):
            assert (g is None) == (w is None), f"gradient {i}: compiled {g is None} vs eager {w is None}"
            if g is not None:
                np.testing.assert_allclose(g, w, rtol=rtol * 10, atol=atol * 10, err_msg=f"gradient {i}, call {call}")
    assert compiled.stats.fallbacks == 0, compiled.stats
    assert compiled.stats.hits >= calls - 1, compiled.stats
    return compiled

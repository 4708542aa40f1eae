"""Returned tensors alias as eager's do: inputs, parameters, state, the same tensor twice, views.

The oracle is eager kiln on the same inputs: for each program, the identity and shared-memory
relations among the outputs, the arguments and the module's tensors must be the same after a
replay as after an eager call, and a write through one output must show where eager shows it.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
from kiln import nn
from kiln.jit.ir import Graph, Value
from kiln.jit.output_alias import Source, find_aliases
from kiln.jit.trace import GraphBreakError

BACKENDS = ["interpret", "cpu"]


def _linear() -> nn.Linear:
    kiln.manual_seed(0)
    return nn.Linear(2, 2)


def _bn() -> nn.BatchNorm1d:
    return nn.BatchNorm1d(2)


def _add_then_slice(x, m):
    x.add_(1)
    return x[1:]


def _same_twice(x, m):
    y = x * 2
    return y, y


def _view_then_base(x, m):
    y = x * 2
    return y[0], y


def _base_then_transpose(x, m):
    y = x * 2
    return y, y.t()


def _view_before_in_place(x, m):
    y = x[1:]
    x.mul_(3)
    return y


def _in_place_through_view(x, m):
    y = x[0]
    y.add_(1)
    return y, x


def _reshape_and_base_after_write(x, m):
    x.mul_(2)
    return x.reshape(-1), x


def _equal_values_and_a_view(x, m):
    """Two equal gathers (a plan computes them once) and a view of the second: three separate memories
    in eager, so a write through one output must not show in another (a fuzzer find)."""
    index = kiln.tensor([[1, 0], [0, 1], [1, 1]])
    first, second = kiln.gather(x, 1, index), kiln.gather(x, 1, index)
    return second.reshape(-1), first


PROGRAMS: dict[str, tuple[Callable, Callable | None]] = {
    "equal_values_and_a_view": (_equal_values_and_a_view, None),
    "add_then_slice": (_add_then_slice, None),
    "same_twice": (_same_twice, None),
    "view_then_base": (_view_then_base, None),
    "base_then_transpose": (_base_then_transpose, None),
    "input_itself": (lambda x, m: x, None),
    "input_view": (lambda x, m: x.view(-1), None),
    "input_detached": (lambda x, m: x.detach(), None),
    "input_transposed": (lambda x, m: x.t(), None),
    "input_expanded": (lambda x, m: x.expand(2, 3, 2), None),
    "two_columns_of_input": (lambda x, m: (x[:, 1], x[:, 0]), None),
    "view_before_in_place": (_view_before_in_place, None),
    "in_place_through_view": (_in_place_through_view, None),
    "reshape_and_base_after_write": (_reshape_and_base_after_write, None),
    "parameter_and_result": (lambda x, m: (m.weight, m(x)), _linear),
    "parameter_row": (lambda x, m: (m.weight[0], m.bias), _linear),
    "buffer_after_update": (lambda x, m: (m(x), m.running_mean), _bn),
}


FALLS_BACK = {"in_place_through_view", "view_before_in_place"}


def _tensors(out: Any) -> list:
    return [t for t in kiln.jit.pytree.flatten(out)[0] if isinstance(t, kiln.Tensor)]


def _relations(outs: list, others: list) -> list:
    """For every output: which outputs and other tensors it *is*, and which it shares memory with."""
    every = outs + others
    return [([u is t for u in every], [np.shares_memory(u._data, t._data) for u in every]) for t in outs]


def _run(name: str, compiled: bool, backend: str) -> tuple[list, list, list]:
    fn, make_module = PROGRAMS[name]
    m = make_module() if make_module else None
    f = kiln.compile(fn, backend=backend) if compiled else fn
    with kiln.no_grad():
        for call in range(3):  # the third call replays a cached plan
            x = kiln.tensor(np.arange(6.0, dtype=np.float32).reshape(3, 2))
            outs = _tensors(f(x, m))
    others = [x] + (list(m.parameters()) + list(m.buffers()) if m is not None else [])
    if compiled:  # replayed (an in-place write through a view of an input falls back to eager, with a warning)
        assert f.stats.hits >= 1 or name in FALLS_BACK and f.stats.fallbacks >= 1
    return outs, others, _relations(outs, others)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.filterwarnings("ignore:kiln.compile.*falling back to eager")
def test_replayed_outputs_alias_as_eager_outputs_do(name, backend):
    eager_outs, eager_others, eager_rel = _run(name, False, backend)
    outs, others, rel = _run(name, True, backend)
    assert rel == eager_rel
    for a, b in zip(outs + others, eager_outs + eager_others):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    with kiln.no_grad():  # a write through the first output shows wherever eager shows it
        try:
            eager_outs[0].add_(100)
        except ValueError:  # an expanded view is read-only in eager: then so is the replay's
            with pytest.raises(ValueError):
                outs[0].add_(100)
        else:
            outs[0].add_(100)
    for a, b in zip(outs + others, eager_outs + eager_others):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_view_of_an_input_follows_the_batch_size_with_dynamic_dims(backend):
    f = kiln.compile(lambda x: x[: x.shape[0] // 2], dynamic_dims={0: {0: "n"}}, backend=backend)
    for n in (4, 8, 10):
        x = kiln.randn(n, 2)
        out = f(x)
        assert out.shape == (n // 2, 2) and np.shares_memory(out.numpy(), x.numpy())
    assert f.stats.misses == 1


def test_a_view_no_view_node_explains_is_rebuilt_at_its_offset_while_the_input_keeps_its_layout():
    # the net under the view-node chains: an output that shares an input's memory in eager although
    # the graph reaches it through no view node is rebuilt at the offset and strides it had
    x = kiln.tensor(np.arange(12.0).reshape(4, 3))
    out = kiln.Tensor._wrap(x.numpy()[1::2, ::-1], x.device)
    aliases = find_aliases([out], [(Source("arg", 0), x)], Graph(outputs=[Value((2, 3), out.dtype)]), {})
    new_x = kiln.tensor(np.arange(100.0, 112.0).reshape(4, 3))
    assert aliases.stale_reason([new_x]) is None
    rebuilt = aliases.apply([kiln.zeros(2, 3)], [new_x])[0]
    np.testing.assert_array_equal(rebuilt.numpy(), new_x.numpy()[1::2, ::-1])
    assert np.shares_memory(rebuilt.numpy(), new_x.numpy()) and rebuilt._base is new_x
    transposed = kiln.tensor(np.arange(12.0).reshape(3, 4)).t()
    assert "layout changed" in aliases.stale_reason([transposed])


@pytest.mark.parametrize("backend", BACKENDS)
def test_views_of_an_output_keep_their_gradients(backend):
    def f(w):
        y = w * 2
        return y, y[0]

    c = kiln.compile(f, backend=backend)
    for compiled in (False, True, True, True):
        w = kiln.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        y, row = (c if compiled else f)(w)
        assert np.shares_memory(y.detach().numpy(), row.detach().numpy())
        (y.sum() + 3 * row.sum()).backward()
        np.testing.assert_array_equal(w.grad.numpy(), [[8.0, 8.0], [2.0, 2.0]])


def test_overlapping_views_of_an_unreturned_intermediate_warn_and_name_the_fix():
    def f(x):
        y = x * 2
        return y[0:2], y[1:3]

    c = kiln.compile(f)
    with pytest.warns(RuntimeWarning, match=r"shares memory.*separate tensors.*Fix: return the tensor they view"):
        c(kiln.ones(3, 2))
    with pytest.raises(GraphBreakError, match="shares memory"):
        kiln.compile(f, fullgraph=True)(kiln.ones(3, 2))


def test_a_whole_step_returns_the_live_grad_and_optimizer_state():
    kiln.manual_seed(0)
    m = nn.Linear(2, 1)
    opt = kiln.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    def step(x):
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
        return m.weight.grad, opt.state[m.weight]["momentum_buffer"], m.weight

    c = kiln.compile(step)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            grad, buf, weight = c(kiln.ones(3, 2))
    assert c.stats.hits >= 1
    assert grad is m.weight.grad and buf is opt.state[m.weight]["momentum_buffer"] and weight is m.weight

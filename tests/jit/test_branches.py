"""Data-dependent branches in kiln.compile: a guarded plan per path (kiln/jit/branches.py).

Every test compares the compiled function with the same function run eagerly on the same inputs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.jit import branches
from kiln.jit.backends.cpu import runtime

nn = kiln.nn
F = kiln.nn.functional


def _mlp() -> nn.Module:
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).double()


def _x(seed: int) -> kiln.Tensor:
    return kiln.tensor(np.random.default_rng(seed).standard_normal((4, 8)) * 20)


def _no_kiln_warnings(record) -> None:
    assert not [str(w.message) for w in record if "kiln" in str(w.message)]


def test_each_path_gets_a_native_plan_with_eagers_bits():
    model = _mlp()

    def f(x):
        h = model[0](x)
        if h.sum() > 0:
            h = h * 0.5
        return F.softmax(model[2](model[1](h)), -1)

    compiled = kiln.compile(f)
    inputs = [_x(seed) for seed in range(8)]
    with kiln.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        signs = {float(model[0](x).sum()) > 0 for x in inputs}
        assert signs == {True, False}
        for x in inputs * 2:
            assert np.array_equal(compiled(x).numpy(), f(x).numpy())
    _no_kiln_warnings(record)
    s = compiled.stats
    assert (s.traces, s.misses, s.fallbacks, s.cache_size) == (2, 2, 0, 1)
    (entry,) = compiled.cache_entries
    assert len(entry.paths) == 2 and all(isinstance(p.plan, runtime.NativePlan) for p in entry.paths)
    assert sorted(p.branches for p in entry.paths) == [(False,), (True,)]
    assert "branch: bool() of a traced tensor" in compiled.explain()


def test_nested_branches_and_the_most_recent_path_first():
    def f(x):
        if x.sum() > 0:
            if x.max() > 5:
                return x * 3
            return x * 2
        return x - 1

    compiled = kiln.compile(f)
    xs = [kiln.tensor([1.0, 2.0]), kiln.tensor([1.0, 9.0]), kiln.tensor([-1.0, -2.0])]
    for x in xs * 3:
        assert compiled(x).tolist() == f(x).tolist()
    assert compiled.stats.traces == 3 and compiled.stats.fallbacks == 0
    (entry,) = compiled.cache_entries
    assert sorted(p.branches for p in entry.paths) == [(False,), (True, False), (True, True)]
    assert entry.paths[0].branches == (False,)  # the last call's path is tried first


def test_a_loop_on_data_past_the_path_limit_runs_eagerly():
    def countdown(x):
        while x.sum() > 0:
            x = x - 1
        return x

    compiled = kiln.compile(countdown)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for n in range(1, branches.MAX_PATHS + 4):
            assert compiled(kiln.tensor([float(n)])).tolist() == [0.0]
    assert compiled.stats.fallbacks >= 1
    assert f"more than {branches.MAX_PATHS} paths" in compiled.explain()


def test_an_error_on_the_wrong_path_is_not_raised():
    emb = nn.Embedding(5, 2)

    def f(idx):
        if idx.sum() < 5:
            return emb(idx)
        return emb(idx - 5)  # the first path's plan would index out of range

    compiled = kiln.compile(f)
    with kiln.no_grad():
        for idx in ([1, 2], [7, 9], [0, 1], [6, 5]):
            idx = kiln.tensor(idx)
            assert np.array_equal(compiled(idx).numpy(), f(idx).numpy())
        with pytest.raises(IndexError):  # an error on every path is eager's error
            compiled(kiln.tensor([3, 99]))


def test_a_branch_on_an_argument_itself():
    f = kiln.compile(lambda x, flag: x + 1 if flag else x - 1)
    x = kiln.ones(2)
    for flag in (True, False, True, False):
        assert f(x, kiln.tensor(flag)).tolist() == ([2.0, 2.0] if flag else [0.0, 0.0])
    assert f.stats.traces == 2


@pytest.mark.parametrize("case", ["gradients", "state", "random"])
def test_a_branch_in_a_plan_with_side_effects_falls_back_to_eager(case):
    bn = nn.BatchNorm1d(3).requires_grad_(False)  # its running stats still change in place
    x = kiln.randn(4, 3, requires_grad=case == "gradients")

    def f(x):
        if case == "state":
            x = bn(x)  # training mode: running stats updated in place
        if case == "random":
            x = F.dropout(x, 0.5, training=True)
        return x * 2 if x.sum() > 0 else x - 1

    compiled = kiln.compile(f)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for seed in range(3):
            kiln.manual_seed(seed)
            got = compiled(x)
            kiln.manual_seed(seed)
            want = f(x)
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6)
    why = {"gradients": "gradients", "state": "state", "random": "random numbers"}[case]
    assert any("falling back to eager" in str(w.message) and why in str(w.message) for w in record)
    assert compiled.stats.fallbacks >= 1


def test_fullgraph_still_refuses_a_branch():
    f = kiln.compile(lambda x: x * 2 if x.sum() > 0 else x, fullgraph=True)
    with pytest.raises(kiln.GraphBreakError, match="data-dependent"):
        f(kiln.ones(2))


def test_branches_with_changing_sizes():
    def f(x):
        return x.sum(-1) if x.mean() > 0 else x.amax(-1)

    compiled = kiln.compile(f)
    for n in (3, 4, 5, 6, 7):
        for sign in (1.0, -1.0):
            x = kiln.arange(float(n)) * sign - 0.5 * sign
            np.testing.assert_array_equal(compiled(x.reshape(1, n)).numpy(), f(x.reshape(1, n)).numpy())
    assert compiled.stats.fallbacks == 0 and compiled.stats.traces <= 6


def test_a_path_that_cannot_be_a_guarded_plan_makes_the_signature_eager():
    def f(x, scale):
        if x.sum() > 0:
            return x * 2
        return x * scale.item()  # .item(): any Python use of the value, so this path cannot be a plan

    compiled = kiln.compile(f)
    x, scale = kiln.ones(2), kiln.tensor(3.0)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for sign in (1.0, -1.0, 1.0, -1.0):
            assert compiled(x * sign, scale).tolist() == f(x * sign, scale).tolist()
    assert compiled.stats.fallbacks == 2 and "fallback to eager" in compiled.explain()

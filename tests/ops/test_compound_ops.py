"""PyTorch's compound ops, aliases and rearrangements (functional/compound.py, aliases.py, rearrange.py) against
PyTorch: values, gradients, the Tensor methods and their in-place forms, compiled against eager, and errors."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import pytest

import kiln
from kiln.ops.primitive import ShapeError

torch = pytest.importorskip("torch")


class Case(NamedTuple):
    name: str
    fn: Callable[..., Any]  # fn(lib, *tensors): the same code for kiln and torch
    shapes: tuple  # float inputs, standard normal unless `positive`
    positive: bool = False  # inputs in (0.1, 2): logarithms
    grad: bool = True
    transcendental: bool = False  # compiled code fuses exp/log/...: within 4 ulp of eager (kiln's vector math)


CASES = [
    Case("addmm", lambda L, i, a, b: L.addmm(i, a, b, beta=0.5, alpha=2.0), ((4, 5), (4, 3), (3, 5))),
    Case("addmm bias row", lambda L, i, a, b: L.addmm(i, a, b), ((5,), (4, 3), (3, 5))),
    Case("addmm beta 0", lambda L, i, a, b: L.addmm(i, a, b, beta=0), ((4, 5), (4, 3), (3, 5))),
    Case("addmv", lambda L, i, m, v: L.addmv(i, m, v, alpha=-1.5), ((4,), (4, 3), (3,))),
    Case("addr", lambda L, i, a, b: L.addr(i, a, b, beta=2.0), ((4, 3), (4,), (3,))),
    Case("baddbmm", lambda L, i, a, b: L.baddbmm(i, a, b, beta=0.0, alpha=0.125), ((2, 4, 5), (2, 4, 3), (2, 3, 5))),
    Case("addbmm", lambda L, i, a, b: L.addbmm(i, a, b), ((4, 5), (2, 4, 3), (2, 3, 5))),
    Case("addcmul", lambda L, i, a, b: L.addcmul(i, a, b, value=-0.3), ((3, 4), (3, 4), (4,))),
    Case("addcdiv", lambda L, i, a, b: L.addcdiv(i, a, b, value=0.7), ((3, 4), (3, 4), (3, 4)), positive=True),
    Case("lerp scalar low", lambda L, a, b: L.lerp(a, b, 0.25), ((3, 4), (3, 4))),
    Case("lerp scalar high", lambda L, a, b: L.lerp(a, b, 0.75), ((3, 4), (3, 4))),
    Case("lerp tensor", lambda L, a, b, w: L.lerp(a, b, w), ((3, 4), (3, 4), (3, 4))),
    Case("clamp_min", lambda L, a: L.clamp_min(a, -0.2), ((3, 4),)),
    Case("clamp_max", lambda L, a: a.clamp_max(0.3), ((3, 4),)),
    Case("log2", lambda L, a: L.log2(a), ((3, 4),), positive=True),
    Case("log10", lambda L, a: a.log10(), ((3, 4),), positive=True),
    Case("expm1", lambda L, a: L.expm1(a), ((3, 4),)),
    Case("trunc", lambda L, a: L.trunc(a * 3), ((3, 4),)),
    Case("fix", lambda L, a: L.fix(a * 3), ((3, 4),)),
    Case("frac", lambda L, a: L.frac(a * 3), ((3, 4),)),
    Case("sgn", lambda L, a: L.sgn(a), ((3, 4),)),
    Case("logaddexp", lambda L, a, b: L.logaddexp(a * 30, b), ((3, 4), (3, 4)), transcendental=True),
    Case("xlogy", lambda L, a, b: L.xlogy(a, b), ((3, 4), (3, 4)), positive=True, transcendental=True),
    Case("logit", lambda L, a: L.logit(a / 2.5), ((3, 4),), positive=True, transcendental=True),
    Case("logit eps", lambda L, a: L.logit(a / 2, eps=0.1), ((3, 4),), positive=True, transcendental=True),
    Case("nansum", lambda L, a: L.nansum(a, 1), ((3, 4),)),
    Case("nanmean", lambda L, a: L.nanmean(a, 0, keepdim=True), ((3, 4),)),
    Case("std_mean", lambda L, a: L.std_mean(a, 1), ((3, 4),)),
    Case("var_mean", lambda L, a: L.var_mean(a, dim=0, correction=0), ((3, 4),)),
    Case("diff", lambda L, a: L.diff(a, n=2, dim=1), ((3, 5),)),
    Case("diff prepend", lambda L, a, p: L.diff(a, dim=0, prepend=p), ((3, 5), (1, 5))),
    Case("divide floor", lambda L, a, b: L.divide(a, b, rounding_mode="floor"), ((3, 4), (3, 4)), grad=False),
    Case("aliases", lambda L, a, b: L.subtract(L.multiply(L.true_divide(a, b + 3), 2.0), L.negative(L.absolute(b)),
                                               alpha=0.5), ((3, 4), (3, 4))),
    Case("compares", lambda L, a, b: (L.greater(a, b), L.less_equal(a, b), L.not_equal(a, a)), ((3, 4), (3, 4)),
         grad=False),
    Case("swapdims moveaxis ravel", lambda L, a: L.ravel(L.moveaxis(L.swapdims(a, 0, 2), 0, 1)), ((2, 3, 4),)),
    Case("normalize", lambda L, a: L.nn.functional.normalize(a, dim=1), ((3, 4),)),
    Case("normalize p1 dim0", lambda L, a: L.nn.functional.normalize(a, p=1, dim=0), ((3, 4),)),
    Case("hstack", lambda L, a, b: L.hstack([a, b]), ((3, 2), (3, 4))),
    Case("hstack vectors", lambda L, a, b: L.hstack((a, b)), ((3,), (4,))),
    Case("vstack", lambda L, a, b: L.vstack([a, b]), ((4,), (2, 4))),
    Case("dstack", lambda L, a, b: L.dstack([a, b]), ((2, 4), (2, 4))),
    Case("column_stack", lambda L, a, b: L.column_stack([a, b]), ((3,), (3, 2))),
    Case("atleast_3d", lambda L, a, b: L.atleast_3d(a, b), ((3,), (2, 3))),
    Case("tensor_split sections", lambda L, a: L.tensor_split(a, 3, dim=1), ((2, 7),)),
    Case("tensor_split indices", lambda L, a: a.tensor_split([1, 4, 9]), ((7, 2),)),
    Case("unflatten", lambda L, a: L.unflatten(a, 1, (2, -1)), ((3, 6),)),
    Case("fliplr flipud", lambda L, a: (L.fliplr(a), a.flipud()), ((3, 4),)),
    Case("rot90", lambda L, a: (L.rot90(a), L.rot90(a, 2, (1, 2)), L.rot90(a, -1, [2, 0])), ((2, 3, 4),)),
    Case("repeat_interleave", lambda L, a: (L.repeat_interleave(a, 2, dim=1), a.repeat_interleave(3)),
         ((2, 3),)),
    Case("repeat_interleave counts", lambda L, a: L.repeat_interleave(a, L.tensor([1, 0, 2]), dim=0), ((3, 2),)),
    Case("meshgrid ij", lambda L, a, b: L.meshgrid(a, b, indexing="ij"), ((3,), (4,))),
    Case("meshgrid xy", lambda L, a, b, c: L.meshgrid(a, b, c, indexing="xy"), ((3,), (4,), (2,))),
    Case("outer method", lambda L, a, b: (a.outer(b), a.ger(b)), ((3,), (4,))),
]


def _inputs(case: Case, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if case.positive:
        return [rng.uniform(0.1, 2.0, shape).astype(np.float32) for shape in case.shapes]
    return [rng.standard_normal(shape).astype(np.float32) for shape in case.shapes]


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_values_and_gradients_match_pytorch(case):
    arrays = _inputs(case)
    ours = [kiln.tensor(a, requires_grad=case.grad) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=case.grad) for a in arrays]
    got, want = _flat(case.fn(kiln, *ours)), _flat(case.fn(torch, *theirs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape), case.name
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=2e-5, atol=2e-6, err_msg=case.name)
    if not case.grad:
        return
    rng = np.random.default_rng(1)
    cotangents = [rng.standard_normal(tuple(w.shape)).astype(np.float32) for w in want]
    sum((g * kiln.tensor(c)).sum() for g, c in zip(got, cotangents)).backward()
    sum((w * torch.tensor(c)).sum() for w, c in zip(want, cotangents)).backward()
    for k, (o, t) in enumerate(zip(ours, theirs)):
        want_grad = np.zeros(t.shape, np.float32) if t.grad is None else t.grad.numpy(force=True)
        got_grad = np.zeros(o.shape, np.float32) if o.grad is None else o.grad.numpy()  # (beta=0: None, torch zeros)
        np.testing.assert_allclose(got_grad, want_grad, rtol=2e-5, atol=2e-5, err_msg=f"{case.name} {k}")


@pytest.mark.parametrize("case", [c for c in CASES if c.grad and "repeat_interleave counts" not in c.name],
                         ids=lambda c: c.name)
def test_compiled_equals_eager(case):
    arrays = _inputs(case, seed=2)

    def run(*ts):
        return _flat(case.fn(kiln, *ts))

    compiled = kiln.compile(run)
    for _ in range(2):
        with kiln.no_grad():
            want = run(*[kiln.tensor(a) for a in arrays])
            got = compiled(*[kiln.tensor(a) for a in arrays])
        for g, w in zip(_flat(got), want):
            g, w = np.ascontiguousarray(g.numpy()), np.ascontiguousarray(w.numpy())
            assert g.dtype == w.dtype and g.shape == w.shape, case.name
            if case.transcendental:
                np.testing.assert_array_max_ulp(g, w, maxulp=4)
            else:
                np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"), err_msg=case.name)


IN_PLACE = [  # (method, extra args (arrays), kwargs)
    ("addmm_", ((4, 3), (3, 5)), {"alpha": 0.5}),
    ("baddbmm_", ((2, 4, 3), (2, 3, 5)), {"beta": 2.0}),
    ("addcmul_", ((4, 5), (4, 5)), {"value": -2.0}),
    ("addcdiv_", ((4, 5), (4, 5)), {"value": 0.1}),
    ("lerp_", ((4, 5),), {"weight": 0.9}),
    ("clamp_min_", (), {"min": 0.0}),
    ("clamp_max_", (), {"max": 0.1}),
    ("expm1_", (), {}),
    ("trunc_", (), {}),
    ("subtract_", ((4, 5),), {"alpha": 3}),
    ("nan_to_num_", (), {}),
]


@pytest.mark.parametrize("method, extra, kwargs", IN_PLACE, ids=[m for m, _, _ in IN_PLACE])
def test_in_place_methods_match_pytorch(method, extra, kwargs):
    rng = np.random.default_rng(3)
    base = rng.standard_normal((2, 4, 5) if method == "baddbmm_" else (4, 5)).astype(np.float32)
    if method == "addcdiv_":
        others = [rng.uniform(0.5, 2, s).astype(np.float32) for s in extra]
    else:
        others = [rng.standard_normal(s).astype(np.float32) for s in extra]
    ours, theirs = kiln.tensor(base.copy()), torch.tensor(base.copy())
    view = ours[:]  # a view sees the write
    assert getattr(ours, method)(*[kiln.tensor(o) for o in others], **kwargs) is ours
    getattr(theirs, method)(*[torch.tensor(o) for o in others], **kwargs)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(view.numpy(), ours.numpy())


def test_in_place_update_is_recorded_for_autograd():
    w = kiln.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    h = w * 2.0
    h.addcmul_(w, w, value=0.5)
    h.sum().backward()
    tw = torch.ones(2, 3, requires_grad=True)
    th = tw * 2.0
    th.addcmul_(tw, tw, value=0.5)
    th.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy())


def test_special_values_match_pytorch():
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30, -1e30, 0.5], np.float32)
    y = np.array([np.inf, 1.0, np.inf, -np.inf, 2.0, 0.0, np.nan, 0.0], np.float32)
    k, t = kiln.tensor, torch.tensor
    pairs = [
        (kiln.logaddexp(k(x), k(y)), torch.logaddexp(t(x), t(y))),
        (kiln.xlogy(k(x), k(y)), torch.xlogy(t(x), t(y))),
        (kiln.nan_to_num(k(x)), torch.nan_to_num(t(x))),
        (kiln.nan_to_num(k(x), nan=1.0, posinf=2.0, neginf=-2.0), torch.nan_to_num(t(x), 1.0, 2.0, -2.0)),
        (kiln.log2(k(np.array([8.0, 1024.0, 0.0], np.float32))), torch.log2(t([8.0, 1024.0, 0.0]))),
        (kiln.count_nonzero(k(x)), torch.count_nonzero(t(x))),
        (kiln.nansum(k(x[4:])), torch.nansum(t(x[4:]))),
        (kiln.lerp(k(x), k(y), 1.0), torch.lerp(t(x), t(y), 1.0)),
    ]
    # (logaddexp: NumPy's and torch's log1p(exp(.)) may round 1 ulp apart, by CPU: torch's AVX-512 path did)
    got, want = pairs.pop(0)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2.4e-7)
    for got, want in pairs:
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_grids_and_index_sets_match_pytorch():
    for row, col, offset in [(4, 4, 0), (3, 5, 1), (5, 3, -2), (0, 3, 0)]:
        np.testing.assert_array_equal(kiln.tril_indices(row, col, offset).numpy(),
                                      torch.tril_indices(row, col, offset).numpy())
        np.testing.assert_array_equal(kiln.triu_indices(row, col, offset).numpy(),
                                      torch.triu_indices(row, col, offset).numpy())
    assert kiln.tril_indices(3, 3).dtype == kiln.int64
    np.testing.assert_array_equal(kiln.repeat_interleave(kiln.tensor([2, 0, 1])).numpy(),
                                  torch.repeat_interleave(torch.tensor([2, 0, 1])).numpy())
    assert kiln.numel(kiln.zeros(2, 3)) == 6
    t = kiln.zeros(2, 3)
    assert (t.nbytes, t.itemsize, t.ndimension()) == (24, 4, 2)


def test_bad_input_says_what_was_expected():
    with pytest.raises(ShapeError, match="addmm: mat1 must be a 2-D tensor"):
        kiln.addmm(kiln.zeros(2), kiln.zeros(2, 3, 4), kiln.zeros(4, 2))
    with pytest.raises(TypeError, match="addcdiv: integer division"):
        kiln.addcdiv(kiln.zeros(2), kiln.tensor([1, 2]), kiln.tensor([1, 2]))
    with pytest.raises(ValueError, match="tensor_split: the number of sections must be positive"):
        kiln.tensor_split(kiln.zeros(4), 0)
    with pytest.raises(ShapeError, match="unflatten: sizes"):
        kiln.unflatten(kiln.zeros(2, 6), 1, (4, -1))
    with pytest.raises(ValueError, match="repeat_interleave: expected 3 non-negative repeats"):
        kiln.repeat_interleave(kiln.zeros(3), kiln.tensor([1, 2]))
    with pytest.raises(ValueError, match="meshgrid: indexing must be"):
        kiln.meshgrid(kiln.zeros(2), indexing="xx")
    with pytest.raises(ValueError, match="rot90: the two dims must differ"):
        kiln.rot90(kiln.zeros(2, 2), 1, (1, 1))
    with pytest.raises(ShapeError, match="fliplr: expected at least a 2-D tensor"):
        kiln.fliplr(kiln.zeros(3))
    with pytest.raises(TypeError, match="hstack: expected a sequence of tensors"):
        kiln.hstack(kiln.zeros(3))


# ---- ParameterList and ParameterDict ------------------------------------------------------------------
def test_parameter_list_registers_its_parameters_as_pytorch_does():
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((3, 3)).astype(np.float32) for _ in range(3)]

    def build(L):
        class Net(L.nn.Module):
            def __init__(self):
                super().__init__()
                self.weights = L.nn.ParameterList([L.nn.Parameter(L.tensor(arrays[0])), L.tensor(arrays[1])])
                self.weights.append(L.tensor(arrays[2]))

            def forward(self, x):
                for w in self.weights:
                    x = (x @ w).tanh()
                return x
        return Net()

    ours, theirs = build(kiln), build(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weights.0", "weights.1", "weights.2"]
    assert all(isinstance(p, kiln.nn.Parameter) for p in ours.weights) and len(ours.weights) == 3
    x = rng.standard_normal((2, 3)).astype(np.float32)
    ours(kiln.tensor(x)).sum().backward()
    theirs(torch.tensor(x)).sum().backward()
    for p, q in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(ours.weights[1:], kiln.nn.ParameterList) and len(ours.weights[1:]) == 2
    with pytest.raises(TypeError, match="ParameterList.append expects tensors or nn.Parameter, got str"):
        ours.weights.append("not a tensor")


def test_parameter_dict_registers_its_parameters_as_pytorch_does():
    def build(L):
        d = L.nn.ParameterDict({"scale": L.nn.Parameter(L.ones(4)), "shift": L.zeros(4)})
        d["extra"] = L.nn.Parameter(L.full((2,), 3.0))
        return d

    ours, theirs = build(kiln), build(torch)
    assert list(ours.keys()) == list(theirs.keys()) == ["scale", "shift", "extra"]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert "shift" in ours and len(ours) == 3 and isinstance(ours["shift"], kiln.nn.Parameter)
    opt = kiln.optim.SGD(ours.parameters(), lr=0.5)
    (ours["scale"] * 2.0).sum().backward()
    opt.step()
    np.testing.assert_allclose(ours["scale"].detach().numpy(), np.zeros(4))
    assert ours.pop("extra").shape == (2,) and list(ours) == ["scale", "shift"]
    with pytest.raises(KeyError, match="ParameterDict has no key 'missing'"):
        ours["missing"]

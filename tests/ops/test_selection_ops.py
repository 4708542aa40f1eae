"""Order statistics and data-dependent selections (functional/selection.py) against PyTorch: values, indices,
gradients, the Tensor methods, kiln.compile (a graph break where the result's size depends on the data),
and clear errors."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.jit import GraphBreakError
from kiln.ops.primitive import ShapeError

torch = pytest.importorskip("torch")


def _pair(shape: tuple, seed: int = 0) -> tuple:
    data = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return kiln.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)


def _backward_and_compare(ours, theirs, got, want, seed: int = 1) -> None:
    g = np.random.default_rng(seed).standard_normal(tuple(want.shape)).astype(np.float32)
    (got * kiln.tensor(g)).sum().backward()
    (want * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dim, keepdim", [(None, False), (0, False), (1, True), (-1, False)])
def test_median_matches_pytorch(dim, keepdim):
    ours, theirs = _pair((5, 6))
    if dim is None:
        got, want = kiln.median(ours), torch.median(theirs)
    else:
        got, want = ours.median(dim, keepdim=keepdim), torch.median(theirs, dim, keepdim=keepdim)
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
        got, want = got.values, want.values
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    _backward_and_compare(ours, theirs, got, want)


@pytest.mark.parametrize("k, dim, keepdim", [(1, -1, False), (3, 0, True), (6, 1, False)])
def test_kthvalue_matches_pytorch(k, dim, keepdim):
    ours, theirs = _pair((4, 6), seed=2)
    got, want = kiln.kthvalue(ours, k, dim, keepdim), torch.kthvalue(theirs, k, dim, keepdim)
    np.testing.assert_array_equal(got.values.detach().numpy(), want.values.detach().numpy())
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    _backward_and_compare(ours, theirs, got.values, want.values)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "nearest", "midpoint"])
@pytest.mark.parametrize("q, dim, keepdim", [(0.3, None, False), (0.5, 1, True), ([0.0, 0.25, 0.9, 1.0], 0, False),
                                             ([0.1, 0.7], None, True)])
def test_quantile_matches_pytorch(interpolation, q, dim, keepdim):
    ours, theirs = _pair((5, 4), seed=3)
    tq = torch.tensor(q) if isinstance(q, list) else q
    kq = kiln.tensor(np.asarray(q, np.float32)) if isinstance(q, list) else q
    got = ours.quantile(kq, dim, keepdim, interpolation=interpolation)
    want = torch.quantile(theirs, tq, dim, keepdim, interpolation=interpolation)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6, atol=1e-6)
    _backward_and_compare(ours, theirs, got, want)


def test_msort_and_masked_select_match_pytorch():
    ours, theirs = _pair((4, 3), seed=4)
    np.testing.assert_array_equal(kiln.msort(ours).detach().numpy(), torch.msort(theirs).detach().numpy())
    mask = np.random.default_rng(5).random((1, 3)) > 0.4  # broadcast over the rows
    got, want = ours.masked_select(kiln.tensor(mask)), theirs.masked_select(torch.tensor(mask))
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    _backward_and_compare(ours, theirs, got, want)


@pytest.mark.parametrize("data", [[[0, 1], [2, 0]], [0.0, -0.0, 3.5, np.nan], 5, 0, np.zeros((2, 0, 3))])
def test_nonzero_and_argwhere_match_pytorch(data):
    a = np.asarray(data)
    for as_tuple in (False, True):
        got, want = kiln.nonzero(kiln.tensor(a), as_tuple=as_tuple), torch.nonzero(torch.tensor(a), as_tuple=as_tuple)
        if as_tuple:
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w.numpy())
        else:
            assert tuple(got.shape) == tuple(want.shape) and got.dtype == kiln.int64
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(kiln.tensor(a).argwhere().numpy(), torch.argwhere(torch.tensor(a)).numpy())


def test_bincount_matches_pytorch():
    x = np.array([0, 1, 1, 3, 7, 1])
    w = np.array([0.5, 0.25, 1.0, 2.0, -1.0, 4.0], np.float32)
    pairs = [(kiln.bincount(kiln.tensor(x)), torch.bincount(torch.tensor(x))),
             (kiln.tensor(x).bincount(minlength=10), torch.tensor(x).bincount(minlength=10)),
             (kiln.bincount(kiln.tensor(x), kiln.tensor(w)), torch.bincount(torch.tensor(x), torch.tensor(w))),
             (kiln.bincount(kiln.tensor(np.zeros(0, np.int64))), torch.bincount(torch.tensor(np.zeros(0, np.int64))))]
    for got, want in pairs:
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got.dtype.name == str(want.dtype).replace("torch.", "")


@pytest.mark.parametrize("right, side, int32", [(False, None, False), (True, None, True), (False, "right", False)])
def test_searchsorted_and_bucketize_match_pytorch(right, side, int32):
    rng = np.random.default_rng(6)
    seq = np.sort(rng.integers(0, 10, (3, 8)), axis=1).astype(np.float32)
    vals = rng.integers(-1, 11, (3, 5)).astype(np.float32)
    for s, v in ((seq, vals), (seq[0], vals), (seq[0], np.float32(4.0))):
        got = kiln.searchsorted(kiln.tensor(s), kiln.tensor(v), right=right, side=side, out_int32=int32)
        want = torch.searchsorted(torch.tensor(s), torch.tensor(v), right=right, side=side, out_int32=int32)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got.dtype == (kiln.int32 if int32 else kiln.int64)
    got = kiln.bucketize(kiln.tensor(vals), kiln.tensor(seq[1]), right=right)
    np.testing.assert_array_equal(got.numpy(), torch.bucketize(torch.tensor(vals), torch.tensor(seq[1]), right=right))
    order = np.argsort(-seq[2])  # sorter: the positions that sort an unsorted sequence
    got = kiln.searchsorted(kiln.tensor(-seq[2]), kiln.tensor(-vals[0]), sorter=kiln.tensor(order))
    want = torch.searchsorted(torch.tensor(-seq[2]), torch.tensor(-vals[0]), sorter=torch.tensor(order))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_order_statistics_compile_and_selections_break_the_graph():
    def stats(x):
        return kiln.median(x, 1).values + kiln.quantile(x, 0.25, 1)

    x = kiln.tensor(np.random.default_rng(7).standard_normal((6, 5)).astype(np.float32))
    compiled = kiln.compile(stats)
    for _ in range(2):
        np.testing.assert_array_equal(compiled(x).numpy(), stats(x).numpy())
    assert compiled.stats.traces == 1

    def selected(x):
        return kiln.masked_select(x, x > 0).sum()

    with pytest.raises(GraphBreakError):
        kiln.compile(selected, fullgraph=True)(x)
    with pytest.warns(RuntimeWarning, match="falling back to eager.*`masked_select`"):
        np.testing.assert_array_equal(kiln.compile(selected)(x).numpy(), selected(x).numpy())


def test_bad_input_says_what_was_expected():
    with pytest.raises(ValueError, match="median\\(\\): the input is empty"):
        kiln.median(kiln.zeros(0))
    with pytest.raises(ValueError, match="kthvalue\\(\\): k=7 is out of range"):
        kiln.kthvalue(kiln.zeros(6), 7)
    with pytest.raises(ValueError, match="quantile\\(\\): interpolation must be one of"):
        kiln.quantile(kiln.zeros(3), 0.5, interpolation="cubic")
    with pytest.raises(ValueError, match="quantile\\(\\): q must be"):
        kiln.quantile(kiln.zeros(3), 1.5)
    with pytest.raises(TypeError, match="masked_select\\(\\): mask must be a bool tensor"):
        kiln.masked_select(kiln.zeros(3), kiln.ones(3))
    with pytest.raises(TypeError, match="bincount\\(\\): expected a 1-D integer tensor"):
        kiln.bincount(kiln.zeros(3))
    with pytest.raises(ValueError, match="bincount\\(\\): values must be non-negative"):
        kiln.bincount(kiln.tensor([1, -2]))
    with pytest.raises(ShapeError, match="bucketize\\(\\): boundaries must be 1-D"):
        kiln.bucketize(kiln.zeros(3), kiln.zeros(2, 2))
    with pytest.raises(ValueError, match="searchsorted\\(\\): side='left' contradicts right=True"):
        kiln.searchsorted(kiln.zeros(3), kiln.zeros(2), right=True, side="left")

"""Common PyTorch names training code uses that kiln lacked: stride/is_contiguous, pin_memory, random_ and
bernoulli, scatter/scatter_reduce, Tensor.softmax, trace, the trigonometric and hyperbolic functions, the
bitwise ops and kiln.equal. Each is checked against PyTorch and under kiln.compile."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kiln
from kiln.functional.random_fill import RandomRangeError
from kiln.ops.checks import ProbabilityError

torch = pytest.importorskip("torch")


def _k(a: np.ndarray, grad: bool = False) -> kiln.Tensor:
    return kiln.tensor(a.copy(), requires_grad=grad)


def _t(a: np.ndarray, grad: bool = False):
    return torch.tensor(a.copy(), requires_grad=grad)


def _same(kout: kiln.Tensor, tout, **tol) -> None:
    """Same shape, dtype name and values (exactly, or within `tol`)."""
    assert tuple(kout.shape) == tuple(tout.shape)
    assert kout.dtype.name == str(tout.dtype).replace("torch.", "")
    if tol:
        np.testing.assert_allclose(kout.detach().numpy(), tout.detach().numpy(), **tol)
    else:
        np.testing.assert_array_equal(kout.detach().numpy(), tout.detach().numpy())


def _bits_equal(a: kiln.Tensor, b: kiln.Tensor) -> None:
    x, y = a.detach().numpy(), b.detach().numpy()
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.view(f"u{x.itemsize}"), y.view(f"u{y.itemsize}")) or np.array_equal(x, y, equal_nan=True)


# ---- stride, is_contiguous, pin_memory -------------------------------------------------------------
LAYOUTS = {
    "contiguous": lambda L, x: x,
    "transposed": lambda L, x: x.transpose(0, 2),
    "permuted": lambda L, x: x.permute(1, 2, 0),
    "sliced": lambda L, x: x[:, 1:3, ::2],
    "row": lambda L, x: x[1],
    "column": lambda L, x: x[:, :, 2],
    "expanded": lambda L, x: x[:, :1].expand(3, 4, 5),
    "unsqueezed": lambda L, x: x.unsqueeze(1),
    "size_one_dims": lambda L, x: x[:1, :, :1],
    "empty": lambda L, x: x[:, :0],
    "zero_d": lambda L, x: x[0, 0, 0],
    "elementwise_of_transposed": lambda L, x: x.transpose(0, 1) * 2,
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_stride_and_is_contiguous_match_pytorch(name):
    view = LAYOUTS[name]
    k, t = view(kiln, kiln.zeros(3, 4, 5)), view(torch, torch.zeros(3, 4, 5))
    assert k.stride() == t.stride()
    assert k.is_contiguous() == t.is_contiguous()
    for d in range(-k.ndim, k.ndim):
        assert k.stride(d) == t.stride(d)


def test_stride_errors_and_flip_and_channels_last():
    x = kiln.zeros(2, 3)
    with pytest.raises(IndexError, match=r"range of \[-2, 1\], but got 2"):
        x.stride(2)
    with pytest.raises(IndexError, match="no dimensions"):
        kiln.tensor(1.0).stride(0)
    with pytest.raises(TypeError, match="dim must be an int"):
        x.stride(1.0)
    flipped = kiln.zeros(3, 4).flip(0)  # a view in kiln: the flipped dim steps backwards
    assert flipped.stride() == (-4, 1) and not flipped.is_contiguous()
    nhwc = kiln.zeros(2, 4, 5, 3).permute(0, 3, 1, 2)
    tnhwc = torch.zeros(2, 4, 5, 3).permute(0, 3, 1, 2)
    for fmt in (torch.channels_last, torch.contiguous_format, "channels_last"):
        tfmt = getattr(torch, fmt) if isinstance(fmt, str) else fmt
        assert nhwc.is_contiguous(memory_format=fmt) == tnhwc.is_contiguous(memory_format=tfmt)
        assert kiln.zeros(2, 3).is_contiguous(memory_format=fmt) == torch.zeros(2, 3).is_contiguous(memory_format=tfmt)
    with pytest.raises(ValueError, match="memory_format must be"):
        x.is_contiguous(memory_format="preserve_format")
    assert not hasattr(kiln.Tensor, "storage_offset")  # still refused: kiln tensors have no storage


def test_stride_inside_a_compiled_function_is_the_traced_layout():
    def f(x):
        y = x.t()
        return y * y.stride(0) + (0.0 if y.is_contiguous() else 1.0)

    compiled = kiln.compile(f, fullgraph=True)
    x = kiln.randn(3, 4)
    np.testing.assert_array_equal(compiled(x).numpy(), f(x).numpy())


def test_pin_memory_matches_a_pytorch_build_without_an_accelerator(monkeypatch):
    assert not torch.cuda.is_available()  # the oracle here is a CPU-only PyTorch
    x = kiln.arange(3.0)
    assert x.is_pinned() is False and torch.arange(3.0).is_pinned() is False
    if not kiln.accelerator.is_available():
        with pytest.raises(RuntimeError) as theirs:
            torch.arange(3.0).pin_memory()
        with pytest.raises(RuntimeError, match="Cannot access accelerator.*kiln.cuda.is_available"):
            x.pin_memory()
        assert "Cannot access accelerator device when none is available" in str(theirs.value)
    monkeypatch.setattr(kiln.accelerator, "is_available", lambda: True)
    pinned = x.pin_memory()
    assert pinned is not x and pinned.device == x.device and not pinned.is_pinned()
    np.testing.assert_array_equal(pinned.numpy(), x.numpy())


# ---- random_ and bernoulli ---------------------------------------------------------------------------
N = 20000


@pytest.mark.parametrize("dtype, args", [
    ("float32", ()), ("float64", ()), ("float16", ()), ("int64", ()), ("int32", ()), ("bool", ()),
    ("float32", (10,)), ("int64", (-5, 5)), ("int32", (3, None)), ("float64", (0, 2 ** 31)),
    ("int64", (7, 2 ** 40)), ("int64", (-(2 ** 62), None)), ("int64", (-(2 ** 63), None)),
])
def test_random_draws_over_pytorchs_range(dtype, args):
    kiln.manual_seed(0)
    torch.manual_seed(0)
    k = kiln.zeros(N, dtype=dtype).random_(*args)
    t = torch.zeros(N, dtype=getattr(torch, dtype)).random_(*args)
    assert k.dtype.name == dtype
    kv, tv = k.numpy().astype(np.float64), t.numpy().astype(np.float64)
    lo = float(args[0]) if len(args) == 2 else 0.0
    top = {"float32": 2 ** 24, "float64": 2 ** 53, "float16": 2048, "int64": 2 ** 63 - 1, "int32": 2 ** 31 - 1,
           "bool": 1}[dtype]
    hi = float(args[-1] - 1) if args and args[-1] is not None else float(top)
    hi = float(args[0] - 1) if len(args) == 1 else hi
    assert kv.min() >= lo and kv.max() <= hi and tv.min() >= lo and tv.max() <= hi
    spread = hi - lo
    assert abs(kv.mean() - tv.mean()) < 0.03 * spread  # both uniform over the same range
    assert abs(kv.std() - tv.std()) < 0.03 * spread
    if spread < 100:  # every value is drawn
        assert set(np.unique(kv)) == set(np.unique(tv))


def test_random_small_range_is_uniform_and_errors_match_pytorch():
    kiln.manual_seed(1)
    counts = np.bincount(kiln.zeros(N, dtype=kiln.int64).random_(0, 10).numpy(), minlength=10)
    assert counts.min() > N / 10 * 0.9 and counts.max() < N / 10 * 1.1
    assert set(np.unique(kiln.zeros(N, dtype=kiln.int64).random_(to=3).numpy())) == {0, 1, 2}
    assert set(np.unique(kiln.zeros(N, dtype=kiln.int64).random_(**{"from": 2, "to": 4}).numpy())) == {2, 3}
    for args in [(5, 5), (5, 3), (-1,)]:
        with pytest.raises(RuntimeError, match="from' to be less than 'to'"):
            torch.zeros(3).random_(*args)
        with pytest.raises(RandomRangeError, match="from' to be less than 'to'"):
            kiln.zeros(3).random_(*args)
    with pytest.raises(RandomRangeError, match=r"to - 1 = 2147483648 is out of bounds for int32"):
        kiln.zeros(3, dtype=kiln.int32).random_(0, 2 ** 31 + 1)
    with pytest.raises(RandomRangeError, match="out of bounds for bool"):
        kiln.zeros(3, dtype=kiln.bool).random_(0, 3)
    with pytest.warns(UserWarning, match="every integer"):
        kiln.zeros(3).random_(0, 2 ** 25)
    with pytest.raises(TypeError, match="'to' must be an int"):
        kiln.zeros(3).random_(0, 2.5)
    assert issubclass(RandomRangeError, RuntimeError) and issubclass(RandomRangeError, ValueError)


def test_random_and_bernoulli_in_place_give_zero_gradients_as_pytorch():
    for lib in (kiln, torch):
        x = lib.ones(4, requires_grad=True)
        y = x * 3
        y.random_(0, 5)
        z = x * 2
        z.bernoulli_(0.5)
        (y * 2 + z).sum().backward()
        np.testing.assert_array_equal(np.asarray(x.grad.numpy()), np.zeros(4))
    with pytest.raises(RuntimeError, match="leaf"):
        kiln.ones(2, requires_grad=True).random_()


@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bernoulli_matches_pytorchs_distribution(p, dtype):
    kiln.manual_seed(3)
    probs = np.full((N,), p, dtype=dtype)
    k = kiln.bernoulli(_k(probs))
    t = torch.bernoulli(_t(probs))
    assert k.dtype.name == dtype == str(t.dtype).replace("torch.", "")
    assert set(np.unique(k.numpy())) <= {0.0, 1.0}
    assert abs(k.numpy().mean() - t.numpy().mean()) < 0.02
    if p in (0.0, 1.0):
        assert (k.numpy() == p).all()
    per_row = kiln.zeros(3, N, dtype=dtype).bernoulli_(kiln.tensor([[0.1], [p], [0.9]], dtype=dtype)).numpy()
    np.testing.assert_allclose(per_row.mean(1), [0.1, p, 0.9], atol=0.02)
    assert abs(kiln.bernoulli(_k(probs), 0.7).numpy().mean() - 0.7) < 0.02  # torch.bernoulli(input, p)


def test_bernoulli_in_place_on_integers_and_bools_and_its_errors():
    kiln.manual_seed(4)
    i = kiln.zeros(N, dtype=kiln.int64).bernoulli_(0.25)
    b = kiln.zeros(N, dtype=kiln.bool).bernoulli_()
    assert i.dtype == kiln.int64 and abs(i.numpy().mean() - 0.25) < 0.02
    assert b.dtype == kiln.bool and abs(b.numpy().mean() - 0.5) < 0.02
    p = kiln.full((3,), 0.5, requires_grad=True)
    out = kiln.bernoulli(p)
    assert out.requires_grad == torch.bernoulli(torch.full((3,), 0.5, requires_grad=True)).requires_grad
    out.sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), np.zeros(3))
    with pytest.raises(ProbabilityError, match=r"bernoulli_: p must be in \[0, 1\], got p=1.5"):
        kiln.zeros(4).bernoulli_(1.5)
    with pytest.raises(ProbabilityError, match=r"bernoulli: probabilities must lie in \[0, 1\], got nan"):
        kiln.bernoulli(kiln.tensor([0.5, float("nan")]))
    with pytest.raises(RuntimeError):  # ProbabilityError is a RuntimeError too, as PyTorch raises
        kiln.bernoulli(kiln.tensor([-0.5]))
    with pytest.raises(TypeError, match="float tensor of probabilities, got int64"):
        kiln.bernoulli(kiln.tensor([0, 1]))
    with pytest.raises(kiln.ShapeError):
        kiln.zeros(4).bernoulli_(kiln.full((3,), 0.5))


def test_random_draws_compile_to_eager_bits_and_advance_the_stream():
    def f(x, p):
        a = x.clone().random_(0, 1000)
        b = kiln.zeros(x.shape, dtype=kiln.int64).random_(-(2 ** 62), None)
        c = kiln.bernoulli(p) * x + kiln.zeros(x.shape).bernoulli_(p)
        d = x.bernoulli(0.3)
        return a, b, c, d

    compiled = kiln.compile(f, fullgraph=True)
    x, p = kiln.randn(5, 6), kiln.rand(5, 6)
    for seed in (0, 0, 7):
        kiln.manual_seed(seed)
        want = [f(x, p) for _ in range(2)]
        kiln.manual_seed(seed)
        got = [compiled(x, p) for _ in range(2)]
        for w, g in zip(want, got):
            for a, b in zip(w, g):
                _bits_equal(a, b)
        assert not np.array_equal(want[0][0].numpy(), want[1][0].numpy())  # each call draws new numbers
    eager_gen, compiled_gen = kiln.Generator(5), kiln.Generator(5)
    gen_compiled = kiln.compile(lambda t: t.clone().random_(0, 9, generator=compiled_gen)
                                + kiln.bernoulli(p, generator=compiled_gen))
    for _ in range(3):
        want = x.clone().random_(0, 9, generator=eager_gen) + kiln.bernoulli(p, generator=eager_gen)
        _bits_equal(gen_compiled(x), want)
    with pytest.raises(ProbabilityError):
        compiled(x, p + 1.5)  # the check runs in every replay


# ---- scatter and scatter_reduce ------------------------------------------------------------------------
IDX = np.array([[0, 1, 2, 0], [2, 0, 1, 1]])


@pytest.mark.parametrize("case", ["src", "value", "int_value", "dim1", "neg_dim", "small_index", "big_src",
                                  "duplicates", "one_hot", "zero_d_index", "empty_index"])
def test_scatter_matches_pytorch(case):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    src = rng.standard_normal((2, 5)).astype(np.float32)
    calls = {
        "src": lambda L, x, s: x.scatter(0, L.tensor(IDX), s),
        "value": lambda L, x, s: L.scatter(x, 0, L.tensor(IDX), 2.5),
        "int_value": lambda L, x, s: x.long().scatter(0, L.tensor(IDX), 2.7),
        "dim1": lambda L, x, s: x.scatter(1, L.tensor([[4, 0], [1, 3]]), s[:, :2]),
        "neg_dim": lambda L, x, s: x.scatter(-1, L.tensor([[2], [0], [4]]), s[:1, :3].t()),
        "small_index": lambda L, x, s: x.scatter(0, L.tensor([[2, 0]]), s),
        "big_src": lambda L, x, s: x.scatter(0, L.tensor([[1, 2, 0]]), s),
        "duplicates": lambda L, x, s: x.scatter(1, L.tensor([[0, 0, 0, 1], [3, 3, 3, 3], [1, 2, 1, 2]]),
                                                L.cat([s, s[:1]])[:, :4]),
        "one_hot": lambda L, x, s: L.zeros(4, 6).scatter_(1, L.tensor([[1], [5], [0], [5]]), 1.0),
        "zero_d_index": lambda L, x, s: x[0].scatter(0, L.tensor(3), L.tensor(9.0)),
        "empty_index": lambda L, x, s: x.scatter(0, L.zeros(0, 5, dtype=L.int64), 1.0),
    }
    fn = calls[case]
    _same(fn(kiln, kiln.tensor(x), kiln.tensor(src)), fn(torch, torch.tensor(x), torch.tensor(src)))


@pytest.mark.parametrize("index", [IDX, np.array([[0, 1, 1, 0, 2], [1, 1, 1, 2, 2]])], ids=["unique", "duplicates"])
def test_scatter_gradients_match_pytorch(index):
    rng = np.random.default_rng(1)
    x, src = rng.standard_normal((3, 5)), rng.standard_normal(index.shape)
    weight = np.arange(15.0).reshape(3, 5)
    grads = []
    for L, make in ((kiln, _k), (torch, _t)):
        xx, ss = make(x, True), make(src, True)
        (xx.scatter(0, L.tensor(index), ss) * L.tensor(weight)).sum().backward()
        grads.append((np.asarray(xx.grad.numpy()), np.asarray(ss.grad.numpy())))
    np.testing.assert_array_equal(grads[0][0], grads[1][0])  # zero where overwritten
    np.testing.assert_array_equal(grads[0][1], grads[1][1])  # src: the gradient at each target (duplicates too)


def test_scatter_with_a_larger_src_sends_zero_gradients_to_the_unread_part():
    x, src = kiln.zeros(3, 5, requires_grad=True), kiln.ones(3, 5, requires_grad=True)
    x.scatter(0, kiln.tensor([[1, 2]]), src).sum().backward()  # PyTorch raises here (a gradient of index's shape)
    want = np.zeros((3, 5))
    want[0, :2] = 1
    np.testing.assert_array_equal(src.grad.numpy(), want)


def test_scatter_legacy_reduce_matches_pytorch():
    x = np.ones((3, 4), np.float32)
    index = np.array([[1, 1], [3, 3], [0, 2]])
    src = np.full((3, 2), 3.0, np.float32)
    for reduce in ("add", "multiply"):
        _same(_k(x).scatter(1, kiln.tensor(index), 3.0, reduce=reduce),
              _t(x).scatter(1, torch.tensor(index), 3.0, reduce=reduce))
        with pytest.warns(UserWarning, match="scatter_reduce"):
            got = _k(x).scatter(1, kiln.tensor(index), _k(src), reduce=reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch warns once per process
            _same(got, _t(x).scatter(1, torch.tensor(index), _t(src), reduce=reduce))
    y = _k(x)
    assert y.scatter_(1, kiln.tensor(index), 2.0, reduce="multiply") is y


def test_scatter_errors_name_the_problem():
    x = kiln.zeros(3, 5)
    with pytest.raises(IndexError, match="scatter: index 5 is out of range for dimension 0 with size 3"):
        x.scatter(0, kiln.tensor([[5]]), 1.0)
    with pytest.raises(IndexError, match="index -1 is out of range"):
        x.scatter(0, kiln.tensor([[-1]]), 1.0)
    with pytest.raises(TypeError, match="scatter: index must be an integer tensor"):
        x.scatter(0, kiln.tensor([[1.0]]), 1.0)
    with pytest.raises(kiln.ShapeError, match=r"no larger than self \(3, 5\) apart from dimension 0"):
        x.scatter(0, kiln.zeros(2, 6, dtype=kiln.int64), 1.0)
    with pytest.raises(kiln.ShapeError, match=r"no larger than src \(1, 1\)"):
        x.scatter(0, kiln.zeros(2, 2, dtype=kiln.int64), kiln.zeros(1, 1))
    with pytest.raises(kiln.ShapeError, match="as many dims as self"):
        x.scatter(0, kiln.zeros(2, dtype=kiln.int64), kiln.zeros(2))
    with pytest.raises(TypeError, match=r"src has dtype float64 but self has float32.*src.to\(self.dtype\)"):
        x.scatter(0, kiln.zeros(2, 2, dtype=kiln.int64), kiln.zeros(2, 2, dtype=kiln.float64))
    with pytest.raises(ValueError, match="reduce must be 'add' or 'multiply'"):
        x.scatter(0, kiln.zeros(1, 1, dtype=kiln.int64), 1.0, reduce="mean")
    with pytest.raises(ValueError, match="reduce must be one of sum, prod, mean, amax, amin"):
        x.scatter_reduce(0, kiln.zeros(1, 1, dtype=kiln.int64), kiln.zeros(1, 1), "max")
    with pytest.raises(TypeError, match="either src or value"):
        x.scatter(0, kiln.zeros(1, 1, dtype=kiln.int64), kiln.zeros(1, 1), value=1.0)
    with pytest.raises(IndexError, match="out of range"):
        x.scatter(2, kiln.zeros(1, 1, dtype=kiln.int64), 1.0)


REDUCE_INDEX = np.array([1, 0, 2, 2, 1, 0])
REDUCE_CASES = {  # self, src: with ties (amax/amin share the gradient) and zeros (prod's special cases)
    "plain": ([1.0, 7.0, 3.0, 4.0], [7.0, 2.0, 3.0, 3.0, 0.5, -1.0]),
    "zeros": ([1.0, 0.0, 3.0, 4.0], [0.0, 2.0, 0.0, 3.0, 5.0, 0.0]),
}


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("case", sorted(REDUCE_CASES))
def test_scatter_reduce_values_and_gradients_match_pytorch(case, reduce, include_self):
    base, src = (np.array(v) for v in REDUCE_CASES[case])
    weight = np.array([1.0, 2.0, 3.0, 4.0])
    oracle_base = base.copy()
    if reduce in ("amax", "amin") and not include_self:
        # PyTorch counts an excluded self value that equals the result among the ties, so the gradients
        # do not add up to the output's; kiln shares it among the values that were reduced. Excluding
        # self by an identity (-inf for amax) gives PyTorch's values without that miscount.
        oracle_base[np.unique(REDUCE_INDEX)] = -np.inf if reduce == "amax" else np.inf
    results = []
    for L, make, b in ((kiln, _k, base), (torch, _t, oracle_base)):
        xx, ss = make(b, True), make(src, True)
        out = xx.scatter_reduce(0, L.tensor(REDUCE_INDEX), ss, reduce, include_self=include_self)
        (out * L.tensor(weight)).sum().backward()
        results.append([np.asarray(a) for a in (out.detach().numpy(), xx.grad.numpy(), ss.grad.numpy())])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_on_integers_and_in_place(reduce):
    base, src = np.array([1, 2, 3, 4]), np.array([5, -2, 1, -7, 8, 3])
    for include_self in (True, False):
        _same(_k(base).scatter_reduce(0, kiln.tensor(REDUCE_INDEX), _k(src), reduce, include_self=include_self),
              _t(base).scatter_reduce(0, torch.tensor(REDUCE_INDEX), _t(src), reduce, include_self=include_self))
    k, t = _k(base), _t(base)
    k.scatter_reduce_(0, kiln.tensor(REDUCE_INDEX), _k(src), reduce)
    t.scatter_reduce_(0, torch.tensor(REDUCE_INDEX), _t(src), reduce)
    _same(k, t)


def test_scatter_reduce_falls_back_to_the_host_without_ufunc_at():
    class NoMultiplyAt:  # an array module like CuPy's: multiply has no `at`
        multiply = staticmethod(lambda a, b: np.multiply(a, b))
        asnumpy = staticmethod(np.asarray)

        def __getattr__(self, name):
            return getattr(np, name)

    prim = kiln.ops.REGISTRY["scatter_reduce"]
    base, idx, src = np.arange(1.0, 5.0), REDUCE_INDEX, np.arange(2.0, 8.0)
    for include_self in (True, False):
        params = {"axis": 0, "reduce": "prod", "include_self": include_self}
        np.testing.assert_array_equal(prim.kernel(NoMultiplyAt(), base, idx, src, **params),
                                      prim.kernel(np, base, idx, src, **params))


def test_scatter_add_in_place_matches_pytorch():
    k, t = kiln.zeros(2, 4), torch.zeros(2, 4)
    index, src = np.array([[0, 1, 1, 3]]), np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)
    assert k.scatter_add_(1, kiln.tensor(index), _k(src)) is k
    t.scatter_add_(1, torch.tensor(index), _t(src))
    _same(k, t)


def test_scatter_ops_compile_to_eager_values_and_gradients():
    def f(x, s):
        idx = kiln.tensor([[0, 2, 1], [1, 1, 0]])
        y = x.scatter(0, idx, s) + x.scatter(1, idx, 0.5) * x
        z = x.scatter_reduce(0, idx, s, "amax", include_self=False) + x.scatter_reduce(0, idx, s, "prod")
        w = x.clone()
        w.scatter_(1, idx, s)
        w.scatter_add_(0, idx, s)
        return (y * z + w.scatter_reduce(0, idx, s, "mean")).sum()

    compiled = kiln.compile(f, fullgraph=True)
    rng = np.random.default_rng(2)
    x0, s0 = rng.standard_normal((3, 3)), rng.standard_normal((2, 3))
    results = []
    for fn in (f, compiled, compiled):
        x, s = _k(x0, True), _k(s0, True)
        loss = fn(x, s)
        loss.backward()
        results.append((loss.item(), x.grad.numpy().copy(), s.grad.numpy().copy()))
    for got in results[1:]:
        assert got[0] == results[0][0]
        np.testing.assert_array_equal(got[1], results[0][1])
        np.testing.assert_array_equal(got[2], results[0][2])
    checked = kiln.compile(lambda x, i: x.scatter(0, i, 1.0), fullgraph=True)
    checked(_k(x0), kiln.tensor([[2]]))
    with pytest.raises(IndexError, match="scatter: index 7 is out of range"):
        checked(_k(x0), kiln.tensor([[7]]))  # the range check runs in every replay


# ---- softmax methods and trace --------------------------------------------------------------------------
def test_softmax_and_log_softmax_methods_match_pytorch():
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    for dim in (0, 1, -1):
        _same(_k(x).softmax(dim), _t(x).softmax(dim), rtol=1e-6, atol=1e-7)
        _same(_k(x).log_softmax(dim), _t(x).log_softmax(dim), rtol=1e-6, atol=1e-6)
    _same(_k(x).softmax(1, dtype=kiln.float64), _t(x).softmax(1, dtype=torch.float64), rtol=1e-12)
    _same(_k(x).log_softmax(0, kiln.float64), _t(x).log_softmax(0, torch.float64), rtol=1e-12)
    k, t = _k(x, True), _t(x, True)
    (k.log_softmax(-1) * _k(x)).sum().backward()
    (t.log_softmax(-1) * _t(x)).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(TypeError):
        _k(x).softmax()  # dim is required, as in PyTorch


def test_trace_matches_pytorch_and_compiles():
    x = np.random.default_rng(4).standard_normal((3, 5))
    for a in (x, x.T, x[:0]):
        _same(kiln.trace(_k(a)), torch.trace(_t(a)), rtol=1e-12)
    for dtype in ("int32", "int64"):
        a = np.arange(12, dtype=dtype).reshape(3, 4)
        _same(_k(a).trace(), _t(a).trace())
    k, t = _k(x, True), _t(x, True)
    (k.trace() * 3).backward()
    (t.trace() * 3).backward()
    np.testing.assert_array_equal(k.grad.numpy(), t.grad.numpy())
    compiled = kiln.compile(lambda m: (m * m).trace(), fullgraph=True)
    assert compiled(_k(x)).item() == (_k(x) * _k(x)).trace().item()
    with pytest.raises(kiln.ShapeError, match="expected a matrix.*3-D.*kiln.diagonal"):
        kiln.trace(kiln.zeros(2, 2, 2))
    with pytest.raises(TypeError, match="bool"):
        kiln.trace(kiln.ones(2, 2) > 0)


# ---- trigonometric and hyperbolic functions -----------------------------------------------------------
UNARY = ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"]
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
           "arctanh": "atanh", "arctan2": "atan2"}
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-30, 1e30, -1e30, 100.0, 1e-8, np.inf, -np.inf, np.nan,
           np.pi / 2, 1.5707964]


def _values(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(5)
    random = np.concatenate([rng.uniform(-1, 1, 5000), rng.standard_normal(5000) * 10, rng.uniform(1, 50, 2000)])
    return np.concatenate([np.array(SPECIAL), random]).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_trig_matches_pytorch(name, dtype):
    a = _values(dtype)
    with np.errstate(all="ignore"):
        want = getattr(torch, name)(_t(a))
    got = getattr(kiln, name)(_k(a))
    assert got.dtype.name == dtype
    rtol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got.numpy()[:2]), np.signbit(want.numpy()[:2]))  # +-0
    _same(getattr(kiln, name)(kiln.arange(3)), getattr(torch, name)(torch.arange(3)), rtol=1e-6)  # ints: float32


@pytest.mark.parametrize("name", UNARY + ["atan2"])
def test_trig_gradients_match_pytorch(name):
    rng = np.random.default_rng(6)
    a = rng.uniform(-0.9, 0.9, (3, 4)) if name != "acosh" else rng.uniform(1.1, 3.0, (3, 4))
    b = rng.standard_normal((4,))
    g = rng.standard_normal((3, 4))
    grads = []
    for L, make in ((kiln, _k), (torch, _t)):
        x, y = make(a, True), make(b, True)
        out = L.atan2(x, y) if name == "atan2" else getattr(L, name)(x)
        (out * L.tensor(g)).sum().backward()
        grads.append([x.grad.numpy()] + ([y.grad.numpy()] if name == "atan2" else []))
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    x = _k(a, True)  # second order through the kiln-op VJPs
    first = kiln.autograd.grad((getattr(kiln, "atan" if name == "atan2" else name)(x)).sum(), [x],
                               create_graph=True)[0]
    assert first.requires_grad


def test_atan2_promotes_and_broadcasts_as_pytorch():
    a, b = np.array([[1.0], [-1.0], [0.0]]), np.array([0.0, -0.0, -1.0, 2.0])
    _same(kiln.atan2(_k(a), _k(b)), torch.atan2(_t(a), _t(b)), rtol=1e-12)
    ints = ([1, -2], [3, 0])
    _same(kiln.atan2(*map(kiln.tensor, ints)), torch.atan2(*map(torch.tensor, ints)), rtol=1e-6)
    _same(kiln.ones(2).atan2(kiln.ones(2, dtype=kiln.float64)), torch.ones(2).atan2(torch.ones(2, dtype=torch.float64)))
    special = np.array(SPECIAL)
    y, x = np.meshgrid(special, special)
    _same(kiln.arctan2(_k(y), _k(x)), torch.atan2(_t(y), _t(x)), rtol=1e-15, equal_nan=True)


def test_trig_aliases_methods_and_in_place_forms():
    for alias, name in ALIASES.items():
        assert getattr(kiln, alias) is getattr(kiln, name)
        assert callable(getattr(kiln.Tensor, alias)) and callable(getattr(kiln.Tensor, alias + "_"))
    a = np.linspace(-0.8, 0.8, 7)
    for name in UNARY + ["sin", "cos"]:
        k, t = _k(a), _t(a)
        source = a + 1.5 if name == "acosh" else a
        k, t = _k(source), _t(source)
        assert getattr(k, name + "_")() is k
        getattr(t, name + "_")()
        _same(k, t, rtol=1e-12)
        _same(getattr(_k(source), name)(), getattr(torch, name)(_t(source)), rtol=1e-12)
    k, t = _k(a), _t(a)
    k.atan2_(_k(a[::-1].copy()))
    t.atan2_(_t(a[::-1].copy()))
    _same(k, t, rtol=1e-12)
    with pytest.raises(RuntimeError, match="can't be cast"):
        kiln.arange(3).tan_()  # as PyTorch: a float result cannot go into an integer tensor


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trig_compiles_to_eager_bits_on_random_and_special_values(dtype):
    a = _values(dtype)
    b = np.roll(a, 7)

    def f(x, y):
        outs = [getattr(kiln, name)(x * 1.0) + 0.0 for name in UNARY]
        outs.append(kiln.atan2(x, y) * 2.0)
        outs.append(x.t().tan() if x.ndim == 2 else x.sinh())
        return outs

    compiled = kiln.compile(f, fullgraph=True)
    x, y = _k(a), _k(b)
    with np.errstate(all="ignore"):
        for _ in range(2):
            for got, want in zip(compiled(x, y), f(x, y)):
                _bits_equal(got, want)
        square = a[:4096].reshape(64, 64)
        for got, want in zip(compiled(_k(square), _k(square.T.copy())), f(_k(square), _k(square.T.copy()))):
            _bits_equal(got, want)


def test_trig_gradients_compile_to_eager_bits():
    a = np.random.default_rng(7).uniform(-0.9, 0.9, (70, 70))

    def f(x):
        total = kiln.atan2(x, x.t() + 2.0).sum()
        for name in UNARY:
            total = total + getattr(kiln, name)(x + 1.5 if name == "acosh" else x).sum()
        return total

    grads = []
    for fn in (f, kiln.compile(f, fullgraph=True)):
        x = _k(a, True)
        fn(x).backward()
        grads.append(x.grad.numpy())
    _bits_equal(kiln.tensor(grads[0]), kiln.tensor(grads[1]))


# ---- bitwise ops and equal -------------------------------------------------------------------------------
BITWISE = {
    "and": lambda L, a, b: (L.bitwise_and(a, b), a & b, a.bitwise_and(b)),
    "or": lambda L, a, b: (L.bitwise_or(a, b), a | b, a.bitwise_or(b)),
    "xor": lambda L, a, b: (L.bitwise_xor(a, b), a ^ b, a.bitwise_xor(b)),
    "not": lambda L, a, b: (L.bitwise_not(a), ~a, a.bitwise_not()),
    "scalars": lambda L, a, b: (a & 6, 3 | a, a ^ -1, True & a, L.bitwise_and(a, 12)),
}


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
@pytest.mark.parametrize("op", sorted(BITWISE))
def test_bitwise_ops_match_pytorch(op, dtype):
    rng = np.random.default_rng(8)
    a = rng.integers(-100, 100, (3, 4)).astype(dtype)
    b = rng.integers(-100, 100, (4,)).astype(dtype)
    a[0, :2] = [np.iinfo(dtype).min, np.iinfo(dtype).max] if dtype != "bool" else [True, False]
    for got, want in zip(BITWISE[op](kiln, _k(a), _k(b)), BITWISE[op](torch, _t(a), _t(b))):
        _same(got, want)


def test_bitwise_in_place_and_mixed_dtypes_match_pytorch():
    a, b = np.array([12, -7, 0, 5]), np.array([10, 3, -1, 5], np.int32)
    for op in ("bitwise_and_", "bitwise_or_", "bitwise_xor_"):
        k, t = _k(a), _t(a)
        assert getattr(k, op)(_k(b)) is k
        getattr(t, op)(_t(b))
        _same(k, t)
    k, t = _k(a), _t(a)
    k &= 6
    t &= 6
    k |= _k(b)
    t |= _t(b)
    k ^= 3
    t ^= 3
    k.bitwise_not_()
    t.bitwise_not_()
    _same(k, t)
    _same(_k(a) & _k(b), _t(a) & _t(b))  # int64 & int32 -> int64
    m = np.array([True, False, True])
    _same(_k(m) & 1, _t(m) & 1)  # bool & int -> int64
    _same(_k(m) ^ _k(~m), _t(m) ^ _t(~m))


def test_bitwise_ops_refuse_floats():
    x = kiln.ones(3)
    i = kiln.ones(3, dtype=kiln.int64)
    for fn, symbol in [(lambda: x & x, "&"), (lambda: x | 1, r"\|"), (lambda: i ^ 1.5, r"\^"), (lambda: ~x, "~"),
                       (lambda: kiln.bitwise_not(x), "~")]:
        with pytest.raises(TypeError, match=f"bitwise_.* \\(`{symbol}`\\) needs integer or bool tensors, got .*float"):
            fn()


def test_bitwise_ops_compile_to_eager_values():
    def f(a, b, m):
        return (a & b) ^ (a | 5), ~a, m & (a > 0), m ^ (b < 0), kiln.bitwise_not(m)

    compiled = kiln.compile(f, fullgraph=True)
    rng = np.random.default_rng(9)
    args = (_k(rng.integers(-50, 50, (5000,))), _k(rng.integers(-50, 50, (5000,))), _k(rng.random(5000) < 0.5))
    for _ in range(2):
        for got, want in zip(compiled(*args), f(*args)):
            _bits_equal(got, want)


def test_equal_matches_pytorch():
    pairs = [
        (lambda L: (L.ones(2), L.ones(2, dtype=L.int64))),
        (lambda L: (L.ones(2), L.ones(3))),
        (lambda L: (L.ones(2), L.ones(1, 2))),
        (lambda L: (L.tensor([float("nan")]), L.tensor([float("nan")]))),
        (lambda L: (L.tensor([[1, 2], [3, 4]]), L.tensor([[1, 2], [3, 4]]).t().t())),
        (lambda L: (L.tensor([1, 2]), L.tensor([1, 3]))),
        (lambda L: (L.zeros(0), L.zeros(0))),
        (lambda L: (L.tensor([True]), L.tensor([1.0]))),
    ]
    for make in pairs:
        got, want = kiln.equal(*make(kiln)), torch.equal(*make(torch))
        assert got is want
    assert kiln.ones(2).equal(kiln.ones(2)) is True
    with pytest.raises(TypeError, match="argument 'other' \\(position 2\\) must be a kiln.Tensor, got list"):
        kiln.equal(kiln.ones(2), [1, 1])


def test_equal_inside_compile_is_a_graph_break():
    def f(a, b):
        return a * 2 if kiln.equal(a, b) else a * 3

    with pytest.raises(kiln.GraphBreakError, match="equal"):
        kiln.compile(f, fullgraph=True)(kiln.ones(2), kiln.ones(2))
    compiled = kiln.compile(f)
    with pytest.warns(RuntimeWarning, match="falling back to eager.*`kiln.equal`"):
        assert compiled(kiln.ones(2), kiln.ones(2)).tolist() == [2.0, 2.0]
    assert compiled(kiln.ones(2), kiln.zeros(2)).tolist() == [3.0, 3.0]

"""Every loss of torch.nn against kiln: module and functional forms, every reduction, values and
gradients (float64 and float32), kiln.compile against eager, and the input checks."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=2e-4, atol=2e-5)}
REDUCTIONS = ["none", "mean", "sum"]
N, C = 6, 4


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _x(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).standard_normal(shape)


def _probs(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).uniform(0.02, 0.98, shape)


def _signs(*shape: int, seed: int = 0) -> np.ndarray:
    return np.where(_rng(seed).random(shape) > 0.5, 1.0, -1.0)


def _classes(*shape: int, seed: int = 0) -> np.ndarray:
    return _rng(seed).integers(0, C, shape)


class Lib:
    """A value built per library, e.g. a distance function written with that library's ops."""

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self.build = build


class Grad:
    """An input array that requires grad."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


MULTILABEL_TARGET = np.array([[3, 0, -1, 1], [1, -1, 2, 2], [0, 1, 2, 3], [-1, 0, 0, 0], [2, 2, -1, 0], [1, 3, 3, -1]])
COSINE_DISTANCE = Lib(lambda lib: (lambda a, b: 1.0 - lib.nn.functional.cosine_similarity(a, b)))

# (class name, functional name, keyword arguments shared by both, inputs)
CASES = [
    ("L1Loss", "l1_loss", {}, [Grad(_x(N, C)), Grad(_x(N, C, seed=1))]),
    ("MSELoss", "mse_loss", {}, [Grad(_x(N, C)), Grad(_x(N, C, seed=1))]),
    ("HuberLoss", "huber_loss", {}, [Grad(_x(N, C) * 2), _x(N, C, seed=1)]),
    ("HuberLoss", "huber_loss", {"delta": 0.5}, [Grad(_x(N, C) * 2), Grad(_x(N, C, seed=1))]),
    ("SmoothL1Loss", "smooth_l1_loss", {"beta": 0.5}, [Grad(_x(N, C) * 2), Grad(_x(N, C, seed=1))]),
    ("SmoothL1Loss", "smooth_l1_loss", {"beta": 0.0}, [Grad(_x(N, C)), _x(N, C, seed=1)]),
    ("BCELoss", "binary_cross_entropy", {}, [Grad(_probs(N, C)), _probs(N, C, seed=1)]),
    ("BCELoss", "binary_cross_entropy", {"weight": _probs(C, seed=2)},
     [Grad(_probs(N, C)), Grad(_probs(N, C, seed=1))]),
    ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", {"pos_weight": _probs(C, seed=2) * 3},
     [Grad(_x(N, C)), _probs(N, C, seed=1)]),
    ("CrossEntropyLoss", "cross_entropy", {"weight": _probs(C, seed=2), "label_smoothing": 0.1, "ignore_index": 1},
     [Grad(_x(N, C)), _classes(N, seed=1)]),
    ("NLLLoss", "nll_loss", {"weight": _probs(C, seed=2)}, [Grad(_x(N, C)), _classes(N, seed=1)]),
    ("KLDivLoss", "kl_div", {}, [Grad(np.log(_probs(N, C))), Grad(_probs(N, C, seed=1))]),
    ("KLDivLoss", "kl_div", {"log_target": True}, [Grad(np.log(_probs(N, C))), Grad(np.log(_probs(N, C, seed=1)))]),
    ("KLDivLoss", "kl_div", {}, [Grad(np.log(_probs(N, C))), np.where(_signs(N, C) > 0, _probs(N, C, seed=1), 0.0)]),
    ("PoissonNLLLoss", "poisson_nll_loss", {}, [Grad(_x(N, C)), np.floor(_probs(N, C, seed=1) * 5)]),
    ("PoissonNLLLoss", "poisson_nll_loss", {"log_input": False, "full": True, "eps": 1e-6},
     [Grad(_probs(N, C) * 4), np.floor(_probs(N, C, seed=1) * 5)]),
    ("GaussianNLLLoss", "gaussian_nll_loss", {}, [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), Grad(_probs(N, C, seed=2))]),
    ("GaussianNLLLoss", "gaussian_nll_loss", {"full": True, "eps": 1e-3},
     [Grad(_x(N, C)), _x(N, C, seed=1), Grad(_probs(N, 1, seed=2) * 0.01)]),
    ("GaussianNLLLoss", "gaussian_nll_loss", {}, [Grad(_x(N, C)), _x(N, C, seed=1), Grad(_probs(N, seed=2))]),
    ("SoftMarginLoss", "soft_margin_loss", {}, [Grad(_x(N, C)), _signs(N, C)]),
    ("MarginRankingLoss", "margin_ranking_loss", {"margin": 0.3}, [Grad(_x(N)), Grad(_x(N, seed=1)), _signs(N)]),
    ("HingeEmbeddingLoss", "hinge_embedding_loss", {"margin": 0.5}, [Grad(_x(N, C)), _signs(N, C)]),
    ("CosineEmbeddingLoss", "cosine_embedding_loss", {"margin": 0.2},
     [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), _signs(N)]),
    ("CosineEmbeddingLoss", "cosine_embedding_loss", {}, [Grad(_x(C)), Grad(_x(C, seed=1)), np.array(-1.0)]),
    ("MultiLabelSoftMarginLoss", "multilabel_soft_margin_loss", {"weight": _probs(C, seed=2)},
     [Grad(_x(N, C)), (_signs(N, C) > 0).astype(np.float64)]),
    ("MultiLabelMarginLoss", "multilabel_margin_loss", {}, [Grad(_x(N, C)), MULTILABEL_TARGET]),
    ("MultiLabelMarginLoss", "multilabel_margin_loss", {}, [Grad(_x(C)), MULTILABEL_TARGET[1]]),
    ("MultiMarginLoss", "multi_margin_loss", {"margin": 0.8}, [Grad(_x(N, C)), _classes(N, seed=1)]),
    ("MultiMarginLoss", "multi_margin_loss", {"p": 2, "weight": _probs(C, seed=2)},
     [Grad(_x(N, C)), _classes(N, seed=1)]),
    ("MultiMarginLoss", "multi_margin_loss", {}, [Grad(_x(C)), np.array(2)]),
    ("TripletMarginLoss", "triplet_margin_loss", {"margin": 2.0},
     [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), Grad(_x(N, C, seed=2))]),
    ("TripletMarginLoss", "triplet_margin_loss", {"p": 1.0, "swap": True},
     [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), Grad(_x(N, C, seed=2))]),
    ("TripletMarginWithDistanceLoss", "triplet_margin_with_distance_loss", {"margin": 2.0, "swap": True},
     [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), Grad(_x(N, C, seed=2))]),
    ("TripletMarginWithDistanceLoss", "triplet_margin_with_distance_loss", {"distance_function": COSINE_DISTANCE},
     [Grad(_x(N, C)), Grad(_x(N, C, seed=1)), Grad(_x(N, C, seed=2))]),
]
CASE_IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


def _lib_value(value: Any, lib: Any, dtype: str) -> Any:
    if isinstance(value, Lib):
        return value.build(lib)
    if isinstance(value, np.ndarray):
        return _tensor(lib, value, dtype, False)
    return value


def _tensor(lib: Any, array: np.ndarray, dtype: str, grad: bool) -> Any:
    if array.dtype.kind == "f":
        return lib.tensor(array, dtype=getattr(lib, dtype), requires_grad=grad)
    return lib.tensor(array)


def _inputs(lib: Any, inputs: list, dtype: str) -> list:
    return [_tensor(lib, v.array, dtype, True) if isinstance(v, Grad) else _tensor(lib, v, dtype, False)
            for v in inputs]


def _run(lib: Any, form: str, case: tuple, reduction: str, dtype: str) -> tuple[np.ndarray, list]:
    cls, fn, kwargs, inputs = case
    args = _inputs(lib, inputs, dtype)
    kw = {k: _lib_value(v, lib, dtype) for k, v in kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kl_div's reduction='mean' warns (in both libraries)
        if form == "module":
            out = getattr(lib.nn, cls)(reduction=reduction, **kw)(*args)
        else:
            out = getattr(lib.nn.functional, fn)(*args, reduction=reduction, **kw)
    upstream = _rng(7).standard_normal(tuple(out.shape))
    (out * _tensor(lib, upstream, dtype, False)).sum().backward()
    grads = [None if a.grad is None else a.grad.numpy() for a in args if getattr(a, "requires_grad", False)]
    return out.detach().numpy(), grads


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["module", "functional"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_loss_matches_torch(case, reduction, form, dtype):
    got, got_grads = _run(kiln, form, case, reduction, dtype)
    want, want_grads = _run(torch, form, case, reduction, dtype)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, **TOL[dtype])
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        np.testing.assert_allclose(g, w, **TOL[dtype], err_msg=f"gradient of input {i}")


def test_kl_div_batchmean_matches_torch():
    logp, target = np.log(_probs(N, C)), _probs(N, C, seed=1)
    got = nn.KLDivLoss(reduction="batchmean")(kiln.tensor(logp), kiln.tensor(target))
    want = torch.nn.KLDivLoss(reduction="batchmean")(torch.tensor(logp), torch.tensor(target))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    with pytest.warns(UserWarning, match="batchmean"):
        F.kl_div(kiln.tensor(logp), kiln.tensor(target))


def _eager_and_compiled(fn: Callable, args: list) -> None:
    """kiln.compile(fn) gives eager's outputs and input gradients, on the trace and on a replay."""
    compiled = kiln.compile(fn)
    for call in range(2):
        results = []
        for run in (fn, compiled):
            for a in args:
                a.grad = None
            outs = run(*args)
            total = sum((o * float(i + 1 + call)).sum() for i, o in enumerate(outs))
            total.backward()
            results.append(([o.detach().numpy() for o in outs],
                             [a.grad.numpy() for a in args if a.requires_grad]))
        (want, want_g), (got, got_g) = results
        for g, w in zip(got + got_g, want + want_g):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    assert compiled.stats.fallbacks == 0 and compiled.stats.hits >= 1, compiled.stats


@pytest.mark.filterwarnings("ignore:kl_div")
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_loss_compiles(case):
    cls, fn, kwargs, inputs = case
    args = _inputs(kiln, inputs, "float64")
    loss = getattr(nn, cls)
    kw = {k: _lib_value(v, kiln, "float64") for k, v in kwargs.items()}
    layers = [loss(reduction=r, **kw) for r in REDUCTIONS]
    _eager_and_compiled(lambda *a: tuple(layer(*a) for layer in layers), args)


# ---- CTC -------------------------------------------------------------------------------------
T, B, K = 10, 3, 5
CTC_TARGETS = np.array([[1, 1, 3, 4], [2, 4, 0, 0], [3, 2, 2, 0]])  # repeats need a blank between them
CTC_TARGET_LENGTHS = [4, 2, 3]
CTC_INPUT_LENGTHS = [10, 7, 6]


def _ctc_targets(lib: Any, layout: str, targets: np.ndarray = CTC_TARGETS) -> Any:
    if layout == "padded":
        return lib.tensor(targets)
    return lib.tensor(np.concatenate([row[:n] for row, n in zip(targets, CTC_TARGET_LENGTHS)]))


def _ctc(lib: Any, reduction: str, layout: str, lengths: str, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    logits = lib.tensor(_x(T, B, K), requires_grad=True)
    il, tl = CTC_INPUT_LENGTHS, kw.pop("target_lengths", CTC_TARGET_LENGTHS)
    targets = kw.pop("targets", CTC_TARGETS)
    if lengths == "tensor":
        il, tl = lib.tensor(il), lib.tensor(tl)
    log_probs = lib.nn.functional.log_softmax(logits, 2)
    out = lib.nn.CTCLoss(reduction=reduction, **kw)(log_probs, _ctc_targets(lib, layout, targets), il, tl)
    out.sum().backward()
    return out.detach().numpy(), logits.grad.numpy()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("layout,lengths", [("padded", "list"), ("concatenated", "tensor")])
def test_ctc_matches_torch(reduction, layout, lengths):
    got, got_grad = _ctc(kiln, reduction, layout, lengths)
    want, want_grad = _ctc(torch, reduction, layout, lengths)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-9, atol=1e-12)


def test_ctc_blank_choice_and_empty_targets():
    kw = dict(blank=2, target_lengths=[0, 2, 3], targets=np.where(CTC_TARGETS == 2, 0, CTC_TARGETS))
    got, got_grad = _ctc(kiln, "none", "padded", "list", **kw)
    want, want_grad = _ctc(torch, "none", "padded", "list", **dict(kw))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_impossible_alignment(zero_infinity):
    # sample 1 has 4 labels (one repeat) but only 3 frames: no alignment exists
    kw = dict(zero_infinity=zero_infinity, target_lengths=[4, 4, 3])
    logits = _x(T, B, K)
    k_logits = kiln.tensor(logits, requires_grad=True)
    il = [10, 3, 6]
    targets = np.array([[1, 1, 3, 4], [2, 4, 1, 3], [3, 2, 2, 0]])
    got = F.ctc_loss(F.log_softmax(k_logits, 2), kiln.tensor(targets), il, kw["target_lengths"], reduction="none",
                     zero_infinity=zero_infinity)
    want = TF.ctc_loss(torch.tensor(logits).log_softmax(2), torch.tensor(targets), il, kw["target_lengths"],
                       reduction="none", zero_infinity=zero_infinity)
    np.testing.assert_allclose(got.detach().numpy(), want.numpy(), rtol=1e-10)
    assert got.detach().numpy()[1] == (0.0 if zero_infinity else np.inf)
    if zero_infinity:
        got.sum().backward()
        grad = k_logits.grad.numpy()
        assert np.isfinite(grad).all() and not grad[:, 1].any()


def test_ctc_unbatched():
    logits = _x(T, K)
    got = F.ctc_loss(F.log_softmax(kiln.tensor(logits), 1), kiln.tensor(CTC_TARGETS[0]), 10, 4, reduction="none")
    want = TF.ctc_loss(torch.tensor(logits).log_softmax(1), torch.tensor(CTC_TARGETS[0]), torch.tensor(10),
                       torch.tensor(4), reduction="none")
    assert got.shape == ()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)


def test_ctc_compiles():
    logits = kiln.tensor(_x(T, B, K), requires_grad=True)
    targets = kiln.tensor(CTC_TARGETS)
    il, tl = kiln.tensor(CTC_INPUT_LENGTHS), kiln.tensor(CTC_TARGET_LENGTHS)
    layers = [nn.CTCLoss(reduction=r) for r in REDUCTIONS]
    _eager_and_compiled(lambda x: tuple(layer(F.log_softmax(x, 2), targets, il, tl) for layer in layers), [logits])


# ---- AdaptiveLogSoftmaxWithLoss --------------------------------------------------------------
def _adaptive_pair() -> tuple[Any, Any]:
    theirs = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, head_bias=True).double()
    ours = nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 12], div_value=2.0, head_bias=True).double()
    ours.load_state_dict({k: kiln.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


def test_adaptive_log_softmax_matches_torch():
    ours, theirs = _adaptive_pair()
    assert repr(ours) == repr(theirs)
    x, target = _x(9, 8), np.array([0, 4, 5, 11, 12, 19, 3, 7, 15])  # shortlist and both clusters
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = ours(kx, kiln.tensor(target)), theirs(tx, torch.tensor(target))
    assert got._fields == want._fields == ("output", "loss")
    np.testing.assert_allclose(got.output.detach().numpy(), want.output.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(got.loss.item(), want.loss.item(), rtol=1e-10)
    got.loss.backward()
    want.loss.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(ours.log_prob(kx).detach().numpy(), theirs.log_prob(tx).detach().numpy(), rtol=1e-10)
    np.testing.assert_array_equal(ours.predict(kx).numpy(), theirs.predict(tx).numpy())


def test_adaptive_log_softmax_checks_and_compiles():
    ours, _ = _adaptive_pair()
    with pytest.raises(ValueError, match="cutoffs"):
        nn.AdaptiveLogSoftmaxWithLoss(8, 20, [5, 5])
    with pytest.raises(IndexError, match="20"):
        ours(kiln.randn(2, 8, dtype="float64"), kiln.tensor([1, 20]))
    with pytest.raises(kiln.ShapeError, match="target"):
        ours(kiln.randn(3, 8, dtype="float64"), kiln.tensor([1, 2]))
    x = kiln.tensor(_x(6, 8), requires_grad=True)
    target = kiln.tensor([0, 4, 5, 11, 12, 19])
    _eager_and_compiled(lambda a: tuple(ours(a, target)), [x])


# ---- the list, legacy flags, modules, input checks -----------------------------------------
def test_every_torch_loss_class_exists():
    names = [n for n in dir(torch.nn) if n.endswith("Loss")]
    missing = [n for n in names if not hasattr(nn, n)]
    # LinearCrossEntropyLoss (PyTorch 2.13's fused projection + cross-entropy) is not in kiln yet
    assert set(missing) <= {"LinearCrossEntropyLoss"}, missing
    for name in names:
        if hasattr(nn, name):
            assert issubclass(getattr(nn, name), nn.Module)


@pytest.mark.parametrize("size_average,reduce", [(False, None), (None, False), (True, True), (False, True)])
def test_legacy_size_average_and_reduce(size_average, reduce):
    x, y = _x(N, C), _x(N, C, seed=1)
    with pytest.warns(UserWarning, match="reduction="):
        got = F.mse_loss(kiln.tensor(x), kiln.tensor(y), size_average, reduce)
    with pytest.warns(UserWarning, match="reduction="):
        module = nn.L1Loss(size_average=size_average, reduce=reduce)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = TF.mse_loss(torch.tensor(x), torch.tensor(y), size_average, reduce)
        assert module.reduction == torch.nn.L1Loss(size_average=size_average, reduce=reduce).reduction
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_weighted_mse_and_l1_means_divide_by_the_weight_sum():
    x, y, w = _x(N, C), _x(N, C, seed=1), _probs(N, C, seed=2)
    for name in ("mse_loss", "l1_loss"):
        got = getattr(F, name)(kiln.tensor(x), kiln.tensor(y), weight=kiln.tensor(w))
        want = getattr(TF, name)(torch.tensor(x), torch.tensor(y), weight=torch.tensor(w))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), 1.5, -0.25])
def test_compiled_bce_checks_its_probabilities_as_eager_does(bad):
    """The check is a graph node: a replayed plan raises on NaN or out-of-range input too (a fuzzer find)."""
    from kiln.ops.checks import ProbabilityError

    f = kiln.compile(lambda p, t: F.binary_cross_entropy(p, t))
    t = kiln.tensor([[0.0, 1.0], [1.0, 0.0]])
    good = kiln.tensor([[0.25, 0.5], [0.75, 0.125]], requires_grad=True)
    for _ in range(2):  # trace, then replay
        loss = f(good, t)
        loss.backward()
    np.testing.assert_array_equal(loss.detach().numpy(), F.binary_cross_entropy(good, t).detach().numpy())
    broken = kiln.tensor([[0.25, bad], [0.75, 0.125]], requires_grad=True)  # the same cache key: a replay
    for fn in (F.binary_cross_entropy, f):
        with pytest.raises(ProbabilityError, match="binary_cross_entropy: probabilities must lie in"):
            fn(broken, t)
    assert (f.stats.misses, f.stats.hits) == (1, 1)  # stats count only the calls that returned


def test_bce_gradient_at_saturated_probabilities_matches_torch():
    p, t = np.array([0.0, 1.0, 0.5, 1e-13]), np.array([0.3, 0.7, 1.0, 0.2])
    kp, tp = kiln.tensor(p, requires_grad=True), torch.tensor(p, requires_grad=True)
    got = F.binary_cross_entropy(kp, kiln.tensor(t), reduction="sum")
    want = TF.binary_cross_entropy(tp, torch.tensor(t), reduction="sum")
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)
    got.backward()
    want.backward()
    assert np.isfinite(kp.grad.numpy()).all()
    np.testing.assert_allclose(kp.grad.numpy(), tp.grad.numpy(), rtol=1e-6)


WEIGHTED = [("BCELoss", {}), ("BCEWithLogitsLoss", {"pos_weight": np.ones(C)}), ("MultiLabelSoftMarginLoss", {}),
            ("MultiMarginLoss", {}), ("CrossEntropyLoss", {}), ("NLLLoss", {})]


@pytest.mark.parametrize("name,extra", WEIGHTED, ids=[w[0] for w in WEIGHTED])
def test_weights_are_buffers_like_torch(name, extra):
    w = np.arange(1.0, C + 1)
    ours = getattr(nn, name)(weight=kiln.tensor(w), **{k: kiln.tensor(v) for k, v in extra.items()})
    theirs = getattr(torch.nn, name)(weight=torch.tensor(w), **{k: torch.tensor(v) for k, v in extra.items()})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)


def test_module_defaults_and_reprs_match_torch():
    for name in [n for n in dir(torch.nn) if n.endswith("Loss") and hasattr(nn, n)]:
        if name == "AdaptiveLogSoftmaxWithLoss":
            continue
        ours, theirs = getattr(nn, name)(), getattr(torch.nn, name)()
        assert repr(ours) == repr(theirs), name
        assert ours.reduction == theirs.reduction, name
        for attr in ("margin", "p", "eps", "swap", "delta", "beta", "log_target", "log_input", "full", "blank",
                     "zero_infinity", "ignore_index", "label_smoothing"):
            if hasattr(theirs, attr):
                assert getattr(ours, attr) == getattr(theirs, attr), (name, attr)


def _both_raise(call: Callable[[Any], Any]) -> BaseException:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(Exception):  # noqa: B017 - any error: PyTorch raises here too
            call(torch)
        with pytest.raises((ValueError, TypeError, IndexError)) as info:
            call(kiln)
    return info.value


def _t(lib: Any, a: Any) -> Any:
    return lib.tensor(np.asarray(a))


BAD_INPUTS = {
    "bce input outside [0, 1]": (lambda L: L.nn.functional.binary_cross_entropy(_t(L, [0.5, 1.5]), _t(L, [1.0, 0.0])),
                                 "binary_cross_entropy"),
    "bce target shape": (lambda L: L.nn.BCELoss()(_t(L, _probs(3, 2)), _t(L, _probs(3))), "binary_cross_entropy"),
    "bce-logits target shape": (lambda L: L.nn.BCEWithLogitsLoss()(_t(L, _x(3, 2)), _t(L, _probs(3))),
                                "binary_cross_entropy_with_logits"),
    "huber delta": (lambda L: L.nn.functional.huber_loss(_t(L, _x(3)), _t(L, _x(3)), delta=-1.0), "delta"),
    "smooth_l1 beta": (lambda L: L.nn.functional.smooth_l1_loss(_t(L, _x(3)), _t(L, _x(3)), beta=-1.0), "beta"),
    "bad reduction": (lambda L: L.nn.functional.huber_loss(_t(L, _x(3)), _t(L, _x(3)), reduction="avg"), "reduction"),
    "bad module reduction": (lambda L: L.nn.SoftMarginLoss(reduction="avg")(_t(L, _x(3)), _t(L, _signs(3))),
                             "reduction"),  # kiln raises at construction already, PyTorch in forward
    "kl_div reduction": (lambda L: L.nn.KLDivLoss(reduction="batch")(_t(L, _x(3)), _t(L, _probs(3))), "reduction"),
    "margin ranking dims": (lambda L: L.nn.MarginRankingLoss()(_t(L, _x(3, 2)), _t(L, _x(3)), _t(L, _signs(3))),
                            "same number of dims"),
    "cosine embedding dims": (lambda L: L.nn.CosineEmbeddingLoss()(_t(L, _x(3, 2, 2)), _t(L, _x(3, 2, 2)),
                                                                  _t(L, _signs(3))), "(N, D)"),
    "multilabel margin target range": (lambda L: L.nn.MultiLabelMarginLoss()(_t(L, _x(2, 4)),
                                                                            _t(L, [[1, 5, -1, 0], [0, -1, 0, 0]])),
                                       "5"),
    "multilabel margin float target": (lambda L: L.nn.MultiLabelMarginLoss()(_t(L, _x(2, 4)), _t(L, _x(2, 4))),
                                       "int64"),
    "multi margin target range": (lambda L: L.nn.MultiMarginLoss()(_t(L, _x(3, 4)), _t(L, [1, 4, 0])), "4"),
    "multi margin p": (lambda L: L.nn.MultiMarginLoss(p=3), "p=1 and p=2"),
    "multi margin weight": (lambda L: L.nn.functional.multi_margin_loss(_t(L, _x(3, 4)), _t(L, [1, 2, 0]),
                                                                         weight=_t(L, _probs(3))), "weight"),
    "multi margin 3d": (lambda L: L.nn.MultiMarginLoss()(_t(L, _x(2, 3, 4)), _t(L, [[1, 2, 0]] * 2)), "(N, C)"),
    "gaussian var size": (lambda L: L.nn.GaussianNLLLoss()(_t(L, _x(3, 2)), _t(L, _x(3, 2)), _t(L, _probs(2))),
                          "var"),
    "gaussian negative var": (lambda L: L.nn.GaussianNLLLoss()(_t(L, _x(3, 2)), _t(L, _x(3, 2)),
                                                               _t(L, -_probs(3, 2))), "negative"),
    "gaussian negative float var": (lambda L: L.nn.functional.gaussian_nll_loss(_t(L, _x(3)), _t(L, _x(3)), -0.5),
                                    "var"),
    "triplet dims": (lambda L: L.nn.TripletMarginLoss()(_t(L, _x(3, 2)), _t(L, _x(2)), _t(L, _x(3, 2))),
                     "same number of dims"),
    "triplet margin": (lambda L: L.nn.TripletMarginWithDistanceLoss(margin=0.0), "margin"),
    "ctc blank": (lambda L: L.nn.CTCLoss(blank=7)(_t(L, _x(T, B, K)).log_softmax(2) if L is torch else
                                                   F.log_softmax(_t(L, _x(T, B, K)), 2),
                                                   _t(L, CTC_TARGETS), CTC_INPUT_LENGTHS, CTC_TARGET_LENGTHS),
                  "blank"),
    "ctc lengths": (lambda L: L.nn.CTCLoss()(_t(L, _x(T, B, K)).log_softmax(2) if L is torch else
                                             F.log_softmax(_t(L, _x(T, B, K)), 2),
                                             _t(L, CTC_TARGETS), [11, 7, 6], CTC_TARGET_LENGTHS), "input_lengths"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_a_clear_error(case):
    call, words = BAD_INPUTS[case]
    error = _both_raise(call)
    assert words in str(error)

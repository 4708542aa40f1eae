"""Eager semantics that must match PyTorch: values that overflow their dtype, out-of-range
indices, integer division by zero, and sizes that are not ints.

Each case checks kiln's behaviour (exception type and a message that says what was expected,
what came, and the fix) and, where torch is installed, that PyTorch behaves the same way.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import kiln
import kiln.nn.functional as F


def torch_or_skip() -> Any:
    return pytest.importorskip("torch")


def torch_dtype(name: str | None) -> Any:
    return None if name is None else getattr(torch_or_skip(), name)


# ---- 1. Python numbers that do not fit the dtype ------------------------------------------
OVERFLOWING = [
    pytest.param(2**31, "int32", id="int32-above"),
    pytest.param(-2**31 - 1, "int32", id="int32-below"),
    pytest.param([1, 2**40], "int32", id="int32-in-list"),
    pytest.param(2**63, "int64", id="int64-above"),
    pytest.param(-2**63 - 1, "int64", id="int64-below"),
    pytest.param(2**63, None, id="default-int64-above"),
    pytest.param([2**64], None, id="beyond-uint64-in-list"),
    pytest.param(3e9, "int32", id="float-into-int32"),
    pytest.param(2147483647.5, "int32", id="float-just-above-int32"),
    pytest.param(float("nan"), "int32", id="nan-into-int32"),
    pytest.param(float("inf"), "int64", id="inf-into-int64"),
    pytest.param(np.int64(2**40), "int32", id="numpy-scalar-into-int32"),
]


@pytest.mark.parametrize(("value", "dtype"), OVERFLOWING)
def test_tensor_raises_when_a_python_number_overflows_the_dtype(value: Any, dtype: str | None) -> None:
    with pytest.raises(kiln.DTypeOverflowError) as info:
        kiln.tensor(value, dtype=dtype)
    err = info.value
    # PyTorch raises RuntimeError (ValueError for int64); Python's own type is OverflowError
    assert isinstance(err, OverflowError) and isinstance(err, RuntimeError)
    message = str(err)
    assert "kiln.tensor()" in message and (dtype or "int64") in message
    assert "Fix:" in message


@pytest.mark.parametrize(("value", "dtype"), OVERFLOWING)
def test_pytorch_raises_for_the_same_overflowing_numbers(value: Any, dtype: str | None) -> None:
    torch = torch_or_skip()
    with pytest.raises((RuntimeError, ValueError, OverflowError)):
        torch.tensor(value, dtype=torch_dtype(dtype))


def test_overflow_message_names_value_range_and_fix() -> None:
    with pytest.raises(OverflowError, match=r"value 2147483648 cannot be converted to int32 without overflow: "
                                            r"int32 holds whole numbers in \[-2147483648, 2147483647\]\. "
                                            r"Fix: pick a dtype that holds it, e.g. int64"):
        kiln.tensor(2**31, dtype=kiln.int32)
    with pytest.raises(OverflowError, match="NaN and infinity have no integer value"):
        kiln.tensor([1.0, float("nan")], dtype=kiln.int64)


@pytest.mark.parametrize(("value", "dtype"), [
    (2**31 - 1, "int32"), (-2**31, "int32"), (2**63 - 1, "int64"), (-2**63, "int64"),
    ([2.9, -2.9], "int32"), (True, "int32"), (300, "bool"), (2**64, "float32"), (2**70, "float64"),
    ([1.5, 2**63], None), ([[1], [2**70]], "float64"),
])
def test_numbers_that_fit_convert_as_in_pytorch(value: Any, dtype: str | None) -> None:
    torch = torch_or_skip()
    got = kiln.tensor(value, dtype=dtype)
    want = torch.tensor(value, dtype=torch_dtype(dtype))
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_an_int_too_large_for_any_float_says_so() -> None:
    with pytest.raises(kiln.DTypeOverflowError, match="an int of 332 digits is too large for any float dtype"):
        kiln.tensor([2**1100], dtype=kiln.float32)


def test_arrays_are_cast_not_checked_as_in_pytorch() -> None:
    torch = torch_or_skip()
    arr = np.array([2**40 + 5, -1], dtype=np.int64)
    got = kiln.tensor(arr, dtype=kiln.int32)
    np.testing.assert_array_equal(got.numpy(), torch.tensor(arr, dtype=torch.int32).numpy())


@pytest.mark.parametrize(("make", "torch_make"), [
    (lambda k: k.full((2,), 2**31, dtype=k.int32), lambda t: t.full((2,), 2**31, dtype=t.int32)),
    (lambda k: k.full((2,), 2**63), lambda t: t.full((2,), 2**63)),
    (lambda k: k.full((2,), -2**63 - 1, dtype=k.int64), lambda t: t.full((2,), -2**63 - 1, dtype=t.int64)),
    (lambda k: k.full((2,), 3e9, dtype=k.int32), lambda t: t.full((2,), 3e9, dtype=t.int32)),
    (lambda k: k.full((2,), float("nan"), dtype=k.int32), lambda t: t.full((2,), float("nan"), dtype=t.int32)),
    (lambda k: k.full_like(k.zeros(2, dtype=k.int32), 2**31), lambda t: t.full_like(t.zeros(2, dtype=t.int32), 2**31)),
    (lambda k: k.zeros(2, dtype=k.int32).fill_(2**31), lambda t: t.zeros(2, dtype=t.int32).fill_(2**31)),
    (lambda k: k.zeros(2, dtype=k.int32).fill_(3e9), lambda t: t.zeros(2, dtype=t.int32).fill_(3e9)),
    (lambda k: k.zeros(2, dtype=k.int64).fill_(2**63), lambda t: t.zeros(2, dtype=t.int64).fill_(2**63)),
    (lambda k: k.zeros(2, dtype=k.int32).fill_(np.int64(2**40)),
     lambda t: t.zeros(2, dtype=t.int32).fill_(np.int64(2**40))),
], ids=["full-int32", "full-default-int64", "full-int64-below", "full-float-into-int32", "full-nan",
        "full_like", "fill_-int32", "fill_-float-into-int32", "fill_-int64", "fill_-numpy-scalar"])
def test_full_and_fill_raise_on_overflow_like_pytorch(make: Callable, torch_make: Callable) -> None:
    with pytest.raises(kiln.DTypeOverflowError, match="without overflow|no integer value"):
        make(kiln)
    torch = pytest.importorskip("torch")
    with pytest.raises((RuntimeError, OverflowError)):  # RuntimeError "...without overflow" but for -2**63-1
        torch_make(torch)


def test_full_and_fill_keep_values_that_fit() -> None:
    torch = torch_or_skip()
    np.testing.assert_array_equal(kiln.full((2,), 2**31 - 1, dtype=kiln.int32).numpy(),
                                  torch.full((2,), 2**31 - 1, dtype=torch.int32).numpy())
    np.testing.assert_array_equal(kiln.full((2,), 2.9, dtype=kiln.int32).numpy(),
                                  torch.full((2,), 2.9, dtype=torch.int32).numpy())
    np.testing.assert_array_equal(kiln.zeros(2, dtype=kiln.int32).fill_(-2.9).numpy(),
                                  torch.zeros(2, dtype=torch.int32).fill_(-2.9).numpy())
    assert kiln.full((1,), 300, dtype=kiln.bool).numpy().tolist() == [True]
    with np.errstate(over="ignore"):
        assert kiln.full((1,), 1e300).numpy()[0] == np.inf  # float targets: no check (PyTorch raises here)


# ---- 2. indices out of range ----------------------------------------------------------------
W = np.arange(6.0).reshape(3, 2)


@pytest.mark.parametrize("bad", [-1, 3, -4], ids=["negative", "too-large", "too-negative"])
def test_embedding_rejects_out_of_range_indices(bad: int) -> None:
    weight = kiln.tensor(W, requires_grad=True)
    with pytest.raises(IndexError, match=rf"embedding: index {bad} is out of range for an embedding table of 3 "
                                         r"rows .*valid indices: 0 to 2"):
        F.embedding(kiln.tensor([[0, bad]]), weight)
    emb = kiln.nn.Embedding(3, 2)
    with pytest.raises(IndexError, match=rf"index {bad}"):
        emb(kiln.tensor([bad, 1]))
    torch = pytest.importorskip("torch")
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([[0, bad]]), torch.tensor(W))


def test_embedding_in_range_matches_pytorch_with_grad_and_padding() -> None:
    torch = torch_or_skip()
    idx = [[0, 2, 1], [2, 2, 0]]
    kw = kiln.tensor(W, requires_grad=True)
    tw = torch.tensor(W, requires_grad=True)
    (F.embedding(kiln.tensor(idx), kw, padding_idx=-1) ** 2).sum().backward()
    (torch.nn.functional.embedding(torch.tensor(idx), tw, padding_idx=-1) ** 2).sum().backward()
    np.testing.assert_allclose(kw.grad.numpy(), tw.grad.numpy())


def test_negative_index_message_says_negatives_are_not_allowed() -> None:
    with pytest.raises(IndexError, match=r"gather: index -1 is out of range for dimension 1 with size 3 "
                                         r"\(input shape \(2, 3\)\); valid indices: 0 to 2 \(negative indices "
                                         r"are not allowed here\)"):
        kiln.gather(kiln.ones(2, 3), 1, kiln.tensor([[0], [-1]]))


GATHER_LIKE = [
    pytest.param(lambda m, x, i: m.gather(x, 1, i), id="gather"),
    pytest.param(lambda m, x, i: m.index_select(x, 1, i.reshape(-1)), id="index_select"),
    pytest.param(lambda m, x, i: x.gather(1, i), id="Tensor.gather"),
    pytest.param(lambda m, x, i: m.zeros(2, 3, dtype=x.dtype).scatter_add(1, i, m.ones(2, 1, dtype=x.dtype)),
                 id="scatter_add"),
]


@pytest.mark.parametrize("op", GATHER_LIKE)
@pytest.mark.parametrize("bad", [-1, 3], ids=["negative", "too-large"])
def test_gather_like_ops_reject_out_of_range_indices(op: Callable, bad: int) -> None:
    x = np.arange(6.0).reshape(2, 3)
    idx = np.array([[0], [bad]])
    with pytest.raises(IndexError, match=rf"index {bad} is out of range for dimension 1 with size 3"):
        op(kiln, kiln.tensor(x), kiln.tensor(idx))
    torch = pytest.importorskip("torch")
    with pytest.raises((IndexError, RuntimeError), match="out of"):  # gather/scatter_add: RuntimeError
        op(torch, torch.tensor(x), torch.tensor(idx))


@pytest.mark.parametrize("op", GATHER_LIKE[:3])
def test_gather_like_ops_in_range_match_pytorch_with_grad(op: Callable) -> None:
    torch = torch_or_skip()
    x = np.arange(6.0).reshape(2, 3)
    idx = np.array([[2], [0]])
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    kout, tout = op(kiln, kx, kiln.tensor(idx)), op(torch, tx, torch.tensor(idx))
    np.testing.assert_allclose(kout.detach().numpy(), tout.detach().numpy())
    (kout * kout).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy())


def test_take_along_dim_allows_negative_indices_as_pytorch() -> None:
    torch = torch_or_skip()
    x = np.arange(6.0).reshape(2, 3)
    idx = np.array([[-1, 0], [-3, 2]])
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    kout = kiln.take_along_dim(kx, kiln.tensor(idx), 1)
    tout = torch.take_along_dim(tx, torch.tensor(idx), 1)
    np.testing.assert_allclose(kout.detach().numpy(), tout.detach().numpy())
    (kout * 3).sum().backward()
    (tout * 3).sum().backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy())
    with pytest.raises(IndexError, match="index -4 is out of range .*valid indices: -3 to 2"):
        kiln.take_along_dim(kx, kiln.tensor([[-4], [0]]), 1)


LOSSES = [
    pytest.param(lambda m, x, t, **kw: m.nn.functional.cross_entropy(x, t, **kw), id="cross_entropy"),
    pytest.param(lambda m, x, t, **kw: m.nn.functional.nll_loss(m.nn.functional.log_softmax(x, 1), t, **kw),
                 id="nll_loss"),
    pytest.param(lambda m, x, t, **kw: m.nn.CrossEntropyLoss(**kw)(x, t), id="CrossEntropyLoss"),
]


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize(("target", "kwargs"), [
    ([3, 0], {}), ([-1, 0], {}), ([-2, 0], {"ignore_index": -1}), ([0, 7], {"weight": [1.0, 2.0, 3.0]}),
    ([4, 0], {"label_smoothing": 0.1}),
], ids=["too-large", "negative", "negative-not-ignored", "weighted", "smoothed"])
def test_class_targets_out_of_range_raise_index_error(loss: Callable, target: list, kwargs: dict) -> None:
    x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    bad = next(t for t in target if not 0 <= t < 3)

    def run(m: Any) -> Any:
        kw = dict(kwargs)
        if "weight" in kw:
            kw["weight"] = m.tensor(kw["weight"], dtype=m.float64)
        return loss(m, m.tensor(x), m.tensor(target), **kw)

    name = "nll_loss" if "nll_loss" in loss.__code__.co_names else "cross_entropy"
    if name == "nll_loss" and "label_smoothing" in kwargs:
        pytest.skip("PyTorch's nll_loss has no label_smoothing")
    with pytest.raises(IndexError, match=rf"{name}: target {bad} is out of bounds: class indices must lie in "
                                         r"\[0, 2\] for an input with 3 classes, or equal ignore_index="):
        run(kiln)
    torch = pytest.importorskip("torch")
    with pytest.raises(IndexError, match=rf"Target {bad} is out of bounds"):
        run(torch)


@pytest.mark.parametrize(("target", "kwargs"), [
    ([-100, 2], {}), ([5, 1], {"ignore_index": 5}), ([-1, 0], {"ignore_index": -1}),
    ([[[-100, 2], [1, 0]], [[2, 2], [-100, 1]]], {}),
], ids=["default-ignore", "ignore-5", "ignore-negative", "4d"])
def test_ignored_targets_still_work_and_match_pytorch(target: list, kwargs: dict) -> None:
    torch = torch_or_skip()
    shape = (2, 3, 2, 2) if isinstance(target[0], list) else (2, 3)
    x = np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    kx, tx = kiln.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    kl = F.cross_entropy(kx, kiln.tensor(target), **kwargs)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(target), **kwargs)
    np.testing.assert_allclose(kl.item(), tl.item(), rtol=1e-12)
    kl.backward()
    tl.backward()
    np.testing.assert_allclose(kx.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_index_checks_do_not_break_compiled_tracing() -> None:
    """The checks read the real index data at trace time, never through the tracer: no graph break."""
    weight = kiln.tensor(W)

    def f(idx: kiln.Tensor, x: kiln.Tensor, t: kiln.Tensor) -> kiln.Tensor:
        return F.embedding(idx, weight).sum() + kiln.gather(x, 1, t).sum() + F.cross_entropy(x, t.reshape(-1))

    compiled = kiln.compile(f, fullgraph=True)
    args = (kiln.tensor([0, 2]), kiln.tensor(np.arange(6.0).reshape(2, 3)), kiln.tensor([[1], [2]]))
    np.testing.assert_allclose(compiled(*args).item(), f(*args).item(), rtol=1e-6)
    with pytest.raises(IndexError, match="embedding: index 3"):  # a new trace checks its own data
        kiln.compile(f, fullgraph=True)(kiln.tensor([3]), *args[1:])


# ---- 3. integer division by zero --------------------------------------------------------------
def _ifloordiv(a: Any, b: Any) -> Any:
    a //= b
    return a


def _imod(a: Any, b: Any) -> Any:
    a %= b
    return a


DIVISIONS = [
    pytest.param(lambda m, a, z: a // 0, id="tensor//int"),
    pytest.param(lambda m, a, z: a % 0, id="tensor%int"),
    pytest.param(lambda m, a, z: a // z, id="tensor//tensor"),
    pytest.param(lambda m, a, z: a % z, id="tensor%tensor"),
    pytest.param(lambda m, a, z: 5 // z, id="int//tensor"),
    pytest.param(lambda m, a, z: 5 % z, id="int%tensor"),
    pytest.param(lambda m, a, z: _ifloordiv(a.clone(), 0), id="//=int"),
    pytest.param(lambda m, a, z: _imod(a.clone(), z), id="%=tensor"),
    pytest.param(lambda m, a, z: m.floor_divide(a, z), id="floor_divide"),
    pytest.param(lambda m, a, z: m.remainder(a, 0), id="remainder"),
    pytest.param(lambda m, a, z: m.div(a, z, rounding_mode="floor"), id="div-floor"),
    pytest.param(lambda m, a, z: m.div(a, 0, rounding_mode="trunc"), id="div-trunc"),
    pytest.param(lambda m, a, z: a.int() // z.int(), id="int32"),
]


@pytest.mark.parametrize("op", DIVISIONS)
def test_integer_division_by_zero_raises(op: Callable) -> None:
    a, z = kiln.tensor([7, -7]), kiln.tensor([2, 0])
    with pytest.raises(kiln.IntegerDivisionByZeroError) as info:
        op(kiln, a, z)
    assert isinstance(info.value, ZeroDivisionError) and isinstance(info.value, RuntimeError)
    assert "ZeroDivisionError" in str(info.value)  # PyTorch's message is just "ZeroDivisionError"
    assert "integer division by zero" in str(info.value) and "Fix:" in str(info.value)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        op(torch, torch.tensor([7, -7]), torch.tensor([2, 0]))


@pytest.mark.parametrize("op", [
    pytest.param(lambda a, b: a // b, id="//"), pytest.param(lambda a, b: a % b, id="%"),
    pytest.param(lambda a, b: 5 // b, id="r//"), pytest.param(lambda a, b: 5 % b, id="r%"),
    pytest.param(_ifloordiv, id="//="), pytest.param(_imod, id="%="),
])
@pytest.mark.parametrize(("a", "b"), [
    ([7, -7, 7, -7, 0], [2, 2, -2, -2, 3]),  # integers: floor semantics, sign of the divisor
    ([7.0, -7.0, 1.5, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0, 2.0]),  # floats by zero: inf / nan, no error
    ([7, -7, 0], [0.0, 0.0, 0.0]),  # an integer tensor by float zeros promotes to float: no error
], ids=["int", "float-by-zero", "int-by-float-zero"])
def test_division_values_match_pytorch(op: Callable, a: list, b: list) -> None:
    torch = torch_or_skip()
    if op in (_ifloordiv, _imod) and isinstance(a[0], int) and isinstance(b[0], float):
        with pytest.raises(RuntimeError, match="can't be cast"), np.errstate(divide="ignore", invalid="ignore"):
            op(kiln.tensor(a), kiln.tensor(b))  # an int tensor can't hold the float result
        with pytest.raises(RuntimeError, match="can't be cast"):
            op(torch.tensor(a), torch.tensor(b))
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        got = op(kiln.tensor(a), kiln.tensor(b))
    want = op(torch.tensor(a), torch.tensor(b))
    assert got.dtype.name == str(want.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_empty_integer_division_does_not_raise() -> None:
    assert (kiln.tensor([], dtype=kiln.int64) // 0).shape == (0,)


def test_inplace_floor_divide_and_remainder_write_into_the_tensor() -> None:
    a = kiln.tensor([7, -7])
    alias = a
    a //= 2
    assert a is alias and a.tolist() == [3, -4]
    a %= 3
    assert a is alias and a.tolist() == [0, 2]


def test_float_division_by_zero_keeps_inf_and_nan() -> None:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = kiln.tensor([1.0, -1.0, 0.0]) // 0
        r = kiln.tensor([1.0, -1.0, 0.0]) % 0.0
    assert q.numpy()[0] == np.inf and q.numpy()[1] == -np.inf and np.isnan(q.numpy()[2])
    assert np.isnan(r.numpy()).all()


# ---- 4. sizes must be ints -------------------------------------------------------------------
BAD_SIZES = [
    pytest.param(lambda m: m.ones(2.5), "ones", "float", 0, id="ones(2.5)"),
    pytest.param(lambda m: m.ones(2.0), "ones", "float", 0, id="ones(2.0)"),
    pytest.param(lambda m: m.zeros((2, 3.0)), "zeros", "float", 1, id="zeros((2,3.0))"),
    pytest.param(lambda m: m.zeros([2, 3.0]), "zeros", "float", 1, id="zeros([2,3.0])"),
    pytest.param(lambda m: m.zeros(2, 3.0), "zeros", "float", 1, id="zeros(2,3.0)"),
    pytest.param(lambda m: m.empty(2.5), "empty", "float", 0, id="empty"),
    pytest.param(lambda m: m.randn(2.5), "randn", "float", 0, id="randn"),
    pytest.param(lambda m: m.rand(2, 2.5), "rand", "float", 1, id="rand"),
    pytest.param(lambda m: m.full((2.5,), 1.0), "full", "float", 0, id="full"),
    pytest.param(lambda m: m.ones(np.float64(2.0)), "ones", "float64", 0, id="numpy-float"),
    pytest.param(lambda m: m.ones(True), "ones", "bool", 0, id="ones(True)"),
    pytest.param(lambda m: m.ones("2"), "ones", "str", 0, id="ones('2')"),
    pytest.param(lambda m: m.ones(None), "ones", "NoneType", 0, id="ones(None)"),
    pytest.param(lambda m: m.ones(4).reshape((2.0, 2)), "reshape", "float", 0, id="reshape"),
    pytest.param(lambda m: m.ones(4).reshape(2, 2.0), "reshape", "float", 1, id="reshape-varargs"),
    pytest.param(lambda m: m.ones(4).view((2, 2.0)), "view", "float", 1, id="view"),
    pytest.param(lambda m: m.ones(1).expand(2.0), "expand", "float", 0, id="expand"),
]


@pytest.mark.parametrize(("make", "op", "found", "pos"), BAD_SIZES)
def test_non_integer_sizes_raise_type_error(make: Callable, op: str, found: str, pos: int) -> None:
    with pytest.raises(TypeError, match=rf"{op}\(\): argument '(size|shape)' must be a tuple of ints, but found "
                                        rf"element of type {found} at pos {pos}"):
        make(kiln)


@pytest.mark.parametrize(("make", "op", "found", "pos"),
                         [p for p in BAD_SIZES if p.id not in ("reshape-varargs",)])
def test_pytorch_also_rejects_those_sizes(make: Callable, op: str, found: str, pos: int) -> None:
    torch = torch_or_skip()
    with pytest.raises(TypeError):
        make(torch)


def test_size_error_suggests_the_fix() -> None:
    with pytest.raises(TypeError, match=r"sizes must be whole numbers: use int\(2.5\) or // for a computed size"):
        kiln.zeros(2.5)


def test_bool_inside_a_size_tuple_is_rejected_too() -> None:
    """PyTorch rejects ones(True) but silently reads ones((2, True)) as (2, 1); kiln rejects both."""
    with pytest.raises(TypeError, match="element of type bool at pos 1"):
        kiln.ones((2, True))


@pytest.mark.parametrize(("make", "op"), [
    (lambda m: m.randint(0, 3, (2.5,)), "randint"), (lambda m: m.eye(2.5), "eye"),
    (lambda m: m.randperm(2.5), "randperm"), (lambda m: m.linspace(0, 1, 2.5), "linspace"),
    (lambda m: m.normal(0.0, 1.0, size=(2.5,)), "normal"),
])
def test_other_integer_arguments_raise_type_error(make: Callable, op: str) -> None:
    with pytest.raises(TypeError, match=rf"{op}\(\): argument '\w+' must be (a tuple of ints|an int)"):
        make(kiln)
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError):
        make(torch)


@pytest.mark.parametrize("make", [
    lambda m: m.ones(np.int64(2), np.int32(3)),
    lambda m: m.zeros((m.tensor(2), 3)),
    lambda m: m.ones(4).reshape(np.int64(2), -1),
    lambda m: m.ones(1).expand(m.tensor(3)),
    lambda m: m.ones([2, 3]),
    lambda m: m.eye(np.int64(2)),
], ids=["numpy-ints", "0-d-int-tensor", "reshape-numpy", "expand-0-d", "list", "eye-numpy"])
def test_integer_like_sizes_are_accepted_as_in_pytorch(make: Callable) -> None:
    torch = torch_or_skip()
    assert tuple(make(kiln).shape) == tuple(make(torch).shape)


def test_arange_still_takes_float_bounds() -> None:
    torch = torch_or_skip()
    np.testing.assert_allclose(kiln.arange(2.5).numpy(), torch.arange(2.5).numpy())
    np.testing.assert_allclose(kiln.arange(0, 1, 0.25).numpy(), torch.arange(0, 1, 0.25).numpy())

"""The op table shared by the PyTorch parity tests and the finite-difference checks.

A `Case` is one call of one op: `fn(L, *tensors)` where `L` is the library (kiln, or
`TorchLib` for PyTorch), so the same lambda runs on both sides; `tfn` overrides it for
PyTorch where the spellings differ (e.g. NumPy's axis/keepdims). Inputs are specs
that draw a NumPy array from a seeded generator: `R` (float, differentiated), `P`
(positive float), `A` (float away from 0), `C` (float constant), `I` (int64 indices),
`M` (bool mask) and `K` (a fixed array).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def _quiet(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call fn with warnings silenced (PyTorch warns about some valid calls)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ---- input specs --------------------------------------------------------------------
@dataclass(frozen=True)
class R:
    """Float input that gets a gradient, uniform in [lo, hi)."""

    shape: tuple
    lo: float = -2.0
    hi: float = 2.0
    grad: bool = True

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        return rng.uniform(self.lo, self.hi, self.shape).astype(dtype)


def _shape(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else tuple(shape)


def P(*shape: int) -> R:
    """Positive floats in [0.5, 2)."""
    return R(_shape(shape), 0.5, 2.0)


def S(*shape: int) -> R:
    """Floats in [-2, 2)."""
    return R(_shape(shape))


@dataclass(frozen=True)
class A(R):
    """Floats with |x| in [0.2, 2): away from the kinks of abs/relu/sign."""

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        mag = rng.uniform(0.2, 2.0, self.shape)
        return (mag * rng.choice([-1.0, 1.0], self.shape)).astype(dtype)


def C(*shape: int, lo: float = -2.0, hi: float = 2.0) -> R:
    """A float input that gets no gradient."""
    return R(_shape(shape), lo, hi, grad=False)


@dataclass(frozen=True)
class I:  # noqa: E742 - short names keep the table readable
    """int64 indices in [lo, hi)."""

    shape: tuple
    hi: int
    lo: int = 0
    grad: bool = False

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        return rng.integers(self.lo, self.hi, self.shape).astype(np.int64)


@dataclass(frozen=True)
class M:
    """A bool mask, true with probability p."""

    shape: tuple
    p: float = 0.5
    grad: bool = False

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        return rng.random(self.shape) < self.p


@dataclass(frozen=True)
class K:
    """A fixed array (float arrays follow the case dtype)."""

    value: Any
    grad: bool = False

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        arr = np.array(self.value)
        return arr.astype(dtype) if arr.dtype.kind == "f" else arr


@dataclass(frozen=True)
class Probs:
    """Rows of class probabilities along dim 1 (float, no grad)."""

    shape: tuple
    grad: bool = False

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        e = np.exp(rng.standard_normal(self.shape))
        axis = 1 if len(self.shape) > 1 else 0
        return (e / e.sum(axis=axis, keepdims=True)).astype(dtype)


@dataclass(frozen=True)
class Targets:
    """Class indices in [0, n) with a few entries set to `ignore`."""

    shape: tuple
    n: int
    ignore: int | None = None
    grad: bool = False

    def draw(self, rng: np.random.Generator, dtype: str) -> np.ndarray:
        t = rng.integers(0, self.n, self.shape).astype(np.int64)
        if self.ignore is not None:
            flat = t.reshape(-1)
            flat[:: 3] = self.ignore
        return t


# ---- cases ---------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    inputs: list
    tfn: Callable[..., Any] | None = None
    grad: bool = True  # differentiable: compare grads and finite-difference check
    fd: bool = True  # include in the finite-difference check
    id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.id:
            shapes = ",".join("x".join(map(str, getattr(s, "shape", ()) or ())) or "s" for s in self.inputs)
            self.id = f"{self.name}[{shapes}]"


CASES: list[Case] = []


def case(name: str, fn: Callable[..., Any], *variants: list, **kw: Any) -> None:
    """Register `fn` on each list of input specs in `variants`."""
    seen: dict[str, int] = {}
    for inputs in variants:
        c = Case(name, fn, list(inputs), **kw)
        n = seen.get(c.id, 0)
        seen[c.id] = n + 1
        if n:
            c.id += f"#{n}"
        CASES.append(c)


# -- elementwise unary ------------------------------------------------------------------
UNARY_SHAPES = [(), (1,), (3, 4), (2, 1, 3)]


def _unary(name: str, fn: Callable, spec: Callable = S) -> None:
    case(name, fn, *[[spec(*s)] for s in UNARY_SHAPES])


def _away(*shape: int) -> R:
    return A(shape)


_unary("neg", lambda L, x: L.neg(x))
_unary("neg_op", lambda L, x: -x)
_unary("abs", lambda L, x: L.abs(x), _away)
_unary("exp", lambda L, x: L.exp(x))
_unary("log", lambda L, x: L.log(x), P)
_unary("log1p", lambda L, x: L.log1p(x), P)
_unary("sqrt", lambda L, x: L.sqrt(x), P)
_unary("rsqrt", lambda L, x: L.rsqrt(x), P)
_unary("sin", lambda L, x: L.sin(x))
_unary("cos", lambda L, x: L.cos(x))
_unary("tanh", lambda L, x: L.tanh(x))
_unary("sigmoid", lambda L, x: L.sigmoid(x))
_unary("relu", lambda L, x: L.relu(x), _away)
_unary("erf", lambda L, x: L.erf(x))
_unary("leaky_relu", lambda L, x: L.leaky_relu(x, 0.1), _away)
_unary("gelu", lambda L, x: L.gelu(x))
_unary("gelu_tanh", lambda L, x: L.gelu(x, approximate="tanh"))
_unary("silu", lambda L, x: L.silu(x))
_unary("softplus", lambda L, x: L.softplus(x))
_unary("softplus_beta", lambda L, x: L.softplus(x, beta=2.0, threshold=1.5))
_unary("clamp", lambda L, x: L.clamp(x, -0.5, 0.7))
_unary("clamp_min", lambda L, x: L.clamp(x, min=-0.5))
_unary("clamp_max", lambda L, x: x.clamp(max=0.3))
_unary("square_pow", lambda L, x: x ** 2)
_unary("cube_pow", lambda L, x: L.pow(x, 3))
_unary("sqrt_pow", lambda L, x: x ** 0.5, P)
_unary("neg_pow", lambda L, x: x ** -1.5, P)
_unary("rpow", lambda L, x: 2 ** x)
_unary("method_chain", lambda L, x: x.exp().tanh().sigmoid())
_unary("sign_mul", lambda L, x: L.sign(x) * x, _away)
_unary("tan", lambda L, x: L.tan(x), lambda *s: R(s, -1.2, 1.2))
_unary("asin", lambda L, x: L.asin(x), lambda *s: R(s, -0.9, 0.9))
_unary("acos", lambda L, x: x.acos(), lambda *s: R(s, -0.9, 0.9))
_unary("atan", lambda L, x: L.arctan(x))
_unary("sinh", lambda L, x: L.sinh(x))
_unary("cosh", lambda L, x: x.cosh())
_unary("asinh", lambda L, x: L.asinh(x))
_unary("acosh", lambda L, x: L.acosh(x), lambda *s: R(s, 1.2, 3.0))
_unary("atanh", lambda L, x: x.atanh(), lambda *s: R(s, -0.9, 0.9))
_unary("log2", lambda L, x: L.log2(x), P)
_unary("log10", lambda L, x: x.log10(), P)
_unary("expm1", lambda L, x: L.expm1(x))

HALVES = K([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, -0.2, 3.7], [0.0, -3.2, 2.49, -2.51]], grad=True)
# piecewise constant: zero gradient, as PyTorch (no finite differences: HALVES sits on the jumps)
case("floor", lambda L, x: L.floor(x) * x, [HALVES], fd=False)
case("ceil", lambda L, x: x.ceil() + x, [HALVES], fd=False)
case("round", lambda L, x: L.round(x) * 2 + x, [HALVES], fd=False)  # halves to even
case("trunc", lambda L, x: L.trunc(x) * x + x.trunc(), [HALVES], fd=False)
case("floor_ceil_round", lambda L, x: L.floor(x) + L.ceil(x) * L.round(x) + x, [S(3, 4)])
case("floor_divide_int", lambda L, a, b: a // b, [I((3, 4), 20, -20), K([3, -3, 7, -2])], grad=False)
case("floor_divide_float", lambda L, a, b: L.floor_divide(a, b), [C(3, 4, lo=-5, hi=5), A((4,), grad=False)], grad=False)
case("div_floor_trunc", lambda L, a, b: (L.div(a, b, rounding_mode="floor"), L.div(a, b, rounding_mode="trunc")),
     [I((3, 4), 20, -20), K([3, -3, 7, -2])], [C(3, 4, lo=-5, hi=5), K([1.5, -2.5, 0.7, -3.0])], grad=False)
case("remainder", lambda L, a, b: L.remainder(a, b), [R((3, 4), -5, 5), R((4,), 0.7, 2.0)], [R((3, 4), -5, 5), R((4,), -2.0, -0.7)])
case("mod_op", lambda L, a: a % 1.5, [R((3, 4), -5, 5)])
case("mod_int", lambda L, a: a % 3, [I((3, 4), 10, -10)], grad=False)
case("prod", lambda L, x: L.prod(x), [S(3, 4)], [S(5)])
case("prod_dim", lambda L, x: L.prod(x, 1), [S(3, 4)], [S(2, 3, 4)])
case("prod_dim_keepdim", lambda L, x: x.prod(dim=-1, keepdim=True), [S(3, 4)])
case("prod_zeros", lambda L, x: L.prod(x, 1), [K([[0.0, 2.0, 3.0], [0.0, 0.0, 1.5], [1.0, -2.0, 0.5]], grad=True)], fd=False)
case("prod_int", lambda L, x: L.prod(x, 0), [I((3, 4), 5, -5)], grad=False)
case("any_all", lambda L, x: (L.any(x), L.all(x), L.any(x, 1), x.all(0), L.all(x, dim=1, keepdim=True)),
     [M((3, 4))], [K([[True, True], [True, True]])], [K([[0.0, 1.5], [0.0, 0.0]])], grad=False)
case("clamp_broadcast_bounds", lambda L, x, lo, hi: L.clamp(x, lo, hi), [S(2, 3), R((3,), -1.0, -0.1), R((2, 1), 0.1, 1.0)])
case("clamp_int_float_bound", lambda L, i: L.clamp(i, 0.5, 3.5), [I((3, 4), 6)], grad=False)
case("clamp_tensor_bounds", lambda L, x, lo, hi: L.clamp(x, lo, hi),
     [S(3, 4), R((3, 4), -1.0, -0.1), R((3, 4), 0.1, 1.0)])

# -- elementwise binary ----------------------------------------------------------------
BINARY_SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (2, 3)),
                 ((2, 1, 3), (1, 4, 1)), ((1,), (3, 1))]


def _binary(name: str, fn: Callable, a_spec: Callable = S, b_spec: Callable = S) -> None:
    case(name, fn, *[[a_spec(*a), b_spec(*b)] for a, b in BINARY_SHAPES])


_binary("add", lambda L, a, b: L.add(a, b))
_binary("add_op", lambda L, a, b: a + b)
_binary("add_alpha", lambda L, a, b: L.add(a, b, alpha=2.5))
_binary("sub", lambda L, a, b: L.sub(a, b))
_binary("sub_op", lambda L, a, b: a - b)
_binary("mul", lambda L, a, b: L.mul(a, b))
_binary("mul_op", lambda L, a, b: a * b)
_binary("div", lambda L, a, b: L.div(a, b), S, _away)
_binary("div_op", lambda L, a, b: a / b, S, _away)
_binary("pow", lambda L, a, b: L.pow(a, b), P, S)
_binary("pow_op", lambda L, a, b: a ** b, P, S)
_binary("maximum", lambda L, a, b: L.maximum(a, b))
_binary("minimum", lambda L, a, b: L.minimum(a, b))
_binary("matmul_free_combo", lambda L, a, b: (a * b + a) / (b * b + 1.0))
_binary("atan2", lambda L, a, b: L.atan2(a, b), S, _away)
case("bitwise_int", lambda L, a, b: (L.bitwise_and(a, b), a | b, L.bitwise_xor(a, b), ~a, a & 6),
     [I((3, 4), 50, -50), I((4,), 50, -50)], grad=False)
case("bitwise_bool", lambda L, a, b: (a & b, L.bitwise_or(a, b), a ^ b, L.bitwise_not(a)), [M((3, 4)), M((4,))],
     grad=False)

case("where", lambda L, c, a, b: L.where(c, a, b),
     [M((3, 4)), S(3, 4), S(3, 4)], [M((3, 1)), S(1, 4), S(3, 4)], [M((4,)), S(2, 3, 4), S(1)],
     [M(()), S(2, 3), S(())])
case("where_scalar", lambda L, c, a: L.where(c, a, 0.5), [M((3, 4)), S(3, 4)])
case("scalar_ops", lambda L, x: (x + 2.5) * 3 - 1.5 / (x * x + 1) + x / 4, [S(3, 4)], [S()])
case("rsub", lambda L, x: 3 - x, [S(3, 4)])
case("rdiv", lambda L, x: 2 / x, [A((3, 4))])
case("rmul_radd", lambda L, x: 2 * x + 1, [S(2, 3)])

# -- reductions --------------------------------------------------------------------------
RED = [S(3, 4, 5), S(3, 1, 4)]
for _name in ("sum", "mean"):
    case(_name, lambda L, x, n=_name: getattr(L, n)(x), *[[s] for s in RED], [S(5)], [S()])
    case(_name + "_dim", lambda L, x, n=_name: getattr(L, n)(x, dim=1), *[[s] for s in RED])
    case(_name + "_dims", lambda L, x, n=_name: getattr(L, n)(x, dim=(0, 2)), *[[s] for s in RED])
    case(_name + "_neg_keepdim", lambda L, x, n=_name: getattr(L, n)(x, -1, keepdim=True), *[[s] for s in RED])
    case(_name + "_method", lambda L, x, n=_name: getattr(x, n)(1), *[[s] for s in RED])
    case(_name + "_numpy_axis", lambda L, x, n=_name: getattr(L, n)(x, axis=1, keepdims=True), [S(3, 4, 5)],
         tfn=lambda L, x, n=_name: getattr(L, n)(x, dim=1, keepdim=True))
    case(_name + "_numpy_axes", lambda L, x, n=_name: getattr(L, n)(x, axis=(0, -1)), [S(3, 4, 5)],
         tfn=lambda L, x, n=_name: getattr(L, n)(x, dim=(0, -1)))
case("var", lambda L, x: L.var(x), [S(3, 4)], [S(6)])
case("var_dim", lambda L, x: L.var(x, dim=1), [S(3, 4, 5)], [S(1, 3, 4)])
case("var_biased", lambda L, x: L.var(x, dim=(0, 2), unbiased=False, keepdim=True), *[[s] for s in RED])
case("var_correction0", lambda L, x: L.var(x, 0, correction=0), [S(3, 4, 5)])
case("var_numpy", lambda L, x: L.var(x, axis=-1, keepdims=True), [S(3, 4, 5)],
     tfn=lambda L, x: L.var(x, dim=-1, keepdim=True, correction=1))
case("var_ddof0", lambda L, x: L.var(x, axis=1, ddof=0), [S(3, 4, 5)],
     tfn=lambda L, x: L.var(x, dim=1, correction=0))
case("std", lambda L, x: L.std(x), [S(3, 4)])
case("std_dim", lambda L, x: L.std(x, dim=1, keepdim=True), [S(3, 4, 5)], [S(1, 3, 4)])
case("std_numpy", lambda L, x: L.std(x, axis=0, keepdims=True), [S(3, 4, 5)],
     tfn=lambda L, x: L.std(x, dim=0, keepdim=True))
case("std_method", lambda L, x: x.std(-1), [S(3, 4, 5)])
case("max_all", lambda L, x: L.max(x), *[[s] for s in RED], [S(())])
case("max_dim", lambda L, x: L.max(x, dim=1), *[[s] for s in RED])
case("max_dim_keepdim", lambda L, x: L.max(x, 2, keepdim=True), *[[s] for s in RED])
TIES = K([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [0.0, -4.0, 5.0, 5.0]], grad=True)
case("max_dim_ties", lambda L, x: L.max(x, dim=1), [TIES], fd=False)  # the gradient goes to the first maximum
case("min_dim_ties", lambda L, x: L.min(x, 0, keepdim=True), [TIES], fd=False)
case("amax_ties", lambda L, x: L.amax(x, dim=1), [TIES], fd=False)  # ... but amax shares it evenly
case("max_all_ties", lambda L, x: L.max(x), [TIES], fd=False)
case("max_binary", lambda L, a, b: L.max(a, b), [S(3, 4), S(4)])
case("min_all", lambda L, x: L.min(x), *[[s] for s in RED])
case("min_dim", lambda L, x: L.min(x, dim=-1), *[[s] for s in RED])
case("amax", lambda L, x: L.amax(x, dim=1), *[[s] for s in RED])
case("amax_dims", lambda L, x: L.amax(x, dim=(0, 2), keepdim=True), *[[s] for s in RED])
case("amin", lambda L, x: L.amin(x, dim=-1), *[[s] for s in RED])
case("max_numpy_axis", lambda L, x: L.max(x, axis=1, keepdims=True), [S(3, 4, 5)],
     tfn=lambda L, x: L.amax(x, dim=1, keepdim=True))
case("argmax", lambda L, x: L.argmax(x), *[[s] for s in RED], grad=False)
case("argmax_dim", lambda L, x: L.argmax(x, dim=1), *[[s] for s in RED], grad=False)
case("argmax_keepdim", lambda L, x: L.argmax(x, -1, keepdim=True), *[[s] for s in RED], grad=False)
case("argmin", lambda L, x: L.argmin(x), *[[s] for s in RED], grad=False)
case("argmin_dim", lambda L, x: L.argmin(x, dim=0), *[[s] for s in RED], grad=False)
case("argmax_int", lambda L, x: L.argmax(x, dim=1), [I((3, 5), 100)], grad=False)
case("logsumexp", lambda L, x: L.logsumexp(x, dim=1), *[[s] for s in RED])
case("logsumexp_dims", lambda L, x: L.logsumexp(x, dim=(0, 2), keepdim=True), *[[s] for s in RED])
case("logsumexp_big", lambda L, x: L.logsumexp(x * 100, dim=-1), [S(3, 4)])
case("cumsum", lambda L, x: L.cumsum(x, dim=1), *[[s] for s in RED])
case("cumsum_neg", lambda L, x: L.cumsum(x, dim=-1), *[[s] for s in RED], [S(5)])
# -- sorting, selection and tiling: values and int64 indices; gradients go back through the indices
case("sort", lambda L, x: L.sort(x), *[[s] for s in RED])
case("sort_dim_descending", lambda L, x: L.sort(x, dim=0, descending=True), [S(4, 3)], [S(2, 3, 4)])
case("sort_method_stable", lambda L, x: x.sort(dim=-1, stable=True), [S(5)], [S(())])
case("argsort", lambda L, x: L.argsort(x, dim=1, descending=True), [S(3, 4)], grad=False)
case("argsort_int", lambda L, x: x.argsort(dim=0, stable=True), [I((6, 2), 3)], grad=False)
case("topk", lambda L, x: L.topk(x, 2), [S(3, 5)], [S(7)], [S(2, 3, 4)])
case("topk_smallest_dim0", lambda L, x: L.topk(x, 3, dim=0, largest=False), [S(5, 2)])
case("topk_partitioned", lambda L, x: x.topk(3, dim=1), [S(4, 40)])
case("topk_partitioned_smallest", lambda L, x: x.topk(2, dim=0, largest=False), [S(30, 3)])
case("topk_all", lambda L, x: L.topk(x, 4, dim=1), [S(2, 4)])
case("repeat", lambda L, x: x.repeat(2, 3), [S(2, 3)])
case("repeat_new_dims", lambda L, x: x.repeat(2, 1, 2), [S(2, 3)], [S(())], [S(3)])
case("repeat_zero", lambda L, x: x.repeat(0, 2), [S(2, 3)])
case("tile", lambda L, x: L.tile(x, (2,)), [S(2, 3)], [S(3)])
case("sum_int", lambda L, x: L.sum(x, dim=0), [I((3, 4), 10)], grad=False)
case("sum_bool", lambda L, x: L.sum(x), [M((3, 4))], grad=False)
case("mean_int_dtype", lambda L, x: L.mean(x, dim=1, dtype=L.float64), [I((3, 4), 10)], grad=False)

# -- matmul / linear / einsum ------------------------------------------------------------------
MATMUL_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((2, 2, 3), (3, 4)),
                 ((3,), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 2, 3), (3, 3, 2)), ((1, 2, 3), (2, 3, 4)),
                 ((1, 1), (1, 1))]
case("matmul", lambda L, a, b: L.matmul(a, b), *[[S(*a), S(*b)] for a, b in MATMUL_SHAPES])
case("matmul_op", lambda L, a, b: a @ b, [S(2, 3), S(3, 4)], [S(2, 2, 3), S(2, 3, 1)])
case("mm_bmm", lambda L, a, b, c: L.bmm(L.mm(a, b).unsqueeze(0), c), [S(2, 3), S(3, 4), S(1, 4, 2)])
case("linear", lambda L, x, w, b: L.linear(x, w, b), [S(4, 3), S(5, 3), S(5)], [S(2, 3, 3), S(2, 3), S(2)],
     [S(3), S(4, 3), S(4)])
case("linear_nobias", lambda L, x, w: L.linear(x, w), [S(4, 3), S(5, 3)])
EINSUMS = [("ij,jk->ik", (2, 3), (3, 4)), ("bij,bjk->bik", (2, 2, 3), (2, 3, 4)), ("i,j->ij", (3,), (4,)),
           ("ij,ij->i", (3, 4), (3, 4)), ("bhqd,bhkd->bhqk", (1, 2, 3, 4), (1, 2, 5, 4)),
           ("ij,jk->", (2, 3), (3, 4)), ("ik,j->ij", (3, 2), (4,)), ("ij,kj->ki", (2, 3), (4, 3)),
           ("bi,i->b", (3, 4), (4,))]
for _spec, _a, _b in EINSUMS:
    case("einsum_" + _spec.replace(",", "_").replace("->", "_to_"),
         lambda L, a, b, s=_spec: L.einsum(s, a, b), [S(*_a), S(*_b)])
case("einsum_list", lambda L, a, b: L.einsum("ij,jk->ik", [a, b]), [S(2, 3), S(3, 2)])

# -- shape ops -----------------------------------------------------------------------------------
case("reshape", lambda L, x: L.reshape(x, (4, 3)), [S(3, 4)], [S(2, 6)])
case("reshape_infer", lambda L, x: x.reshape(-1, 2), [S(3, 4)], [S(2, 1, 2)])
case("reshape_scalar", lambda L, x: x.reshape(1, 1), [S(())])
case("view", lambda L, x: x.view(2, -1, 2), [S(3, 4)])
case("flatten", lambda L, x: L.flatten(x), [S(2, 3, 4)], [S(())])
case("flatten_start", lambda L, x: L.flatten(x, 1), [S(2, 3, 4)])
case("flatten_range", lambda L, x: x.flatten(0, 1), [S(2, 3, 4)])
case("squeeze", lambda L, x: L.squeeze(x), [S(2, 1, 3, 1)], [S(1, 1)])
case("squeeze_dim", lambda L, x: x.squeeze(1), [S(2, 1, 3, 1)], [S(2, 3)])
case("squeeze_neg", lambda L, x: L.squeeze(x, -1), [S(2, 1, 3, 1)])
case("unsqueeze", lambda L, x: L.unsqueeze(x, 0), [S(3, 4)], [S(())])
case("unsqueeze_neg", lambda L, x: x.unsqueeze(-1), [S(3, 4)])
case("unsqueeze_mid", lambda L, x: x.unsqueeze(1), [S(3, 4)])
case("permute", lambda L, x: L.permute(x, (2, 0, 1)), [S(2, 3, 4)])
case("permute_varargs", lambda L, x: x.permute(1, 0, 2), [S(2, 3, 4)])
case("permute_neg", lambda L, x: x.permute(-1, 0, 1), [S(2, 3, 4)])
case("transpose", lambda L, x: L.transpose(x, 0, 2), [S(2, 3, 4)])
case("transpose_neg", lambda L, x: x.transpose(-1, -2), [S(2, 3, 4)], [S(3, 1)])
case("T", lambda L, x: x.T, [S(3, 4)], [S(1, 3)])
case("mT", lambda L, x: x.mT, [S(2, 3, 4)], [S(3, 4)])
case("expand", lambda L, x: x.expand(2, 3, 4), [S(3, 1)], [S(1, 3, 4)], [S(())])
case("expand_keep", lambda L, x: x.expand(-1, 4), [S(3, 1)])
case("broadcast_to", lambda L, x: L.broadcast_to(x, (2, 3, 4)), [S(4)], [S(3, 1)])
case("view_after_transpose", lambda L, x: x.transpose(0, 1).reshape(-1), [S(3, 4)])
case("contiguous", lambda L, x: x.transpose(0, 1).contiguous() * 2, [S(3, 4)])
case("clone", lambda L, x: x.clone() * x, [S(3, 4)])

case("cat", lambda L, a, b: L.cat([a, b], 0), [S(2, 3), S(4, 3)], [S(1), S(3)])
case("cat_dim1", lambda L, a, b, c: L.cat([a, b, c], dim=1), [S(2, 1), S(2, 3), S(2, 2)])
case("cat_neg", lambda L, a, b: L.cat((a, b), -1), [S(2, 3, 2), S(2, 3, 1)])
case("cat_one", lambda L, a: L.cat([a], 0) * 2, [S(2, 3)])
case("cat_partial_grad", lambda L, a, b: L.cat([a, b], 0), [S(2, 3), C(1, 3)])
case("stack", lambda L, a, b: L.stack([a, b]), [S(2, 3), S(2, 3)], [S(), S()])
case("stack_dim1", lambda L, a, b, c: L.stack([a, b, c], dim=1), [S(2, 3), S(2, 3), S(2, 3)])
case("stack_neg", lambda L, a, b: L.stack((a, b), -1), [S(2, 3), S(2, 3)])
case("split", lambda L, x: L.split(x, 2, dim=1), [S(3, 5)], [S(2, 4)])
case("split_sizes", lambda L, x: x.split([1, 3, 1], dim=1), [S(3, 5)])
case("split_dim0", lambda L, x: L.split(x, 1), [S(3, 2)])
case("split_partial_use", lambda L, x: L.split(x, 2, dim=1)[1], [S(3, 5)])
case("chunk", lambda L, x: L.chunk(x, 3, dim=0), [S(6, 2)], [S(5, 2)], [S(7, 2)])
case("chunk_dim", lambda L, x: x.chunk(2, -1), [S(2, 3)], [S(2, 4)])

case("pad", lambda L, x: L.pad(x, (1, 2)), [S(2, 3)], [S(3)])
case("pad_2d_value", lambda L, x: L.pad(x, (1, 1, 2, 0), value=0.5), [S(2, 3, 4)])
case("pad_3dims", lambda L, x: L.pad(x, (0, 1, 1, 0, 2, 1)), [S(2, 2, 2)])
case("pad_negative", lambda L, x: L.pad(x, (-1, 2, 1, -1)), [S(3, 4)])

case("gather", lambda L, x, i: L.gather(x, 1, i), [S(3, 4), I((3, 6), 4)], [S(3, 4), I((3, 1), 4)])
case("gather_dim0", lambda L, x, i: L.gather(x, 0, i), [S(3, 4), I((5, 4), 3)])
case("gather_small_index", lambda L, x, i: x.gather(1, i), [S(3, 4), I((2, 3), 4)])
case("gather_3d", lambda L, x, i: L.gather(x, -1, i), [S(2, 3, 4), I((2, 3, 2), 4)])
case("scatter", lambda L, x, i, s: L.scatter(x, 1, i, s), [S(3, 5), K([[4, 0], [1, 3], [2, 0]]), S(3, 2)])
case("scatter_value", lambda L, x, i: x.scatter(0, i, 0.5), [S(3, 4), K([[2, 0, 1, 1]])])
for _reduce in ("sum", "prod", "mean", "amax", "amin"):
    for _self in (True, False):
        case(f"scatter_reduce_{_reduce}{'' if _self else '_exclude_self'}",
             lambda L, x, i, s, r=_reduce, inc=_self: x.scatter_reduce(0, i, s, r, include_self=inc),
             [A((4, 2)), K([[1, 0], [0, 0], [2, 2], [2, 1], [1, 2], [0, 1]]), A((6, 2))])
case("index_select", lambda L, x, i: L.index_select(x, 0, i), [S(4, 3), K([0, 2, 2, 3, 0])],
     [S(4, 3), K([1])])
case("index_select_0d", lambda L, x, i: L.index_select(x, 1, i), [S(2, 4), K(3)])
case("index_select_dim1", lambda L, x, i: x.index_select(1, i), [S(2, 4, 3), K([3, 0, 3])])
case("index_copy", lambda L, x, i, s: L.index_copy(x, 0, i, s), [S(4, 3), K([2, 0]), S(2, 3)])
case("index_copy_dim2", lambda L, x, i, s: x.index_copy(2, i, s), [S(1, 2, 5, 3), K([4]), S(1, 2, 1, 3)])
case("index_copy_inplace", lambda L, x, i, s: (x * 1.0).index_copy_(1, i, s), [S(2, 4), K([3, 1]), S(2, 2)])
case("tril", lambda L, x: L.tril(x), [S(3, 4)], [S(2, 3, 3)], [S(4, 2)])
case("tril_triu_int_bool", lambda L, i, m: (L.tril(i), L.triu(m, 1), L.tril(i.float(), -1)), [I((3, 4), 9), M((4, 3))],
     grad=False)
case("tril_diag", lambda L, x: L.tril(x, 1), [S(3, 4)])
case("tril_neg_diag", lambda L, x: x.tril(-1), [S(3, 4)])
case("triu", lambda L, x: L.triu(x), [S(3, 4)], [S(2, 3, 3)])
case("triu_diag", lambda L, x: L.triu(x, -1), [S(3, 4)])
case("triu_pos_diag", lambda L, x: x.triu(2), [S(4, 4)])
case("masked_fill", lambda L, x, m: L.masked_fill(x, m, 0.5), [S(3, 4), M((3, 4))], [S(3, 4), M((1, 4))],
     [S(2, 3, 4), M((3, 1))])
case("masked_fill_tensor_value", lambda L, x, m, v: L.masked_fill(x, m, v), [S(3, 4), M((3, 4)), S()])
case("masked_fill_neg_inf_softmax", lambda L, x, m: L.softmax(x.masked_fill(m, float("-inf")), -1),
     [S(3, 4), K([[False, True, False, False], [True, False, True, False], [False, False, False, True]])])

# -- indexing --------------------------------------------------------------------------------------
case("index_int", lambda L, x: x[1], [S(3, 4)])
case("index_neg_int", lambda L, x: x[-1, -2], [S(3, 4)])
case("index_slice", lambda L, x: x[:, 1:3], [S(3, 4)])
case("index_slice_step", lambda L, x: x[::2, 1::2], [S(5, 4)])
case("index_none_ellipsis", lambda L, x: x[None, 1:, ..., None], [S(3, 4, 2)])
case("index_ellipsis_int", lambda L, x: x[..., 0], [S(2, 3, 4)])
case("index_int_array", lambda L, x, i: x[i], [S(4, 3), K([0, 2, 2, 3])])
case("index_list", lambda L, x: x[:, [0, 2, 2]], [S(3, 4)])
case("index_two_arrays", lambda L, x: x[[0, 1, 1], [1, 2, 2]], [S(3, 4)])
case("index_2d_int_array", lambda L, x, i: x[i], [S(5, 3), K([[0, 1], [4, 4]])])
case("index_bool_mask", lambda L, x, m: x[m], [S(3, 4), K([[True, False, True, True], [False] * 4,
                                                              [True, True, False, False]])])
case("index_bool_rows", lambda L, x, m: x[m], [S(4, 3), K([True, False, True, True])])
case("index_slice_and_array", lambda L, x, i: x[1:, i], [S(3, 4), K([3, 0, 3])])
case("index_array_then_slice", lambda L, x, i: x[i, :2], [S(3, 4), K([2, 2])])
case("index_tensor_scalar", lambda L, x, i: x[i], [S(3, 4), K(1)])
case("index_negative_array", lambda L, x, i: x[:, i], [S(2, 4), K([-1, 0, -4])])
case("index_3d_mixed", lambda L, x, i: x[i, :, 1:], [S(3, 2, 4), K([[2], [0]])])
case("index_bool_mask_3d", lambda L, x, m: x[m], [S(2, 3, 2), K([[True, False, True], [False, False, True]])])
case("index_chain", lambda L, x: x[1:][0][::2], [S(3, 4)])


def _setitem_int(L: Any, x: Any, v: Any) -> Any:
    y = x * 1
    y[0] = v
    return y


def _setitem_slice_scalar(L: Any, x: Any) -> Any:
    y = x * 2
    y[:, 1:3] = 0.25
    return y


def _setitem_mask(L: Any, x: Any, m: Any) -> Any:
    y = x + 0
    y[m] = -1.0
    return y


def _setitem_array_broadcast(L: Any, x: Any, v: Any, i: Any) -> Any:
    y = x * 1
    y[i] = v
    return y


def _setitem_then_use(L: Any, x: Any, v: Any) -> Any:
    y = x.exp()
    z = y * 3
    z[1, :] = v * 2
    return z.sum(0) * z[0]


def _setitem_into_zeros(L: Any, v: Any) -> Any:
    out = L.zeros(3, 4, dtype=v.dtype)
    out[1] = v
    out[:, 0] = v[1]
    return out


def _setitem_leading_ones(L: Any, x: Any, v: Any) -> Any:
    y = x * 1
    y[1:] = v  # v has an extra leading 1: allowed, as in NumPy
    return y


def _zero_fill_copy(L: Any, x: Any, v: Any, s: Any) -> Any:
    a, b, c = x * 2, x * 3, x * 4
    a.zero_()
    b.fill_(s)
    c.copy_(v)
    return a + b * x + c * x


case("setitem_leading_ones", _setitem_leading_ones, [S(3, 4), S(1, 2, 4)])
case("zero_fill_copy_in_graph", _zero_fill_copy, [S(2, 3), S(3), S()])
case("setitem_int", _setitem_int, [S(3, 4), S(4)], [S(3, 4), S(())])
case("setitem_slice_scalar", _setitem_slice_scalar, [S(3, 4)])
case("setitem_mask", _setitem_mask, [S(3, 4), M((3, 4))])
case("setitem_array_broadcast", _setitem_array_broadcast, [S(4, 3), S(1, 3), K([0, 2])])
case("setitem_then_use", _setitem_then_use, [S(3, 4), S(4)])
case("setitem_into_zeros", _setitem_into_zeros, [S(4)])

# -- activations / normalization / layers --------------------------------------------------------
case("softmax", lambda L, x: L.softmax(x, dim=-1), [S(3, 4)], [S(2, 3, 4)], [S(1, 5)], [S(4)])
case("softmax_dim0", lambda L, x: L.softmax(x, 0), [S(3, 4)], [S(2, 3, 4)])
case("softmax_dim1", lambda L, x: L.softmax(x * 10, 1), [S(2, 3, 4)])
case("log_softmax", lambda L, x: L.log_softmax(x, dim=-1), [S(3, 4)], [S(2, 3, 4)], [S(1, 5)])
case("log_softmax_dim1", lambda L, x: L.log_softmax(x * 10, 1), [S(2, 3, 4)])
case("dropout_p0", lambda L, x: L.dropout(x, 0.0), [S(3, 4)])
case("dropout_eval", lambda L, x: L.dropout(x, 0.5, training=False), [S(3, 4)])
case("layer_norm", lambda L, x, w, b: L.layer_norm(x, (4,), w, b), [S(2, 3, 4), S(4), S(4)],
     [S(5, 4), S(4), S(4)])
case("layer_norm_2d", lambda L, x, w, b: L.layer_norm(x, (3, 4), w, b, eps=1e-3), [S(2, 3, 4), S(3, 4), S(3, 4)])
case("layer_norm_plain", lambda L, x: L.layer_norm(x, [4]), [S(2, 3, 4)], [S(1, 4)])
case("layer_norm_int_shape", lambda L, x, w: L.layer_norm(x, 4, w), [S(3, 4), S(4)],
     tfn=lambda L, x, w: L.layer_norm(x, (4,), w))


def _bn_train(L: Any, x: Any, w: Any, b: Any) -> Any:
    c = x.shape[1]
    rm, rv = L.zeros(c, dtype=x.dtype), L.ones(c, dtype=x.dtype)
    return L.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2, eps=1e-5)


def _bn_eval(L: Any, x: Any, w: Any, b: Any, rm: Any, rv: Any) -> Any:
    return L.batch_norm(x, rm, rv, w, b, training=False)


case("batch_norm_train", _bn_train, [S(4, 3), S(3), S(3)], [S(2, 3, 4, 4), S(3), S(3)], [S(2, 3, 5), S(3), S(3)])
case("batch_norm_train_noaffine", lambda L, x: L.batch_norm(x, None, None, training=True), [S(3, 2, 2, 2)])
case("batch_norm_eval", _bn_eval, [S(4, 3), S(3), S(3), C(3), C(3, lo=0.5, hi=2.0)], [S(2, 3, 2, 2), S(3), S(3), C(3), C(3, lo=0.5, hi=2.0)])
case("embedding", lambda L, i, w: L.embedding(i, w), [I((2, 3), 5), S(5, 4)], [I((4,), 3), S(3, 2)])
case("embedding_3d_idx", lambda L, i, w: L.embedding(i, w), [I((2, 2, 3), 4), S(4, 3)])
case("embedding_padding", lambda L, i, w: L.embedding(i, w, padding_idx=1),
     [K([[0, 1, 2], [1, 1, 4]]), S(5, 4)], fd=False)  # the padding row's gradient is zeroed by design
case("one_hot", lambda L, i: L.one_hot(i, 5), [I((2, 3), 5)], [I((4,), 5)], grad=False)
case("one_hot_infer", lambda L, i: L.one_hot(i), [K([0, 3, 1])], grad=False)

case("conv1d", lambda L, x, w, b: L.conv1d(x, w, b), [S(2, 3, 7), S(4, 3, 3), S(4)])
case("conv1d_stride_pad_dil", lambda L, x, w, b: L.conv1d(x, w, b, stride=2, padding=1, dilation=2),
     [S(2, 3, 9), S(4, 3, 3), S(4)])
case("conv1d_groups", lambda L, x, w: L.conv1d(x, w, None, 1, 1, 1, 2), [S(1, 4, 6), S(4, 2, 3)])
case("conv1d_unbatched", lambda L, x, w: L.conv1d(x, w), [S(3, 6), S(2, 3, 2)])
case("conv2d", lambda L, x, w, b: L.conv2d(x, w, b), [S(2, 3, 6, 5), S(4, 3, 3, 3), S(4)])
case("conv2d_1x1", lambda L, x, w: L.conv2d(x, w), [S(1, 3, 2, 2), S(2, 3, 1, 1)])
case("conv2d_stride", lambda L, x, w, b: L.conv2d(x, w, b, stride=2), [S(2, 3, 7, 6), S(4, 3, 3, 3), S(4)])
case("conv2d_padding", lambda L, x, w: L.conv2d(x, w, padding=1), [S(1, 2, 5, 5), S(3, 2, 3, 3)])
case("conv2d_dilation", lambda L, x, w: L.conv2d(x, w, dilation=2), [S(1, 2, 7, 6), S(3, 2, 3, 2)])
case("conv2d_groups", lambda L, x, w, b: L.conv2d(x, w, b, groups=2), [S(1, 4, 5, 5), S(6, 2, 3, 3), S(6)])
case("conv2d_depthwise", lambda L, x, w: L.conv2d(x, w, padding=1, groups=4), [S(2, 4, 4, 4), S(4, 1, 3, 3)])
case("conv2d_all", lambda L, x, w, b: L.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
     [S(2, 4, 6, 7), S(2, 2, 2, 3), S(2)])
case("conv2d_same", lambda L, x, w: L.conv2d(x, w, padding="same"), [S(1, 2, 5, 4), S(3, 2, 3, 3)])
case("conv2d_valid", lambda L, x, w: L.conv2d(x, w, padding="valid"), [S(1, 2, 5, 4), S(3, 2, 2, 3)])
def _same_even(L: Any, x: Any, w: Any) -> Any:
    with warnings.catch_warnings():  # PyTorch warns that an even kernel needs a padded copy
        warnings.simplefilter("ignore")
        return (L.conv1d if x.ndim == 3 else L.conv2d)(x, w, padding="same")


case("conv_same_even_kernel", _same_even, [S(1, 2, 6), S(3, 2, 4)], [S(2, 2, 5, 4), S(3, 2, 2, 3)])
case("conv2d_same_dilated", lambda L, x, w: L.conv2d(x, w, padding="same", dilation=(2, 1)), [S(1, 2, 6, 5), S(2, 2, 2, 3)],
     tfn=lambda L, x, w: _quiet(L.conv2d, x, w, padding="same", dilation=(2, 1)))
case("conv2d_unbatched", lambda L, x, w: L.conv2d(x, w), [S(2, 4, 4), S(3, 2, 2, 2)])
case("max_pool2d", lambda L, x: L.max_pool2d(x, 2), [S(2, 3, 4, 4)], [S(1, 2, 5, 5)])
case("max_pool2d_stride_pad", lambda L, x: L.max_pool2d(x, 3, stride=2, padding=1), [S(2, 2, 6, 5)])
case("max_pool2d_rect", lambda L, x: L.max_pool2d(x, (2, 3), stride=1), [S(1, 2, 4, 5)])
case("max_pool2d_dilation", lambda L, x: L.max_pool2d(x, 2, stride=1, dilation=2), [S(1, 2, 5, 5)])
case("max_pool2d_unbatched", lambda L, x: L.max_pool2d(x, 2), [S(2, 4, 4)])
case("avg_pool2d", lambda L, x: L.avg_pool2d(x, 2), [S(2, 3, 4, 4)], [S(1, 2, 5, 5)])
case("avg_pool2d_stride_pad", lambda L, x: L.avg_pool2d(x, 3, stride=2, padding=1), [S(2, 2, 6, 5)])
case("avg_pool2d_exclude_pad", lambda L, x: L.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [S(1, 2, 5, 6)])
case("avg_pool2d_divisor", lambda L, x: L.avg_pool2d(x, 2, divisor_override=3), [S(1, 2, 4, 4)])
case("adaptive_avg_pool2d", lambda L, x: L.adaptive_avg_pool2d(x, (3, 2)), [S(2, 3, 7, 5)], [S(1, 2, 4, 4)])
case("adaptive_avg_pool2d_1", lambda L, x: L.adaptive_avg_pool2d(x, 1), [S(2, 3, 5, 4)])
case("adaptive_avg_pool2d_overlap", lambda L, x: L.adaptive_avg_pool2d(x, 3), [S(1, 2, 4, 5)])
case("adaptive_avg_pool2d_none", lambda L, x: L.adaptive_avg_pool2d(x, (None, 2)), [S(1, 2, 3, 5)])
case("adaptive_avg_pool2d_3d", lambda L, x: L.adaptive_avg_pool2d(x, (2, 3)), [S(2, 5, 6)])
case("sdpa", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v),
     [S(2, 3, 4, 8), S(2, 3, 5, 8), S(2, 3, 5, 6)], [S(4, 3), S(5, 3), S(5, 2)])
case("sdpa_causal", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v, is_causal=True),
     [S(2, 2, 4, 8), S(2, 2, 4, 8), S(2, 2, 4, 3)], [S(1, 5, 4), S(1, 5, 4), S(1, 5, 4)])
case("sdpa_causal_rect", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v, is_causal=True),
     [S(2, 3, 4), S(2, 5, 4), S(2, 5, 2)])
case("sdpa_bool_mask", lambda L, q, k, v, m: L.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [S(2, 3, 4), S(2, 5, 4), S(2, 5, 3), K(np.tril(np.ones((3, 5), bool)) | np.eye(3, 5, 2, dtype=bool))])
case("sdpa_float_mask", lambda L, q, k, v, m: L.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [S(2, 3, 4), S(2, 5, 4), S(2, 5, 3), C(3, 5)])
case("sdpa_scale", lambda L, q, k, v: L.scaled_dot_product_attention(q, k, v, scale=0.3),
     [S(1, 3, 4), S(1, 3, 4), S(1, 3, 2)])

# -- losses ------------------------------------------------------------------------------------------
for _red in ("mean", "sum", "none"):
    case(f"cross_entropy_{_red}", lambda L, x, t, r=_red: L.cross_entropy(x, t, reduction=r),
         [S(5, 4), I((5,), 4)], [S(2, 3, 4), I((2, 4), 3)], [S(2, 3, 2, 2), I((2, 2, 2), 3)])
    case(f"nll_loss_{_red}", lambda L, x, t, r=_red: L.nll_loss(L.log_softmax(x, 1), t, reduction=r),
         [S(5, 4), I((5,), 4)], [S(2, 3, 4), I((2, 4), 3)])
    case(f"cross_entropy_weight_ignore_{_red}",
         lambda L, x, t, w, r=_red: L.cross_entropy(x, t, weight=w, ignore_index=-100, reduction=r),
         [S(6, 4), Targets((6,), 4, -100), C(4, lo=0.5, hi=2.0)])
    case(f"cross_entropy_smoothing_{_red}",
         lambda L, x, t, r=_red: L.cross_entropy(x, t, label_smoothing=0.1, reduction=r),
         [S(5, 4), I((5,), 4)], [S(2, 3, 4), I((2, 4), 3)])
    case(f"cross_entropy_smoothing_weight_ignore_{_red}",
         lambda L, x, t, w, r=_red: L.cross_entropy(x, t, weight=w, ignore_index=2, label_smoothing=0.2,
                                                    reduction=r),
         [S(6, 4), Targets((6,), 4, 2), C(4, lo=0.5, hi=2.0)])
    case(f"cross_entropy_probs_{_red}", lambda L, x, t, r=_red: L.cross_entropy(x, t, reduction=r),
         [S(5, 4), Probs((5, 4))], [S(2, 3, 4), Probs((2, 3, 4))])
    case(f"cross_entropy_probs_weight_smoothing_{_red}",
         lambda L, x, t, w, r=_red: L.cross_entropy(x, t, weight=w, label_smoothing=0.3, reduction=r),
         [S(5, 4), Probs((5, 4)), C(4, lo=0.5, hi=2.0)])
    case(f"nll_loss_weight_ignore_{_red}",
         lambda L, x, t, w, r=_red: L.nll_loss(x, t, weight=w, ignore_index=1, reduction=r),
         [S(6, 3), Targets((6,), 3, 1), C(3, lo=0.5, hi=2.0)], [S(2, 3, 4), Targets((2, 4), 3, 1), C(3, lo=0.5, hi=2.0)])
    case(f"mse_loss_{_red}", lambda L, x, y, r=_red: L.mse_loss(x, y, reduction=r), [S(3, 4), S(3, 4)], [S(()), S(())])
    case(f"l1_loss_{_red}", lambda L, x, y, r=_red: L.l1_loss(x, y, reduction=r), [A((3, 4)), C(3, 4, lo=-0.1, hi=0.1)])
    case(f"bce_logits_{_red}", lambda L, x, y, r=_red: L.binary_cross_entropy_with_logits(x, y, reduction=r),
         [S(3, 4), R((3, 4), 0.0, 1.0)], [S(5), R((5,), 0.0, 1.0)])
    case(f"bce_logits_weights_{_red}",
         lambda L, x, y, w, pw, r=_red: L.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw, reduction=r),
         [S(3, 4), R((3, 4), 0.0, 1.0), C(3, 1, lo=0.5, hi=2.0), C(4, lo=0.5, hi=3.0)])
case("cross_entropy_all_ignored", lambda L, x, t: L.cross_entropy(x, t, label_smoothing=0.1), [S(2, 3), K([-100, -100])],
     fd=False)  # the mean over no entries is nan, but the gradient is 0
case("cross_entropy_unbatched_probs", lambda L, x, t: L.cross_entropy(x, t, label_smoothing=0.05), [S(4), Probs((4,))])
case("cross_entropy_unbatched", lambda L, x, t: L.cross_entropy(x, t), [S(4), K(2)])
case("cross_entropy_big_logits", lambda L, x, t: L.cross_entropy(x * 50, t), [S(4, 5), I((4,), 5)])
case("bce_logits_big", lambda L, x, y: L.binary_cross_entropy_with_logits(x * 40, y), [S(3, 4), R((3, 4), 0.0, 1.0)])
case("mse_loss_target_grad", lambda L, x, y: L.mse_loss(x, y), [S(3, 4), S(3, 4)])


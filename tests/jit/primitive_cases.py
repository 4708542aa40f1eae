"""The table of test_primitive_differential.py: each primitive as user-level kiln code, on drawn operands.

`TABLE` maps every primitive name (kiln.ops.primitive.REGISTRY) to an `Entry`: a function that
takes a `Draw` (a seeded generator of shapes, layouts, dtypes and special values) and returns
the user-level function to run and the operands to call it with. `EXCLUDED` names the
primitives that cannot be reached this way, with the reason.

Operands are `Arg`s: a base array plus a view of it (contiguous, transposed, every other element
of the last dim, starting one row in, or one row broadcast down the first dim with stride 0),
so compiled code sees non-contiguous, offset and broadcast inputs. A gradient, when asked for, goes to the base, through the eager view.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import kiln
import kiln.nn.functional as F

FLOATS = ("float32", "float64")
VIEWS = ("C", "T", "step", "offset", "bcast")
SMALL_DIMS = (1, 2, 3, 4, 5, 7)
BIG_ROWS = (64, 80, 127, 130)  # last dims of "big" shapes; leading dims bring them past 4096 elements
BIG_NUMEL = 4100


@dataclass(frozen=True)
class Arg:
    """One tensor operand: its base array, the view of it the function receives (of `shape`), and
    whether the base is a leaf that receives a gradient."""

    base: np.ndarray
    view: str
    grad: bool
    shape: tuple

    def make(self) -> tuple[kiln.Tensor, kiln.Tensor]:
        """A fresh leaf holding a copy of the base, and the view of it."""
        leaf = kiln.tensor(self.base.copy(), requires_grad=self.grad)
        if self.view == "T":
            return leaf, leaf.transpose(-1, -2)
        if self.view == "step":
            return leaf, leaf[..., ::2]
        if self.view == "offset":
            return leaf, leaf[1:]
        if self.view == "bcast":
            return leaf, leaf.expand(*self.shape)
        return leaf, leaf

    def __repr__(self) -> str:
        view = "" if self.view == "C" else f"({self.view})"
        return f"{self.base.dtype}{list(self.shape)}{view}{'+grad' if self.grad else ''}"


def specials(dtype: str) -> np.ndarray:
    """Special floats mixed into inputs: zeros of both signs, infinities, NaN, huge and tiny values."""
    info = np.finfo(dtype)
    return np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.max / 4, -info.max / 4, info.tiny, -info.tiny,
                     info.smallest_subnormal * 3, 1e30 if dtype == "float64" else 1e20, 1.0, -1.0], dtype)


class Draw:
    """Seeded draws of shapes, operands and parameters for one case.

    size: "small" (dims of 1 to 7), "empty" (as small, one dim 0 where allowed) or "big"
    (past 4096 elements: the fused C kernels and row kernels' vectorized loops run).
    dtype: what `x()` fills operands with: a float dtype, "int64" or "bool".
    """

    def __init__(self, rng: np.random.Generator, dtype: str, size: str, grad: bool, views: tuple = VIEWS):
        self.rng, self.dtype, self.size, self.grad, self.views = rng, dtype, size, grad, views
        self.float = dtype if dtype in FLOATS else "float32"

    # ---- plain choices
    def pick(self, options: Any) -> Any:
        options = list(options)
        return options[int(self.rng.integers(len(options)))]

    def coin(self, p: float = 0.5) -> bool:
        return bool(self.rng.random() < p)

    def int(self, lo: int, hi: int) -> int:
        """An int in [lo, hi]."""
        return int(self.rng.integers(lo, hi + 1))

    # ---- shapes
    def shape(self, min_ndim: int = 1, max_ndim: int = 3, empty: bool = True) -> tuple:
        """A shape of the case's size; `empty=False` keeps every dim nonzero."""
        ndim = self.int(max(min_ndim, self.size == "big"), max_ndim)
        if self.size == "big":
            last = self.pick(BIG_ROWS)
            lead = [self.pick(SMALL_DIMS[:3]) for _ in range(ndim - 2)]
            if ndim >= 2:
                lead.append(-(-BIG_NUMEL // (last * math.prod(lead))) + self.int(0, 2))
            else:
                last = BIG_NUMEL + self.int(-4, 3)
            return (*lead, last)
        dims = [self.pick(SMALL_DIMS) for _ in range(ndim)]
        if self.size == "empty" and empty and ndim:
            dims[self.int(0, ndim - 1)] = 0
        return tuple(dims)

    def bshapes(self, n: int, **kw: Any) -> list[tuple]:
        """`n` shapes that broadcast together: a common shape with leading dims dropped and dims set to 1."""
        out = self.shape(**kw)
        shapes = []
        for _ in range(n):
            drop = self.int(0, len(out)) if self.coin(0.3) else 0
            shapes.append(tuple(1 if self.coin(0.25) else d for d in out[drop:]))
        return shapes

    # ---- operands
    def values(self, shape: tuple, fill: str, dtype: str) -> np.ndarray:
        rng = self.rng
        if fill == "bool" or dtype == "bool":
            return rng.random(shape) < 0.5
        if fill.startswith("index:"):
            return rng.integers(0, max(int(fill[6:]), 1), shape).astype(dtype)
        if dtype.startswith("int"):
            a = rng.integers(-5, 6, shape).astype(dtype)
            if fill == "nonzero":
                a[a == 0] = 3
            elif a.size and self.coin(0.3):
                info = np.iinfo(dtype)
                a.reshape(-1)[rng.integers(0, a.size, 2)] = [info.min, info.max]
            return a
        if fill == "unit":
            return rng.uniform(0.05, 1.0, shape).astype(dtype)
        if self.coin(0.25):  # small integers: ties for max/argmax/sort, exact zeros, equal operands
            a = rng.integers(-3, 4, shape).astype(dtype)
        else:
            a = (rng.standard_normal(shape) * self.pick([1e-3, 1.0, 1e3])).astype(dtype)
        if fill == "float" and a.size and self.coin(0.75):
            k = max(1, a.size // 200) if self.size == "big" else self.int(1, 3)
            a.reshape(-1)[rng.integers(0, a.size, k)] = rng.choice(specials(dtype), k)
        return a

    def x(self, shape: tuple, fill: str = "float", dtype: str | None = None, grad: bool | None = None,
          view: str | None = None) -> Arg:
        """An operand of `shape` (`dtype` defaults to the case's) in a random layout."""
        dtype = dtype or ("int64" if fill.startswith("index:") else self.dtype)
        if grad is None:
            grad = self.grad and dtype in FLOATS and not fill.startswith("index:")
        if view is None:
            views = ["C"] + (["step", "offset"] if len(shape) >= 1 else []) + (["T"] if len(shape) >= 2 else [])
            views += ["bcast"] if len(shape) >= 2 and shape[0] != 1 and not fill.startswith("index:") else []
            views = [v for v in views if v in self.views]
            view = "C" if self.coin(0.35) or len(views) == 1 else self.pick(views)
        base = list(shape)
        if view == "T":
            base[-1], base[-2] = base[-2], base[-1]
        elif view == "step":
            base[-1] = 2 * base[-1]
        elif view == "offset":
            base[0] += 1
        elif view == "bcast":
            base[0] = 1
        return Arg(self.values(tuple(base), fill, dtype), view, grad, tuple(shape))

    def scalar(self) -> float:
        """A Python scalar operand, special values included."""
        return self.pick([2.0, 0.5, -1.5, 3.0, -0.0, 0.0, math.inf, -math.inf, math.nan, 1e30, 1e-30])

    def axis(self, ndim: int) -> int:
        """An axis of an `ndim`-d tensor, negative half of the time."""
        a = self.int(0, max(ndim - 1, 0))
        return a - ndim if self.coin() else a

    def axes(self, shape: tuple, nonempty: bool = False) -> tuple:
        """A nonempty random subset of the axes (of nonzero size with `nonempty`)."""
        ok = [i for i, d in enumerate(shape) if d or not nonempty]
        chosen = [i for i in ok if self.coin()] or ok[: 1]
        return tuple(chosen)


# ---- the table ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """How one primitive is reached: build(draw) -> (function of tensors, operands).

    dtypes: what the operands take ("float32", "float64", "int64", "bool"); grad: whether the
    primitive is differentiable in its float operands; empty: whether it takes size-0 dims.
    """

    build: Callable[[Draw], tuple[Callable, list[Arg]]]
    dtypes: tuple[str, ...] = FLOATS
    grad: bool = True
    empty: bool = True


INTS = ("int64",)


def unary(fn: Callable, fill: str = "float") -> Callable:
    return lambda d: (fn, [d.x(d.shape(0, 3), fill)])


def binary(fn: Callable, fill_b: str = "float") -> Callable:
    """fn(a, b) on broadcasting operands; a quarter of the time b is a Python scalar."""
    def build(d: Draw):
        if d.dtype in FLOATS and d.coin(0.25):
            s = d.scalar()
            return (lambda a: fn(a, s)), [d.x(d.shape(0, 3))]
        sa, sb = d.bshapes(2)
        return fn, [d.x(sa), d.x(sb, fill_b)]
    return build


def _where(d: Draw):
    sc, sa, sb = d.bshapes(3)
    return kiln.where, [d.x(sc, "bool", "bool"), d.x(sa), d.x(sb)]


def _cast(d: Draw):
    to = d.pick([t for t in ("float32", "float64", "int64", "bool") if t != d.dtype])
    if d.dtype in FLOATS and to == "int64":  # NaN, inf and out-of-range floats have no int value
        return (lambda x: x.to(to)), [d.x(d.shape(0, 3), "finite")]
    return (lambda x: x.to(to)), [d.x(d.shape(0, 3))]


def _reduce(method: str) -> Callable:
    def build(d: Draw):
        # (an empty max has no value: amax and argmax reduce over nonzero dims, of which 2-d shapes have one)
        shape = d.shape(2 if d.size == "empty" and method in ("amax", "argmax") else 1, 3)
        axes = d.axes(shape, nonempty=method in ("amax", "argmax"))
        keep = d.coin()
        if method == "argmax":
            ax = axes[0] if shape[axes[0]] else None
            return (lambda x: x.argmax(ax, keepdim=keep)), [d.x(shape)]
        if method == "cumsum":
            return (lambda x: x.cumsum(axes[0])), [d.x(shape)]
        return (lambda x: getattr(x, method)(axes, keepdim=keep)), [d.x(shape)]
    return build


def _reshape(d: Draw):
    shape = d.shape(1, 3)
    n = math.prod(shape)
    options = [(n,), (n, 1), (1, n, 1), shape[::-1], (shape[0], n // shape[0] if shape[0] else 0)]
    options = [o for o in options if o != shape] or [(1, *shape)]  # (never the shape it has: no reshape)
    new = d.pick(options)
    return (lambda x: x.reshape(new)), [d.x(shape)]


def _permute(d: Draw):
    shape = d.shape(2, 4)
    perm = tuple(int(p) for p in d.rng.permutation(len(shape)))
    if perm == tuple(range(len(shape))):  # the identity is no permute at all
        perm = perm[::-1]
    return (lambda x: x.permute(perm)), [d.x(shape)]


def _expand(d: Draw):
    out = d.shape(1, 3)
    src = tuple(1 if d.coin() else s for s in out)
    lead = (d.pick(SMALL_DIMS[1:]),) if d.coin(0.3) or src == out else ()  # never the shape it has
    return (lambda x: x.expand(*lead, *out)), [d.x(src)]


def _flip(d: Draw):
    shape = d.shape(1, 3)
    dims = d.axes(shape)
    return (lambda x: x.flip(dims)), [d.x(shape)]


def _pad(d: Draw):
    shape = d.shape(1, 3)
    pads = tuple(d.int(0, 2) for _ in range(2 * d.int(1, len(shape))))
    if not any(pads):  # no padding at all is no pad
        pads = (1,) + pads[1:]
    value = d.scalar() if d.dtype in FLOATS else 7
    return (lambda x: F.pad(x, pads, value=value)), [d.x(shape)]


def _concat(d: Draw):
    shape = d.shape(1, 3)
    ax = d.axis(len(shape))
    shapes = [tuple(d.int(0 if d.size == "empty" else 1, 3) if i == ax % len(shape) else s
                    for i, s in enumerate(shape)) for _ in range(d.int(2, 3))]
    return (lambda *xs: kiln.cat(xs, dim=ax)), [d.x(s) for s in shapes]


def _copy(d: Draw):
    return (lambda x: x.clone()), [d.x(d.shape(0, 3))]


def _index(d: Draw):
    shape = d.shape(2, 3)
    kind = d.pick(["slices", "tensor", "int"])
    if kind == "slices":
        return (lambda x: x[1:, ::2]), [d.x(shape)]
    if kind == "int":
        i = d.int(0, shape[0] - 1) if shape[0] else 0
        return ((lambda x: x[i, ..., ::-1]) if shape[0] else (lambda x: x[:, ::-1])), [d.x(shape)]
    idx = d.x((d.int(0, 5),), f"index:{shape[0]}") if shape[0] else d.x((0,), "index:1")
    return (lambda x, i: x[i]), [d.x(shape), idx]


def _index_put(d: Draw):
    shape = d.shape(1, 3)
    n = shape[0]
    idx = d.x((d.int(0, 4) if n else 0,), f"index:{n}")
    v_shape = (1,) if d.coin() else shape[1:]

    def put(x, i, v):
        y = x.clone()
        y[i] = v
        return y
    return put, [d.x(shape), idx, d.x(v_shape)]


def _index_grad(d: Draw):  # the VJP of integer-tensor indexing
    shape = d.shape(1, 3)
    idx = d.x((d.int(0, 6) if shape[0] else 0,), f"index:{shape[0]}")
    return (lambda x, i: x[i]), [d.x(shape, grad=d.dtype in FLOATS), idx]


def _index_shape(d: Draw, shape: tuple, ax: int) -> tuple:
    """The index operand of gather and scatter_add along `ax`: empty where that dim is."""
    n = d.int(0 if d.size == "empty" else 1, 4) if shape[ax] else 0
    return tuple(n if i == ax % len(shape) else s for i, s in enumerate(shape))


def _gather(d: Draw):
    shape = d.shape(1, 3)
    ax = d.axis(len(shape))
    ishape = _index_shape(d, shape, ax)
    return (lambda x, i: x.gather(ax, i)), [d.x(shape), d.x(ishape, f"index:{shape[ax]}")]


def _scatter_add(d: Draw):
    shape = d.shape(1, 3)
    ax = d.axis(len(shape))
    ishape = _index_shape(d, shape, ax)
    return (lambda x, i, s: x.scatter_add(ax, i, s)), [d.x(shape), d.x(ishape, f"index:{shape[ax]}"), d.x(ishape)]


def _scatter_reduce(d: Draw):
    shape = d.shape(1, 3)
    ax = d.axis(len(shape))
    ishape = _index_shape(d, shape, ax)
    reduce, include_self = d.pick(["prod", "amax", "amin"]), d.coin()
    return ((lambda x, i, s: x.scatter_reduce(ax, i, s, reduce, include_self=include_self)),
            [d.x(shape), d.x(ishape, f"index:{shape[ax]}"), d.x(ishape)])


def _matmul(d: Draw):
    m, k, n = (d.pick(SMALL_DIMS) for _ in range(3))
    if d.size == "empty":
        m, k, n = [0 if i == d.int(0, 2) else v for i, v in enumerate((m, k, n))]
    if d.size == "big":
        m, k, n = d.pick([(64, 65, 80), (130, 33, 64), (1, 4100, 3)])
    batch = d.pick([(), (2,), (3, 1)])
    kind = d.pick(["mm", "batched", "vec"])
    if kind == "vec":
        return (lambda a, b: a @ b), [d.x((m, k)), d.x((k,))]
    if kind == "batched":
        return (lambda a, b: a @ b), [d.x((*batch, m, k)), d.x((*batch[1:], k, n))]
    return (lambda a, b: a @ b), [d.x((m, k)), d.x((k, n))]


def _einsum(d: Draw):
    b, i, j, k = (d.pick(SMALL_DIMS) for _ in range(4))
    if d.size == "empty":
        b = 0
    if d.size == "big":
        b, i, j, k = 2, 40, 60, 64
    spec = d.pick(["bij,bjk->bik", "bij,bkj->bki", "bij,bij->bi"])
    shapes = {"bij,bjk->bik": ((b, i, j), (b, j, k)), "bij,bkj->bki": ((b, i, j), (b, k, j)),
              "bij,bij->bi": ((b, i, j), (b, i, j))}[spec]
    return (lambda x, y: kiln.einsum(spec, x, y)), [d.x(s) for s in shapes]


def _window(fold: bool) -> Callable:
    def build(d: Draw):
        kh, kw = d.int(1, 3), d.int(1, 3)
        stride, pad, dil = (d.int(1, 2), d.int(1, 2)), (d.int(0, 1), d.int(0, 1)), (d.int(1, 2), 1)
        h, w = (40, 60) if d.size == "big" else (d.int(3, 6), d.int(3, 6))
        h, w = max(h, dil[0] * (kh - 1) + 1), max(w, kw)  # at least one window fits (without padding)
        n = 0 if d.size == "empty" else d.int(1, 2)
        c = d.int(1, 2)
        if not fold:
            return (lambda x: kiln.unfold2d(x, (kh, kw), stride, pad, dil)), [d.x((n, c, h, w))]
        oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        return ((lambda cols: kiln.fold2d(cols, (h, w), (kh, kw), stride, pad, dil)),
                [d.x((n, c, kh, kw, oh, ow))])
    return build


def _conv(which: str) -> Callable:
    """conv2d, or one of its gradients through kiln.nn.grad (PyTorch's torch.nn.grad functions)."""
    def build(d: Draw):
        kh, kw = d.int(1, 3), d.int(1, 3)
        stride, pad, dil = (d.int(1, 2), d.int(1, 2)), (d.int(0, 1), d.int(0, 1)), (d.int(1, 2), 1)
        h, w = (20, 24) if d.size == "big" else (d.int(3, 6), d.int(3, 6))
        h, w = max(h, dil[0] * (kh - 1) + 1), max(w, kw)
        n = 0 if d.size == "empty" else d.int(1, 2)
        c, o = d.int(1, 3), (24 if d.size == "big" else d.int(1, 5))
        oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
        geometry = {"stride": stride, "padding": pad, "dilation": dil}
        if which == "input":
            return ((lambda g, wt: kiln.nn.grad.conv2d_input((n, c, h, w), wt, g, **geometry)),
                    [d.x((n, o, oh, ow)), d.x((o, c, kh, kw))])
        if which == "weight":
            return ((lambda x, g: kiln.nn.grad.conv2d_weight(x, (o, c, kh, kw), g, **geometry)),
                    [d.x((n, c, h, w)), d.x((n, o, oh, ow))])
        return (lambda x, wt: F.conv2d(x, wt, **geometry)), [d.x((n, c, h, w)), d.x((o, c, kh, kw))]
    return build


def _argsort(d: Draw):
    shape = d.shape(1, 3)
    ax, desc = d.axis(len(shape)), d.coin()
    return (lambda x: x.argsort(ax, descending=desc)), [d.x(shape)]


def _topk(d: Draw):
    shape = d.shape(1, 3)
    ax, largest = d.axis(len(shape)), d.coin()
    k = d.int(0, shape[ax])
    return (lambda x: x.topk(k, ax, largest=largest)), [d.x(shape)]


def _arange(d: Draw):
    shape = d.shape(1, 3)
    n = shape[-1]
    return (lambda x: x + kiln.arange(n, dtype=x.dtype)), [d.x(shape)]


def _full(d: Draw):
    shape = d.shape(1, 3)
    value = d.scalar() if d.dtype in FLOATS else -4
    return (lambda x: x * kiln.full(shape[-1:], value, dtype=x.dtype)), [d.x(shape)]


def _normal(d: Draw):
    shape = d.shape(0, 3)
    return (lambda x: x * kiln.randn(shape, dtype=x.dtype) + kiln.randn(shape[-1:], dtype=x.dtype)), [d.x(shape)]


def _uniform(d: Draw):
    shape = d.shape(0, 3)
    return (lambda x: x * kiln.rand(shape, dtype=x.dtype) - 0.5), [d.x(shape)]


def _multinomial(d: Draw):
    rows, cats = d.int(1, 4), d.int(1, 6)
    if d.size == "big":
        rows, cats = 40, 120
    if d.size == "empty":
        rows = 0
    replacement = d.coin()
    k = d.int(1, 8) if replacement else d.int(1, cats)
    return (lambda p: p.multinomial(k, replacement=replacement)), [d.x((rows, cats), "unit")]


def _bernoulli(d: Draw):
    shape = d.shape(0, 3)
    return (lambda p: kiln.bernoulli(p) * p), [d.x(shape, "unit")]


def _check_divisor(d: Draw):
    sa, sb = d.bshapes(2)
    return kiln.floor_divide, [d.x(sa), d.x(sb, "nonzero")]


def _check_index(d: Draw):
    shape = d.shape(1, 3)
    ax = d.axis(len(shape))
    n = d.int(0, 5) if shape[ax] else 0
    return (lambda x, i: x.index_select(ax, i)), [d.x(shape), d.x((n,), f"index:{shape[ax]}")]


def _check_targets(d: Draw):
    n, c = (50, 90) if d.size == "big" else (d.int(0 if d.size == "empty" else 1, 5), d.int(1, 6))
    return ((lambda x, t: F.cross_entropy(x, t)),
            [d.x((n, c), "finite"), d.x((n,), f"index:{c}")])


def _stop_gradient(d: Draw):
    sa, sb = d.bshapes(2)
    return (lambda a, b: a.detach() * b + a), [d.x(sa), d.x(sb)]


NUMERIC = FLOATS + INTS

TABLE: dict[str, Entry] = {
    # unary elementwise
    "abs": Entry(unary(kiln.abs), NUMERIC),
    "neg": Entry(unary(lambda x: -x), NUMERIC),
    "sign": Entry(unary(kiln.sign), NUMERIC),
    "relu": Entry(unary(lambda x: x.relu())),
    "sqrt": Entry(unary(kiln.sqrt)),
    "exp": Entry(unary(kiln.exp)),
    "log": Entry(unary(lambda x: x.log())),
    "log1p": Entry(unary(kiln.log1p)),
    "sin": Entry(unary(kiln.sin)),
    "cos": Entry(unary(lambda x: x.cos())),
    "tanh": Entry(unary(kiln.tanh)),
    "sigmoid": Entry(unary(lambda x: x.sigmoid())),
    "erf": Entry(unary(kiln.erf)),
    "floor": Entry(unary(kiln.floor)),
    "ceil": Entry(unary(lambda x: x.ceil())),
    "round": Entry(unary(kiln.round)),
    "trunc": Entry(unary(kiln.trunc)),
    "log2": Entry(unary(kiln.log2)),
    "log10": Entry(unary(lambda x: x.log10())),
    "expm1": Entry(unary(kiln.expm1)),
    "logical_not": Entry(unary(kiln.logical_not), ("bool",), grad=False),
    "tan": Entry(unary(kiln.tan)),
    "asin": Entry(unary(kiln.asin)),
    "acos": Entry(unary(lambda x: x.acos())),
    "atan": Entry(unary(kiln.atan)),
    "sinh": Entry(unary(kiln.sinh)),
    "cosh": Entry(unary(lambda x: x.cosh())),
    "asinh": Entry(unary(kiln.asinh)),
    "acosh": Entry(unary(kiln.acosh)),
    "atanh": Entry(unary(lambda x: x.atanh())),
    "bitwise_not": Entry(unary(lambda x: ~x), INTS, grad=False),
    "cast": Entry(_cast, FLOATS + ("int64", "bool")),
    # binary elementwise
    "add": Entry(binary(lambda a, b: a + b), NUMERIC),
    "sub": Entry(binary(lambda a, b: a - b), NUMERIC),
    "mul": Entry(binary(lambda a, b: a * b), NUMERIC),
    "div": Entry(binary(lambda a, b: a / b)),
    "pow": Entry(binary(lambda a, b: a ** b)),
    "maximum": Entry(binary(kiln.maximum), NUMERIC),
    "minimum": Entry(binary(lambda a, b: kiln.minimum(a, b)), NUMERIC),
    "floor_divide": Entry(binary(kiln.floor_divide), grad=False),
    "eq": Entry(binary(lambda a, b: a == b), NUMERIC, grad=False),
    "ne": Entry(binary(lambda a, b: a != b), NUMERIC, grad=False),
    "lt": Entry(binary(lambda a, b: a < b), NUMERIC, grad=False),
    "le": Entry(binary(kiln.le), NUMERIC, grad=False),
    "gt": Entry(binary(lambda a, b: a > b), NUMERIC, grad=False),
    "ge": Entry(binary(lambda a, b: a.ge(b)), NUMERIC, grad=False),
    "logical_and": Entry(binary(kiln.logical_and), ("bool",), grad=False),
    "logical_or": Entry(binary(lambda a, b: a.logical_or(b)), ("bool",), grad=False),
    "atan2": Entry(binary(kiln.atan2)),
    "bitwise_and": Entry(binary(lambda a, b: a & b), INTS, grad=False),
    "bitwise_or": Entry(binary(kiln.bitwise_or), INTS, grad=False),
    "bitwise_xor": Entry(binary(lambda a, b: a ^ b), INTS, grad=False),
    "where": Entry(_where, NUMERIC),
    # reductions and scans
    "sum": Entry(_reduce("sum"), NUMERIC),
    "max": Entry(_reduce("amax"), NUMERIC),
    "prod": Entry(_reduce("prod")),
    "argmax": Entry(_reduce("argmax"), NUMERIC, grad=False),
    "cumsum": Entry(_reduce("cumsum"), NUMERIC),
    # movement
    "reshape": Entry(_reshape, NUMERIC),
    "permute": Entry(_permute, NUMERIC),
    "expand": Entry(_expand, NUMERIC),
    "flip": Entry(_flip, NUMERIC),
    "pad": Entry(_pad, NUMERIC),
    "concat": Entry(_concat, NUMERIC),
    "copy": Entry(_copy, NUMERIC),
    "index": Entry(_index, NUMERIC),
    "index_put": Entry(_index_put, NUMERIC),
    "index_grad": Entry(_index_grad),
    "gather": Entry(_gather, NUMERIC),
    "scatter_add": Entry(_scatter_add),
    "scatter_reduce": Entry(_scatter_reduce, NUMERIC),
    "stop_gradient": Entry(_stop_gradient),
    # linear algebra, windows, sorting
    "matmul": Entry(_matmul),
    "einsum": Entry(_einsum),
    "unfold2d": Entry(_window(fold=False)),
    "fold2d": Entry(_window(fold=True)),
    "conv2d": Entry(_conv("forward")),
    "conv2d_input_grad": Entry(_conv("input")),
    "conv2d_weight_grad": Entry(_conv("weight")),
    "argsort": Entry(_argsort, NUMERIC, grad=False),
    "topk": Entry(_topk),
    # creation
    "arange": Entry(_arange, NUMERIC),
    "full": Entry(_full, NUMERIC),
    # random: compiled streams must equal eager's
    "normal": Entry(_normal),
    "uniform": Entry(_uniform),
    "multinomial": Entry(_multinomial, grad=False),
    # runtime checks, on valid data here (test_primitive_differential.py also replays bad data)
    "check_divisor": Entry(_check_divisor, INTS, grad=False, empty=False),  # nothing to check when empty
    "check_index": Entry(_check_index),
    "check_targets": Entry(_check_targets),
    "check_probability": Entry(_bernoulli),
}

EXCLUDED: dict[str, str] = {
    "all_reduce_mean": "needs an initialized process group (tests/distributed runs it under MPI)",
}

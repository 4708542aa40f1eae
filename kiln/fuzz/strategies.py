"""Hypothesis strategies that draw random, shape-valid kiln programs (see programs.py for the IR).

`programs()` draws a `Program`: a few ops, each picked from `GENERATORS` and given
operands that fit, either existing values or new inputs made to measure. Every
choice is a hypothesis draw, so a failing program shrinks to a short one.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException

import kiln

from .programs import (BIG_DIMS, BIG_NUMEL, BINARY_FLOAT, COMPARE, FLOATS, MAX_NUMEL, OPS, REDUCE,
                       SCALAR_OPS, SCALARS, UNARY_FLOAT, Input, Op, Program, index_tuple)


def _placeholder(spec: Input) -> kiln.Tensor:
    """Data standing in for an input while generating: only shapes and dtypes matter."""
    if spec.fill == "unit":
        return kiln.full(spec.shape, 0.5, dtype=spec.dtype)
    return kiln.zeros(*spec.shape, dtype=spec.dtype)


def _broadcasts(a: tuple, b: tuple) -> tuple | None:
    try:
        return tuple(np.broadcast_shapes(a, b))
    except ValueError:
        return None


class Builder:
    """Grows a program one statement at a time, tracking each value's shape and dtype."""

    def __init__(self, draw: Callable, dtype: str, big: bool = False):
        self.draw = draw
        self.dtype = dtype
        self.big = big  # new float inputs get one large dim, so results reach the fused C kernels
        self.max_numel = BIG_NUMEL if big else MAX_NUMEL
        self.stmts: list = []
        self.types: list[tuple[tuple, str]] = []
        self.placeholders: list[kiln.Tensor] = []

    # ---- drawing ------------------------------------------------------------------
    def choice(self, options: Any) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def integer(self, lo: int, hi: int) -> int:
        if hi <= lo:  # an empty range (a size-0 dim): the op that asked will likely not fit, and is skipped
            return lo
        return self.draw(st.integers(lo, hi))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def shape(self, min_ndim: int = 0, max_ndim: int = 3, max_dim: int = 4, big: bool = False) -> tuple:
        ndim = self.integer(max(min_ndim, 1) if big else min_ndim, max_ndim)
        dims = [self.integer(1, max_dim) for _ in range(ndim)]
        if big:
            dims[self.integer(0, ndim - 1)] = self.choice(BIG_DIMS)
        return tuple(dims)

    def partner_shape(self, shape: tuple, narrower: bool = False) -> tuple:
        """A shape that broadcasts with `shape` (narrower: one that broadcasts *to* `shape`)."""
        drop = self.integer(0, len(shape))
        out = list(shape[drop:])
        for i in range(len(out)):
            if out[i] != 1 and self.integer(0, 3) == 0:
                out[i] = 1
            elif out[i] == 1 and not narrower and self.integer(0, 2) == 0:
                out[i] = self.integer(2, 3)
        if not narrower and drop == 0 and self.integer(0, 4) == 0:
            out.insert(0, self.integer(1, 3))
        return tuple(out)

    # ---- values -------------------------------------------------------------------
    def ndim(self, v: int) -> int:
        return len(self.types[v][0])

    def shape_of(self, v: int) -> tuple:
        return self.types[v][0]

    def dtype_of(self, v: int) -> str:
        return self.types[v][1]

    def new_input(self, shape: tuple, dtype: str | None = None, fill: str | None = None,
                  grad: bool | None = None, view: str | None = None) -> int:
        if dtype is None:
            dtype = self.dtype if self.integer(0, 5) else self.choice(FLOATS)
        if dtype in FLOATS:
            if grad is None:
                grad = self.flag()
            if fill is None:
                fill = self.choice(["normal", "special", "ties", "positive"])
        else:
            grad = False
            fill = fill or ("bool" if dtype == "bool" else "ints")
        if view is None:
            views = ["contiguous"]
            if len(shape) >= 1:
                views += ["strided", "offset"]
            if len(shape) >= 2:
                views.append("transposed")
            if len(shape) >= 1 and shape[0] > 1:
                views.append("expanded")
            view = self.choice(views) if self.integer(0, 2) == 0 else "contiguous"
        spec = Input(tuple(shape), dtype, bool(grad), fill, view)
        self.stmts.append(spec)
        self.types.append((tuple(shape), dtype))
        self.placeholders.append(_placeholder(spec))
        return len(self.stmts) - 1

    def values(self, pred: Callable[[tuple, str], bool]) -> list[int]:
        return [i for i, (s, d) in enumerate(self.types) if pred(s, d)]

    def float_value(self, pred: Callable[[tuple], bool] = lambda s: True,
                    make_shape: Callable[[], tuple] | None = None) -> int:
        """An existing float value whose shape satisfies `pred`, or a new input."""
        existing = self.values(lambda s, d: d in FLOATS and pred(s))
        if existing and self.integer(0, 3):
            return self.choice(existing)
        shape = make_shape() if make_shape is not None else self.shape(big=self.big)
        while not pred(shape):
            shape = self.shape(min_ndim=1)
        return self.new_input(shape)

    def partner(self, x: int, narrower: bool = False, dtype: str | None = None, fill: str | None = None) -> int:
        """A float value broadcastable with value x (existing or new)."""
        sx = self.shape_of(x)
        if narrower:
            ok = lambda s, d: d in FLOATS and _broadcasts(s, sx) == sx  # noqa: E731
        else:
            ok = lambda s, d: d in FLOATS and _broadcasts(s, sx) is not None  # noqa: E731
        existing = self.values(ok) if dtype is None else []
        if existing and self.integer(0, 2) == 0:
            return self.choice(existing)
        return self.new_input(self.partner_shape(sx, narrower), dtype=dtype, fill=fill)

    def add_op(self, name: str, args: tuple, params: dict | None = None) -> int | None:
        """Append an op if it runs on placeholders and its result is small; returns its value index."""
        params = dict(params or {})
        try:
            with kiln.no_grad(), warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                out = OPS[name](*[self.placeholders[a] for a in args], **params)
        except Exception:  # noqa: BLE001 - an op that does not fit these operands is simply skipped
            return None
        if not isinstance(out, kiln.Tensor) or out.numel() > self.max_numel:
            return None
        self.stmts.append(Op(name, tuple(args), params))
        self.types.append((tuple(out.shape), out.dtype.name))
        self.placeholders.append(out.detach())
        return len(self.stmts) - 1

    # ---- params -------------------------------------------------------------------
    def dim(self, ndim: int) -> int:
        span = max(ndim, 1)
        return self.integer(-span, span - 1)

    def dims(self, ndim: int) -> Any:
        """A reduction's dim: None, an int, or a tuple of distinct dims."""
        kind = self.integer(0, 2)
        if kind == 0 or ndim == 0:
            return None if kind == 0 else self.dim(ndim)
        if kind == 1:
            return self.dim(ndim)
        picked = self.draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
        return tuple(d - ndim if self.flag() else d for d in picked)


# ---- generators: one per op family ---------------------------------------------------
def g_unary(b: Builder) -> None:
    b.add_op(b.choice(UNARY_FLOAT), (b.float_value(),))


def g_scalar(b: Builder) -> None:
    b.add_op(b.choice(SCALAR_OPS), (b.float_value(),), {"c": b.choice(SCALARS)})


def g_binary(b: Builder) -> None:
    x = b.float_value()
    y = b.partner(x)
    a, c = (x, y) if b.flag() else (y, x)
    b.add_op(b.choice(BINARY_FLOAT), (a, c))


def g_reduce(b: Builder) -> None:
    x = b.float_value()
    name = b.choice(REDUCE)
    nd = b.ndim(x)
    params: dict[str, Any] = {"keepdim": b.flag()}
    if name in ("max_dim", "min_dim"):
        params.update(dim=b.dim(nd), part=b.integer(0, 1))
    elif name in ("argmax", "argmin"):
        params["dim"] = None if b.flag() else b.dim(nd)
    else:
        params["dim"] = b.dims(nd)
    if name in ("var", "std"):
        params["correction"] = b.integer(0, 1)
    if name == "norm":
        params["p"] = b.choice([2, 1, math.inf, 3.0])
    b.add_op(name, (x,), {k: params[k] for k in sorted(params)})


def g_compare(b: Builder) -> None:
    x = b.float_value()
    b.add_op(b.choice(COMPARE), (x, b.partner(x)))


def g_bool_value(b: Builder, shape: tuple) -> int:
    """A bool value broadcastable to `shape`: an existing one, a comparison, or a new mask input."""
    existing = b.values(lambda s, d: d == "bool" and _broadcasts(s, shape) == shape)
    if existing and b.flag():
        return b.choice(existing)
    return b.new_input(b.partner_shape(shape, narrower=True), dtype="bool")


def g_where(b: Builder) -> None:
    x = b.float_value()
    y = b.partner(x)
    out_shape = _broadcasts(b.shape_of(x), b.shape_of(y))
    c = g_bool_value(b, out_shape)
    b.add_op("where", (c, x, y))


def g_branch(b: Builder) -> None:
    """``x if c.sum() > 0 else y``: Python branching on tensor data (compiled: a plan per path)."""
    x = b.float_value()
    b.add_op("branch", (b.float_value(), x, b.partner(x)))


def g_masked_fill(b: Builder) -> None:
    x = b.float_value()
    m = g_bool_value(b, b.shape_of(x))
    b.add_op("masked_fill", (x, m), {"value": b.choice(SCALARS)})


def g_logical(b: Builder) -> None:
    x = b.float_value()
    name = b.choice(["isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "any", "all"])
    if name in ("logical_and", "logical_or"):
        b.add_op(name, (x, b.partner(x)))
    elif name in ("any", "all"):
        b.add_op(name, (x,), {"dim": b.dims(b.ndim(x)), "keepdim": b.flag()})
    else:
        b.add_op(name, (x,))


def g_cast(b: Builder) -> None:
    candidates = b.values(lambda s, d: True)
    if not candidates:
        return
    b.add_op("cast", (b.choice(candidates),), {"dtype": b.choice(FLOATS)})


def g_clamp(b: Builder) -> None:
    bounds = [None, 0.0, -1.0, 0.5, math.inf, -math.inf, math.nan]
    lo, hi = b.choice(bounds), b.choice(bounds)
    if lo is None and hi is None:
        lo = 0.0
    b.add_op("clamp", (b.float_value(),), {"lo": lo, "hi": hi})


def g_const(b: Builder) -> None:
    x = b.float_value()
    if b.flag():
        b.add_op("full_add", (x,), {"c": b.choice(SCALARS)})
    elif b.ndim(x):
        b.add_op("arange_mul", (x,))


def g_cumsum(b: Builder) -> None:
    x = b.float_value()
    b.add_op("cumsum", (x,), {"dim": b.dim(b.ndim(x))})


def g_softmax(b: Builder) -> None:
    x = b.float_value()
    b.add_op(b.choice(["softmax", "log_softmax"]), (x,), {"dim": b.dim(b.ndim(x))})


def g_reshape(b: Builder) -> None:
    x = b.float_value()
    n = int(np.prod(b.shape_of(x), dtype=np.int64))
    factors = []
    k = n
    p = 2
    while k > 1:
        while k % p == 0:
            factors.append(p)
            k //= p
        p += 1
    ndim = b.integer(0, 4) if n == 1 else b.integer(1, 4)
    dims = [1] * ndim
    for f in factors:
        dims[b.integer(0, ndim - 1)] *= f
    if dims and b.integer(0, 2) == 0:
        dims[b.integer(0, ndim - 1)] = -1
    b.add_op("reshape", (x,), {"shape": tuple(dims)})


def g_movement(b: Builder) -> None:
    name = b.choice(["transpose", "permute", "unsqueeze", "squeeze", "flatten", "expand", "t", "movedim", "flip"])
    x = b.float_value()
    nd = b.ndim(x)
    s = b.shape_of(x)
    if name == "transpose":
        b.add_op(name, (x,), {"d0": b.dim(nd), "d1": b.dim(nd)})
    elif name == "permute":
        perm = tuple(b.draw(st.permutations(range(nd))))
        b.add_op(name, (x,), {"perm": perm})
    elif name == "unsqueeze":
        b.add_op(name, (x,), {"dim": b.integer(-nd - 1, nd)})
    elif name == "squeeze":
        b.add_op(name, (x,), {"dim": None if b.flag() else b.dim(nd)})
    elif name == "flatten":
        start = b.integer(0, max(nd - 1, 0))
        b.add_op(name, (x,), {"start": start, "end": b.integer(start, max(nd - 1, 0))})
    elif name == "expand":
        target = [b.integer(1, 3) if d == 1 and b.flag() else (-1 if b.integer(0, 3) == 0 else d) for d in s]
        if b.integer(0, 2) == 0:
            target.insert(0, b.integer(1, 3))
        b.add_op(name, (x,), {"shape": tuple(target)})
    elif name == "t":
        b.add_op(name, (x,))
    elif name == "movedim" and nd:
        b.add_op(name, (x,), {"src": b.dim(nd), "dst": b.dim(nd)})
    elif name == "flip" and nd:
        dims = b.draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
        b.add_op(name, (x,), {"dims": tuple(dims)})


def _index_tokens(b: Builder, shape: tuple) -> tuple:
    tokens: list[tuple] = []
    used_ellipsis = False
    for d in shape:
        kind = b.integer(0, 5)
        if kind == 0:
            tokens.append(("i", b.integer(-d, d - 1)))
        elif kind == 1:
            start = b.choice([None, 0, 1, -1, -d, d + 1])
            stop = b.choice([None, d, -1, 1, 2 * d])
            step = b.choice([None, 1, 2, 3])
            tokens.append(("s", start, stop, step))
        elif kind == 2 and not used_ellipsis:
            tokens.append(("e",))
            used_ellipsis = True
        elif kind == 3:
            tokens.append(("n",))
            tokens.append(("s", None, None, None))
        else:
            tokens.append(("s", None, None, None))
    while tokens and b.integer(0, 2) == 0:  # a shorter index leaves trailing dims whole
        tokens.pop()
    return tuple(tokens)


def g_getitem(b: Builder) -> None:
    x = b.float_value(lambda s: len(s) >= 1)
    b.add_op("getitem", (x,), {"index": _index_tokens(b, b.shape_of(x))})


def _index_input(b: Builder, size: int, shape: tuple) -> int:
    return b.new_input(shape, dtype="int64", fill=f"index:{size}", view="contiguous")


def g_indexing(b: Builder) -> None:
    name = b.choice(["tensor_index", "index_select", "gather", "scatter_add", "narrow", "select"])
    x = b.float_value(lambda s: len(s) >= 1)
    s = b.shape_of(x)
    nd = len(s)
    d = b.integer(0, nd - 1)
    if name == "tensor_index":
        idx = _index_input(b, s[d], b.shape(0, 2, 3))
        b.add_op(name, (x, idx), {"dim": d})
    elif name == "index_select":
        idx = _index_input(b, s[d], b.shape(0, 1, 4))
        b.add_op(name, (x, idx), {"dim": d})
    elif name in ("gather", "scatter_add"):
        ishape = tuple(b.integer(1, 4) if i == d else b.integer(1, n) for i, n in enumerate(s))
        idx = _index_input(b, s[d], ishape)
        if name == "gather":
            b.add_op(name, (x, idx), {"dim": d})
        else:
            src = b.new_input(ishape)
            b.add_op(name, (x, idx, src), {"dim": d})
    elif name == "narrow":
        start = b.integer(0, s[d] - 1)
        b.add_op(name, (x,), {"dim": d, "start": start, "length": b.integer(1, s[d] - start)})
    else:
        b.add_op(name, (x,), {"dim": d - nd if b.flag() else d, "index": b.integer(-s[d], s[d] - 1)})


def g_split(b: Builder) -> None:
    x = b.float_value(lambda s: len(s) >= 1)
    s = b.shape_of(x)
    d = b.integer(0, len(s) - 1)
    name = b.choice(["split", "chunk", "unbind"])
    if name == "split":
        size = b.integer(1, s[d])
        b.add_op(name, (x,), {"size": size, "dim": d, "part": b.integer(0, -(-s[d] // size) - 1)})
    elif name == "chunk":
        chunks = b.integer(1, s[d])
        step = -(-s[d] // chunks)
        b.add_op(name, (x,), {"chunks": chunks, "dim": d, "part": b.integer(0, -(-s[d] // step) - 1)})
    else:
        b.add_op(name, (x,), {"dim": d, "part": b.integer(0, s[d] - 1)})


def g_join(b: Builder) -> None:
    stack = b.flag()
    x = b.float_value(lambda s: len(s) >= 1 or stack)
    s = b.shape_of(x)
    nd = len(s)
    d = b.integer(-nd - 1, nd) if stack else b.dim(nd)
    others = []
    for _ in range(b.integer(1, 2)):
        if stack:
            want = s
        else:
            dn = d % nd
            want = s[:dn] + (b.integer(1, 3),) + s[dn + 1:]
        existing = b.values(lambda sh, dt, want=want: dt in FLOATS and (sh == want if stack else (
            len(sh) == nd and all(a == c for i, (a, c) in enumerate(zip(sh, s)) if i != d % nd))))
        if existing and b.flag():
            others.append(b.choice(existing))
        else:
            others.append(b.new_input(want))
    b.add_op("stack" if stack else "cat", (x, *others), {"dim": d})


def g_pad(b: Builder) -> None:
    x = b.float_value(lambda s: len(s) >= 1)
    s = b.shape_of(x)
    pads = []
    for i in range(b.integer(1, min(len(s), 3))):
        size = s[len(s) - 1 - i]
        lo = b.integer(-1 if size > 1 else 0, 2)
        hi = b.integer(-1 if size + lo > 1 else 0, 2)
        pads += [lo, hi]
    b.add_op("pad", (x,), {"pads": tuple(pads), "value": b.choice([0.0, 1.5, -math.inf])})


def g_tri(b: Builder) -> None:
    x = b.float_value(lambda s: len(s) >= 2, lambda: b.shape(2, 3))
    b.add_op(b.choice(["tril", "triu"]), (x,), {"diagonal": b.integer(-2, 2)})


def g_matmul(b: Builder) -> None:
    name = b.choice(["matmul", "linear", "einsum", "outer", "dot"])
    if name == "matmul":
        x = b.float_value(lambda s: len(s) >= 1)
        s = b.shape_of(x)
        k = s[-1]
        kind = b.integer(0, 2)
        if kind == 0:
            yshape = (k,)
        elif kind == 1:
            yshape = (k, b.integer(1, 4))
        else:
            batch = b.partner_shape(s[:-2]) if len(s) > 2 else (b.integer(1, 3),)
            yshape = batch + (k, b.integer(1, 4))
        existing = b.values(lambda sh, dt: dt in FLOATS and len(sh) >= 1 and _matmul_ok(s, sh))
        y = b.choice(existing) if existing and b.flag() else b.new_input(yshape)
        a, c = (x, y) if b.flag() or len(b.shape_of(y)) < 2 or len(s) < 2 else (y, x)
        if _matmul_ok(b.shape_of(a), b.shape_of(c)):
            b.add_op(name, (a, c))
    elif name == "linear":
        x = b.float_value(lambda s: len(s) >= 1)
        fan_in = b.shape_of(x)[-1]
        out = b.integer(1, 4)
        w = b.new_input((out, fan_in))
        args = (x, w, b.new_input((out,))) if b.flag() else (x, w)
        b.add_op(name, args)
    elif name == "einsum":
        x = b.float_value(lambda s: len(s) == 2, lambda: b.shape(2, 2))
        i, j = b.shape_of(x)
        spec, yshape = b.choice([("ij,jk->ik", (j, 3)), ("ij,kj->ik", (2, j)), ("ij,ij->i", (i, j)),
                                 ("ij,j->i", (j,)), ("ij,ik->jk", (i, 2))])
        b.add_op(name, (x, b.new_input(yshape)), {"spec": spec})
    else:
        x = b.float_value(lambda s: len(s) == 1, lambda: b.shape(1, 1))
        n = b.shape_of(x)[0]
        b.add_op(name, (x, b.new_input((n if name == "dot" else b.integer(1, 4),))))


def _matmul_ok(a: tuple, c: tuple) -> bool:
    try:
        np.matmul(np.zeros(a), np.zeros(c))
        return True
    except ValueError:
        return False


def g_layer_norm(b: Builder) -> None:
    x = b.float_value(lambda s: len(s) >= 1)
    s = b.shape_of(x)
    k = b.integer(1, min(2, len(s)))
    shape = s[len(s) - k:]
    args = [x]
    if b.flag():
        args.append(b.new_input(shape))
        if b.flag():
            args.append(b.new_input(shape))
    b.add_op("layer_norm", tuple(args), {"shape": shape})


def g_batch_norm(b: Builder) -> None:
    x = b.float_value(lambda s: 2 <= len(s) <= 4, lambda: b.shape(2, 4))
    s = b.shape_of(x)
    c = s[1]
    training = b.flag() and c > 0 and int(np.prod(s)) // c > 1
    dtype = b.dtype_of(x)
    rm = b.new_input((c,), dtype=dtype, fill="normal", grad=False, view="contiguous")
    rv = b.new_input((c,), dtype=dtype, fill="positive", grad=False, view="contiguous")
    args = [x, rm, rv]
    if b.flag():
        args += [b.new_input((c,)), b.new_input((c,))]
    b.add_op("batch_norm", tuple(args), {"training": training, "momentum": b.choice([0.1, 0.5])})


def _image(b: Builder) -> int:
    return b.float_value(lambda s: len(s) == 4 and s[2] >= 2 and s[3] >= 2,
                         lambda: (b.integer(1, 2), b.integer(1, 3), b.integer(3, 6), b.integer(3, 6)))


def g_conv(b: Builder) -> None:
    x = _image(b)
    c = b.shape_of(x)[1]
    groups = b.choice([g for g in (1, 2, 3) if c % g == 0])
    out = groups * b.integer(1, 2)
    kh, kw = b.integer(1, 3), b.integer(1, 3)
    stride = b.integer(1, 2)
    padding = b.choice([0, 1, "same", "valid"]) if stride == 1 else b.integer(0, 1)
    weight = b.new_input((out, c // groups, kh, kw))
    args = (x, weight, b.new_input((out,))) if b.flag() else (x, weight)
    b.add_op("conv2d", args, {"stride": stride, "padding": padding, "dilation": b.integer(1, 2),
                              "groups": groups})


def g_pool(b: Builder) -> None:
    x = _image(b)
    name = b.choice(["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
    if name == "adaptive_avg_pool2d":
        b.add_op(name, (x,), {"size": b.choice([1, 2, (2, 1), (None, 2)])})
        return
    k = b.integer(1, 3)
    b.add_op(name, (x,), {"k": k, "stride": b.choice([None, 1, 2]), "padding": b.integer(0, k // 2)})


def g_random(b: Builder) -> None:
    x = b.float_value()
    name = b.choice(["dropout", "randn_add", "rand_mul"])
    if name == "dropout":
        b.add_op(name, (x,), {"p": b.choice([0.5, 0.0, 0.2, 1.0])})
    else:
        b.add_op(name, (x,))


def g_embedding(b: Builder) -> None:
    vocab, dim = b.integer(2, 5), b.integer(1, 4)
    if b.flag():
        idx = _index_input(b, vocab, b.shape(0, 2, 3))
        b.add_op("embedding", (idx, b.new_input((vocab, dim))))
    else:
        idx = _index_input(b, vocab, b.shape(0, 2, 3))
        b.add_op("one_hot", (idx,), {"n": vocab + b.integer(0, 1)})


def g_attention(b: Builder) -> None:
    lead = b.shape(0, 2, 2)
    lq, lk, d, e = b.integer(1, 3), b.integer(1, 3), b.integer(1, 3), b.integer(1, 3)
    q = b.new_input(lead + (lq, d))
    k = b.new_input(lead + (lk, d))
    v = b.new_input(lead + (lk, e))
    b.add_op("sdpa", (q, k, v), {"causal": b.flag()})


def g_loss(b: Builder) -> None:
    name = b.choice(["cross_entropy", "mse_loss", "nll_loss", "l1_loss", "smooth_l1_loss", "bce_with_logits",
                     "bce"])
    reduction = b.choice(["mean", "sum", "none"])
    if name in ("cross_entropy", "nll_loss"):
        x = b.float_value(lambda s: 1 <= len(s) <= 3)
        s = b.shape_of(x)
        classes = s[1] if len(s) > 1 else s[0]
        tshape = () if len(s) == 1 else (s[0],) + s[2:]
        if name == "cross_entropy" and b.integer(0, 2) == 0:
            t = b.new_input(s, dtype=b.dtype_of(x), fill="unit")
        else:
            t = b.new_input(tshape, dtype="int64", fill=b.choice([f"index:{classes}", f"target:{classes}"]))
        params = {"reduction": reduction}
        if name == "cross_entropy":
            params["smoothing"] = b.choice([0.0, 0.1])
        b.add_op(name, (x, t), params)
        return
    if name == "bce":
        x = b.float_value()
        x = b.add_op("sigmoid", (x,))
        if x is None:
            return
    else:
        x = b.float_value()
    t = b.new_input(b.shape_of(x), fill="unit" if name.startswith("bce") else None)
    b.add_op(name, (x, t), {"reduction": reduction})


def g_inplace(b: Builder) -> None:
    name = b.choice(["iadd", "imul", "isub", "idiv", "iclamp", "irelu", "iexp", "imasked_fill", "izero",
                     "icopy", "setitem"])
    x = b.float_value()
    s = b.shape_of(x)
    if name in ("iadd", "imul", "isub", "idiv", "icopy"):
        b.add_op(name, (x, b.partner(x, narrower=True)))
    elif name == "iclamp":
        b.add_op(name, (x,), {"min": b.choice([None, 0.0, -0.5]), "max": b.choice([1.0, 0.25])})
    elif name == "imasked_fill":
        b.add_op(name, (x, g_bool_value(b, s)), {"value": b.choice(SCALARS)})
    elif name == "setitem" and s:
        index = _index_tokens(b, s)
        with kiln.no_grad():
            target = tuple(b.placeholders[x][index_tuple(index)].shape)
        if b.flag():
            b.add_op(name, (x,), {"index": index, "value": b.choice(SCALARS)})
        else:
            y = b.new_input(b.partner_shape(target, narrower=True))
            b.add_op(name, (x, y), {"index": index})
    elif name in ("irelu", "iexp", "izero"):
        b.add_op(name, (x,))


def g_input_inplace(b: Builder) -> None:
    candidates = [i for i, s in enumerate(b.stmts)
                  if isinstance(s, Input) and not s.grad and s.dtype in FLOATS and s.view != "expanded"]
    if not candidates:
        return
    x = b.choice(candidates)
    b.add_op(b.choice(["input_iadd", "input_imul"]), (x, b.partner(x, narrower=True)))


def g_constant(b: Builder) -> None:
    """A constant made inside the program (full or arange), maybe combined with another constant."""
    dtype = b.dtype if b.integer(0, 3) else b.choice(FLOATS)
    if b.flag():
        c = b.add_op("full", (), {"shape": b.shape(), "value": b.choice(SCALARS), "dtype": dtype})
    else:
        c = b.add_op("arange", (), {"n": b.integer(1, 5), "dtype": dtype})
    if c is None:
        return
    kind = b.integer(0, 2)
    if kind == 0:
        b.add_op(b.choice(UNARY_FLOAT), (c,))
    elif kind == 1:
        other = b.add_op("full", (), {"shape": b.partner_shape(b.shape_of(c)), "value": b.choice(SCALARS),
                                      "dtype": dtype})
        if other is not None:
            b.add_op(b.choice(BINARY_FLOAT), (c, other))


def g_repeat(b: Builder) -> None:
    """An earlier op again, with the same operands: common-subexpression bait."""
    ops = [s for s in b.stmts if isinstance(s, Op) and not s.name.startswith("input_")]
    if ops:
        op = b.choice(ops)
        b.add_op(op.name, op.args, op.params)


INT_BINARY = ["add", "sub", "mul", "floor_divide", "remainder", "maximum", "minimum", "lt", "eq"]
INT_UNARY = ["neg", "abs", "sign"]


def g_int(b: Builder) -> None:
    """Integer arithmetic (and integer-float promotion)."""
    existing = b.values(lambda s, d: d == "int64")
    x = b.choice(existing) if existing and b.flag() else b.new_input(b.shape(big=b.big), dtype="int64")
    kind = b.integer(0, 3)
    if kind == 0:
        b.add_op(b.choice(INT_BINARY), (x, b.new_input(b.partner_shape(b.shape_of(x)), dtype="int64")))
    elif kind == 1:
        b.add_op(b.choice(INT_UNARY), (x,))
    elif kind == 2:
        name = b.choice(["sum", "prod", "amax"])
        b.add_op(name, (x,), {"dim": b.dims(b.ndim(x)), "keepdim": b.flag()})
    else:
        y = b.partner(x)
        b.add_op(b.choice(["add", "mul", "div", "maximum"]), (x, y) if b.flag() else (y, x))


def g_view_inplace(b: Builder) -> None:
    """An in-place update through a view of an intermediate: t = x.clone(); t[index] += y."""
    x = b.float_value(lambda s: len(s) >= 1)
    index = _index_tokens(b, b.shape_of(x))
    if b.flag():
        b.add_op("view_iadd", (x,), {"index": index, "value": b.choice(SCALARS)})
        return
    with kiln.no_grad():
        target = tuple(b.placeholders[x][index_tuple(index)].shape)
    b.add_op("view_iadd", (x, b.new_input(b.partner_shape(target, narrower=True))), {"index": index})


def g_view_of_input(b: Builder) -> None:
    """A view of an argument (a slice, transpose, flattening or detach), maybe after an in-place
    update of it: a replay must hand back a view of the live argument where eager does."""
    inputs = [i for i, s in enumerate(b.stmts)
              if isinstance(s, Input) and s.dtype in FLOATS and len(s.shape) >= 1 and s.view != "expanded"]
    x = b.choice(inputs) if inputs and b.flag() else b.new_input(b.shape(1, 2, 3), dtype=b.dtype)
    spec = b.stmts[x]
    if not spec.grad and b.integer(0, 2) == 0:
        x = b.add_op(b.choice(["input_iadd", "input_imul"]), (x, b.partner(x, narrower=True))) or x
    nd = b.ndim(x)
    kind = b.choice(["getitem", "transpose", "reshape", "detach"])
    if kind == "getitem":
        b.add_op("getitem", (x,), {"index": _index_tokens(b, b.shape_of(x))})
    elif kind == "transpose" and nd >= 2:
        b.add_op("transpose", (x,), {"d0": 0, "d1": nd - 1})
    elif kind == "reshape":
        b.add_op("reshape", (x,), {"shape": (-1,)})
    else:
        b.add_op("detach", (x,))


# In order of simplicity: hypothesis shrinks a choice toward the front of this list.
GENERATORS: list[Callable[[Builder], None]] = [
    g_unary, g_binary, g_scalar, g_reduce, g_reshape, g_movement, g_getitem, g_compare, g_where,
    g_masked_fill, g_logical, g_cast, g_clamp, g_const, g_cumsum, g_softmax, g_indexing, g_split, g_join,
    g_pad, g_tri, g_matmul, g_layer_norm, g_batch_norm, g_conv, g_pool, g_random, g_embedding, g_attention,
    g_loss, g_inplace, g_input_inplace, g_constant, g_repeat, g_int, g_view_inplace, g_view_of_input, g_branch,
]


@st.composite
def programs(draw: Callable, max_ops: int = 6) -> Program:
    """A random shape-valid kiln program of 1..max_ops ops."""
    dtype = draw(st.sampled_from(FLOATS))
    b = Builder(draw, dtype, big=draw(st.sampled_from([False, False, False, True])))
    for _ in range(draw(st.integers(1, max_ops))):
        generator = draw(st.sampled_from(GENERATORS))
        try:
            generator(b)
        except HypothesisException:
            raise
        except Exception:  # noqa: BLE001 - a generator that trips on an odd shape (a size-0 dim) adds nothing
            del b.stmts[len(b.types):]
    if not any(isinstance(s, Op) for s in b.stmts):
        b.add_op("neg", (b.new_input(b.shape()),))
    last = len(b.stmts) - 1
    while isinstance(b.stmts[last], Input):
        last -= 1
    extra = draw(st.lists(st.integers(0, len(b.stmts) - 1), max_size=2, unique=True))
    outputs = tuple([last] + extra)  # extra may repeat `last`: the same tensor returned twice
    no_grad = draw(st.sampled_from([False, False, False, True]))
    seed = draw(st.integers(0, 2 ** 16))
    return Program(b.stmts, outputs, dtype=dtype, seed=seed, no_grad=no_grad)

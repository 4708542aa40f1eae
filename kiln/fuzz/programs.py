"""Kiln programs as a small list-of-statements IR: data, the op table, and running them.

A `Program` is a list of statements. Each statement makes one value, numbered by
its position: an `Input` (a tensor argument of the program) or an `Op` (one call
of a kiln function on earlier values). Programs print as Python source that
rebuilds them, so a shrunk failing program can be pasted into a regression test:

    Program(dtype='float32', seed=3, stmts=[
        Input((3, 1), 'float32', grad=True, fill='special'),    # v0
        Op('exp', (0,)),                                         # v1
        Op('sum', (1,), {'dim': 0, 'keepdim': True}),            # v2
    ], outputs=(2,))

strategies.py draws random programs; harness.py runs them eagerly and compiled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import kiln
import kiln.nn.functional as F

FLOATS = ("float32", "float64")
MAX_NUMEL = 256  # results larger than this are dropped while generating
BIG_NUMEL = 40_000  # the same in "big" programs, whose tensors reach the fused C kernels (>= 4096 elements)
BIG_DIMS = (4096, 2048, 4099, 1024)


# ---- the IR ------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    """A tensor argument: shape, dtype, requires_grad, how its data is filled, and its memory layout.

    fill: "normal", "special" (some 0, -0.0, +-inf, nan, huge, tiny), "ties" (small integers,
    so maxima tie and zeros are exact), "positive", "unit" (in (0, 1)), "bool", "ints" (int64 in [-3, 3]),
    "index:N" (int64 in [0, N)), "target:N" (int64 in [0, N) with some -100 = ignored).
    view: "contiguous", "transposed", "strided" (every other element of the last dim),
    "offset" (starts one row in), "expanded" (a stride-0 broadcast of its first dim).
    A view of a requires_grad input is made from a leaf base, which receives the gradient.
    """

    shape: tuple
    dtype: str = "float32"
    grad: bool = False
    fill: str = "normal"
    view: str = "contiguous"

    def source(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v, d in (("grad", self.grad, False), ("fill", self.fill, "normal"),
                                                        ("view", self.view, "contiguous")) if v != d)
        return f"Input({self.shape!r}, {self.dtype!r}{extra})"

    __repr__ = source


@dataclass(frozen=True)
class Op:
    """One call: ``OPS[name](*values[args], **params)``."""

    name: str
    args: tuple = ()
    params: dict = field(default_factory=dict)

    def source(self) -> str:
        text = f"Op({self.name!r}, {self.args!r}"
        if self.params:
            text += ", {" + ", ".join(f"{k!r}: {_py(v)}" for k, v in self.params.items()) + "}"
        return text + ")"

    __repr__ = source

    def __hash__(self) -> int:
        return hash((self.name, self.args, repr(sorted(self.params.items()))))


@dataclass
class Program:
    """Statements (Inputs and Ops, value i = statement i), the returned values, and run settings.

    seed: the input data seed. no_grad: run the whole program under kiln.no_grad().
    """

    stmts: list
    outputs: tuple
    dtype: str = "float32"
    seed: int = 0
    no_grad: bool = False

    @property
    def inputs(self) -> list[tuple[int, Input]]:
        return [(i, s) for i, s in enumerate(self.stmts) if isinstance(s, Input)]

    def source(self) -> str:
        head = f"Program(dtype={self.dtype!r}, seed={self.seed!r}"
        if self.no_grad:
            head += ", no_grad=True"
        lines = [head + ", stmts=["]
        for i, s in enumerate(self.stmts):
            src = s.source() + ","
            lines.append(f"    {src:<72} # v{i}")
        lines.append(f"], outputs={self.outputs!r})")
        return "\n".join(lines)

    __str__ = __repr__ = source


def _py(v: Any) -> str:
    """Python source for a param value (nan and inf included)."""
    if isinstance(v, float):
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "-float('inf')"
        return repr(v)
    if isinstance(v, tuple):
        return "(" + ", ".join(_py(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, list):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)


# ---- input data ---------------------------------------------------------------------
def _specials(dtype: str) -> list[float]:
    info = np.finfo(dtype)
    return [0.0, -0.0, math.inf, -math.inf, math.nan, float(info.max) / 8, -float(info.max) / 8,
            float(info.tiny), -float(info.tiny), float(info.tiny) / 4]


def fill_array(rng: np.random.Generator, shape: tuple, dtype: str, fill: str) -> np.ndarray:
    """Data for one input (or view base)."""
    n = int(np.prod(shape, dtype=np.int64))
    if fill.startswith(("index:", "target:")):
        kind, hi = fill.split(":")
        data = np.array(rng.integers(0, max(int(hi), 1), size=shape, dtype=np.int64))  # (N = 0: an empty dim)
        if kind == "target":
            data[rng.random(shape) < 0.25] = -100
        return data
    if fill == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if fill == "ints":
        return np.array(rng.integers(-3, 4, size=shape, dtype=np.int64))
    if fill == "ties":
        data = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif fill == "positive":
        data = np.abs(rng.standard_normal(shape)) + 0.1
    elif fill == "unit":
        data = rng.uniform(0.05, 0.95, size=shape)
    else:
        data = rng.standard_normal(shape)
    data = np.array(data, dtype=dtype, order="C")  # (ascontiguousarray would make 0-d 1-d)
    if fill == "special" and n:
        specials = np.array(_specials(dtype), dtype=dtype)
        flat = data.reshape(-1)
        where = rng.random(n) < 0.3
        flat[where] = specials[rng.integers(0, len(specials), size=int(where.sum()))]
    return data


def base_shape(spec: Input) -> tuple:
    """The shape of the array a view input is cut from."""
    s = tuple(spec.shape)
    if spec.view == "transposed":
        return s[::-1]
    if spec.view == "strided":
        return s[:-1] + (2 * s[-1],)
    if spec.view == "offset":
        return (s[0] + 1,) + s[1:]
    if spec.view == "expanded":
        return (1,) + s[1:]
    return s


def view_of(base: kiln.Tensor, spec: Input) -> kiln.Tensor:
    """The argument tensor: `base` itself, or a view of it with the requested layout."""
    if spec.view == "transposed":
        return base.permute(tuple(range(base.ndim))[::-1])
    if spec.view == "strided":
        return base[..., ::2]
    if spec.view == "offset":
        return base[1:]
    if spec.view == "expanded":
        return base.expand(spec.shape)
    return base


def make_inputs(program: Program, call: int) -> tuple[list[kiln.Tensor], list[kiln.Tensor]]:
    """Fresh (leaf bases, argument tensors) for one call; `call` picks a different data draw."""
    bases, args = [], []
    for i, spec in program.inputs:
        rng = np.random.default_rng([program.seed, call, i])
        data = fill_array(rng, base_shape(spec), spec.dtype, spec.fill)
        base = kiln.from_numpy(data)
        if spec.grad:
            base.requires_grad_(True)
        bases.append(base)
        args.append(view_of(base, spec))
    return bases, args


def dynamic_variant(program: Program, grow: Callable[[int], int] = lambda b: b + 1) -> tuple[dict, Program] | None:
    """(dynamic_dims, the program at another size) for kiln.compile(dynamic_dims=...) tests.

    The leading dim of the first input with one becomes the symbol "B"; every input whose
    leading dim has that size has size grow(B) in the variant. The variant may not be valid
    (an op's params can bake the size in): the harness skips it when eager code raises.
    """
    inputs = program.inputs
    sizes = [spec.shape[0] for _, spec in inputs if len(spec.shape) >= 1]
    if not sizes:
        return None
    size = sizes[0]
    dims, stmts = {}, list(program.stmts)
    for arg, (i, spec) in enumerate(inputs):
        if len(spec.shape) >= 1 and spec.shape[0] == size:
            dims[arg] = {0: "B"}
            stmts[i] = Input((grow(size),) + tuple(spec.shape[1:]), spec.dtype, spec.grad, spec.fill, spec.view)
    return dims, Program(stmts, program.outputs, program.dtype, program.seed, program.no_grad)


# ---- running ----------------------------------------------------------------------
def run_program(program: Program, args: list) -> tuple:
    """Execute the statements on argument tensors; returns the output values."""
    env: list[Any] = []
    it = iter(args)
    for s in program.stmts:
        if isinstance(s, Input):
            env.append(next(it))
        else:
            env.append(OPS[s.name](*[env[a] for a in s.args], **s.params))
    return tuple(env[o] for o in program.outputs)


def program_function(program: Program) -> Callable:
    """A plain Python function of the program's inputs (what kiln.compile gets)."""
    def fuzz_program(*args):
        return run_program(program, list(args))
    return fuzz_program


# ---- the op table -------------------------------------------------------------------
def index_tuple(tokens: tuple) -> tuple:
    """The Python index for getitem tokens: ("s", start, stop, step), ("i", n), ("n",) None, ("e",) Ellipsis."""
    out: list[Any] = []
    for t in tokens:
        if t[0] == "s":
            out.append(slice(t[1], t[2], t[3]))
        elif t[0] == "i":
            out.append(t[1])
        elif t[0] == "n":
            out.append(None)
        else:
            out.append(Ellipsis)
    return tuple(out)


def _inplace(method: str) -> Callable:
    def run(x, y=None, **params):
        t = x.clone()
        getattr(t, method)(*(() if y is None else (y,)), **params)
        return t
    return run


def _input_inplace(method: str) -> Callable:
    def run(x, y=None, **params):
        getattr(x, method)(*(() if y is None else (y,)), **params)
        return x
    return run


def _branch(c, x, y):
    """A Python branch on tensor data: x where c sums to more than 0, else y (broadcast together)."""
    x, y = kiln.broadcast_tensors(x, y)
    return x if c.sum() > 0 else y


def _setitem(x, y=None, *, index, value=None):
    t = x.clone()
    t[index_tuple(index)] = y if y is not None else value
    return t


def _view_iadd(x, y=None, *, index, value=None):
    t = x.clone()
    view = t[index_tuple(index)]
    view.add_(y if y is not None else value)
    return t


def _tensor_index(x, idx, *, dim):
    return x[(slice(None),) * dim + (idx,)]


def _part(fn: Callable) -> Callable:
    def run(x, *, part, **params):
        return fn(x, **params)[part]
    return run


def _sdpa(q, k, v, *, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


OPS: dict[str, Callable] = {
    # unary math
    "neg": kiln.neg, "exp": kiln.exp, "log": kiln.log, "log1p": kiln.log1p, "sin": kiln.sin, "cos": kiln.cos,
    "sqrt": kiln.sqrt, "rsqrt": kiln.rsqrt, "tanh": kiln.tanh, "sigmoid": kiln.sigmoid, "relu": kiln.relu,
    "erf": kiln.erf, "abs": kiln.abs, "sign": kiln.sign, "floor": kiln.floor, "ceil": kiln.ceil,
    "round": kiln.round, "reciprocal": kiln.reciprocal, "square": kiln.square,
    "isnan": kiln.isnan, "isinf": kiln.isinf, "isfinite": kiln.isfinite, "logical_not": kiln.logical_not,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "softplus": F.softplus, "mish": F.mish, "elu": F.elu, "leaky_relu": F.leaky_relu, "hardtanh": F.hardtanh,
    "detach": lambda x: x.detach(), "clone": kiln.clone, "contiguous": lambda x: x.contiguous(),
    "cast": lambda x, *, dtype: x.to(dtype),
    # with a Python scalar
    "add_scalar": lambda x, *, c: x + c, "sub_scalar": lambda x, *, c: x - c, "rsub_scalar": lambda x, *, c: c - x,
    "mul_scalar": lambda x, *, c: x * c, "div_scalar": lambda x, *, c: x / c, "rdiv_scalar": lambda x, *, c: c / x,
    "pow_scalar": lambda x, *, c: x ** c, "rpow_scalar": lambda x, *, c: c ** x,
    "clamp": lambda x, *, lo, hi: kiln.clamp(x, lo, hi),
    "full_add": lambda x, *, c: x + kiln.full(x.shape, c, dtype=x.dtype),
    "full": lambda *, shape, value, dtype: kiln.full(shape, value, dtype=dtype),
    "arange": lambda *, n, dtype: kiln.arange(n, dtype=dtype),
    "arange_mul": lambda x: x * kiln.arange(x.shape[-1], dtype=x.dtype),
    # binary, broadcasting
    "add": kiln.add, "sub": kiln.sub, "mul": kiln.mul, "div": kiln.div, "pow": kiln.pow,
    "maximum": kiln.maximum, "minimum": kiln.minimum, "remainder": kiln.remainder,
    "floor_divide": kiln.floor_divide,
    "lt": kiln.lt, "le": kiln.le, "gt": kiln.gt, "ge": kiln.ge, "eq": kiln.eq, "ne": kiln.ne,
    "logical_and": kiln.logical_and, "logical_or": kiln.logical_or,
    "where": kiln.where, "branch": _branch, "masked_fill": lambda x, m, *, value: kiln.masked_fill(x, m, value),
    # reductions
    "sum": lambda x, *, dim, keepdim: kiln.sum(x, dim, keepdim),
    "mean": lambda x, *, dim, keepdim: kiln.mean(x, dim, keepdim),
    "amax": lambda x, *, dim, keepdim: kiln.amax(x, dim, keepdim),
    "amin": lambda x, *, dim, keepdim: kiln.amin(x, dim, keepdim),
    "prod": lambda x, *, dim, keepdim: kiln.prod(x, dim, keepdim),
    "var": lambda x, *, dim, keepdim, correction: kiln.var(x, dim, keepdim, correction=correction),
    "std": lambda x, *, dim, keepdim, correction: kiln.std(x, dim, keepdim, correction=correction),
    "logsumexp": lambda x, *, dim, keepdim: kiln.logsumexp(x, dim, keepdim),
    "norm": lambda x, *, p, dim, keepdim: kiln.norm(x, p, dim, keepdim),
    "any": lambda x, *, dim, keepdim: kiln.any(x, dim, keepdim),
    "all": lambda x, *, dim, keepdim: kiln.all(x, dim, keepdim),
    "max_dim": lambda x, *, dim, keepdim, part: kiln.max(x, dim, keepdim)[part],
    "min_dim": lambda x, *, dim, keepdim, part: kiln.min(x, dim, keepdim)[part],
    "argmax": lambda x, *, dim, keepdim: kiln.argmax(x, dim, keepdim),
    "argmin": lambda x, *, dim, keepdim: kiln.argmin(x, dim, keepdim),
    "cumsum": lambda x, *, dim: kiln.cumsum(x, dim),
    "softmax": lambda x, *, dim: F.softmax(x, dim), "log_softmax": lambda x, *, dim: F.log_softmax(x, dim),
    # linear algebra
    "matmul": kiln.matmul, "outer": kiln.outer, "dot": kiln.dot,
    "einsum": lambda a, b, *, spec: kiln.einsum(spec, a, b),
    "linear": F.linear,
    # movement
    "reshape": lambda x, *, shape: x.reshape(shape), "permute": lambda x, *, perm: x.permute(perm),
    "transpose": lambda x, *, d0, d1: x.transpose(d0, d1), "t": lambda x: x.t(),
    "unsqueeze": lambda x, *, dim: x.unsqueeze(dim), "squeeze": lambda x, *, dim: kiln.squeeze(x, dim),
    "flatten": lambda x, *, start, end: kiln.flatten(x, start, end),
    "expand": lambda x, *, shape: x.expand(shape), "movedim": lambda x, *, src, dst: kiln.movedim(x, src, dst),
    "flip": lambda x, *, dims: kiln.flip(x, dims), "getitem": lambda x, *, index: x[index_tuple(index)],
    "tensor_index": _tensor_index,
    "index_select": lambda x, i, *, dim: kiln.index_select(x, dim, i),
    "gather": lambda x, i, *, dim: kiln.gather(x, dim, i),
    "narrow": lambda x, *, dim, start, length: kiln.narrow(x, dim, start, length),
    "select": lambda x, *, dim, index: kiln.select(x, dim, index),
    "split": _part(lambda x, *, size, dim: kiln.split(x, size, dim)),
    "chunk": _part(lambda x, *, chunks, dim: kiln.chunk(x, chunks, dim)),
    "unbind": _part(lambda x, *, dim: kiln.unbind(x, dim)),
    "cat": lambda *xs, dim: kiln.cat(list(xs), dim), "stack": lambda *xs, dim: kiln.stack(list(xs), dim),
    "pad": lambda x, *, pads, value: F.pad(x, pads, value=value),
    "tril": lambda x, *, diagonal: kiln.tril(x, diagonal), "triu": lambda x, *, diagonal: kiln.triu(x, diagonal),
    "scatter_add": lambda x, i, s, *, dim: kiln.scatter_add(x, dim, i, s),
    # nn
    "layer_norm": lambda x, w=None, b=None, *, shape: F.layer_norm(x, shape, w, b),
    "batch_norm": lambda x, rm, rv, w=None, b=None, *, training, momentum: F.batch_norm(
        x, rm, rv, w, b, training=training, momentum=momentum),
    "conv2d": lambda x, w, b=None, *, stride, padding, dilation, groups: F.conv2d(
        x, w, b, stride, padding, dilation, groups),
    "max_pool2d": lambda x, *, k, stride, padding: F.max_pool2d(x, k, stride, padding),
    "avg_pool2d": lambda x, *, k, stride, padding: F.avg_pool2d(x, k, stride, padding),
    "adaptive_avg_pool2d": lambda x, *, size: F.adaptive_avg_pool2d(x, size),
    "dropout": lambda x, *, p: F.dropout(x, p, True),
    "randn_add": lambda x: x + kiln.randn_like(x), "rand_mul": lambda x: x * kiln.rand_like(x),
    "embedding": lambda i, w: F.embedding(i, w),
    "one_hot": lambda i, *, n: F.one_hot(i, n),
    "sdpa": _sdpa,
    "cross_entropy": lambda x, t, *, reduction, smoothing: F.cross_entropy(
        x, t, reduction=reduction, label_smoothing=smoothing),
    "nll_loss": lambda x, t, *, reduction: F.nll_loss(x, t, reduction=reduction),
    "mse_loss": lambda x, y, *, reduction: F.mse_loss(x, y, reduction=reduction),
    "l1_loss": lambda x, y, *, reduction: F.l1_loss(x, y, reduction=reduction),
    "smooth_l1_loss": lambda x, y, *, reduction: F.smooth_l1_loss(x, y, reduction=reduction),
    "bce_with_logits": lambda x, y, *, reduction: F.binary_cross_entropy_with_logits(x, y, reduction=reduction),
    "bce": lambda x, y, *, reduction: F.binary_cross_entropy(x, y, reduction=reduction),
    # in place, on a clone (an intermediate) or on an input argument
    "iadd": _inplace("add_"), "isub": _inplace("sub_"), "imul": _inplace("mul_"), "idiv": _inplace("div_"),
    "iclamp": _inplace("clamp_"), "irelu": _inplace("relu_"), "iexp": _inplace("exp_"),
    "imasked_fill": _inplace("masked_fill_"), "izero": _inplace("zero_"), "icopy": _inplace("copy_"),
    "setitem": _setitem, "view_iadd": _view_iadd,
    "input_iadd": _input_inplace("add_"), "input_imul": _input_inplace("mul_"),
}

UNARY_FLOAT = ["neg", "exp", "log", "sin", "tanh", "sigmoid", "relu", "abs", "sqrt", "log1p", "cos", "rsqrt",
               "erf", "sign", "floor", "ceil", "round", "reciprocal", "square", "gelu", "gelu_tanh", "silu",
               "softplus", "mish", "elu", "leaky_relu", "hardtanh", "detach", "clone", "contiguous"]
BINARY_FLOAT = ["add", "mul", "sub", "div", "maximum", "minimum", "pow", "remainder", "floor_divide"]
COMPARE = ["lt", "gt", "eq", "le", "ge", "ne"]
SCALAR_OPS = ["add_scalar", "mul_scalar", "sub_scalar", "rsub_scalar", "div_scalar", "rdiv_scalar",
              "pow_scalar", "rpow_scalar"]
REDUCE = ["sum", "mean", "amax", "amin", "prod", "logsumexp", "var", "std", "norm", "max_dim", "min_dim",
          "argmax", "argmin"]
SCALARS = [2.0, 0.5, 1.0, 0.0, -1.0, 3.0, -0.0, -2.5, math.inf, -math.inf, math.nan, 1e30, 1e-30, 2]

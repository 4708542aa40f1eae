"""The kernel IR: what one generated kernel does, before any language spells it.

The scheduler (cpu/elementwise_groups.py, cpu/rows.py) decides *which* graph nodes run together; the
lowering (cpu/lower.py) turns each such group into a `Kernel` of this IR; a renderer spells
the IR in one language: C for the CPU (render/c_kernels.py), CUDA C++ (cuda/kernels.py).

A kernel works over an ``[outer, inner]`` view of its output: ``outer`` independent rows of
``inner`` elements each, two sizes it is given when called. Its statements:

* `Loop`: ``var`` over ``[0, stop)``. A ``parallel`` loop runs independent rows (OpenMP
  threads or GPU blocks may share it); a ``vector`` loop runs independent elements of a row
  (vectorized on the CPU, threads of a block on a GPU); a ``serial`` loop runs its iterations
  in order, each thread running all of them over its own elements (a sum over leading rows
  adds one row after another into each column).
* `Load`: a typed local from a buffer at an *index expression*: C-style integer arithmetic
  over the loop variables ``o`` (row) and ``j`` (element) and the size ``inner``, such as
  ``o * inner + j`` (a full-size input), ``j`` (the same row for every row, a bias), ``o``
  (one value per row), ``0`` (a scalar) or a strided offset for inputs broadcast along
  inner dims.
* `Compute`: a typed local from one primitive applied to earlier locals (a `copy` for
  identities such as reshape, or a broadcast read through its index instead).
* `Store`: a local into a buffer at an index expression.
* `CheckIndex`: an int64 local read from an index buffer, made an index into an axis of a
  given size as NumPy's indexing does (a negative one counts from the end); the kernel
  returns a nonzero code when it is out of range, so its caller can hand the call to NumPy,
  which raises. Only an ``indexed`` kernel (a gather, a scatter-add) checks indices, and only
  its index expressions may name an int64 local (the element an index picks).
* `Reduce`: a *reduce axis*: ``var`` over ``[0, stop)``, the statements of `body` computing
  `value` for each element (the prologue), combined by ``op`` (sum or max) in a stated
  ``order``: ``pairwise`` (NumPy's pairwise summation), ``sequential`` (left to right), or
  ``any`` (an order-free maximum).

A second kind of kernel, `Contraction`, is a sum of products over a shared axis (a
convolution, a GEMM): ``out[m, n] = sum over k of a[mo[m] + ko[k]] * b[k, n]``, where the
offset tables ``mo`` and ``ko`` say where each row's operands lie (a convolution's windows,
read straight from its padded image). Renderers tile it in registers for their target.

Locals are single-assignment and typed by dtype name, so a renderer rounds every node where
NumPy would. `Kernel.text()` prints the IR; a cpu plan shows its kernels in ``plan.kernel_ir``.
`Kernel.verify()` checks that a kernel is well formed (the lowering runs it wherever graphs are
verified: under KILN_DEBUG, and in the test suite).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Union

LOOP_KINDS = ("parallel", "vector", "serial")
KERNEL_KINDS = ("elementwise", "rows", "indexed")
REDUCE_OPS = ("sum", "max")
REDUCE_ORDERS = ("pairwise", "sequential", "any")
SIZES = ("outer", "inner")  # the sizes every kernel is given
INDEX_DTYPE = "int64"  # the dtype of index buffers and the locals read from them (a renderer's index type)
_INDEX_WORDS = ("unsigned", "long")  # the casts a strided index expression may spell
_NAME = re.compile(r"(?<![A-Za-z_0-9])[A-Za-z_][A-Za-z_0-9]*")  # a name, not a literal's suffix (15u)


class KernelIRError(ValueError):
    """A kernel of the IR is malformed: `Kernel.verify` names the statement and what is wrong."""


@dataclass(frozen=True)
class Param:
    """A buffer argument of a kernel: `name` (out, out0, in1, ...), its dtype and element count."""

    name: str
    dtype: str
    size: int
    written: bool = False
    restrict: bool = True  # no other parameter reaches its memory

    def text(self) -> str:
        flags = ", ".join(f for f, on in (("written", self.written), ("may alias", not self.restrict)) if on)
        return f"{self.name}: {self.dtype}[{self.size}]" + (f" ({flags})" if flags else "")


@dataclass(frozen=True)
class Load:
    """``name = buffer[index]``, a local of `dtype`."""

    name: str
    dtype: str
    buffer: str
    index: str

    def lines(self, indent: str) -> list[str]:
        return [f"{indent}{self.name}: {self.dtype} = {self.buffer}[{self.index}]"]


@dataclass(frozen=True)
class Compute:
    """``name = prim(operands...)``, a local of `dtype`; `copy` marks an identity (the operand as it is)."""

    name: str
    dtype: str
    prim: Any  # the Primitive: renderers spell it by its name, or its own c_expr
    operands: tuple[str, ...]
    copy: bool = False

    def lines(self, indent: str) -> list[str]:
        op = f"copy[{self.prim.name}]" if self.copy else self.prim.name
        return [f"{indent}{self.name}: {self.dtype} = {op}({', '.join(self.operands)})"]


@dataclass(frozen=True)
class Store:
    """``buffer[index] = value``."""

    buffer: str
    index: str
    value: str

    def lines(self, indent: str) -> list[str]:
        return [f"{indent}{self.buffer}[{self.index}] = {self.value}"]


@dataclass(frozen=True)
class Loop:
    """``for var in [0, stop)``: `kind` "parallel" (independent rows), "vector" (independent elements) or
    "serial" (iterations in order)."""

    var: str
    stop: str
    kind: str
    body: tuple["Statement", ...]

    def lines(self, indent: str) -> list[str]:
        head = f"{indent}for {self.var} in [0, {self.stop}) {self.kind}:"
        return [head] + [line for s in self.body for line in s.lines(indent + "  ")]


@dataclass(frozen=True)
class Reduce:
    """``name = op over var in [0, stop) of value``, `body` computing `value` for each element."""

    name: str
    dtype: str
    op: str  # "sum" or "max"
    order: str  # "pairwise", "sequential" or "any"
    var: str
    stop: str
    body: tuple["Statement", ...]
    value: str

    def lines(self, indent: str) -> list[str]:
        head = (f"{indent}{self.name}: {self.dtype} = {self.op}[{self.order}] "
                f"over {self.var} in [0, {self.stop}) of {self.value}:")
        return [head] + [line for s in self.body for line in s.lines(indent + "  ")]

    def row_load(self) -> tuple[Load, str] | None:
        """(the load, the index of its row's first element divided by the row length), when the prologue is
        just one input's elements in one contiguous row: ``in[R * stop + var]``, R a name or a parenthesized
        expression without `var` (``o`` in ``in[o * inner + j]``, a row's own elements). A renderer may then
        reduce that row where it lies."""
        if len(self.body) != 1 or not isinstance(self.body[0], Load) or self.body[0].name != self.value:
            return None
        load, tail = self.body[0], f" * {self.stop} + {self.var}"
        row = load.index[: -len(tail)]
        if not load.index.endswith(tail) or not _one_term(row) or self.var in _NAME.findall(row):
            return None
        return load, row


@dataclass(frozen=True)
class CheckIndex:
    """``name = index + size if index < 0 else index``, an int64 local; the kernel returns `code` when `name` is
    outside ``[0, size)`` (NumPy's indexing raises there)."""

    name: str
    index: str  # an int64 local
    size: int
    code: int = 1

    def lines(self, indent: str) -> list[str]:
        return [f"{indent}{self.name}: int64 = wrap({self.index}, {self.size}) or return {self.code}"]


Statement = Union[Load, Compute, Store, Loop, Reduce, CheckIndex]


def _one_term(expr: str) -> bool:
    """Whether `expr` binds as one operand of ``*``: a name, or one parenthesized group."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", expr):
        return True
    if not (expr.startswith("(") and expr.endswith(")")):
        return False
    depth = 0
    for k, ch in enumerate(expr):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and k < len(expr) - 1:
            return False  # "(a) * (b)": the first group closes early
    return depth == 0


def _defined(body: tuple) -> set[str]:
    """The locals a block defines at its own level."""
    return {s.name for s in body if isinstance(s, (Load, Compute, Reduce, CheckIndex))}


@dataclass(frozen=True)
class Kernel:
    """One generated kernel: its buffers (outputs first, then inputs) and statements.

    `kind` is "elementwise" (each output element from its own inputs: its vector loop may be
    split across threads too), "rows" (reductions over each row, with their prologue and epilogue) or
    "indexed" (rows whose elements are read or written at indices from a buffer, checked by `CheckIndex`;
    the kernel returns nonzero when one is out of range).
    `compute_bound`: its loops evaluate transcendentals, so wider vectors pay.
    """

    title: str
    kind: str
    params: tuple[Param, ...]
    body: tuple[Statement, ...]
    compute_bound: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def outputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.written)

    @property
    def inputs(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.written)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"kernel {self.title!r} has no buffer {name!r}")

    def reductions(self) -> list[Reduce]:
        """Every Reduce statement, in program order."""
        found: list[Reduce] = []

        def walk(body: tuple) -> None:
            for s in body:
                if isinstance(s, Reduce):
                    found.append(s)
                if isinstance(s, (Loop, Reduce)):
                    walk(s.body)

        walk(self.body)
        return found

    def verify(self) -> None:
        """Check that the kernel is well formed; raise `KernelIRError` naming the first problem.

        Checks: known kinds, reduce operators and orders; loads read parameters and stores write
        written ones; every operand is a local defined earlier in an enclosing scope, and no local is
        defined twice there (a sibling loop may recompute one); an index expression uses only the
        sizes and the variables of the loops and reduce axes around it, and, in an indexed kernel, the
        int64 locals in scope; a CheckIndex checks an int64 local, in an indexed kernel only; a
        Reduce's value is defined in its own body.
        """
        if self.kind not in KERNEL_KINDS:
            raise KernelIRError(f"kernel {self.title}: kind {self.kind!r} is not one of {KERNEL_KINDS}")
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise KernelIRError(f"kernel {self.title}: a buffer name is repeated in {names}")
        self._verify_block(self.body, {}, set(), "")

    def _verify_block(self, body: tuple, scope: dict[str, str], loop_vars: set[str], where: str) -> None:
        scope = dict(scope)  # local -> its dtype
        for s in body:
            at = f"kernel {self.title}: {where}{s.lines('')[0].strip()!r}"
            if isinstance(s, (Load, Store)):
                buffer = next((p for p in self.params if p.name == s.buffer), None)
                if buffer is None:
                    raise KernelIRError(f"{at}: no buffer named {s.buffer!r}")
                if isinstance(s, Store) and not buffer.written:
                    raise KernelIRError(f"{at}: stores into input {s.buffer!r}")
                indices = {n for n, dtype in scope.items() if dtype == INDEX_DTYPE} if self.kind == "indexed" else set()
                unknown = set(_NAME.findall(s.index)) - loop_vars - set(SIZES) - set(_INDEX_WORDS) - indices
                if unknown:
                    raise KernelIRError(f"{at}: the index uses {sorted(unknown)}, not a size or an enclosing "
                                        f"loop's variable {sorted(loop_vars)}")
            if isinstance(s, CheckIndex):
                if self.kind != "indexed":
                    raise KernelIRError(f"{at}: only an indexed kernel checks indices (this one is {self.kind})")
                if scope.get(s.index) != INDEX_DTYPE:
                    raise KernelIRError(f"{at}: {s.index!r} is not an int64 local defined before it")
                if s.code == 0:
                    raise KernelIRError(f"{at}: the code returned for an index out of range must be nonzero")
            operands = (s.value,) if isinstance(s, Store) else s.operands if isinstance(s, Compute) else ()
            for name in operands:
                if name not in scope:
                    raise KernelIRError(f"{at}: {name!r} is not defined before it")
            if isinstance(s, (Loop, Reduce)):
                if s.var in loop_vars:
                    raise KernelIRError(f"{at}: loop variable {s.var!r} is already bound")
                if isinstance(s, Loop) and s.kind not in LOOP_KINDS:
                    raise KernelIRError(f"{at}: loop kind {s.kind!r} is not one of {LOOP_KINDS}")
                if isinstance(s, Reduce) and (s.op not in REDUCE_OPS or s.order not in REDUCE_ORDERS):
                    raise KernelIRError(f"{at}: a reduction is {REDUCE_OPS} in one of {REDUCE_ORDERS}")
                self._verify_block(s.body, scope, loop_vars | {s.var}, f"in {s.var!r}'s loop, ")
                if isinstance(s, Reduce) and s.value not in _defined(s.body):
                    raise KernelIRError(f"{at}: its value {s.value!r} is not computed in its body")
            if isinstance(s, (Load, Compute, Reduce, CheckIndex)):
                if s.name in scope:
                    raise KernelIRError(f"{at}: {s.name!r} is defined twice")
                scope[s.name] = INDEX_DTYPE if isinstance(s, CheckIndex) else s.dtype

    def text(self) -> str:
        """The kernel as readable text (one statement per line, nested by indentation)."""
        lines = [f"kernel {self.title} ({self.kind}{', compute-bound' if self.compute_bound else ''})"]
        lines += [f"  {p.text()}" for p in self.params]
        lines += [f"  # {n}" for n in self.notes]
        lines += [line for s in self.body for line in s.lines("  ")]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


CONTRACTION_DTYPES = ("float32", "float64")


@dataclass(frozen=True)
class Contraction:
    """``out[om[m] + n * ldn] = sum over k in [0, K) of a[mo[m] + ko[k]] * b(k, n)``, for m in
    [0, M) and n in [0, N).

    * ``a`` is read through two offset tables: ``mo`` (M int64 offsets, one per output row) and
      ``ko`` (K offsets, one per term). A convolution's row m is an output position and its term k
      a (channel, kernel row, kernel column) of the window, both offsets into the padded image, so
      the windows are never copied out (no im2col).
    * ``b`` is a (K, N) matrix laid out in panels of P = ldb columns, each K rows long,
      ``b(k, n) = b[(n / P) * K * P + k * P + n % P]``, where P is the renderer's choice for the target (one
      register tile's columns, which the library reports); the last panel's lanes past N are read, computed
      and dropped.
    * ``out`` is written through ``om`` (one offset per row) and the column stride ``ldn``: a
      convolution's position m and channel n land at their (N, O, OH, OW) place (ldn = OH*OW); a
      row-major matrix has om[m] = m * N and ldn = 1 (whole vectors stored at once).
    * Order: each sum starts from zero and adds its terms k = 0, 1, ..., K-1 in turn, each with one
      fused multiply-add where the target has FMA (one rounding per term). Every output element is
      that one sequence of operations however a renderer tiles the loops or splits rows over
      threads, so results do not depend on the vector width, the tile or the thread count.
    """

    name: str
    dtype: str

    def verify(self) -> None:
        """Check the contraction is one the renderers can spell (`KernelIRError` otherwise)."""
        if self.dtype not in CONTRACTION_DTYPES:
            raise KernelIRError(f"contraction {self.name}: dtype {self.dtype!r} is not one of {CONTRACTION_DTYPES}")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", self.name):
            raise KernelIRError(f"contraction {self.name!r}: the name must be a C identifier")

    def text(self) -> str:
        """The contraction as readable text."""
        return "\n".join([f"contraction {self.name} ({self.dtype})",
                          f"  a: {self.dtype}[*], mo: int64[M], ko: int64[K], b: {self.dtype}[panels, K, P], "
                          "om: int64[M]",
                          f"  out: {self.dtype}[*] (written)",
                          "  for m in [0, M) parallel:",
                          "    for n in [0, N) vector:",
                          "      out[om[m] + n * ldn] = sum[sequential, fma] over k in [0, K) of "
                          "a[mo[m] + ko[k]] * b[n / P, k, n % P]"])

    def __str__(self) -> str:
        return self.text()

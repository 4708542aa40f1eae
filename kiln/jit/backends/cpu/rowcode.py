"""Render a row group (rows.py) as one C function, and run it as a kernel of a Plan.

The function is ``long long kiln_fused(outer, inner, scratch, out0.., in0..)``. For each
row ``o`` it runs the group's members in order:

* a reduction becomes a loop ``for j < inner`` that computes its operand's prologue (the
  full nodes it needs, each a typed local as in codegen.py) into a scratch row, then one
  call of the matching reducer in ROW_PRELUDE; an operand that is a full-size input is
  reduced in place;
* a row node becomes one typed scalar statement (each spelled by the C renderer, render/c.py);
* full-size outputs are written by a last loop over the row, the epilogue; per-row
  outputs are stored as soon as they are computed.

Inputs are read by their index form: ``in[o * inner + j]`` (full), ``in[j]`` (the same
for every row, e.g. a LayerNorm weight), ``in[o]`` (one value per row) or ``in[0]``.

Reducers, each equal to the NumPy kernel it replaces (tests/jit/test_row_kernels.py):

* ``kiln_pairwise_sum``: NumPy's pairwise summation of a contiguous row: under 8
  elements a plain loop from 0; up to 128, eight accumulators over blocks of eight,
  combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)), then the tail; above 128, the two
  halves (the split rounded down to a multiple of 8) summed recursively and added. The
  row's result is ``0 + that``, as NumPy adds the row into a zero-initialized output.
* a left-to-right loop where the Sum or Max kernel combines a small window slice by
  slice (reduce.window_reduce), with the ``maximum`` primitive's own C expression for max;
* ``kiln_row_max``: 32 independent lanes, NaN-propagating. Any order gives NumPy's value
  except the sign of a zero maximum when the row holds both +0 and -0 (NumPy's answer then
  depends on its SIMD lanes): those rows are counted, and a nonzero count makes the Python
  side evaluate the whole group with NumPy instead.

The function returns that count. The kernel also falls back to NumPy (RowKernel.evaluate)
when an input a sum reduces directly is not C-contiguous (NumPy sums it in another
order), or another full-size input is neither C-ordered nor the broadcast view eager also
reads (eager's results would be laid out in another order than this kernel's, see
layouts.py).
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...ir import Node, Value
from ....ops.primitive import REGISTRY, Primitive
from ..render import C, CStyleLanguage
from .layouts import c_ordered
from .rows import IDENTITIES, RowGroup, describe
from .toolchain import build


ROW_PRELUDE = r"""
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
/* measured: row loops run faster with 512-bit vectors where the CPU has them (toolchain.py
   prefers 256 bits for plain elementwise loops, which store to full-size arrays) */
#pragma GCC target("prefer-vector-width=512")
#endif
/* NumPy's pairwise summation of a[0..n) (see rowcode.py) */
#define KILN_PAIRWISE_SUM(T, S) \
    static T kiln_pairwise_sum##S(const T *restrict a, long long n) { \
        if (n < 8) { \
            T res = 0; \
            for (long long i = 0; i < n; i++) res += a[i]; \
            return res; \
        } \
        if (n <= 128) { \
            T r[8]; \
            for (int k = 0; k < 8; k++) r[k] = a[k]; \
            long long i, stop = n - n % 8; \
            for (i = 8; i < stop; i += 8) \
                for (int k = 0; k < 8; k++) r[k] += a[i + k]; \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])); \
            for (; i < n; i++) res += a[i]; \
            return res; \
        } \
        long long half = n / 2; \
        half -= half % 8; \
        return kiln_pairwise_sum##S(a, half) + kiln_pairwise_sum##S(a + half, n - half); \
    }
KILN_PAIRWISE_SUM(double, )
KILN_PAIRWISE_SUM(float, f)

/* The maximum of a[0..n), n >= 1, NaN if any element is NaN; the sign of a zero result is
   unspecified (kiln_mixed_zeros tells when it matters). 32 lanes so the loop vectorizes. */
#define KILN_ROW_MAX(T, S) \
    static T kiln_row_max##S(const T *restrict a, long long n) { \
        long long i = 0; \
        T m = a[0]; \
        if (n >= 32) { \
            T r[32]; \
            int nan[32]; \
            for (int k = 0; k < 32; k++) { r[k] = a[k]; nan[k] = a[k] != a[k]; } \
            for (i = 32; i + 32 <= n; i += 32) \
                for (int k = 0; k < 32; k++) { \
                    T v = a[i + k]; \
                    r[k] = v > r[k] ? v : r[k]; \
                    nan[k] |= v != v; \
                } \
            int any = 0; \
            for (int k = 0; k < 32; k++) any |= nan[k]; \
            if (any) return (T)NAN; \
            m = r[0]; \
            for (int k = 1; k < 32; k++) m = r[k] > m ? r[k] : m; \
        } \
        for (; i < n; i++) m = (m > a[i] || m != m) ? m : a[i]; \
        return m; \
    } \
    static int kiln_mixed_zeros##S(const T *restrict a, long long n) { \
        int pos = 0, neg = 0; \
        for (long long i = 0; i < n; i++) \
            if (a[i] == 0) { if (signbit(a[i])) neg = 1; else pos = 1; } \
        return pos && neg; \
    }
KILN_ROW_MAX(double, )
KILN_ROW_MAX(float, f)
"""


def _ctype(v: Value) -> str:
    return C.type_name(v.dtype.name)


class _Renderer:
    """Renders one row group as C; the CUDA row renderer subclasses it (another loop and reduction)."""

    def __init__(self, group: RowGroup, lang: CStyleLanguage = C):
        self.group = group
        self.lang = lang
        self.space = group.space
        self.index = {n.out.id: k for k, n in enumerate(group.nodes)}  # member value -> position
        self.member = {n.out.id: n for n in group.nodes}
        self.inputs = {v.id: k for k, v in enumerate(group.inputs)}
        self.outputs = {v.id: k for k, v in enumerate(group.outputs)}

    # ---- names ----------------------------------------------------------------------------
    def _level(self, v: Value) -> str | None:
        node = self.member.get(v.id)
        return self.group.levels[id(node)] if node is not None else None

    def _row_read(self, v: Value) -> str:
        k = self.inputs[v.id]
        return f"in{k}[0]" if int(np.prod(v.shape)) == 1 else f"in{k}[o]"

    def _row_reads(self) -> list[int]:
        """Positions of the group inputs that row-level nodes read (one value per row: r0, r1, ...)."""
        group = self.group
        return sorted({self.inputs[v.id] for n in group.nodes if group.levels[id(n)] == "row"
                       for v in n.inputs if v.id in self.inputs})

    def _operand(self, v: Value, context: str) -> str:
        """The C name or read of `v` inside a full loop ("full") or at row scope ("row")."""
        if v.id in self.member:
            return f"t{self.index[v.id]}"
        if context == "row":
            return f"r{self.inputs[v.id]}"
        return f"x{self.inputs[v.id]}"

    def _statement(self, node: Node, context: str) -> str:
        lang = self.lang
        ctype = lang.compute_type(node.out.dtype.name)
        operands = [self._operand(v, context) for v in node.inputs]
        expr = operands[0] if node.prim.name in IDENTITIES else lang.expr(node.prim, ctype, operands)
        return lang.local(ctype, f"t{self.index[node.out.id]}", expr)

    # ---- loops ----------------------------------------------------------------------------
    def _full_cone(self, targets: list[Value]) -> tuple[list[Node], list[int]]:
        """The full members computing `targets`, in order, and the inputs they read at full level."""
        need: set[int] = set()
        reads: set[int] = set()
        stack = list(targets)
        while stack:
            v = stack.pop()
            if v.id in self.member:
                node = self.member[v.id]
                if self.group.levels[id(node)] != "full" or id(node) in need:
                    continue
                need.add(id(node))
                stack.extend(node.inputs)
            else:
                reads.add(self.inputs[v.id])
        nodes = [n for n in self.group.nodes if id(n) in need]
        return nodes, sorted(reads)

    def _loop(self, targets: list[Value], stores: list[str], indent: str) -> list[str]:
        nodes, reads = self._full_cone(targets)
        body = [indent + C.loop("j", "inner")]
        for k in reads:
            v = self.group.inputs[k]
            body.append(f"{indent}    " + C.local(_ctype(v), f"x{k}", C.read(f"in{k}", self.space.form(v.shape))))
        body += [f"{indent}    {self._statement(n, 'full')}" for n in nodes]
        body += [f"{indent}    {s}" for s in stores]
        body.append(f"{indent}}}")
        return body

    def _reduction(self, node: Node, indent: str) -> list[str]:
        (x,) = node.inputs
        t = self.index[node.out.id]
        ctype = _ctype(x)
        suffix = C.math("", ctype)
        lines = [f"{indent}/* {node.prim.name} over the row */"]
        if x.id in self.member:
            lines.append(f"{indent}{C.pointer(ctype, f'p{t}')} = ({ctype} *)scratch;")
            lines += self._loop([x], [C.store(f"p{t}", "j", self._operand(x, 'full'))], indent)
        else:
            lines.append(f"{indent}{C.pointer(ctype, f'p{t}', const=True)} = in{self.inputs[x.id]} + o * inner;")
        if self.group.sequential[id(node)]:  # the kernel's window path: left to right
            if node.prim.name == "sum":
                step = f"a{t} + p{t}[j]"
            else:
                step = C.expr(REGISTRY["maximum"], ctype, [f"a{t}", f"p{t}[j]"])
            lines += [f"{indent}{ctype} a{t} = p{t}[0];",
                      f"{indent}{C.loop('j', 'inner', start='1')} a{t} = ({ctype})({step}); }}",
                      f"{indent}const {ctype} t{t} = a{t};"]
        elif node.prim.name == "sum":
            lines.append(f"{indent}const {ctype} t{t} = ({ctype})0 + kiln_pairwise_sum{suffix}(p{t}, inner);")
        else:
            lines += [f"{indent}const {ctype} t{t} = kiln_row_max{suffix}(p{t}, inner);",
                      f"{indent}if (t{t} == 0) flagged += kiln_mixed_zeros{suffix}(p{t}, inner);"]
        return lines

    # ---- the function ---------------------------------------------------------------------
    def function(self, name: str = "kiln_fused", storage: str = "") -> str:
        """The C function alone (no prelude; `storage` may be "static")."""
        group = self.group
        params = [f"{C.index_type} outer", f"{C.index_type} inner", C.pointer("void", "scratch")]
        params += [C.pointer(_ctype(v), f"out{k}") for k, v in enumerate(group.outputs)]
        params += [C.pointer(_ctype(v), f"in{k}", const=True) for k, v in enumerate(group.inputs)]
        ind = "        "
        body: list[str] = []
        for k in self._row_reads():
            v = group.inputs[k]
            body.append(f"{ind}const {_ctype(v)} r{k} = {self._row_read(v)};")
        for node in group.nodes:
            lvl = group.levels[id(node)]
            if lvl == "reduce":
                body += self._reduction(node, ind)
            elif lvl == "row":
                body.append(f"{ind}{self._statement(node, 'row')}")
            else:
                continue
            if node.out.id in self.outputs:
                body.append(ind + C.store(f"out{self.outputs[node.out.id]}", "o", f"t{self.index[node.out.id]}"))
        full_outputs = [v for v in group.outputs if self._level(v) == "full"]
        if full_outputs:
            body.append(f"{ind}/* epilogue: the full-size outputs */")
            stores = [C.store(f"out{self.outputs[v.id]}", "o * inner + j", f"t{self.index[v.id]}") for v in full_outputs]
            body += self._loop(full_outputs, stores, ind)
        loops = ["    long long flagged = 0;", "    " + C.outer_loop("o", "outer"), *body, "    }",
                 "    return flagged;"]
        return "\n".join([*C.function(name, "long long", params, loops, storage), ""])

    def render(self, name: str = "kiln_fused") -> str:
        return "\n".join([f"/* generated by kiln: row kernel {describe(self.group)} */", C.prelude + ROW_PRELUDE,
                          self.function(name)])


def render_rows(group: RowGroup, name: str = "kiln_fused") -> str:
    """C source for one row group (see the module docstring)."""
    return _Renderer(group).render(name)


def render_rows_function(group: RowGroup, name: str, storage: str = "static") -> str:
    """The C function for one row group without the preludes (PRELUDE and ROW_PRELUDE must precede it)."""
    return _Renderer(group).function(name, storage)


class RowKernel(Primitive):
    """One generated C function standing in for a row group; returns its outputs (a tuple if several)."""

    def __init__(self, group: RowGroup):
        self.name = "fused_rows[" + describe(group) + "]"
        self.group = group
        self.source = render_rows(group)
        self._fn = None
        self.outer, self.inner = group.space.outer, group.space.inner
        self.in_shapes = [tuple(v.shape) for v in group.inputs]
        self.out_specs = [(tuple(v.shape), v.dtype.np) for v in group.outputs]
        self.strict = frozenset(group.strict_inputs())
        self.full = frozenset(k for k, v in enumerate(group.inputs) if group.space.form(v.shape) == "full")
        self.fallbacks = 0  # calls answered by evaluate() (a mixed-sign zero maximum, non-C-ordered input)

    @property
    def fn(self) -> Any:
        """The compiled C function, built on first use (a native plan renders the group into its own source)."""
        if self._fn is None:
            fn = build(self.source).kiln_fused
            fn.restype = ctypes.c_longlong
            fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + \
                [ctypes.c_void_p] * (1 + len(self.group.outputs) + len(self.group.inputs))
            self._fn = fn
        return self._fn

    def kernel(self, xp: Any, *arrays: Any) -> Any:
        ready = []
        for k, a in enumerate(arrays):
            if a.__class__ is not np.ndarray or not a.flags.c_contiguous:
                # NumPy sums a row pairwise only in a C-contiguous array, and lays results out
                # after their full-size operands: otherwise only NumPy itself gives eager's bits
                if k in self.strict or k in self.full and k not in self.group.broadcast_inputs \
                        and not c_ordered(a):
                    return self.evaluate(xp, arrays)
                a = np.ascontiguousarray(a)
            if a.shape != self.in_shapes[k] and a.size != 1:
                return self.evaluate(xp, arrays)
            ready.append(a)
        outs = [np.empty(shape, dtype) for shape, dtype in self.out_specs]
        scratch = np.empty(self.inner, np.float64)
        flagged = self.fn(self.outer, self.inner, scratch.ctypes.data, *[o.ctypes.data for o in outs],
                          *[a.ctypes.data for a in ready])
        if flagged:
            return self.evaluate(xp, arrays)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def evaluate(self, xp: Any, arrays: tuple) -> Any:
        """The group node by node through the primitives' NumPy kernels: what eager computes."""
        self.fallbacks += 1
        env: dict[int, Any] = {v.id: a for v, a in zip(self.group.inputs, arrays)}
        for node in self.group.nodes:
            env[node.out.id] = node.prim.kernel(xp, *[env[v.id] for v in node.inputs], **node.params)
        outs = [np.asarray(env[v.id]) for v in self.group.outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)


class Unpack(Primitive):
    """Output `index` of a multi-output kernel (a plan slot holding a tuple)."""

    def __init__(self, index: int):
        self.name = f"unpack[{index}]"
        self.index = index

    def kernel(self, xp: Any, packed: Any) -> Any:
        return packed[self.index]

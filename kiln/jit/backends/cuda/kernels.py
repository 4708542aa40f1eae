"""CUDA kernels for the CPU backend's fused groups: the kernel IR spelled by `CUDALanguage`.

The schedule is the CPU backend's: elementwise groups (cpu/elementwise_groups.py) and row groups
(cpu/rows.py) with their index forms, lowered to the same kernel IR the C renderer spells
(cpu/lower.py, render/kernel_ir.py). What changes on a GPU is the parallel structure:

* an elementwise group is one grid-stride loop over the ``outer * inner`` output elements,
  each thread reading its inputs by their index forms (full / row / col / scalar);
* a row group runs one row per block: each reduction is a block-stride loop in which every
  thread computes the prologue (the full nodes it needs) for its elements and combines them
  into one value, then a block reduction (``kiln_block_reduce``: warp shuffles and 32
  shared values) gives every thread the row's result; row nodes are scalar statements every
  thread computes; per-row outputs are stored by thread 0 and the full-size outputs by a last
  block-stride loop (the epilogue). No scratch row is needed: the prologue is recomputed.

Sums are combined in a different order than NumPy's pairwise sum, so results agree with the
CPU backend within float tolerance, not bit for bit. A kernel launches with ``BLOCK``
threads per block (a multiple of 32). `render_module` puts a plan's kernels in one source,
the unit NVRTC compiles (``cupy.RawModule``) and the disk cache keys (cache_key.py).
"""
from __future__ import annotations

from typing import Any, Iterable

from ..render.kernel_ir import Compute, Kernel, Load, Loop, Reduce, Statement, Store
from .language import CUDA, CUDALanguage

BLOCK = 256  # threads per block of every kernel (a multiple of 32, for the block reduction)

_IDENTITY = {("sum", "float"): "0.0f", ("sum", "double"): "0.0", ("max", "float"): "-INFINITY",
             ("max", "double"): "-(double)INFINITY"}
_REDUCER = {"sum": "KilnSum()", "max": "KilnMax()"}
SHARED = {"float": "kiln_sf", "double": "kiln_sd"}  # the block reduction's 32 values, per C type


class CUDAKernelRenderer:
    """Spells one Kernel of the IR in CUDA (see the module docstring)."""

    def __init__(self, kernel: Kernel, lang: CUDALanguage = CUDA):
        self.kernel = kernel
        self.lang = lang
        self.shared: set[str] = set()  # C types of the block reductions (one __shared__ array each)

    def statement(self, s: Statement, indent: str, per_thread: bool) -> list[str]:
        """`s` as CUDA lines; `per_thread`: inside a loop whose iterations the threads share (else a
        store is thread 0's alone, as every thread of the block holds the same row values)."""
        lang = self.lang
        if isinstance(s, Load):
            p = self.kernel.param(s.buffer)
            return [indent + lang.local(lang.compute_type(s.dtype), s.name,
                                        lang.load_value(s.buffer, s.index, p.dtype, p.size))]
        if isinstance(s, Compute):
            ctype = lang.compute_type(s.dtype)
            expr = s.operands[0] if s.copy else lang.expr(s.prim, ctype, list(s.operands))
            return [indent + lang.local(ctype, s.name, expr)]
        if isinstance(s, Store):
            p = self.kernel.param(s.buffer)
            store = lang.store_value(s.buffer, s.index, s.value, p.dtype, p.size)
            return [indent + (store if per_thread else f"if (threadIdx.x == 0) {store}")]
        if isinstance(s, Loop):
            if s.kind == "parallel":
                head = [indent + lang.block_loop(s.var, s.stop)]
            elif s.kind == "serial":  # every thread runs it, over the elements its inner loops give it
                head = [indent + lang.loop(s.var, s.stop)]
            else:  # a row kernel's epilogue (an elementwise kernel's loops are _elementwise's)
                head = [f"{indent}/* epilogue: the full-size outputs */", indent + lang.thread_loop(s.var, s.stop)]
            return [*head, *self.block(s.body, indent + "    ", s.kind == "vector"), indent + "}"]
        if isinstance(s, Reduce):
            return self.reduce(s, indent)
        raise TypeError(f"the CUDA renderer cannot spell {type(s).__name__}")

    def block(self, body: tuple, indent: str, per_thread: bool) -> list[str]:
        return [line for s in body for line in self.statement(s, indent, per_thread)]

    def reduce(self, s: Reduce, indent: str) -> list[str]:
        """Each thread combines its share of the row's prologue values, then the block combines the threads'."""
        lang = self.lang
        ctype = lang.compute_type(s.dtype)
        identity, reducer = _IDENTITY[(s.op, ctype)], _REDUCER[s.op]
        acc = f"acc_{s.name}"
        self.shared.add(ctype)
        return [f"{indent}/* {s.op} over the row */", f"{indent}{ctype} {acc} = {identity};",
                indent + lang.thread_loop(s.var, s.stop),
                *self.block(s.body, indent + "    ", True),
                f"{indent}    {acc} = {reducer}({acc}, {s.value});",
                indent + "}",
                indent + lang.local(ctype, s.name, f"kiln_block_reduce({acc}, ({ctype}){identity}, "
                                                   f"{SHARED[ctype]}, {reducer})")]

    def _elementwise(self) -> list[str]:
        """One grid-stride loop over the outer * inner elements, each thread finding its (o, j)."""
        (rows,) = self.kernel.body
        (columns,) = rows.body
        t = self.lang.index_type
        return [f"    const {t} total = outer * inner;",
                "    " + self.lang.outer_loop("i", "total"),
                f"        const {t} o = i / inner;",
                f"        const {t} j = i - o * inner;",
                *self.block(columns.body, "        ", True),
                "    }"]

    def function(self, name: str) -> str:
        lang, kernel = self.lang, self.kernel
        params = [f"{lang.index_type} outer", f"{lang.index_type} inner"]
        params += [lang.pointer(lang.storage_type(p.dtype, p.size), p.name, const=not p.written,
                                restrict=p.restrict) for p in kernel.params]
        body = self._elementwise() if kernel.kind == "elementwise" else self.block(kernel.body, "    ", False)
        return "\n".join([
            f"/* {kernel.title} */",
            lang.signature(name, "void", params),
            *[f"    __shared__ {ctype} {SHARED[ctype]}[32];" for ctype in sorted(self.shared)],
            *body,
            "}",
            "",
        ])


def render_kernel(kernel: Any, name: str, lang: CUDALanguage = CUDA) -> str:
    """The CUDA function for a fused node of the CPU backend (a FusedElementwise or a RowKernel
    primitive, from its kernel IR), or for a Kernel of the IR itself."""
    ir = kernel if isinstance(kernel, Kernel) else getattr(kernel, "kernel_ir", None)
    if not isinstance(ir, Kernel):
        raise TypeError(f"render_kernel expects a fused elementwise or row kernel, got {kernel!r}")
    return CUDAKernelRenderer(ir, lang).function(name)


def render_module(kernels: Iterable[Any], lang: CUDALanguage = CUDA) -> tuple[str, list[str]]:
    """One CUDA source for a plan's fused kernels (the unit NVRTC compiles), and their names in order."""
    parts, names = [f"/* generated by kiln for CUDA, {lang.storage} storage */", lang.prelude], []
    for k, kernel in enumerate(kernels):
        names.append(f"kiln_k{k}")
        parts.append(render_kernel(kernel, names[-1], lang))
    return "\n".join(parts), names

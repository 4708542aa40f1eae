"""CUDA kernels for the CPU backend's fused groups, spelled by `CUDALanguage`.

The schedule is the CPU backend's: elementwise groups (cpu/fusion.py) and row groups
(cpu/rows.py) with their index forms. What changes on a GPU is the parallel structure:

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

import math

from ..cpu.fusion import Group, describe
from ..cpu.rowcode import _Renderer
from ..cpu.rows import RowGroup
from ..cpu.rows import describe as describe_rows
from ..render.cstyle import index_expr
from .language import CUDA, CUDALanguage

BLOCK = 256  # threads per block of every kernel (a multiple of 32, for the block reduction)

_IDENTITY = {("sum", "float"): "0.0f", ("sum", "double"): "0.0", ("max", "float"): "-INFINITY",
             ("max", "double"): "-(double)INFINITY"}
_REDUCER = {"sum": "KilnSum()", "max": "KilnMax()"}
SHARED = {"float": "kiln_sf", "double": "kiln_sd"}  # the block reduction's 32 values, per C type


def _size(v: Any) -> int:
    return int(math.prod(v.shape))


def render_elementwise(group: Group, forms: list[str], name: str, lang: CUDALanguage = CUDA) -> str:
    """The ``__global__`` function computing one elementwise group (inputs read by `forms`)."""
    names: dict[int, str] = {}
    root = group.root.out
    params = [f"{lang.index_type} outer", f"{lang.index_type} inner",
              lang.pointer(lang.storage_type(root.dtype.name, _size(root)), "out")]
    loads = []
    for k, (v, form) in enumerate(zip(group.inputs, forms)):
        params.append(lang.pointer(lang.storage_type(v.dtype.name, _size(v)), f"in{k}", const=True))
        names[v.id] = f"x{k}"
        loads.append(lang.local(lang.compute_type(v.dtype.name), f"x{k}",
                                lang.load_value(f"in{k}", index_expr(form), v.dtype.name, _size(v))))
    body = []
    for t, node in enumerate(group.nodes):
        ctype = lang.compute_type(node.out.dtype.name)
        body.append(lang.local(ctype, f"t{t}", lang.expr(node.prim, ctype, [names[v.id] for v in node.inputs])))
        names[node.out.id] = f"t{t}"
    t = lang.index_type
    return "\n".join([
        f"/* {describe(group)} */",
        lang.signature(name, "void", params),
        f"    const {t} total = outer * inner;",
        "    " + lang.outer_loop("i", "total"),
        f"        const {t} o = i / inner;",
        f"        const {t} j = i - o * inner;",
        *["        " + line for line in loads + body],
        "        " + lang.store_value("out", "i", names[root.id], root.dtype.name, _size(root)),
        "    }",
        "}",
        "",
    ])


class _RowKernel(_Renderer):
    """Renders one row group (see the module docstring): the C row renderer's names, statements and
    cones, with a block per row, a grid-stride loop over the row and block reductions."""

    def __init__(self, group: RowGroup, lang: CUDALanguage):
        super().__init__(group, lang)
        self.shared: set[str] = set()  # C types of the block reductions (one __shared__ array each)

    def _loop(self, targets: list, tail: list[str], indent: str) -> list[str]:
        lang = self.lang
        nodes, reads = self._full_cone(targets)
        lines = [indent + lang.thread_loop("j", "inner")]
        for k in reads:
            v = self.group.inputs[k]
            form = self.space.form(tuple(v.shape))
            lines.append(f"{indent}    " + lang.local(lang.compute_type(v.dtype.name), f"x{k}",
                                                        lang.load_value(f"in{k}", index_expr(form), v.dtype.name,
                                                                        _size(v))))
        lines += [f"{indent}    {self._statement(n, 'full')}" for n in nodes]
        lines += [f"{indent}    {s}" for s in tail]
        lines.append(indent + "}")
        return lines

    def _reduction(self, node: Any, indent: str) -> list[str]:
        lang = self.lang
        (x,) = node.inputs
        t = self.index[node.out.id]
        ctype = lang.compute_type(x.dtype.name)
        op = node.prim.name
        identity = _IDENTITY[(op, ctype)]
        if x.id in self.member:
            operand = self._operand(x, "full")
            lines = [f"{indent}/* {op} over the row */", f"{indent}{ctype} a{t} = {identity};"]
            lines += self._loop([x], [f"a{t} = {_REDUCER[op]}(a{t}, {operand});"], indent)
        else:  # a full-size input reduced directly
            k = self.inputs[x.id]
            lines = [f"{indent}/* {op} over the row of input {k} */", f"{indent}{ctype} a{t} = {identity};",
                     indent + lang.thread_loop("j", "inner"),
                     f"{indent}    a{t} = {_REDUCER[op]}(a{t}, "
                     f"{lang.load_value(f'in{k}', 'o * inner + j', x.dtype.name, _size(x))});",
                     indent + "}"]
        self.shared.add(ctype)
        lines.append(f"{indent}" + lang.local(ctype, f"t{t}",
                                              f"kiln_block_reduce(a{t}, ({ctype}){identity}, {SHARED[ctype]}, "
                                              f"{_REDUCER[op]})"))
        return lines

    def function(self, name: str) -> str:
        lang, group = self.lang, self.group
        params = [f"{lang.index_type} outer", f"{lang.index_type} inner"]
        params += [lang.pointer(lang.storage_type(v.dtype.name, _size(v)), f"out{k}")
                   for k, v in enumerate(group.outputs)]
        params += [lang.pointer(lang.storage_type(v.dtype.name, _size(v)), f"in{k}", const=True)
                   for k, v in enumerate(group.inputs)]
        ind = "        "
        body: list[str] = []
        for k in self._row_reads():
            v = group.inputs[k]
            index = "0" if _size(v) == 1 else "o"
            body.append(ind + lang.local(lang.compute_type(v.dtype.name), f"r{k}",
                                         lang.load_value(f"in{k}", index, v.dtype.name, _size(v))))
        for node in group.nodes:
            lvl = group.levels[id(node)]
            if lvl == "reduce":
                body += self._reduction(node, ind)
            elif lvl == "row":
                body.append(ind + self._statement(node, "row"))
            else:
                continue
            if node.out.id in self.outputs:
                store = lang.store_value(f"out{self.outputs[node.out.id]}", "o", f"t{self.index[node.out.id]}",
                                         node.out.dtype.name, _size(node.out))
                body.append(f"{ind}if (threadIdx.x == 0) {store}")
        full_outputs = [v for v in group.outputs if v.id in self.member
                        and group.levels[id(self.member[v.id])] == "full"]
        if full_outputs:
            body.append(f"{ind}/* epilogue: the full-size outputs */")
            stores = [lang.store_value(f"out{self.outputs[v.id]}", "o * inner + j", f"t{self.index[v.id]}",
                                       v.dtype.name, _size(v)) for v in full_outputs]
            body += self._loop(full_outputs, stores, ind)
        return "\n".join([
            f"/* row kernel: {describe_rows(group)} */",
            lang.signature(name, "void", params),
            *[f"    __shared__ {ctype} {SHARED[ctype]}[32];" for ctype in sorted(self.shared)],
            "    " + lang.block_loop("o", "outer"),
            *body,
            "    }",
            "}",
            "",
        ])


def render_rows(group: RowGroup, name: str, lang: CUDALanguage = CUDA) -> str:
    """The ``__global__`` function computing one row group, one row per block."""
    return _RowKernel(group, lang).function(name)


def render_kernel(kernel: Any, name: str, lang: CUDALanguage = CUDA) -> str:
    """The CUDA function for a fused node of the CPU backend: a FusedElementwise or a RowKernel primitive."""
    if isinstance(getattr(kernel, "group", None), RowGroup):
        return render_rows(kernel.group, name, lang)
    if isinstance(getattr(kernel, "group", None), Group) and getattr(kernel, "forms", None) is not None:
        return render_elementwise(kernel.group, kernel.forms, name, lang)
    raise TypeError(f"render_kernel expects a fused elementwise or row kernel, got {kernel!r}")


def render_module(kernels: Iterable[Any], lang: CUDALanguage = CUDA) -> tuple[str, list[str]]:
    """One CUDA source for a plan's fused kernels (the unit NVRTC compiles), and their names in order."""
    parts, names = [f"/* generated by kiln for CUDA, {lang.storage} storage */", lang.prelude], []
    for k, kernel in enumerate(kernels):
        names.append(f"kiln_k{k}")
        parts.append(render_kernel(kernel, names[-1], lang))
    return "\n".join(parts), names

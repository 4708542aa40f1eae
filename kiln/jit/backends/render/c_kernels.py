"""Spell a kernel of the IR (kernel_ir.py) as a C function for the CPU.

* The ``parallel`` loop over rows and, in an elementwise kernel, the ``vector`` loop run over
  the bounds CLanguage.function gives them, so an OpenMP team can share rows, or columns
  (openmp.py); the ``vector`` loop of a row kernel (its epilogue) runs over the whole row.
* Each Load and Compute is a typed local (float32 math rounds where NumPy rounds), spelled by
  the language's table of primitive expressions (cstyle.py, c.py).
* A Reduce computes its prologue into a ``scratch`` row, one value per element, then reduces
  the row with the matching reducer of c_reducers.py; a prologue that is one input's own row
  is reduced where it lies. A ``sequential`` reduction is a left-to-right loop, and an ``any``
  order maximum counts the rows holding both +0 and -0 (their maximum's sign is NumPy's SIMD
  lanes' choice): a row kernel returns that count, so its caller can ask NumPy instead.
* The values a reduction's prologue left in the scratch row stay there until the next
  reduction through scratch; an epilogue computing one of them again (softmax's and
  cross-entropy's ``exp(x - max)``) reads it from the row instead: the same value, computed
  by the same code, without a second exp per element.

* A CheckIndex wraps a negative index as NumPy does and returns its code from the kernel when the
  index is out of range: an indexed kernel (a gather, a scatter-add) returns 0 when every index fit.

Row kernels take ``(outer, inner, scratch, outputs..., inputs...)`` and return the count;
indexed kernels take ``(outer, inner, outputs..., inputs...)`` and return their code; elementwise
kernels take ``(outer, inner, out, inputs...)``.
"""
from __future__ import annotations

from ....ops.primitive import REGISTRY
from ....sizes import is_symbolic_number
from .c import C, CLanguage
from .kernel_ir import INDEX_DTYPE, CheckIndex, Compute, Kernel, Load, Loop, Reduce, Statement, Store

STEP = "    "
# ends the opening line of every loop that must vectorize on every target (cpu/vector_report.py checks)
VECTOR_LOOP = "/* kiln: vector loop */"


class CKernelRenderer:
    """Renders one Kernel as C in `lang` (see the module docstring)."""

    reuse_scratch = True  # an epilogue reads values a prologue left in the scratch row (tests turn it off)

    def __init__(self, kernel: Kernel, lang: CLanguage = C, team_min: int = 0):
        self.kernel = kernel
        self.lang = lang
        sizes = [p.size for p in kernel.params]
        # the loop space (outer x inner) is the largest buffer's size: known below `team_min`, never a team (a
        # kernel of a plan for every size, whose sizes are symbolic, may have one: the team starts by size)
        plain = not any(is_symbolic_number(n) for n in sizes)
        self.teams = not (plain and sizes and min(sizes) > 0 and max(sizes) < team_min)
        self.kept: dict[str, tuple[str, str]] = {}  # value -> (scratch row holding it, its dtype)
        self.vector_var: str | None = None  # the element index of the vector loop being rendered

    def _ctype(self, dtype_name: str) -> str:
        # (an index is no value type of the language's table: int64 math is not spelled for NumPy's bits)
        return self.lang.index_type if dtype_name == INDEX_DTYPE else self.lang.type_name(dtype_name)

    def statement(self, s: Statement, indent: str) -> list[str]:
        lang = self.lang
        if isinstance(s, Load):
            return [indent + lang.local(self._ctype(s.dtype), s.name, lang.load(s.buffer, s.index))]
        if isinstance(s, Compute):
            ctype = lang.compute_type(s.dtype)
            kept = self.kept.get(s.name)
            if kept is not None and kept[1] == s.dtype and self.vector_var is not None and self.reuse_scratch:
                return [indent + lang.local(ctype, s.name, f"{kept[0]}[{self.vector_var}]")]
            expr = s.operands[0] if s.copy else lang.expr(s.prim, ctype, list(s.operands))
            return [indent + lang.local(ctype, s.name, expr)]
        if isinstance(s, Store):
            return [indent + lang.store(s.buffer, s.index, s.value)]
        if isinstance(s, Loop):
            epilogue = s.kind == "vector" and self.kernel.kind == "rows"
            return ([f"{indent}/* epilogue: the full-size outputs */"] if epilogue else []) + self.loop(s, indent)
        if isinstance(s, Reduce):
            return self.reduce(s, indent)
        if isinstance(s, CheckIndex):
            itype = self._ctype(INDEX_DTYPE)
            return [indent + lang.local(itype, s.name, f"{s.index} < 0 ? {s.index} + {s.size} : {s.index}"),
                    f"{indent}if ({s.name} < 0 || {s.name} >= {s.size}) return {s.code};"]
        raise TypeError(f"the C renderer cannot spell {type(s).__name__}")

    def block(self, body: tuple, indent: str) -> list[str]:
        return [line for s in body for line in self.statement(s, indent)]

    def loop(self, s: Loop, indent: str) -> list[str]:
        lang = self.lang
        if s.kind == "parallel":
            head = lang.outer_loop(s.var, s.stop)
        elif s.kind == "serial":
            head = lang.loop(s.var, s.stop)
        elif self.kernel.kind == "elementwise":  # its columns may be shared by a team too
            head = lang.inner_loop(s.var, s.stop)
        else:
            head = lang.loop(s.var, s.stop)
        if s.kind == "vector":
            head += " " + VECTOR_LOOP
        outer_var, self.vector_var = self.vector_var, s.var if s.kind == "vector" else self.vector_var
        body = self.block(s.body, indent + STEP)
        self.vector_var = outer_var
        return [indent + head, *body, indent + "}"]

    def reduce(self, s: Reduce, indent: str) -> list[str]:
        lang = self.lang
        ctype = self._ctype(s.dtype)
        suffix = lang.math("", ctype)
        tag = s.name[1:] if s.name.startswith("t") else s.name
        row, acc = f"p{tag}", f"a{tag}"
        lines = [f"{indent}/* {s.op} over the row */"]
        direct = s.row_load()
        if direct is not None:
            load, first = direct
            lines.append(f"{indent}{lang.pointer(ctype, row, const=True)} = {load.buffer} + {first} * {s.stop};")
        else:
            self.kept = {}  # this prologue overwrites the scratch row
            lines.append(f"{indent}{lang.pointer(ctype, row)} = ({ctype} *)scratch;")
            lines += self.loop(Loop(s.var, s.stop, "vector", (*s.body, Store(row, s.var, s.value))), indent)
            self.kept = {s.value: (row, s.dtype)}
        if s.order == "sequential":
            step = f"{acc} + {row}[j]" if s.op == "sum" else lang.expr(REGISTRY["maximum"], ctype, [acc, f"{row}[j]"])
            lines += [f"{indent}{ctype} {acc} = {row}[0];",
                      f"{indent}{lang.loop('j', s.stop, start='1')} {acc} = ({ctype})({step}); }}",
                      f"{indent}const {ctype} {s.name} = {acc};"]
        elif s.op == "sum":
            lines.append(f"{indent}const {ctype} {s.name} = ({ctype})0 + kiln_pairwise_sum{suffix}({row}, {s.stop});")
        elif s.op == "max":
            lines += [f"{indent}const {ctype} {s.name} = kiln_row_max{suffix}({row}, {s.stop});",
                      f"{indent}if ({s.name} == 0) flagged += kiln_mixed_zeros{suffix}({row}, {s.stop});"]
        else:
            raise ValueError(f"the C renderer has no reducer for {s.op!r}")
        return lines

    def function(self, name: str, storage: str = "") -> str:
        """The C function alone (no prelude; `storage` may be "static")."""
        lang, kernel = self.lang, self.kernel
        params = [f"{lang.index_type} outer", f"{lang.index_type} inner"]
        if kernel.kind == "rows":
            params.append(lang.pointer("void", "scratch"))
        params += [lang.pointer(self._ctype(p.dtype), p.name, const=not p.written, restrict=p.restrict)
                   for p in kernel.params]
        body = self.block(kernel.body, STEP)
        if kernel.kind == "rows":
            lines = lang.function(name, "long long", params, [f"{STEP}long long flagged = 0;", *body,
                                                               f"{STEP}return flagged;"], storage, teams=self.teams)
        elif kernel.kind == "indexed":
            lines = lang.function(name, "long long", params, [*body, f"{STEP}return 0;"], storage, teams=self.teams)
        else:
            lines = lang.function(name, "void", params, body, storage, wide=kernel.compute_bound, split_inner=True,
                                  teams=self.teams)
        return "\n".join([*lines, ""])


def render_c(kernel: Kernel, name: str, storage: str = "", lang: CLanguage = C, team_min: int = 0) -> str:
    """The C function `name` computing `kernel` (no prelude; `storage` may be "static"). A kernel whose buffers all
    have known sizes below `team_min` elements (the team threshold) is rendered to run serially only."""
    return CKernelRenderer(kernel, lang, team_min).function(name, storage)

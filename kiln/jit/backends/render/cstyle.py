"""CStyleLanguage: how a C-like language spells a generated kernel.

One object answers every question the code generators (cpu/codegen.py, cpu/rowcode.py)
ask about the target language: the C type of a dtype, each primitive's expression (one
table, `ops`, keyed by primitive name), how a math function is named per type
(``expf``/``exp``), the prelude every source starts with, and how a function signature,
restrict pointers, loops, loads, stores and typed locals are written. A language for
another target is a subclass that overrides only what differs (its half-precision math,
intrinsics, a kernel qualifier, thread indexing in place of the outer loop).

A template in `ops` names its operands ``{0}``, ``{1}``, ... and may use ``{dtype}`` (the
C type of the node's output, e.g. for cast) and ``{f}`` (the math suffix of the output's
C type: ``f`` for float, nothing for double, so ``exp{f}`` is ``expf``/``exp``). A
primitive the table does not know may carry its own template in `Primitive.c_expr`
(same placeholders): that is how a third-party elementwise primitive gets fused.
"""
from __future__ import annotations

from typing import Any, ClassVar

# Spellings shared by C-like languages. Each must give the primitive's NumPy kernel's bits on
# every input, NaN and signed zeros included (tests/jit/test_c_expressions.py), unless the op is
# a transcendental with a measured ulp bound there.
OPS: dict[str, str] = {
    "neg": "(-{0})",
    "abs": "fabs({0})",
    "sign": "({0} != {0} ? {0} : (({0} > 0) - ({0} < 0)))",
    "relu": "(({0} > 0 || {0} != {0}) ? {0} : 0)",  # NaN propagates, as np.maximum
    "sqrt": "sqrt({0})",
    "floor": "floor({0})",
    "ceil": "ceil({0})",
    "round": "nearbyint({0})",  # half to even, as NumPy
    "exp": "exp({0})",
    "log": "log({0})",
    "log1p": "log1p({0})",
    "sin": "sin({0})",
    "cos": "cos({0})",
    "tan": "tan({0})",
    "asin": "asin({0})",
    "acos": "acos({0})",
    "atan": "atan({0})",
    "sinh": "sinh({0})",
    "cosh": "cosh({0})",
    "asinh": "asinh({0})",
    "acosh": "acosh({0})",
    "atanh": "atanh({0})",
    "tanh": "tanh({0})",
    "erf": "erf({0})",
    # the kernel's two branches, in the output's precision
    "sigmoid": "({0} >= 0 ? 1 / (1 + exp{f}(-fabs{f}({0}))) : exp{f}(-fabs{f}({0})) / (1 + exp{f}(-fabs{f}({0}))))",
    "logical_not": "(!{0})",
    "cast": "(({dtype}){0})",
    "copy": "{0}",  # a C-ordered copy: the kernel reads its input through that input's own layout
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "atan2": "atan2({0}, {1})",
    "pow": "pow{f}({0}, {1})",  # powf for float32, as NumPy's loop calls it where it uses libm
    "maximum": "(({0} > {1} || {0} != {0}) ? {0} : {1})",  # NumPy: NaN wins, ties give {1}
    "minimum": "(({0} < {1} || {0} != {0}) ? {0} : {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "logical_and": "({0} && {1})",
    "logical_or": "({0} || {1})",
    "where": "({0} ? {1} : {2})",
}

# how a kernel input is indexed inside the [outer, inner] loops, per index form (cpu/elementwise_groups.py)
INDEX = {"full": "o * inner + j", "row": "j", "col": "o", "scalar": "0"}
STRIDED = "at:"  # a strided form (cpu/elementwise_groups.py strided_form) carries its index expression after this


def index_expr(form: str) -> str:
    """The C index of a kernel input read by index form `form` inside the [outer, inner] loops."""
    return form[len(STRIDED):] if form.startswith(STRIDED) else INDEX[form]


class CStyleLanguage:
    """The spelling of kernels in a C-like language (see the module docstring)."""

    name: ClassVar[str] = "c-style"
    types: ClassVar[dict[str, str]] = {"float32": "float", "float64": "double", "bool": "unsigned char"}
    math_suffixes: ClassVar[dict[str, str]] = {"float": "f", "double": ""}  # C type -> suffix of math functions
    ops: ClassVar[dict[str, str]] = OPS
    index_type: ClassVar[str] = "long long"
    restrict: ClassVar[str] = "restrict"
    kernel_qualifier: ClassVar[str] = ""  # written before a kernel's return type (e.g. a GPU's entry marker)
    wide_qualifier: ClassVar[str] = ""  # marks a function whose loops are compute-bound (prefer wide vectors)
    prelude: ClassVar[str] = ""  # what every generated source starts with

    # ---- types and names --------------------------------------------------------------------
    def type_name(self, dtype_name: str) -> str:
        """The C type holding one element of `dtype_name` ("float32" -> "float")."""
        try:
            return self.types[dtype_name]
        except KeyError:
            raise ValueError(f"{self.name} has no type for {dtype_name}; it knows {sorted(self.types)}") from None


    def compute_type(self, dtype_name: str) -> str:
        """The C type a value of `dtype_name` is computed in (its storage type here; CUDA computes halves in float)."""
        return self.type_name(dtype_name)
    def math(self, function: str, ctype: str) -> str:
        """The name of math `function` for arguments of C type `ctype` ("exp", "float" -> "expf")."""
        return function + self.math_suffixes.get(ctype, "")

    # ---- expressions ------------------------------------------------------------------------
    def template(self, prim: Any) -> str | None:
        """The expression template of primitive `prim`: the table's, else its own `c_expr`, else None."""
        return self.ops.get(prim.name, getattr(prim, "c_expr", None))

    def spelling(self, prim_name: str, template: str | None, out_ctype: str) -> str | None:
        """The template that spells primitive `prim_name` with output C type `out_ctype`: the table's,
        else `template` (the primitive's own `c_expr`). A language may spell some types its own way."""
        return self.ops.get(prim_name, template)

    def expr(self, prim: Any, out_ctype: str, operands: list[str]) -> str:
        """The expression computing `prim` (output of C type `out_ctype`) from C operand names."""
        template = self.spelling(prim.name, getattr(prim, "c_expr", None), out_ctype)
        return self.render_template(prim.name, template, out_ctype, operands)

    def render_template(self, prim_name: str, template: str | None, out_ctype: str, operands: list[str]) -> str:
        """Expand `template` for one node; a bool result is compared with 0 (so 0 or 1, as NumPy
        stores bools: bool + bool is 2 in C), and a cast to bool means "nonzero", as in NumPy."""
        if prim_name == "expand":  # read through a broadcast index form instead
            return operands[0]
        if template is None:
            raise ValueError(f"{prim_name} has no C expression: add it to {type(self).__name__}.ops, "
                             "or give the primitive a c_expr template")
        bool_types = {self.types["bool"], self.compute_type("bool")}
        if prim_name == "cast" and out_ctype in bool_types:
            template = "({0} != 0)"  # a C conversion would truncate 0.5 to 0
        template = template.replace("{dtype}", out_ctype).replace("{f}", self.math_suffixes.get(out_ctype, ""))
        expr = template.format(*operands)
        return f"(({expr}) != 0)" if out_ctype in bool_types else expr

    # ---- statements -------------------------------------------------------------------------
    def local(self, ctype: str, name: str, expr: str) -> str:
        """A typed local holding `expr` rounded to `ctype` (float32 math rounds where NumPy rounds)."""
        return f"const {ctype} {name} = ({ctype})({expr});"

    def pointer(self, ctype: str, name: str, const: bool = False, restrict: bool = True) -> str:
        """A pointer parameter or local declaration."""
        return f"{'const ' if const else ''}{ctype} *{self.restrict + ' ' if restrict else ''}{name}"

    def signature(self, name: str, ret: str, params: list[str], storage: str = "", wide: bool = False) -> str:
        """The opening line of a function (`storage` may be "static"; `wide`: its loops are compute-bound,
        e.g. they evaluate transcendentals, so wider vectors pay)."""
        qualifiers = [q for q in (storage, self.wide_qualifier if wide else "", self.kernel_qualifier) if q]
        return f"{' '.join([*qualifiers, ret])} {name}({', '.join(params)}) {{"

    def loop(self, var: str, stop: str, start: str = "0") -> str:
        """The opening line of a sequential loop `var` in [start, stop)."""
        return f"for ({self.index_type} {var} = {start}; {var} < {stop}; {var}++) {{"

    def outer_loop(self, var: str, stop: str) -> str:
        """The opening line of the loop over independent rows (a GPU spells it with thread indices)."""
        return self.loop(var, stop)

    def inner_loop(self, var: str, stop: str) -> str:
        """The opening line of an elementwise kernel's loop over the elements of a row."""
        return self.loop(var, stop)

    def function(self, name: str, ret: str, params: list[str], body: list[str], storage: str = "",
                 wide: bool = False, split_inner: bool = False, teams: bool = True) -> list[str]:
        """The lines of a kernel function whose `body` runs outer_loop (and, if `split_inner`, inner_loop)
        over its `outer` and `inner` parameters: here the function as written; a language may run the
        loops on several threads (CLanguage: OpenMP) where `teams` allows."""
        return [self.signature(name, ret, params, storage, wide=wide), *body, "}"]

    def load(self, pointer: str, index: str) -> str:
        return f"{pointer}[{index}]"

    def store(self, pointer: str, index: str, value: str) -> str:
        return f"{pointer}[{index}] = {value};"

    def read(self, pointer: str, form: str) -> str:
        """The load of a kernel input read by index form `form` (full / row / col / scalar)."""
        return self.load(pointer, index_expr(form))

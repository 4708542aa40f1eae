"""Render a fusion group as a C function and wrap it as a kernel callable from a Plan.

Each node becomes one typed local (so float32 math rounds where NumPy rounds), using
the primitive's own `c_expr` template. The loop is ``for o < outer: for j < inner:``
with each input read by its compile-time index form, so the inner loop vectorizes.

A template names its operands ``{0}``, ``{1}``, ... and may also use ``{dtype}`` (the C
type of the node's output, e.g. for cast) and ``{f}`` (``f`` when the output is float32,
else nothing: ``powf``/``pow`` as NumPy's float32/float64 loops call them), plus the
helpers in PRELUDE. A bool output is normalized to 0/1, as NumPy stores bools.

Fused code must equal NumPy bit for bit (tests/jit/test_c_expressions.py), so PRELUDE
turns off floating-point contraction: a*b+c must round twice, as NumPy's separate
multiply and add do, never once in an FMA, whatever -ffp-contract the toolchain uses.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from ....ops.primitive import Primitive
from .fusion import Group, choose_split, describe, index_form
from .layouts import c_ordered
from .toolchain import build

C_TYPES = {"float32": "float", "float64": "double", "bool": "unsigned char"}
MATH_SUFFIX = {"float": "f"}  # what ``{f}`` becomes for a node's output C type (else "")
_READ = {"full": "{p}[o * inner + j]", "row": "{p}[j]", "col": "{p}[o]", "scalar": "{p}[0]"}

PRELUDE = r"""#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>

/* Python's float floor division as NumPy computes it: from the exact remainder fmod(a, b)
   (so a == b * q + r), the quotient moved down when r and b differ in sign, snapped to an
   integer, and a zero quotient signed like a / b. Division by zero gives a / b (inf or nan). */
#define KILN_FLOOR_DIVIDE(T, S) \
    static inline T kiln_floor_divide##S(T a, T b) { \
        if (b == 0) return a / b; \
        T r = fmod##S(a, b); \
        T q = (a - r) / b; \
        if (r != 0 && ((b < 0) != (r < 0))) q -= 1; \
        if (q == 0) return copysign##S(0, a / b); \
        T whole = floor##S(q); \
        return q - whole > (T)0.5 ? whole + 1 : whole; \
    }
KILN_FLOOR_DIVIDE(double, )
KILN_FLOOR_DIVIDE(float, f)
"""


def node_expr(prim_name: str, template: str | None, out_ctype: str, operands: list[str]) -> str:
    """The C expression computing one node of output type `out_ctype` from C operand names.

    Expands the primitive's `c_expr` (see the module docstring for its placeholders); a
    bool result is compared with 0, so it is 0 or 1 as in NumPy (bool + bool is 2 in C).
    """
    if prim_name == "expand":
        return operands[0]
    if template is None:
        raise ValueError(f"{prim_name} has no C expression")
    if prim_name == "cast" and out_ctype == C_TYPES["bool"]:
        template = "({0} != 0)"  # to bool means "nonzero", as in NumPy; a C conversion would truncate 0.5
    template = template.replace("{dtype}", out_ctype).replace("{f}", MATH_SUFFIX.get(out_ctype, ""))
    expr = template.format(*operands)
    if out_ctype == C_TYPES["bool"]:
        return f"(({expr}) != 0)"
    return expr


def render_function(group: Group, forms: list[str], name: str = "kiln_fused", storage: str = "",
                    in_place: int | None = None) -> str:
    """The C function for one group given each input's index form (no prelude; `storage` may be "static").

    With `in_place` = k, input k and the output may be the same memory (each element is read before
    it is written, at the same index), so neither is declared restrict.
    """
    names: dict[int, str] = {}
    restrict = "" if in_place is not None else "restrict "
    params = ["long long outer", "long long inner", f"{C_TYPES[group.root.out.dtype.name]} *{restrict}out"]
    loads = []
    for k, (v, form) in enumerate(zip(group.inputs, forms)):
        ctype = C_TYPES[v.dtype.name]
        params.append(f"const {ctype} *{'' if k == in_place else 'restrict '}in{k}")
        names[v.id] = f"x{k}"
        loads.append(f"            const {ctype} x{k} = {_READ[form].format(p=f'in{k}')};")
    body = []
    for t, node in enumerate(group.nodes):
        ctype = C_TYPES[node.out.dtype.name]
        expr = node_expr(node.prim.name, node.prim.c_expr, ctype, [names[v.id] for v in node.inputs])
        body.append(f"            const {ctype} t{t} = ({ctype})({expr});")
        names[node.out.id] = f"t{t}"
    root = names[group.root.out.id]
    return "\n".join([
        f"{storage + ' ' if storage else ''}void {name}({', '.join(params)}) {{",
        "    for (long long o = 0; o < outer; o++) {",
        "        for (long long j = 0; j < inner; j++) {",
        *loads,
        *body,
        f"            out[o * inner + j] = {root};",
        "        }",
        "    }",
        "}",
        "",
    ])


def render(group: Group, forms: list[str], name: str = "kiln_fused") -> str:
    """C source for one group given each input's index form: the prelude and the function."""
    return "\n".join(["/* generated by kiln: " + describe(group) + " */", PRELUDE,
                      render_function(group, forms, name)])


class FusedElementwise(Primitive):
    """One generated C loop standing in for a group of elementwise nodes.

    Its kernel checks that this call's inputs still fit the compiled index forms (dynamic
    dims can change that) and that its full-size inputs are C-ordered (else eager NumPy would
    lay the result out in another order, and a later reduction would add in another order),
    and otherwise evaluates the group node by node with NumPy.
    """

    def __init__(self, group: Group):
        self.name = "fused[" + describe(group) + "]"
        self.group = group
        out_shape = tuple(group.root.out.shape)
        self.split, self.forms = choose_split([tuple(v.shape) for v in group.inputs], out_shape)
        self.source = render(group, self.forms)
        self._fn = None
        self.out_dtype = group.root.out.dtype.np

    @property
    def fn(self) -> Any:
        """The compiled C function, built on first use (a native plan renders the group into its own source
        and builds this only if the group ever runs on its own)."""
        if self._fn is None:
            fn = build(self.source).kiln_fused
            fn.restype = None
            fn.argtypes = [ctypes.c_longlong, ctypes.c_longlong] + [ctypes.c_void_p] * (1 + len(self.group.inputs))
            self._fn = fn
        return self._fn

    def kernel(self, xp: Any, *arrays: Any) -> Any:
        shapes = [a.shape for a in arrays]
        out_shape = np.broadcast_shapes(*shapes) if shapes else ()
        forms = [index_form(s, out_shape, self.split) for s in shapes]
        if forms != self.forms:  # this call's shapes broadcast differently (dynamic dims)
            return self.evaluate(xp, arrays)
        if any(f == "full" and k not in self.group.broadcast_inputs and not c_ordered(a)
               for k, (f, a) in enumerate(zip(forms, arrays))):
            return self.evaluate(xp, arrays)  # eager lays the result out in another order (layouts.py)
        # contiguous arrays (numpy scalars from full reductions become 1-element arrays)
        arrays = [a if a.__class__ is np.ndarray and a.flags.c_contiguous else np.ascontiguousarray(a)
                  for a in arrays]
        out = np.empty(out_shape, dtype=self.out_dtype)
        outer = math.prod(out_shape[: self.split])
        inner = math.prod(out_shape[self.split:])
        self.fn(outer, inner, out.ctypes.data, *[a.ctypes.data for a in arrays])
        return out

    def evaluate(self, xp: Any, arrays: tuple) -> Any:
        """The group node by node through the primitives' NumPy kernels (the reference)."""
        env: dict[int, Any] = {v.id: a for v, a in zip(self.group.inputs, arrays)}
        for node in self.group.nodes:
            env[node.out.id] = node.prim.kernel(xp, *[env[v.id] for v in node.inputs], **node.params)
        return np.asarray(env[self.group.root.out.id])

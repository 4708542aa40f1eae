"""kiln.jit is both the package and the seed API's jit decorator."""
from __future__ import annotations

import kiln
from kiln.jit.symbolic import Expr, SymInt


def test_kiln_jit_is_a_callable_package():
    assert kiln.jit.passes.DeadNodeElim is not None
    assert type(kiln.jit(lambda x: x + 1)).__name__ == "StaticJITFunction"

    @kiln.jit
    def double(x):
        return x * 2

    @kiln.jit(static=False)
    def triple(x):
        return x * 3

    assert double(kiln.ones(2)).tolist() == [2.0, 2.0]
    assert triple(kiln.ones(2)).tolist() == [3.0, 3.0]
    assert type(triple).__name__ == "DynamicJITFunction"


def test_symbolic_sizes_simplify():
    b, t = SymInt(4, Expr.sym("B")), SymInt(3, Expr.sym("T"))
    assert str(b * t * 2 // t) == "2*B"
    assert (b * 12) // b == 12 and not hasattr((b * 12) // b, "expr")
    assert str(b * 1) == "B" and str(b + 0) == "B"
    assert int(b * t) == 12

"""ArithmeticElimination: NaN-safe algebraic identities.

Safe: x+0, x-0, x*1, x/1, x**1, neg(neg x), no-op casts/reshapes/permutes/expands, and a
permute of a permute as one permute (a transposed gradient transposed back is the product itself).
Never rewritten, because they are wrong for floats: x*0 -> 0 (inf*0 is nan),
x-x -> 0 (inf-inf is nan), exp(log x) -> x (x < 0 gives nan), x/x -> 1.
"""
from __future__ import annotations

from .rewrite import Pat, Rule, RewritePass


def _identity(op: str, literal: float, commutative: bool) -> Rule:
    pattern = Pat(op, Pat.any("x"), Pat.literal(literal), commutative=commutative)
    return Rule(pattern, lambda m, b: m["x"], name=f"{op}(x, {literal}) -> x")


def _compose_permutes(m, b):
    """permute(permute(x, p), q) is permute(x, p[q]); x itself when that is the identity."""
    inner = m.producers[m["inner"].id].params["perm"]
    outer = m.producers[m["root"].id].params["perm"]
    perm = tuple(inner[i] for i in outer)
    return m["x"] if perm == tuple(range(len(perm))) else b.emit("permute", m["x"], perm=perm)


def _noop(op: str, check) -> Rule:
    return Rule(Pat(op, Pat.any("x"), name="root"),
                lambda m, b: m["x"] if check(m) else None, name=f"no-op {op}")


class ArithmeticElimination(RewritePass):
    """Remove operations that provably return their input unchanged (NaN-safe)."""

    def __init__(self) -> None:
        rules = [
            _identity("add", 0, True),
            _identity("sub", 0, False),
            _identity("mul", 1, True),
            _identity("div", 1, False),
            _identity("pow", 1, False),
            Rule(Pat("neg", Pat("neg", Pat.any("x"))), lambda m, b: m["x"], name="neg(neg(x)) -> x"),
            _noop("reshape", lambda m: m["root"].shape == m["x"].shape),
            _noop("expand", lambda m: m["root"].shape == m["x"].shape),
            _noop("permute", lambda m: m.producers[m["root"].id].params["perm"] == tuple(range(len(m["x"].shape)))),
            _noop("cast", lambda m: m["root"].dtype is m["x"].dtype),
            Rule(Pat("permute", Pat("permute", Pat.any("x"), name="inner"), name="root"), _compose_permutes,
                 name="permute(permute(x)) -> permute(x)"),
        ]
        super().__init__(rules, name="ArithmeticElimination")

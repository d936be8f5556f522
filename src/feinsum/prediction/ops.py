"""The arithmetic of one statement, as a GPU's pipes see it (per work-item execution).

``lp.get_op_map`` counts operations by kind, but it fails on the kernels feinsum
generates: on a ``min()`` clamp in an index (``TypeError: unexpected value type``), on the
argmin/argmax and other custom reductions; and it counts index arithmetic as arithmetic.
This counter reads the statement's value expression only (indices are the compiler's
address arithmetic), fuses ``a + b*c`` into one FMA as the compilers do, and counts a
function call as what its library expands it into: special-function unit instructions and
fp instructions, accurate or (with ``-cl-fast-relaxed-math``) fast. A function it does not
know counts as two fp instructions and is named in the prediction's notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pymbolic.primitives as prim

#: (special-function instructions, fp instructions) per call, fp32 accurate / fast, and
#: fp64 (CUDA libdevice's instruction counts: expf = ex2.approx after a range reduction
#: of ~8 FMAs; fp64 functions are polynomial evaluations on the fp64 pipe).
_FUNCTIONS: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    "exp": ((1, 8), (1, 1), (0, 24)), "exp2": ((1, 2), (1, 0), (0, 22)),
    "expm1": ((1, 12), (1, 2), (0, 26)), "log": ((1, 8), (1, 1), (0, 28)),
    "log2": ((1, 6), (1, 0), (0, 26)), "log1p": ((1, 12), (1, 2), (0, 30)),
    "sqrt": ((1, 3), (1, 0), (1, 10)), "rsqrt": ((1, 1), (1, 0), (1, 8)),
    "sin": ((1, 10), (1, 1), (0, 30)), "cos": ((1, 10), (1, 1), (0, 30)),
    "tanh": ((1, 8), (1, 2), (0, 30)), "pow": ((2, 16), (2, 2), (0, 60)),
    "erf": ((0, 14), (0, 14), (0, 30)), "fabs": ((0, 1), (0, 1), (0, 1)),
    "abs": ((0, 1), (0, 1), (0, 1)), "fmin": ((0, 1), (0, 1), (0, 1)),
    "fmax": ((0, 1), (0, 1), (0, 1)), "min": ((0, 1), (0, 1), (0, 1)),
    "max": ((0, 1), (0, 1), (0, 1)), "isnan": ((0, 1), (0, 1), (0, 1)),
    "copysign": ((0, 1), (0, 1), (0, 1)), "fma": ((0, 1), (0, 1), (0, 1)),
    "floor": ((0, 1), (0, 1), (0, 1)), "ceil": ((0, 1), (0, 1), (0, 1)),
}
#: A division: fp32 a reciprocal and a Newton step, fp64 the same on the fp64 pipe.
_DIVISION = ((1, 4), (1, 1), (1, 10))


@dataclass
class Ops:
    """Per work-item execution: fp instructions (an FMA is one), the flops they do,
    special-function instructions, integer/logic instructions; functions not known."""

    fp: float = 0.0
    flops: float = 0.0
    sfu: float = 0.0
    other: float = 0.0
    unknown: set[str] = field(default_factory=set)

    def add(self, o: Ops) -> None:
        self.fp += o.fp
        self.flops += o.flops
        self.sfu += o.sfu
        self.other += o.other
        self.unknown |= o.unknown


def _function_name(expr: prim.Call) -> str:
    f = expr.function
    name = getattr(f, "name", str(f))
    return str(getattr(name, "name", name))


class OpCounter:
    """Counts :class:`Ops` in a value expression of a given float width."""

    def __init__(self, itemsize: int, fast_math: bool) -> None:
        self.column = 2 if itemsize == 8 else (1 if fast_math else 0)

    def __call__(self, expr: Any) -> Ops:
        out = Ops()
        self._rec(expr, out)
        return out

    def _children(self, expr: Any, out: Ops) -> None:
        for c in getattr(expr, "__getinitargs__", tuple)():
            if isinstance(c, tuple):
                for cc in c:
                    self._rec(cc, out)
            else:
                self._rec(c, out)

    def _fp(self, out: Ops, n: float, flops: float | None = None) -> None:
        out.fp += n
        out.flops += n if flops is None else flops

    def _rec(self, expr: Any, out: Ops) -> None:
        if isinstance(expr, (int, float, complex, str)) or expr is None:
            return
        if isinstance(expr, (prim.Variable, prim.Subscript)):
            return  # a read; its index is address arithmetic
        if isinstance(expr, prim.Sum):
            products = sum(1 for c in expr.children if isinstance(c, prim.Product))
            fused = min(products, len(expr.children) - 1)
            self._fp(out, len(expr.children) - 1 - fused)
            for c in expr.children:
                if isinstance(c, prim.Product) and fused > 0:
                    fused -= 1
                    n = len(c.children) - 1
                    self._fp(out, n, n + 1.0)  # the last multiply fused with the add
                    for cc in c.children:
                        self._rec(cc, out)
                else:
                    self._rec(c, out)
            return
        if isinstance(expr, prim.Product):
            self._fp(out, len(expr.children) - 1)
            for c in expr.children:
                self._rec(c, out)
            return
        if isinstance(expr, prim.Quotient):
            sfu, fp = _DIVISION[self.column]
            out.sfu += sfu
            self._fp(out, fp, 1)
            self._rec(expr.numerator, out)
            self._rec(expr.denominator, out)
            return
        if isinstance(expr, prim.Power):
            if expr.exponent == 2:
                self._fp(out, 1)
            else:
                sfu, fp = _FUNCTIONS["pow"][self.column]
                out.sfu += sfu
                self._fp(out, fp, 1)
            self._rec(expr.base, out)
            return
        if isinstance(expr, prim.Call):
            name = _function_name(expr).removeprefix("native_").removeprefix("half_")
            known = _FUNCTIONS.get(name.rstrip("f"), _FUNCTIONS.get(name))
            if known is None:
                out.unknown.add(name)
                self._fp(out, 2)
            else:
                sfu, fp = known[self.column]
                out.sfu += sfu
                self._fp(out, fp, 1)
            for p in expr.parameters:
                self._rec(p, out)
            return
        if isinstance(expr, (prim.Min, prim.Max)):
            self._fp(out, len(expr.children) - 1)
        elif isinstance(expr, prim.Comparison):
            self._fp(out, 1, 0)
        elif isinstance(expr, (prim.If, prim.LogicalAnd, prim.LogicalOr, prim.LogicalNot)):
            out.other += 1
        self._children(expr, out)

"""The integer instructions of array indices that the address computation does not absorb.

The model counts one address instruction per global access
(:data:`~feinsum.prediction.model.ADDRESS_INSTRUCTIONS`) and one pointer increment per
local array a rolled loop walks: an affine index costs the compiler no more than that
(its multiply-adds fold into the address, a loop's stride becomes an increment). What
breaks the affine form costs instructions of its own, each distinct subexpression once
per statement, where :mod:`feinsum.prediction.reuse` places it (out of the loops it does
not vary in):

* an integer division by a constant (``(k*224 + 7*l1 + l0) / 35``, the element of a flat
  index): a multiply-high, the shifts and the sign's correction, and the multiply-add
  that uses it (NVIDIA's PTX: ``mul.hi``, ``mad``, two shifts, an addition); by a power of
  two a shift; by a variable the ~20 instructions of a division's emulation;
* a remainder by a constant: the division, a multiplication and a subtraction;
* a ``min`` or ``max`` (an element index clamped to the last element): a comparison-select
  and the multiply-add that uses it; a ``?:``: a comparison and a select;
* a product of two variables (not folded into a multiply-add with a constant stride).

What depends on unrolled loop indices alone is a constant in each copy, folded by the
compiler (a register tile's ``fb[px // 4, px % 4]``): it costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pymbolic.primitives as prim

from feinsum.prediction.ops import Node, Ops, leaf_depends

#: integer instructions of a division of an index by a constant (not a power of two),
#: the multiply-add that uses its quotient included
DIVISION = 5.0
#: ... of a remainder (the division, a multiplication and a subtraction)
REMAINDER = 6.0
#: ... of a division or remainder by a power of two (a shift or a mask)
SHIFT = 1.0
#: ... of a division or remainder by a variable (emulated)
VARIABLE_DIVISION = 20.0
#: ... of a ``min``/``max`` (per operand after the first) and of a ``?:``, their
#: multiply-add included
SELECT = 2.0


def _power_of_two(c: Any) -> bool:
    return isinstance(c, int) and c > 0 and c & (c - 1) == 0


def _constant(c: Any) -> bool:
    return isinstance(c, (int, float)) and not isinstance(c, bool)


def index_nodes(indices: Iterable[Any], folded: frozenset[str] = frozenset()
                ) -> list[Node]:
    """The distinct subexpressions of the array indices *indices* that cost integer
    instructions beyond the address (operands first), each with the names it depends on;
    those that depend on the names *folded* (unrolled loop indices) alone cost nothing."""
    found: dict[Any, Node] = {}
    for index in indices:
        for i in index if isinstance(index, tuple) else (index,):
            _rec(i, found)
    return [n for n in found.values() if not n.depends <= folded]


def _node(expr: Any, found: dict[Any, Node], depends: frozenset[str], cost: float
          ) -> frozenset[str]:
    if cost:
        found[expr] = Node(expr, Ops(other=cost), depends)
    return depends


def _all(children: Iterable[Any], found: dict[Any, Node]) -> frozenset[str]:
    deps: frozenset[str] = frozenset()
    for c in children:
        deps |= _rec(c, found)
    return deps


def _division(expr: prim.FloorDiv | prim.Remainder, found: dict[Any, Node]
              ) -> frozenset[str]:
    deps = _all((expr.numerator, expr.denominator), found)
    d = expr.denominator
    if not _constant(d):
        cost = VARIABLE_DIVISION
    elif _power_of_two(d):
        cost = SHIFT
    else:
        cost = REMAINDER if isinstance(expr, prim.Remainder) else DIVISION
    return _node(expr, found, deps, cost)


def _rec(expr: Any, found: dict[Any, Node]) -> frozenset[str]:
    known = leaf_depends(expr, found)
    if known is not None:
        return known
    if isinstance(expr, prim.Subscript):  # an index read from an array
        return frozenset([getattr(expr.aggregate, "name", str(expr.aggregate))]) | _all(
            expr.index if isinstance(expr.index, tuple) else (expr.index,), found)
    if isinstance(expr, (prim.FloorDiv, prim.Remainder)):
        return _division(expr, found)
    if isinstance(expr, (prim.Min, prim.Max)):
        return _node(expr, found, _all(expr.children, found),
                     SELECT * (len(expr.children) - 1))
    if isinstance(expr, prim.If):
        return _node(expr, found, _all((expr.condition, expr.then, expr.else_), found),
                     SELECT)
    if isinstance(expr, prim.Product):
        variables = [c for c in expr.children if not _constant(c)]
        deps = _all(variables, found)
        return _node(expr, found, deps, float(len(variables) > 1))
    children: list[Any] = []
    for c in getattr(expr, "__getinitargs__", tuple)():
        children.extend(c if isinstance(c, tuple) else (c,))
    return _all(children, found)

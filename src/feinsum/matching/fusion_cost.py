"""Whether an operand expression is worth computing where a recipe's kernel reads it.

An operand expression fused into the loads (:mod:`feinsum.matching.fuse`) is computed at
every read of the operand, instead of once into a global temporary. A recipe that reads
each entry once or twice (the DG recipes stage element operands, or keep them in
registers) saves the temporary's write and read for nothing; one that reads each entry
at every pass of a loop that does not index it (a GEMM's tile loop reads ``B[k, j]`` for
every block of rows) computes ``exp(B[k, j])`` that many times: ``einsum("ik,kj->ij",
exp(B)/(1 + B), C)`` ran 21x slower fused than with the temporary on this project's CPU.

:func:`reads_per_entry` counts, in the recipe's kernel, the passes of the loops around
each read of the operand whose index the read does not use (unrolled and vector lanes
excluded: the compiler computes a pure expression once for all of them);
:func:`too_costly` weighs the extra evaluations against the temporary's traffic.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from feinsum.matching.fusion import Fusion

#: operations of an expression, in multiply-add units: a division, a call (``exp``,
#: ``sin``...) and a power cost more than one
DIVISION, CALL = 4.0, 20.0
#: what a pass through memory costs against arithmetic: operations worth one byte of
#: DRAM traffic (CPUs and GPUs do 5-20 flops in the time one byte moves)
OPS_PER_BYTE = 8.0


def expression_cost(expr: Any) -> float:
    """The operations of *expr* (array reads, their index arithmetic and constants are
    free)."""
    import pymbolic.primitives as prim

    if isinstance(expr, prim.Subscript) or not isinstance(expr, prim.ExpressionNode):
        return 0.0
    children: tuple[Any, ...] = ()
    ops = 0.0
    if isinstance(expr, prim.Sum):
        children, ops = expr.children, len(expr.children) - 1
    elif isinstance(expr, prim.Product):  # a sign (the -1 of a - b) is no operation
        children = expr.children
        ops = len([c for c in children if c not in (1, -1)]) - 1
    elif isinstance(expr, (prim.Quotient, prim.FloorDiv, prim.Remainder)):
        children, ops = (expr.numerator, expr.denominator), DIVISION
    elif isinstance(expr, prim.Power):
        children, ops = (expr.base, expr.exponent), CALL
    elif isinstance(expr, prim.Call):
        children, ops = tuple(expr.parameters), CALL
    elif isinstance(expr, prim.Comparison):
        children, ops = (expr.left, expr.right), 1
    elif isinstance(expr, prim.If):
        children, ops = (expr.condition, expr.then, expr.else_), 1
    elif isinstance(expr, (prim.LogicalAnd, prim.LogicalOr, prim.Min, prim.Max)):
        children, ops = expr.children, max(1, len(expr.children) - 1)
    elif isinstance(expr, prim.LogicalNot):
        children, ops = (expr.child,), 1
    return ops + sum(expression_cost(c) for c in children)


def reads_per_entry(tk: Any, name: str) -> float:
    """How many times kernel *tk* (lengths fixed) reads each entry of array *name*, at
    most: per read, the product of the lengths of the loops around it that its index does
    not use (unrolled, vector and ILP lanes aside)."""
    import pymbolic.primitives as prim
    from loopy.kernel.data import IlpBaseTag, UnrollTag, VectorizeTag
    from loopy.symbolic import get_dependencies

    from feinsum.spec.formulas import walk

    most = 0.0
    for insn in tk.instructions:
        expression = getattr(insn, "expression", None)
        if expression is None:
            continue
        for e in walk(expression):
            if not (isinstance(e, prim.Subscript)
                    and getattr(e.aggregate, "name", None) == name):
                continue
            used = get_dependencies(e.index)
            passes = 1.0
            for iname in insn.within_inames - used:
                tags = tk.iname_tags(iname)
                if any(isinstance(t, (UnrollTag, VectorizeTag, IlpBaseTag)) for t in tags):
                    continue
                passes *= _length(tk, iname)
            most = max(most, passes)
    return most


def _length(tk: Any, iname: str) -> float:
    try:
        size = tk.get_constant_iname_length(iname)
        return float(size)
    except Exception:  # a length loopy cannot bound: count it as long
        return math.inf


def too_costly(tk: Any, name: str, expr: Any, itemsize: int) -> str | None:
    """Why computing *expr* at each read of array *name* in *tk* costs more than its
    temporary (None: it does not): the extra evaluations' operations against
    :data:`OPS_PER_BYTE` times the temporary's write and read."""
    cost = expression_cost(expr)
    if cost == 0:
        return None
    reads = reads_per_entry(tk, name)
    extra = (reads - 1) * cost
    if extra <= OPS_PER_BYTE * 2 * itemsize:
        return None
    times = "an unbounded number of" if math.isinf(reads) else f"{reads:.0f}"
    return (f"the recipe's kernel reads each entry {times} times: its {cost:.0f} "
            "operations there cost more than the temporary")


def worthwhile(tk: Any, fusion: Fusion, canonical: Any) -> tuple[Fusion, list[str]]:
    """*fusion* without the operand expressions that cost more computed at every read of
    kernel *tk* (the recipe's, in the canonical names of einsum *canonical*) than their
    temporaries (:func:`too_costly`), and a note for each one left out."""
    from feinsum.matching.fusion import without_operands

    spec = fusion.spec
    if spec is None or not spec.operands:
        return fusion, []
    itemsize = {a.name: a.dtype.itemsize for a in canonical.arrays}
    costly = {}
    for op in spec.operands:
        if op.array in fusion.required:
            continue
        why = too_costly(tk, op.array, op.expression, itemsize.get(op.array, 8))
        if why is not None:
            costly[op.array] = why
    if not costly:
        return fusion, []
    return without_operands(fusion, costly)

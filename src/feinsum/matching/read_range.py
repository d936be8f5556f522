"""Reads of a fused operand past the end of an axis.

A recipe may read a C-order operand with an index past its axis' length, meaning the
entries that follow in memory: ``dg_nodes`` copies a block of ``u[e, j]`` into local
memory as ``u[e0, f]`` with ``f`` running over the whole block (``j + 35 k`` is element
``e0 + k``). For an array that is what it reads; for an operand computed by an expression
of its indices (:class:`~feinsum.spec.fused.OperandExpression`) it is not, unless the
expression is laid out as the operand. :func:`in_range` says whether a read stays within
the operand's shape over the statement's loop domain; where it may not,
:func:`c_order_indices` gives the in-range indices of the entry the read means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymbolic.primitives as prim


def in_range(domain: Any, index: Sequence[Any], shape: Sequence[Any]) -> bool:
    """Whether every value of *index* over *domain* (an ``isl.Set`` of the statement's
    loops, the kernel's lengths its parameters) lies within *shape* (``min``/``max``
    clamps and floor divisions included, as piecewise quasi-affine functions); ``False``
    where ISL cannot tell."""
    from loopy.symbolic import get_dependencies, pwaff_from_expr

    names = set(domain.get_var_dict())
    if not get_dependencies(tuple(index)) | get_dependencies(tuple(shape)) <= names:
        return False
    space = domain.get_space()
    try:
        for value, length in zip(index, shape, strict=True):
            at = pwaff_from_expr(space, value, ())
            below = at.lt_set(pwaff_from_expr(space, 0, ()))
            past = at.ge_set(pwaff_from_expr(space, length, ()))
            if not (domain.intersect(below).is_empty()
                    and domain.intersect(past).is_empty()):
                return False
    except Exception:  # an index ISL cannot express: not known to be in range
        return False
    return True


def c_strides(shape: Sequence[Any]) -> list[Any]:
    """The strides, in entries, of a C-order array of *shape*."""
    strides: list[Any] = []
    step: Any = 1
    for length in reversed(shape):
        strides.insert(0, step)
        step = step * length
    return strides


def c_order_indices(index: Sequence[Any], shape: Sequence[Any]) -> tuple[Any, ...]:
    """The in-range indices of the entry a read of a C-order array of *shape* at *index*
    reaches in memory (the entry ``sum(index[k] * stride[k])`` from the first): *index*
    itself where it is in range."""
    strides = c_strides(shape)
    flat: Any = 0
    for i, s in zip(index, strides, strict=True):
        flat = flat + i * s
    out: list[Any] = []
    for axis, (s, length) in enumerate(zip(strides, shape, strict=True)):
        value = prim.FloorDiv(flat, s) if s != 1 else flat
        out.append(value if axis == 0 else prim.Remainder(value, length))
    return tuple(out)


def equal(a: Any, b: Any) -> bool:
    """Whether two length expressions (strides) are equal: evaluated with their length
    symbols set to the same distinct values."""
    from loopy.symbolic import get_dependencies
    from pymbolic import evaluate

    names = sorted(get_dependencies(a) | get_dependencies(b))
    values = {n: 1009 + 2 * k for k, n in enumerate(names)}
    return bool(evaluate(a, values) == evaluate(b, values))

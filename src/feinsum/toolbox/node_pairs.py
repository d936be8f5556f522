"""Reduction points two at a time in :mod:`feinsum.toolbox.nodes` (``pairs``).

A stage whose inputs all lie in local memory and end with the same reduction index ``q``
(:func:`feinsum.toolbox.node_plan.pair_index`: the node operators' ``j``) reads them in
pairs of points: each such array is staged as rows of OpenCL 2-vectors (a ``vec`` axis),
one row per value of its other indices, ``ceil(len(q)/2)`` pairs a row, rows padded to
an odd number of pairs (:func:`~feinsum.toolbox.node_plan.pair_shape`) so that the rows a
subgroup reads fall on distinct banks. A fetch then loads one vector per pair (half the
local-memory instructions and wavefronts of scalar loads); the pad point of an odd length
is zero in every input, so it adds products of zeros only. Writers store whole pairs,
component by component (loopy writes a vector component only at a constant index).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.dense import Stage, subscript
from feinsum.toolbox.node_plan import (
    NodeLayout,
    chunks,
    element,
    flat,
    length,
    outer,
    pair_shape,
    sliced,
    stage_out,
    staged_pitch,
)


def pair_row(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int,
             col: int | str, values: dict[str, Any], local_el: Any, mode: str) -> Any:
    """The first pair of the row input *col* of stage *s* reads at *values* (all its
    indices but the paired last one): in pairs from the start of its local array. *mode*:
    ``"local"`` (an operator), ``"staged"`` (an element operand) or ``"w"``."""
    if col == "w":
        out = stage_out(e, stages, s - 1, outer(e, stages, layout))
        row = local_el * (math.prod(length(e, i) for i in out) // length(e, out[-1])) + flat(
            e, out[:-1], values)
        return row * pair_shape(e, out[-1])[1]
    c = int(col)
    idx = e.in_indices[c]
    P = pair_shape(e, idx[-1])[1]
    if mode == "local":
        return flat(e, idx[1 if sliced(e, stages, layout, c) else 0:-1], values) * P
    k = idx.index(element(e))
    per_element = math.prod(length(e, i) for i in idx[k + 1:-1])
    pitch = staged_pitch(e, stages, layout, c) // (2 * P)
    return (flat(e, idx[:k], values) * pitch + local_el * per_element
            + flat(e, idx[k + 1:-1], values)) * P


def pair_store(name: str, at: Any, values: Sequence[Any], dtype: Any, id: str,
               within: set[str], bounds: dict[str, int], temp: Any,
               predicates: frozenset[Any] = frozenset()) -> list[lp.Assignment]:
    """Pair *at* of local array *name* ``=`` the two *values*: computed into a private
    2-vector, component by component, then stored whole (one vector store; the
    component loop ``vec_ID`` is for :func:`feinsum.toolbox.nodes.node_kernel` to tag
    ``vec``)."""
    pv, v = f"pv_{id}", f"vec_{id}"
    temp(pv, (2,), dtype, vector=2)
    bounds[v] = 2
    out = [lp.Assignment(subscript(pv, comp), value, id=f"{id}_{comp}",
                         predicates=predicates, within_inames=frozenset(within))
           for comp, value in enumerate(values)]
    out.append(lp.Assignment(subscript(name, at, prim.Variable(v)), subscript(pv, prim.Variable(v)),
                             id=id, predicates=predicates,
                             depends_on=frozenset(i.id for i in out),
                             within_inames=frozenset({*within, v})))
    return out


def pair_copy(name: str, rule: str, idx: Sequence[str], first: dict[str, Any], rows: int,
              layout: NodeLayout, e: BatchedEinsum, within: set[str],
              bounds: dict[str, int], id: str, dtype: Any, temp: Any, guard: Any = None,
              base: Any = 0, padded: bool = False) -> list[lp.Assignment]:
    """Copy *rows* consecutive rows of a C-order operand (its last index ``q`` a row) into
    local array *name* of pairs (from pair *base* on), spread over all the work-items of a
    work-group as :func:`feinsum.toolbox.nodes.flat_copy` spreads entries: work-item ``w``
    copies the pairs ``k*work_items + w`` (:func:`pair_store`), the pad point of an odd
    length as zero. The operand is read through its *rule* at the index values *first*
    with the flat offset added to its last index. *guard*: a condition on the flat offset
    (inside the element range: else zero); *padded*: every work-item stores in every round
    (the array has room for it), else stores past the rows are skipped."""
    q = idx[-1]
    n = length(e, q)
    m, P = pair_shape(e, q)
    work, total = layout.work_items, rows * m
    bounds[f"k_{id}"] = chunks(total, work)
    g = (prim.Variable(f"k_{id}") * work + prim.Variable("l1") * layout.lanes
         + prim.Variable("l0"))
    row, pair = prim.FloorDiv(g, m), prim.Remainder(g, m)
    past = [prim.Comparison(g, "<", total)] if total % work else []
    values = []
    for comp in (0, 1):
        point = 2 * pair + comp
        f = row * n + point
        args = [first.get(i, 0) for i in idx]
        args[-1] = args[-1] + f
        conds = [prim.Comparison(point, "<", n)] if comp and n % 2 else []
        if guard is not None:
            conds.append(guard(f))
        if padded:
            conds += past
        value: Any = prim.Variable(rule)(*args)
        if conds:
            value = prim.If(prim.LogicalAnd(tuple(conds)) if len(conds) > 1 else conds[0],
                            value, 0)
        values.append(value)
    return pair_store(name, base + row * P + pair, values, dtype, id, {*within, f"k_{id}"},
                      bounds, temp, frozenset() if padded else frozenset(past))

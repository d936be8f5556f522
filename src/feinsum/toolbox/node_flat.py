"""A flat first stage in :mod:`feinsum.toolbox.nodes` (``flat``): the block's entries of
the first stage's result spread over all the work-items of a work-group, one entry per
work-item and round (in pairs of entries where the next stage reads pairs,
:mod:`feinsum.toolbox.node_pairs`), its short reduction written out as one sum."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.dense import Stage, stage_indices, subscript
from feinsum.toolbox.node_pairs import pair_store
from feinsum.toolbox.node_plan import (
    NodeLayout,
    access,
    chunks,
    element,
    flat,
    flat_unit,
    flat_width,
    length,
    operator_offset,
    outer,
    pair_shape,
    paired,
    sliced,
    slots,
    stage_out,
    staged_name,
    staged_pitch,
)


def flat_stage_statements(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout,
                          p: int, rows: Sequence[int], e0: Any, E: Any, within: set[str],
                          bounds: dict[str, int], needs: frozenset[str],
                          own: dict[tuple[int, int], int], temp: Any) -> list[Any]:
    """Pass *p*'s first stage computed flat (:func:`~feinsum.toolbox.node_plan.flat_stage`):
    its result for the whole block, entry ``f = k*width + w`` by work-item ``w`` in round
    ``k`` (the layout of the local result: element ``f // size``, then the stage's outputs
    in C order; ``width``: :func:`~feinsum.toolbox.node_plan.flat_width`, whole elements'
    entries, so that a work-item's element offset and entry are divided out once, not in
    every round; the work-items past it idle). Consecutive work-items read consecutive
    addresses of the element operands that end with the stage's outputs; the element
    index is clamped to the last element (the entries past it are never stored). Where
    the next stage reads pairs of the last output, slot ``g`` computes the pair ``g`` of
    the rows of pairs, the pad point of an odd length as zero, and stores it whole."""
    out = stage_out(e, stages, 0, outer(e, stages, layout))
    size = math.prod(length(e, i) for i in out)
    unit, width = flat_unit(e, stages, layout), flat_width(e, stages, layout)
    nq = length(e, out[-1])
    m, P = pair_shape(e, out[-1]) if paired(e, stages, layout, "w", 1) else (0, 0)
    w = prim.Variable("l1") * layout.lanes + prim.Variable("l0")
    idle: frozenset[Any] = frozenset(
        {prim.Comparison(w, "<", width)} if width < layout.work_items else ())
    insns: list[Any] = []
    for r in rows:
        k = f"k_flat_p{p}_r{r}"
        g = prim.Variable(k) * width + w
        # the element in the block and the entry in the element's result (its pairs)
        le, at = ((prim.Variable(k) * (width // unit) + prim.FloorDiv(w, unit),
                   prim.Remainder(w, unit)) if width % unit == 0
                  else (prim.FloorDiv(g, unit), prim.Remainder(g, unit)))
        dest, sid = f"w0_{r % slots(e, layout)}", f"fin_p{p}_s0_r{r}"
        bounds[k] = chunks(unit * layout.block, width)
        if not m:
            insns.append(lp.Assignment(
                subscript(dest, g), _entry(e, stages, layout, p, r, le, at, e0, E, own),
                id=sid, depends_on=needs, predicates=cast(Any, idle),
                within_inames=frozenset(within | {k})))
            continue
        pair = prim.Remainder(at, m)  # in the element's row of pairs at // m
        first = prim.FloorDiv(at, m) * nq + 2 * pair
        values = [_entry(e, stages, layout, p, r, le, first, e0, E, own),
                  _entry(e, stages, layout, p, r, le, first + 1, e0, E, own)]
        if nq % 2:  # the pad point of an odd length: zero
            values[1] = prim.If(prim.Comparison(2 * pair + 1, "<", nq), values[1], 0)
        row = le * (size // nq) + prim.FloorDiv(at, m)
        insns += [i.copy(depends_on=i.depends_on | needs) for i in pair_store(
            dest, row * P + pair, values,
            np.result_type(*(e.value_dtype(r) for r in rows)), sid, within | {k}, bounds,
            temp, idle)]
    return insns


def _entry(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, p: int, r: int,
           le: Any, rest: Any, e0: Any, E: Any, own: dict[tuple[int, int], int]) -> Any:
    """Entry *rest* of the result of the block's element *le* of row *r*'s flat first
    stage (pass *p*): its sum written out."""
    el, st = element(e), stages[0]
    split = outer(e, stages, layout)
    out = stage_out(e, stages, 0, split)
    vals: dict[str, Any] = {el: prim.Min((e0 + le, E - 1))}
    for i, stride in zip(out, [math.prod(length(e, j) for j in out[n + 1:])
                               for n in range(len(out))], strict=True):
        q = prim.FloorDiv(rest, stride) if stride > 1 else rest
        vals[i] = prim.Remainder(q, length(e, i)) if i != out[0] else q
    if split:
        vals[split] = prim.Variable(f"{split}_p{p}x")
    red = [i for i in stage_indices(e, stages, 0) if i not in st.out]
    terms = []
    for pt in itertools.product(*(range(length(e, i)) for i in red)):
        at = vals | dict(zip(red, pt, strict=True))
        terms.append(prim.Product(tuple(
            _factor(e, stages, layout, r, int(c), at, own, prim.Min((le, layout.block - 1)))
            for c in st.inputs)))
    return prim.Sum(tuple(terms)) if len(terms) > 1 else terms[0]


def _factor(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, r: int, c: int,
            vals: dict[str, Any], own: dict[tuple[int, int], int], local_el: Any) -> Any:
    """Operand *c* of the flat first stage for row *r* at the index values *vals*."""
    idx = e.in_indices[c]
    mode = access(e, stages, c, layout.registers)
    if mode in ("lanes", "broadcast"):
        return prim.Variable(f"op{c}_r{r}")(*(vals[i] for i in idx))
    if mode == "staged":
        k = idx.index(element(e))
        S = math.prod(length(e, i) for i in idx[k + 1:])
        return subscript(staged_name(e, layout, r, c),
                         flat(e, idx[:k], vals) * staged_pitch(e, stages, layout, c)
                         + local_el * S + flat(e, idx[k + 1:], vals))
    if mode in ("local", "registers"):
        return subscript(f"o{c}_r{own[r, c]}", operator_offset(
            e, stages, c, vals, sliced(e, stages, layout, c)))
    return prim.Variable(f"op{c}_r{r}")()

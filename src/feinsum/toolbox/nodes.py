"""Element-batched operators on GPUs: the output's node index on the lanes.

The per-element programs of :mod:`feinsum.toolbox.dense` and
:mod:`feinsum.toolbox.transposed` give each work-item whole elements, a CPU's layout: on a
GPU every element load and output store then has a lane stride of a whole element row.
:func:`node_kernel` builds the GPU's layout (:class:`NodeLayout`) for the einsums of
:func:`feinsum.toolbox.dense.element_reason`, contracted in the stages of
:func:`feinsum.toolbox.dense.element_stages`:

* every stage has a *lane index* (:func:`stage_lane`): the output's last index ``a`` (the
  node ``i`` of ``ij,ej->ei``) where the stage keeps it, else its longest output index
  (divergence's ``W[r,j] = sum_x J[x,r,e] u[x,e,j]``: ``j``). ``lanes`` work-items along
  ``l.0`` cover it in chunks: a work-item owns the entries ``t*lanes + l0``;
* ``rows`` element rows along ``l.1`` and ``elements`` elements per work-item (a register
  tile along ``e``) make a block of ``rows*elements`` elements: element ``n`` of row ``l1``
  is ``e0 + n*rows + l1``, so that a store of all work-items writes consecutive
  element rows (coalesced);
* the element-independent operands (operators) are staged once per work-group in local
  memory by *all* its work-items: one flat index over the operand's entries, split over
  the work-items (coalesced loads; :func:`flat_copy`); ``registers``: each work-item then
  keeps the operator entries of its own lane-index entries in registers;
* the element operands a stage reads without its lane index (``u[e,j]`` in
  ``ij,ej->ei``, read by every node) are staged per block in local memory the same way
  (flat coalesced copies of the block's contiguous range) and read as broadcasts; those
  with the lane index are read straight from global memory (``u[x,e,j]`` on ``j``);
* a stage's result stays in registers when the next stage has the same lane index
  (gradient's ``V[r,i]``), else it goes to local memory for the next stage
  (divergence's ``W[r,j]``, reduced over ``j`` by every node);
* every stage computes all its outputs of a work-item at once: one accumulator per
  element, chunk, row of the pass and entry of the other output indices, updated in one
  fully unrolled nest of the reduction loops (each loaded value feeds every accumulator
  it can; no private array is indexed by a rolled loop, so none spills to the stack);
* ``rows_per_pass`` fields (rows of a batch) share the loops, ``groups`` work-groups loop
  over the blocks (operators staged once per group), or one block per group (``0``);
* ``pairs``: a stage whose inputs all lie in local memory reads two points of their last
  index at a time (:mod:`feinsum.toolbox.node_pairs`).

Element indices past the end are never clamped inside the loops: global loads are guarded
(``if``), staged operators get padding so that a partial last chunk reads inside the
array, and only entries inside the ranges are stored.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from pymbolic.mapper.substitutor import substitute

from feinsum.errors import RecipeError
from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.core import kernel_of
from feinsum.toolbox.dense import (
    Stage,
    finish_element_kernel,
    rewritten_kernel,
    row_specific,
    stage_indices,
    subscript,
)
from feinsum.toolbox.node_flat import flat_stage_statements
from feinsum.toolbox.node_pairs import pair_copy, pair_row
from feinsum.toolbox.node_plan import (
    NodeLayout,
    access,
    chunks,
    direct_stage,
    element,
    fetch_dims,
    flat,
    flat_stage,
    kept_private,
    length,
    node_reason,
    operator_entries,
    operator_offset,
    operator_row,
    outer,
    owners,
    pair_index,
    pair_shape,
    paired,
    private_indices,
    result_entries,
    sliced,
    slots,
    stage_lane,
    stage_of,
    stage_out,
    staged_name,
    staged_pitch,
)

#: Copy loops of at most this many rounds are unrolled (the loads then overlap).
UNROLLED_COPY_ROUNDS = 16

def flat_copy(name: str, rule: str, idx: Sequence[str], first: dict[str, Any], count: int,
              layout: NodeLayout, within: set[str], bounds: dict[str, int], id: str,
              guard: Any = None, base: Any = 0, padded: bool = False, row: int = 0
              ) -> lp.Assignment:
    """Copy *count* consecutive entries of a C-order operand into local array *name*
    (from offset *base* on), spread over all the work-items of a work-group: work-item
    ``w = l1*lanes + l0`` copies entries ``k*work_items + w``, so consecutive work-items
    read consecutive addresses. The operand is read through its *rule* at the index
    values *first* (those not given: 0) with the flat offset added to its last index (C
    order: the entries that follow). *guard*: a condition on the flat offset (inside the
    element range). *padded*: the local array has room for every work-item's last round
    (:func:`padded_entries`): each work-item stores unconditionally, zero outside the
    ranges (PoCL's CPU device dropped guarded local stores of a partial work-group inside
    a loop with barriers: a plain store is what it runs correctly). *row*: every *row*
    entries are followed by one of padding in local memory."""
    work = layout.work_items
    bounds[f"k_{id}"] = chunks(count, work)
    f = prim.Variable(f"k_{id}") * work + prim.Variable("l1") * layout.lanes + prim.Variable("l0")
    args = [first.get(i, 0) for i in idx]
    args[-1] = args[-1] + f
    conds = [prim.Comparison(f, "<", count)] if count % work else []
    if guard is not None:
        conds.append(guard(f))
    value: Any = prim.Variable(rule)(*args)
    if padded and conds:
        value = prim.If(prim.LogicalAnd(tuple(conds)) if len(conds) > 1 else conds[0],
                        value, 0)
        conds = []
    where = base + f + (prim.FloorDiv(f, row) if row else 0)
    return lp.Assignment(subscript(name, where), value, id=id,
                         predicates=frozenset(cast(Any, conds)),
                         within_inames=frozenset({*within, f"k_{id}"}))


def node_kernel(t_unit: lp.TranslationUnit, e: BatchedEinsum, stages: Sequence[Stage],
                layout: NodeLayout) -> lp.TranslationUnit:
    """The GPU per-element program of element-batched *e* in the plan *stages* (see the
    module docstring; :func:`node_reason` must hold)."""
    knl = kernel_of(t_unit)
    why = node_reason(e, stages)
    if why is not None:
        raise RecipeError(f"the node layout does not fit {e}: {why}")
    el, L0, R, NE, G = element(e), layout.lanes, layout.rows, layout.elements, layout.groups
    F, B = slots(e, layout), layout.block
    nsym = str(e.lengths[el])
    E, l0, l1, eg = (prim.Variable(v) for v in (nsym, "l0", "l1", "eg"))
    e0 = (prim.Variable("et") * G + eg) * B if G else eg * B
    group = {"eg", "l0", "l1"}
    block = group | ({"et"} if G else set())
    bounds: dict[str, int] = {}
    tags: dict[str, str] = {"l0": "l.0", "l1": "l.1", "eg": "g.0"}
    temps: list[Any] = []
    insns: list[Any] = []
    priorities: list[list[str]] = []
    own = owners(e)

    def temp(name: str, shape: tuple[int, ...], dt: Any, local: bool = False,
             pairs: bool = False, vector: int = 0) -> None:
        if any(t.name == name for t in temps):
            return  # a register array of one slot, reused pass after pass
        temps.append(lp.TemporaryVariable(
            name, dt, shape=(shape[0] // 2, 2) if pairs else shape,
            dim_tags=cast(Any, "c,vec" if pairs else "vec" if vector else None),
            address_space=lp.AddressSpace.LOCAL if local else lp.AddressSpace.PRIVATE))

    def dtype(r: int, c: int) -> Any:
        return np.result_type(*(cast(Array, f).dtype for f in e.arguments[r][c]))

    def loops(idx: Sequence[str], tag: str, unroll: Any = True) -> dict[str, Any]:
        """A loop per index of *idx* (unrolled if *unroll*, a bool or a set of indices)."""
        names = {i: f"{i}_{tag}" for i in idx}
        for i, v in names.items():
            bounds[v] = length(e, i)
            if unroll is True or (unroll and i in unroll):
                tags[v] = "unr"
        return {i: prim.Variable(v) for i, v in names.items()}

    # {{{ operators: staged once per work-group by all its work-items (and to registers)

    regs: dict[tuple[int, int], str] = {}
    pre_ids: list[str] = []
    slices: list[tuple[str, int, int]] = []  # staged per slice, inside the split loop
    for (r, c), owner in own.items():
        mode = access(e, stages, c, layout.registers)
        if owner != r or mode not in ("local", "registers"):
            continue
        idx, name = e.in_indices[c], f"o{c}_r{r}"
        cut, pr = sliced(e, stages, layout, c), paired(e, stages, layout, c)
        temp(name, (operator_entries(e, stages, c, L0, cut, pr),), dtype(r, c), local=True,
             pairs=pr)
        if cut:
            slices.append((name, r, c))
            continue
        copy = pair_copy(name, f"op{c}_r{r}", idx, {}, math.prod(
            length(e, i) for i in idx[:-1]), layout, e, group, bounds, f"copy_{name}",
            dtype(r, c), temp) if pr else [flat_copy(name, f"op{c}_r{r}", idx, {}, math.prod(
                length(e, i) for i in idx), layout, group, bounds, id=f"copy_{name}",
                row=operator_row(e, stages, c))]
        insns += copy
        pre_ids += [i.id for i in copy]
        if mode == "registers":
            lane = stage_lane(e, stages, stage_of(stages, c))
            rest = [i for i in idx if i != lane]
            g = regs[r, c] = f"g{c}_r{r}"
            vals = loops([lane, *rest], g)
            bounds[f"{lane}_{g}"] = chunks(length(e, lane), L0)
            temp(g, (bounds[f"{lane}_{g}"], *(length(e, i) for i in rest)), dtype(r, c))
            insns.append(lp.Assignment(
                subscript(g, *vals.values()),
                subscript(name, operator_offset(e, stages, c,
                                                vals | {lane: vals[lane] * L0 + l0})),
                id=f"load_{g}", depends_on=frozenset({f"copy_{name}"}),
                within_inames=frozenset({*group, *(v.name for v in vals.values())})))
            pre_ids.append(f"load_{g}")

    # }}}

    # {{{ per pass: the block's element copies, then the stages

    passes = [list(range(p, min(p + F, e.nrows))) for p in range(0, e.nrows, F)]
    split = outer(e, stages, layout)
    for p, rows in enumerate(passes):
        # a split layout loops over the split index around the first two stages
        around = {f"{split}_p{p}x"} if split else set()
        if split:
            bounds[f"{split}_p{p}x"] = length(e, split)
        after = frozenset({f"*_p{p - 1}_*"} if p else set())
        copies = _element_copies(e, stages, layout, p, rows, e0, E, block, bounds, temp,
                                 dtype, loops, after)
        for name, r, c in slices:
            at = {str(split): prim.Variable(f"{split}_p{p}x")}
            idx = e.in_indices[c]
            copy = pair_copy(
                name, f"op{c}_r{r}", idx, at, math.prod(length(e, i) for i in idx[1:-1]),
                layout, e, block | around, bounds, f"copy_p{p}_{name}", dtype(r, c), temp
            ) if paired(e, stages, layout, c) else [flat_copy(
                name, f"op{c}_r{r}", idx, at, math.prod(length(e, i) for i in idx[1:]),
                layout, block | around, bounds, id=f"copy_p{p}_{name}",
                row=operator_row(e, stages, c))]
            copies += [i.copy(depends_on=after) for i in copy]
        insns += copies
        for s, st in enumerate(stages):
            if flat_stage(e, stages, layout, s):
                _result_temps(e, stages, layout, s, p, rows, temp)
                insns += flat_stage_statements(
                    e, stages, layout, p, rows, e0, E, block | around, bounds,
                    frozenset({*pre_ids, *(i.id for i in copies)} | after), own, temp)
                continue
            lane = stage_lane(e, stages, s)
            nb, T = length(e, lane), chunks(length(e, lane), L0)
            tag = f"s{s}p{p}"
            red_idx = [i for i in stage_indices(e, stages, s)
                       if i not in st.out and not (s == 1 and i == split)]
            direct = direct_stage(e, stages, layout, s)
            q = pair_index(e, stages, layout, s)
            red = {} if direct else loops([i for i in red_idx if i != q], tag,
                                          private_indices(e, stages, s, layout.registers))
            two: set[str] = set()  # the pair's component loop
            pairs: Any = None  # the loop over q's pairs
            if q is not None:  # pairs of q's points: q = 2 * (q's loop) + component
                red[q] = pairs = prim.Variable(f"{q}_{tag}")
                jv = prim.Variable(f"{q}v_{tag}")
                bounds[red[q].name], bounds[jv.name] = pair_shape(e, q)[0], 2
                tags[jv.name], two = "unr", {jv.name}
            inside = around if s < 2 else set()  # statements inside the split loop
            whole = around if s == 0 else set()  # ... init and fin included
            n, t = prim.Variable(f"n_{tag}"), prim.Variable(f"t_{tag}")
            bounds |= {n.name: NE, t.name: T}
            tags |= {n.name: "unr", t.name: "unr"}
            oth = loops([i for i in stage_out(e, stages, s, split) if i != lane], f"{tag}o")
            cells = (n, t, *oth.values())
            inner = {n.name, t.name, *(v.name for v in oth.values())}
            vals = {el: e0 + n * R + l1, lane: t * L0 + l0, **oth, **red} | (
                {split: prim.Variable(next(iter(around)))} if inside and split else {})
            if not direct:
                priorities.append([*inside, *(v.name for v in red.values()), *two, n.name,
                                   t.name, *(v.name for v in oth.values())])
            if s < len(stages) - 1:
                _result_temps(e, stages, layout, s, p, rows, temp)
            # a result kept in registers is read from the accumulators themselves
            needs = {*pre_ids, *(i.id for i in copies)} | ({
                f"{'upd' if kept_private(e, stages, s - 1) else 'fin'}_p{p}_s{s - 1}_*"}
                if s else set())
            partial = {prim.Comparison(vals[lane], "<", nb)} if nb < T * L0 else set()
            dims = {"n": n, "t": t, **oth, **({"pair": jv} if two else {})}
            fetched: dict[str, str] = {}
            for r in rows:
                acc, sfx = f"a{s}_r{r % F}", f"_p{p}_s{s}_r{r}"
                if direct:
                    insns.append(_direct(e, stages, layout, s, r, vals, red_idx, n, t, regs,
                                         own, E, partial, frozenset(block | inner),
                                         frozenset(needs), sfx))
                    continue
                temp(acc, (NE, T, *(length(e, i) for i in oth)), e.value_dtype(r))
                cell = subscript(acc, *cells)
                factors = []
                for col in st.inputs:
                    fd = fetch_dims(e, stages, s, col, layout.registers, split)
                    if fd is not None and two:
                        fd = (*fd, "pair")
                    if fd is None:
                        factors.append(_factor(e, stages, layout, s, r, col, vals, n, t, regs,
                                               own, E, l1))
                        continue
                    # each value loaded once per reduction point, for all accumulators
                    slot = (r % F if col == "w" or int(col) in row_specific(e)
                            else own[r, int(col)])
                    name = f"v_s{s}_{col}_r{slot}"
                    if name not in fetched:
                        fetched[name] = f"fetch_p{p}{name[1:]}"
                        fv = {d: prim.Variable(f"{dims[d].name}_{name}") for d in fd}
                        bounds.update({v.name: bounds[dims[d].name] for d, v in fv.items()})
                        tags.update({v.name: "unr" for v in fv.values()})
                        fvals = vals | {el: e0 + fv.get("n", n) * R + l1,
                                        lane: fv.get("t", t) * L0 + l0} | {
                            i: fv[i] for i in oth if i in fv}
                        temp(name, tuple(bounds[dims[d].name] for d in fd) or (1,),
                             e.value_dtype(r) if col == "w" else dtype(r, int(col)))
                        insns.append(lp.Assignment(
                            subscript(name, *fv.values()) if fd else subscript(name, 0),
                            _factor(e, stages, layout, s, r, col, fvals, fv.get("n", n),
                                    fv.get("t", t), regs, own, E, l1,
                                    (pairs, fv["pair"]) if two else None),
                            id=fetched[name], depends_on=frozenset(needs) | after,
                            within_inames=frozenset(block | {v.name for v in fv.values()}
                                                    | {v.name for v in red.values()}
                                                    | inside)))
                    factors.append(subscript(name, *(dims[d] for d in fd)) if fd
                                   else subscript(name, 0))
                dest, guards = _destination(e, stages, layout, s, r, vals, n, t, partial, E)
                # init and fin loop over their own copies of the accumulator loops (loopy
                # nests loops as a tree: the fetches sit between the reduction and these)
                roles = ("init",) if kept_private(e, stages, s) else ("init", "fin")
                for role, i in itertools.product(roles, inner):
                    bounds[f"{i}_{role}"], tags[f"{i}_{role}"] = bounds[i], "unr"

                def moved(x: Any, role: str, inner: set[str] = inner) -> Any:
                    return substitute(x, {i: prim.Variable(f"{i}_{role}") for i in inner})

                fin = [] if kept_private(e, stages, s) else [
                    lp.Assignment(moved(dest, "fin"), moved(cell, "fin"), id=f"fin{sfx}",
                                  predicates=frozenset(moved(g, "fin") for g in guards),
                                  depends_on=frozenset({f"upd{sfx}"}),
                                  within_inames=frozenset(
                                      block | whole | {f"{i}_fin" for i in inner}))]
                insns += [*fin,
                    lp.Assignment(moved(cell, "init"), e.value_dtype(r).type(0),
                                  id=f"init{sfx}", depends_on=after, within_inames=frozenset(
                                      block | whole | {f"{i}_init" for i in inner})),
                    lp.Assignment(cell, cell + prim.Product(tuple(factors)), id=f"upd{sfx}",
                                  depends_on=frozenset({*needs, f"init{sfx}",
                                                        *fetched.values()}),
                                  within_inames=frozenset(
                                      block | inner | inside | two
                                      | {v.name for v in red.values()}))]

    # }}}

    # {{{ domain and the kernel

    cons = [f"0 <= l0 < {L0}", f"0 <= l1 < {R}"]
    # a looping grid: every group the same trips (the last blocks of some groups lie past
    # the end: their loads are guarded, their stores too), so that the loop around the
    # barriers does not depend on the group (PoCL's CPU device lost the local stores of
    # some trips otherwise)
    cons += [f"0 <= eg < {G} and 0 <= et and {B * G}*et < {nsym}" if G
             else f"0 <= eg and {B}*eg < {nsym}"]
    # one small domain per loop: ISL's work in code generation grows with the dimensions
    # of the domain an index is simplified in
    domains = [f"[{nsym}] -> {{[{', '.join(sorted(block))}]: {' and '.join(cons)}}}",
               *(f"{{[{i}]: 0 <= {i} < {n}}}" for i, n in bounds.items())]
    new = rewritten_kernel(knl, domains, insns, temps)
    tags |= {k: "unr" for k, n in bounds.items()
             if k.startswith("k_") and n <= UNROLLED_COPY_ROUNDS}
    tags |= {k: "vec" for k in bounds if k.startswith("vec_")}  # node_pairs.pair_store
    new = lp.tag_inames(new, tags)
    return finish_element_kernel(new, None, priorities, nsym)

    # }}}


def _element_copies(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, p: int,
                    rows: Sequence[int], e0: Any, E: Any, block: set[str],
                    bounds: dict[str, int], temp: Any, dtype: Any, loops: Any,
                    after: frozenset[str]) -> list[Any]:
    """Pass *p*'s copies of the block's element operands read without their stage's lane
    index into local memory (an operand all rows share: in pass 0 only)."""
    el, B = element(e), layout.block
    out = []
    for r in rows:
        for c in range(e.noperands):
            if access(e, stages, c, layout.registers) != "staged" or (
                    c not in row_specific(e) and r != 0):
                continue
            name = staged_name(e, layout, r, c)
            idx = e.in_indices[c]
            k = idx.index(el)
            S = math.prod(length(e, i) for i in idx[k + 1:])
            pitch, pr = staged_pitch(e, stages, layout, c), paired(e, stages, layout, c)
            if p == 0:
                temp(name, (math.prod(length(e, i) for i in idx[:k]) * pitch,), dtype(r, c),
                     True, pairs=pr)
            pre = loops(idx[:k], f"{name}_p{p}")
            within = block | {v.name for v in pre.values()}

            def guard(f: Any, S: int = S) -> Any:
                return prim.Comparison(e0 * S + f, "<", E * S)
            copy = pair_copy(
                name, f"op{c}_r{r}", idx, {**pre, el: e0}, B * S // length(e, idx[-1]),
                layout, e, within, bounds, f"copy_p{p}_{name}", dtype(r, c), temp, guard=guard,
                base=flat(e, idx[:k], pre) * (pitch // 2), padded=True) if pr else [flat_copy(
                    name, f"op{c}_r{r}", idx, {**pre, el: e0}, B * S, layout, within, bounds,
                    id=f"copy_p{p}_{name}", guard=guard, base=flat(e, idx[:k], pre) * pitch,
                    padded=True)]
            out += [i.copy(depends_on=after) for i in copy]
    return out


def _direct(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int, r: int,
            vals: dict[str, Any], red: Sequence[str], n: Any, t: Any,
            regs: dict[tuple[int, int], str], own: dict[tuple[int, int], int], E: Any,
            partial: set[Any], within: frozenset[str], needs: frozenset[str], sfx: str
            ) -> lp.Assignment:
    """Last stage *s* of row *r* written out (:func:`direct_stage`): each output entry one
    sum over the reduction points, no accumulators (a value several entries read, as
    ``J[x,r,e]`` for every node, is one load: the compiler's)."""
    terms = []
    for point in itertools.product(*(range(length(e, i)) for i in red)):
        at = vals | dict(zip(red, point, strict=True))
        terms.append(prim.Product(tuple(
            _factor(e, stages, layout, s, r, col, at, n, t, regs, own, E, prim.Variable("l1"))
            for col in stages[s].inputs)))
    dest, guards = _destination(e, stages, layout, s, r, vals, n, t, partial, E)
    return lp.Assignment(dest, prim.Sum(tuple(terms)) if len(terms) > 1 else terms[0],
                         id=f"fin{sfx}", predicates=frozenset(guards), depends_on=needs,
                         within_inames=within)


def _result_temps(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int,
                  p: int, rows: Sequence[int], temp: Any) -> None:
    """Declare where stage *s* (not the last) keeps its result: per row in registers, or
    one local array per row of a pass (declared in pass 0)."""
    dt = np.result_type(*(e.value_dtype(r) for r in rows))
    if kept_private(e, stages, s):
        return  # the accumulators are the result
    if p == 0:
        size = result_entries(e, stages, layout, s)
        for slot in range(len(rows)):
            temp(f"w{s}_{slot}", (size,), dt, True, pairs=paired(e, stages, layout, "w", s + 1))


def _factor(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int, r: int,
            col: int | str, vals: dict[str, Any], n: Any, t: Any,
            regs: dict[tuple[int, int], str], own: dict[tuple[int, int], int], E: Any,
            l1: Any, pair: tuple[Any, Any] | None = None) -> Any:
    """The value of input *col* of stage *s* for row *r* at the index values *vals*
    (element *n* of the work-item, chunk *t* of the lane index; *pair*: the pair and
    component of the paired index, :mod:`feinsum.toolbox.node_pairs`)."""
    el = element(e)
    local_el = n * layout.rows + l1
    if pair is not None:
        mode = "w" if col == "w" else access(e, stages, int(col), layout.registers)
        name = (f"w{s - 1}_{r % slots(e, layout)}" if col == "w" else
                staged_name(e, layout, r, int(col)) if mode == "staged"
                else f"o{col}_r{own[r, int(col)]}")
        return subscript(name, pair_row(e, stages, layout, s, col, vals, local_el, mode)
                         + pair[0], pair[1])
    if col == "w":
        pout = stage_out(e, stages, s - 1, outer(e, stages, layout))
        if kept_private(e, stages, s - 1):
            plane = stage_lane(e, stages, s - 1)
            return subscript(f"a{s - 1}_r{r % slots(e, layout)}", n, t,
                             *(vals[i] for i in pout if i != plane))
        size = math.prod(length(e, i) for i in pout)
        return subscript(f"w{s - 1}_{r % slots(e, layout)}",
                         local_el * size + flat(e, pout, vals))
    c = int(col)
    idx = e.in_indices[c]
    mode = access(e, stages, c, layout.registers)
    if mode in ("lanes", "broadcast"):
        lane = stage_lane(e, stages, s)
        conds = [prim.Comparison(vals[el], "<", E)]
        if mode == "lanes" and chunks(length(e, lane), layout.lanes) * layout.lanes > (
                length(e, lane)):
            conds.append(prim.Comparison(vals[lane], "<", length(e, lane)))
        return prim.If(prim.LogicalAnd(tuple(conds)) if len(conds) > 1 else conds[0],
                       prim.Variable(f"op{c}_r{r}")(*(vals[i] for i in idx)), 0)
    if mode == "staged":
        k = idx.index(el)
        S = math.prod(length(e, i) for i in idx[k + 1:])
        return subscript(staged_name(e, layout, r, c),
                         flat(e, idx[:k], vals) * staged_pitch(e, stages, layout, c)
                         + local_el * S + flat(e, idx[k + 1:], vals))
    if mode == "registers":
        lane = stage_lane(e, stages, s)
        return subscript(regs[own[r, c], c], t, *(vals[i] for i in idx if i != lane))
    if mode == "local":
        return subscript(f"o{c}_r{own[r, c]}", operator_offset(
            e, stages, c, vals, sliced(e, stages, layout, c)))
    return prim.Variable(f"op{c}_r{r}")()


def _destination(e: BatchedEinsum, stages: Sequence[Stage], layout: NodeLayout, s: int,
                 r: int, vals: dict[str, Any], n: Any, t: Any, partial: set[Any], E: Any
                 ) -> tuple[Any, set[Any]]:
    """Where stage *s*'s accumulators go and under which conditions: the output (inside
    the ranges) or local memory (``None``: a result kept in registers stays in its
    accumulators)."""
    el = element(e)
    if s == len(stages) - 1:
        return (subscript(f"out{r}", *(vals[i] for i in e.out_indices)),
                partial | {prim.Comparison(vals[el], "<", E)})
    if kept_private(e, stages, s):
        return None, set()
    out = stage_out(e, stages, s, outer(e, stages, layout))
    size = math.prod(length(e, i) for i in out)
    return subscript(f"w{s}_{r % slots(e, layout)}",
                     (n * layout.rows + prim.Variable("l1")) * size + flat(e, out, vals)
                     ), partial


# vim: foldmethod=marker

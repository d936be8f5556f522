"""Element-batched operators with the output's contiguous index as the vector lanes.

The per-element programs of :mod:`feinsum.toolbox.dense` make ``V`` consecutive
*elements* the lanes of OpenCL vectors. In the plain ``(E, ndof)`` layouts this costs a
gather per operand entry and a scatter per output entry, one scalar per lane. This module
builds the other orientation: the lanes run along the output's last, contiguous index
``a`` (``i`` of ``ij,ej->ei``), padded to whole vectors (35 entries: five ``double8``),
so that

* every operand that carries ``a`` and not the element (the operator ``D[r,i,j]``) is
  staged once per work-group in local memory, transposed into vectors along ``a``
  (``Dt[r,j,iv]``, padding lanes zero), and read as whole vectors;
* the element operands (``u[e,j]``, ``J[x,r,e]``) are scalars, broadcast across the lanes;
* each work-item computes ``elements`` elements at once (independent accumulators: one
  operator load feeds that many fused multiply-adds), ``blocks`` times in a row, so the
  staging is paid once per ``work_items x elements x blocks`` elements;
* the output rows are written as whole vectors with ``vstoreN`` (any alignment), the
  last partial vector lane by lane.

The contraction runs in the stages of :func:`feinsum.toolbox.dense.element_stages`. A stage
whose output keeps ``a`` is a *vector stage* (each product has exactly one factor with
``a``: a staged operand or the previous vector stage), the others are scalar stages
(divergence's ``W[r,j] = sum_x J[x,r,e] u[x,e,j]``). :func:`transposed_reason` says when an
einsum or plan does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim

from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox import cvec as cvec
from feinsum.toolbox.core import kernel_of
from feinsum.toolbox.dense import (
    Stage,
    element_index,
    element_reason,
    finish_element_kernel,
    loop_names,
    operand_key,
    rewritten_kernel,
    stage_indices,
)
from feinsum.toolbox.dense import (
    subscript as sub,
)


def _has_a(e: BatchedEinsum, stages: Sequence[Stage], s: int, c: int | str) -> bool:
    a = e.out_indices[-1]
    return a in (stages[s - 1].out if c == "w" else e.in_indices[int(c)])


def transposed_reason(e: BatchedEinsum, stages: Sequence[Stage] | None = None) -> str | None:
    """``None`` if :func:`transposed_kernel` can run *e* with the plan *stages* (or with
    some plan, when *stages* is ``None``), else why not."""
    why = element_reason(e)
    if why is not None:
        return why
    el, a = element_index(e), e.out_indices[-1]
    if a == el:
        return f"the output's last index {a} is the element index"
    for c in range(e.noperands):
        if a in e.in_indices[c] and el in e.in_indices[c]:
            return (f"operand {c} has both the element index {el} and the output's last "
                    f"index {a}")
    for _, c, f in e.factors():
        if a in e.in_indices[c] and cast(Array, f).order != "C" and cast(Array, f).ndim > 1:
            return f"operand {c} is not a C-order array"
    if stages is None:
        return None
    for s, st in enumerate(stages):
        n = sum(_has_a(e, stages, s, c) for c in st.inputs)
        if (a in st.out) != (n == 1):
            return (f"stage {s} multiplies {n} factors with the index {a}; the plan needs "
                    "exactly one in every stage that keeps it (choose another 'last')")
    return None


def staged_entries(e: BatchedEinsum, vec: int) -> int:
    """Entries of local memory the staged (transposed, padded) operands take."""
    el, a = element_index(e), e.out_indices[-1]
    n_a = int(e.lengths[a])
    padded = -(-n_a // vec) * vec
    keys = {(c, str(e.arguments[r][c])) for r in range(e.nrows) for c in range(e.noperands)
            if a in e.in_indices[c] and el not in e.in_indices[c]}
    return sum(padded * math.prod(int(e.lengths[i]) for i in e.in_indices[c] if i != a)
               for c, _ in keys)


def private_entries(e: BatchedEinsum, stages: Sequence[Stage], vec: int, elements: int
                    ) -> int:
    """Private entries per work-item of :func:`transposed_kernel` (times the item size:
    bytes): every row's accumulators and kept stage results."""
    a = e.out_indices[-1]
    padded = -(-int(e.lengths[a]) // vec) * vec
    n = 0
    for s, st in enumerate(stages):
        width = padded if a in st.out else 1
        others = math.prod(int(e.lengths[i]) for i in st.out if i != a)
        n += width + (others * width if s < len(stages) - 1 else 0)
    return n * elements * e.nrows


def accumulator_vectors(e: BatchedEinsum, vec: int, elements: int) -> int:
    """Vector accumulators a work-item keeps live in a vector stage."""
    return elements * -(-int(e.lengths[e.out_indices[-1]]) // vec)


def transposed_kernel(
    t_unit: lp.TranslationUnit, e: BatchedEinsum, stages: Sequence[Stage], *, vec: int,
    work_items: int, elements: int, blocks: int, unroll: int, flat_copy: bool = False,
) -> lp.TranslationUnit:
    """The per-element program of *e* with the output's last index as vector lanes (see
    the module docstring; :func:`transposed_reason` must hold).

    :arg vec: lanes per vector (1: scalar code).
    :arg work_items: work-items per work-group (``l.0``).
    :arg elements: elements per work-item and block (independent accumulators).
    :arg blocks: blocks each work-item computes one after the other.
    :arg unroll: reduction loops of at most this length are unrolled.
    :arg flat_copy: stage the operators with one flat index (over the operand's entries in
        its own order, the vector lanes unrolled) split over all the work-items, so that
        consecutive work-items read consecutive addresses (GPUs); else spread over their
        first index only (CPUs, where a work-group's items run in turn anyway).
    """
    knl = kernel_of(t_unit)
    el = element_index(e)
    if el is None or transposed_reason(e, stages):
        raise ValueError(f"transposed_kernel does not fit: {transposed_reason(e, stages)}")
    a, V, NE = e.out_indices[-1], vec, elements
    n_a = int(e.lengths[a])
    nv = -(-n_a // V)
    nsym = prim.Variable(str(e.lengths[el]))
    rules = knl.substitutions
    eb, ev = prim.Variable("eb"), prim.Variable("ev")
    vdim: tuple[str, ...] = ("vec",) if V > 1 else ("c",)
    # lanes written one by one (staging, partial rows): separate unrolled inames per nest
    bounds: dict[str, int] = {}
    tags: dict[str, str] = {"ev": "vec"} if V > 1 else {}
    temps: list[Any] = []
    insns: list[Any] = []
    spread: list[str] = []
    joined: dict[str, list[str]] = {}
    priorities: list[list[str]] = []

    def temp(name: str, shape: tuple[int, ...], dtype: Any, space: Any,
             vector: bool = True) -> None:
        dims = ",".join(("c",) * (len(shape) - 1) + (vdim if vector else ("c",)))
        temps.append(lp.TemporaryVariable(name, dtype, shape=shape, dim_tags=cast(Any, dims),
                                          address_space=space))

    def loops(idx: Sequence[str], suffix: str) -> dict[str, Any]:
        return loop_names(e, idx, suffix, bounds)

    def element(n: int) -> Any:
        return eb * NE + n

    def clamped(n: int) -> Any:
        return prim.Min((element(n), nsym - 1))

    def rule_key(r: int, c: int) -> tuple[Any, ...]:
        return operand_key(rules, r, c)

    # {{{ stage the operands with the index a, transposed, in local memory

    staged: dict[tuple[Any, ...], str] = {}
    for r in range(e.nrows):
        for c in range(e.noperands):
            idx, key = e.in_indices[c], rule_key(r, c)
            if a not in idx or el in idx or key in staged:
                continue
            name = staged[key] = f"s{len(staged)}"
            rest = [i for i in idx if i != a]
            names = loops(rest, name)
            iv, lane = f"iv_{name}", prim.Variable(f"ln_{name}")
            bounds[iv] = nv
            bounds[lane.name] = V
            tags[lane.name] = "unr"
            dt = np.result_type(*(cast(Array, f).dtype for f in e.arguments[r][c]))
            temp(name, (*(int(e.lengths[i]) for i in rest), nv, V), dt,
                 lp.AddressSpace.LOCAL)
            ai = prim.Variable(iv) * V + lane
            args = [prim.Min((ai, n_a - 1)) if i == a else names[i] for i in idx]
            insns.append(lp.Assignment(
                sub(name, *names.values(), prim.Variable(iv), lane),
                prim.If(prim.Comparison(ai, "<", n_a), prim.Variable(f"op{c}_r{r}")(*args),
                        dt.type(0)),
                id=f"stage_{name}",
                within_inames=frozenset({iv, lane.name, *(v.name for v in names.values())})))
            spread.append(names[rest[0]].name if rest else iv)
            if flat_copy:  # the operand's own index order, the lanes' block for a
                joined[name] = [iv if i == a else names[i].name for i in idx]

    # }}}

    # {{{ the stages, row after row

    loads = [i.id for i in insns]
    out_args = {f"out{r}": cvec.array_arg(knl, f"out{r}") for r in range(e.nrows)}
    for r in range(e.nrows):
        dt = e.value_dtype(r)
        prev: list[str] = []
        if n_a % V or V not in cvec.WIDTHS:  # some lanes are stored one by one
            bounds[f"sl{r}"] = V
            tags[f"sl{r}"] = "unr"
        for s, st in enumerate(stages):
            tag, last = f"{s}r{r}", s == len(stages) - 1
            vector = a in st.out
            others = [i for i in st.out if i != a]
            red = [i for i in stage_indices(e, stages, s) if i not in st.out]
            names = loops([*others, *red], tag)
            outer = [names[i].name for i in others]
            unrolled = [names[i].name for i in red if int(e.lengths[i]) <= unroll]
            rolled = [names[i].name for i in red if int(e.lengths[i]) > unroll]
            tags.update({n: "unr" for n in unrolled})
            priorities.append([*outer, *rolled, *unrolled])
            wname = f"w{tag}"
            lanes_k = list(range(nv)) if vector else [None]
            if not last:
                shape = (NE, *(int(e.lengths[i]) for i in others))
                temp(wname, (*shape, nv, V) if vector else (*shape, 1), dt,
                     lp.AddressSpace.PRIVATE, vector)
            vi: set[str] = {"ev"} if vector and V > 1 else set()
            lv: Any = ev if vector and V > 1 else 0
            group: list[Any] = []
            for n in range(NE):
                for k in lanes_k:
                    # one temporary per accumulator: loopy then sees exactly which
                    # statements touch it (the vector stores read it as a whole)
                    sfx = f"{tag}n{n}k{k}"
                    acc = f"acc{sfx}"
                    temp(acc, (V,) if vector else (1,), dt, lp.AddressSpace.PRIVATE, vector)
                    cell = sub(acc, lv)
                    factors = []
                    for col in st.inputs:
                        if col == "w":
                            pw, pst = f"w{s - 1}r{r}", stages[s - 1]
                            pidx = [names[i] for i in pst.out if i != a]
                            factors.append(sub(pw, n, *pidx, k, lv)
                                           if _has_a(e, stages, s, col) else sub(pw, n, *pidx, 0))
                            continue
                        c = int(col)
                        idx = e.in_indices[c]
                        key = rule_key(r, c)
                        if key in staged:
                            factors.append(sub(staged[key], *(names[i] for i in idx if i != a),
                                                k, lv))
                        else:
                            args = [clamped(n) if i == el else names[i] for i in idx]
                            factors.append(prim.Variable(f"op{c}_r{r}")(*args))
                    deps = {*loads, *prev}
                    group += [
                        lp.Assignment(cell, dt.type(0), id=f"init{sfx}",
                                      within_inames=frozenset({"eb", *outer, *vi})),
                        lp.Assignment(cell, cell + prim.Product(tuple(factors)),
                                      id=f"upd{sfx}", depends_on=frozenset({*deps, f"init{sfx}"}),
                                      within_inames=frozenset({"eb", *outer, *rolled, *unrolled,
                                                               *vi})),
                    ]
                    if not last:
                        oidx = [names[i] for i in others]
                        group.append(lp.Assignment(
                            sub(wname, n, *oidx, k, lv) if vector else sub(wname, n, *oidx, 0),
                            cell, id=f"keep{sfx}", depends_on=frozenset({f"upd{sfx}"}),
                            within_inames=frozenset({"eb", *outer, *vi})))
                    else:
                        group += _stores(e, r, n, cast(int, k), acc, names, outer, out_args,
                                         element(n), nsym, V, n_a, f"upd{sfx}", sfx)
            insns += group
            prev = [i.id for i in group if i.id.startswith("keep")]

    # the stores write disjoint entries of the outputs, which loopy cannot see in the C
    # code of the vector stores: no ordering between them
    stores = {i.id for i in insns if i.id.startswith(("store", "tail"))}
    insns = [i.copy(no_sync_with=frozenset((o, "any") for o in stores - {i.id}))
             if i.id in stores else i for i in insns]

    # }}}

    # {{{ domain and the kernel

    cons = [f"0 <= eb and {NE}*eb < {nsym}", *([f"0 <= ev < {V}"] if V > 1 else [])]
    cons += [f"0 <= {i} < {n}" for i, n in bounds.items()]
    inames = ["eb", *(["ev"] if V > 1 else []), *bounds]
    domain = f"[{nsym}] -> {{[{', '.join(inames)}]: {' and '.join(cons)}}}"
    new = rewritten_kernel(knl, domain, insns, temps)
    new = lp.tag_inames(new, tags)
    for name, order in joined.items() if work_items > 1 else ():
        new = lp.join_inames(new, order, new_iname=f"f_{name}")
        new = lp.split_iname(new, f"f_{name}", work_items, inner_tag="l.0")
    for first in spread if work_items > 1 and not joined else ():
        new = lp.split_iname(new, first, work_items, inner_tag="l.0")
    if work_items > 1:
        new = lp.split_iname(new, "eb", work_items, outer_iname="eb_o", inner_iname="eb_l",
                             inner_tag="l.0")
        outer_block = "eb_o"
    else:
        outer_block = "eb"
    if blocks > 1:
        new = lp.split_iname(new, outer_block, blocks, outer_iname="eb_g", inner_iname="eb_t",
                             outer_tag="g.0")
    else:
        new = lp.tag_inames(new, {outer_block: "g.0"})
    return finish_element_kernel(new, "id:stage_*" if staged else None, priorities, str(nsym))

    # }}}


def _stores(e: BatchedEinsum, r: int, n: int, k: int, acc: str, names: dict[str, Any],
            outer: list[str], out_args: dict[str, Any], elem: Any, nsym: Any, V: int,
            n_a: int, dep: str, sfx: str) -> list[Any]:
    """Vector *k* of element *n*'s output row: ``vstoreN`` if it is whole, else lane by
    lane (the lanes inside the row only); nothing for an element past the end."""
    el, a = element_index(e), e.out_indices[-1]
    out = f"out{r}"
    inside = prim.Comparison(elem, "<", nsym)
    base = [elem if i == el else None if i == a else names[i] for i in e.out_indices]
    if V in cvec.WIDTHS and (k + 1) * V <= n_a:
        idx = [k * V if i == a else x for i, x in zip(e.out_indices, base, strict=True)]
        return [cvec.vstore(out_args[out], idx, acc, V, id=f"store{sfx}",
                            depends_on=frozenset({dep}), within=frozenset({"eb", *outer}),
                            predicates=frozenset({inside}))]
    lane = prim.Variable(f"sl{r}")
    ai = k * V + lane
    idx = [ai if i == a else x for i, x in zip(e.out_indices, base, strict=True)]
    value = sub(acc, lane) if V > 1 else sub(acc, 0)
    guards = {inside} | ({prim.Comparison(ai, "<", n_a)} if (k + 1) * V > n_a else set())
    return [lp.Assignment(
        sub(out, *idx), value, id=f"tail{sfx}", depends_on=frozenset({dep}),
        predicates=frozenset(cast(Any, guards)),
        within_inames=frozenset({"eb", *outer, lane.name}))]


# vim: foldmethod=marker

"""Dense building blocks shared by the DG-operator recipes: per-element programs.

An *element-batched* einsum has one long index (the element ``e``, a runtime length) that
is in the output, and only short fixed lengths otherwise (``xre,rij,xej->ei``). Such an
einsum is a small dense computation repeated for every element. :func:`element_kernel`
rewrites its reference kernel into a per-element program:

* ``V`` consecutive elements share one work-item, as the lanes of OpenCL vectors
  (``vec``); blocks of ``V`` elements are spread over ``L`` work-items per work-group;
* the operands that depend on the element are gathered lane by lane into private vector
  temporaries (element indices past the end are clamped, so every lane computes finite
  values; only lanes inside the range are stored);
* the contraction runs in *stages* (:class:`Stage`): e.g. ``W[r,j] = sum_x J[x,r] u[x,j]``
  then ``out[i] = sum_{r,j} D[r,i,j] W[r,j]``, each stage result kept in private memory;
* in each stage ``K`` output entries are computed at once by ``K`` independent vector
  accumulators, written as separate statements inside one loop over the reduction
  (latency hiding, one load of the staged operand for ``K`` fused multiply-adds);
* rows (fields) are grouped ``F`` at a time into passes that share every loop, so an
  operator entry loaded once serves ``F`` fields;
* operands that do not depend on the element (the operator matrix) are read from global
  memory (cached) or staged once per work-group in local memory.

*Lane mode* (element-blocked data): when a short index ``l`` of length 2, 4, 8 or 16 is the
last (contiguous) axis of the output and of every element operand that has it (see
:func:`lane_reason`), e.g. ``ij,bjl->bil`` with ``u_b[b, j, l] = u[b*B + l, j]``, the vector
lanes are ``l`` itself: a work-item takes one ``b``, reads its element operands as whole
vectors straight from global memory inside the reduction loops (measured 1.1-2.2x faster
than copying them to private memory first) and writes whole vectors (the arguments' last
axes are ``vec``-tagged: OpenCL ``double8`` pointers, so array bases must be aligned to a
vector, as fresh buffers are); element operands without ``l`` are gathered once, broadcast
across the lanes. No clamping, no per-lane stores.

The kernel keeps the reference kernel's arguments and operand substitution rules (the
normalised form), so replaying it on a user's kernel computes what that kernel computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim

from feinsum.devices.info import GENERIC_GPU
from feinsum.errors import RecipeError
from feinsum.spec.model import Array, BatchedEinsum
from feinsum.toolbox.core import kernel_of

#: The longest fixed length an element-batched einsum may have outside the element index.
SHORT_LIMIT = 128
#: Lengths a lane index may have (OpenCL vector widths, 3 excepted).
LANE_WIDTHS = (2, 4, 8, 16)
#: How element-independent operands are staged in local memory: ``"rows"``, spread over
#: the work-items by their first index (CPUs, where a work-group's items run in turn);
#: ``"flat"``, one flat index over all their entries split over the work-items, so that
#: consecutive work-items read consecutive addresses (GPUs).
STAGING = ("rows", "flat")


def staging_upgrade(params: dict[str, Any]) -> dict[str, Any]:
    """A configuration recorded before ``staging`` was a parameter: it staged by rows on
    every device."""
    return params if "staging" in params else {**params, "staging": "rows"}


@dataclass(frozen=True)
class Stage:
    """One stage of a per-element program: the product of *inputs* (operand columns, or
    ``"w"``: the previous stage's result) summed over every index not in *out*."""

    inputs: tuple[int | str, ...]
    out: tuple[str, ...]
    #: the lane index (lane mode, see the module docstring), ``None``: elements as lanes
    lane: str | None = None


def itemsize(e: BatchedEinsum) -> int:
    """Bytes of the widest output value: what a lane of an accumulator vector holds."""
    return max(e.value_dtype(r).itemsize for r in range(e.nrows))


def native_lanes(e: BatchedEinsum, device: Any) -> int:
    """Lanes of one of *device*'s native vectors of *e*'s values."""
    return int(device.native_lanes(itemsize(e)))


def plans(e: BatchedEinsum) -> list[int | None]:
    """The contraction plans (``last``: the operand contracted last, ``None``: all at
    once): every operand for three operands or more."""
    return [None, *range(e.noperands)] if e.noperands >= 3 else [None]


def accumulator_count(n: int, budget: int) -> int:
    """Accumulators for an output index of length *n*: a divisor of *n* near *budget*."""
    divs = [k for k in range(1, min(n, budget) + 1) if n % k == 0]
    return max(divs) if divs[-1] * 2 > min(n, budget) else min(n, budget)


def element_index(e: BatchedEinsum) -> str | None:
    """The element index of an element-batched einsum (see the module docstring)."""
    longs = [i for i in e.indices if not isinstance(e.lengths[i], int)]
    return longs[0] if len(longs) == 1 else None


def element_reason(e: BatchedEinsum) -> str | None:
    """``None`` if *e* is element-batched with plain array operands, else why not."""
    if e.block_sparse is not None or e.reduction != "sum":
        return "not a dense sum einsum"
    el = element_index(e)
    if el is None:
        return "needs exactly one long (runtime-length) index, the element index"
    if el not in e.out_indices:
        return f"the long index {el} is reduced (a contraction, not element-batched)"
    if any(e.in_indices[c].count(el) > 1 for c in range(e.noperands)):
        return f"an operand repeats the element index {el}"
    for i in e.indices:
        n = e.lengths[i]
        if i != el and isinstance(n, int) and n > SHORT_LIMIT:
            return f"index {i} has length {n} > {SHORT_LIMIT}: not a small per-element operator"
    if not all(isinstance(f, Array) for _, _, f in e.factors()):
        return "formula operands are not supported (use generic)"
    return None


def lane_reason(e: BatchedEinsum) -> str | None:
    """``None`` if *e* has a lane index (see the module docstring), else why not."""
    why = element_reason(e)
    if why is not None:
        return why
    el, lane = element_index(e), e.out_indices[-1]
    n = e.lengths[lane]
    if lane == el or n not in LANE_WIDTHS:
        return (f"the output's last index {lane} has length {n}, not a short length in "
                f"{LANE_WIDTHS}")
    for _, c, f in e.factors():
        idx = e.in_indices[c]
        if lane not in idx:
            continue
        if el not in idx:
            return f"operand {c} has the lane index {lane} but not the element index {el}"
        if idx[-1] != lane or cast(Array, f).order != "C":
            return (f"operand {c} (array {cast(Array, f).name}) does not have the lane "
                    f"index {lane} as its last, contiguous axis")
    return None


def lane_index(e: BatchedEinsum) -> str | None:
    """The lane index of *e* (the output's last index), or ``None`` (see :func:`lane_reason`)."""
    return e.out_indices[-1] if lane_reason(e) is None else None


def element_stages(e: BatchedEinsum, last: int | None, lane: str | None = None
                   ) -> tuple[Stage, ...]:
    """One stage over every operand (*last* ``None`` or two operands), or two: every
    operand but *last* contracted first, then that result with operand *last*. *lane*:
    the lane index of lane mode (per lane, like the element index)."""
    skip = {element_index(e), lane}
    out = tuple(i for i in e.out_indices if i not in skip)
    cols = tuple(range(e.noperands))
    if last is None or e.noperands < 3:
        return (Stage(cols, out, lane),)
    first = tuple(c for c in cols if c != last)
    keep = set(e.in_indices[last]) | set(out)
    mid = tuple(dict.fromkeys(i for c in first for i in e.in_indices[c]
                              if i not in skip and i in keep))
    return Stage(first, mid, lane), Stage(("w", last), out, lane)


def stage_indices(e: BatchedEinsum, stages: Sequence[Stage], s: int) -> list[str]:
    """The indices of stage *s*'s inputs, the element and lane indices excluded."""
    skip = {element_index(e), stages[s].lane}
    idx: list[str] = []
    for c in stages[s].inputs:
        idx += list(stages[s - 1].out) if c == "w" else [i for i in e.in_indices[int(c)]
                                                          if i not in skip]
    return list(dict.fromkeys(idx))


def stage_flops(e: BatchedEinsum, stages: Sequence[Stage]) -> int:
    """Multiply-adds per element and row of the per-element program."""
    total = 0
    for s, st in enumerate(stages):
        n = math.prod(int(e.lengths[i]) for i in stage_indices(e, stages, s))
        total += n * max(len(st.inputs) - 1, 1)
    return total


def accumulator_index(e: BatchedEinsum, stage: Stage) -> str | None:
    """The stage output index whose entries get separate accumulators (the longest)."""
    if not stage.out:
        return None
    return max(reversed(stage.out), key=lambda i: int(e.lengths[i]))


def row_specific(e: BatchedEinsum) -> set[int]:
    """Operand columns whose arrays differ between rows."""
    return {c for c in range(e.noperands) if len({e.arguments[r][c] for r in range(e.nrows)}) > 1}


def _entries(e: BatchedEinsum, c: int, skip: set[str | None]) -> int:
    n = math.prod(int(e.lengths[i]) for i in e.in_indices[c] if i not in skip)
    return n * (e.nrows if c in row_specific(e) else 1)


def private_entries(e: BatchedEinsum, stages: Sequence[Stage], acc: Sequence[int]) -> int:
    """Private vector entries per work-item of :func:`element_kernel` (times the lanes and
    the item size: bytes): gathered operands, stage results, accumulators."""
    el, lane = element_index(e), stages[0].lane
    n = sum(_entries(e, c, {el}) for c in range(e.noperands)
            if el in e.in_indices[c] and (lane is None or lane not in e.in_indices[c]))
    n += sum(math.prod(int(e.lengths[i]) for i in st.out) * e.nrows for st in stages[:-1])
    return n + sum(acc) * e.nrows


def private_limit(device: Any, work_items: int | None = None) -> int:
    """Private bytes one work-item of a *work_items* group may use (``None``: the least
    group, one subgroup): the device's ``private_bytes_per_work_item`` (a compute unit's
    registers and L1 shared by its default work-group); on GPUs, the items of a smaller
    group (a subgroup at least) share the same: ``8192`` bytes on the H200 for 64 items,
    ``16384`` for 32. CPUs: the fixed budget."""
    base = int(device.private_bytes_per_work_item)
    if device.is_cpu:
        return base
    items = max(int(device.subgroup_width or GENERIC_GPU["subgroup_width"]), work_items or 1)
    return base * max(1, device.default_work_items // items)


def operator_entries(e: BatchedEinsum) -> int:
    """Entries of the element-independent operands (what ``local_operator`` stages)."""
    el = element_index(e)
    return sum(_entries(e, c, set()) for c in range(e.noperands) if el not in e.in_indices[c])


def operator_fits(e: BatchedEinsum, device: Any) -> bool:
    """Whether the element-independent operands fit *device*'s local memory whole."""
    return operator_entries(e) * itemsize(e) <= device.local_mem_size


# {{{ the kernel


def loop_names(e: BatchedEinsum, idx: Sequence[str], suffix: str, bounds: dict[str, Any]
               ) -> dict[str, Any]:
    """A fresh loop iname ``{i}_{suffix}`` per index of *idx* (its bound added to
    *bounds*), as variables by index."""
    names = {}
    for i in idx:
        names[i] = prim.Variable(f"{i}_{suffix}")
        bounds[f"{i}_{suffix}"] = int(e.lengths[i])
    return names


def operand_key(rules: Any, r: int, c: int) -> tuple[Any, ...]:
    """What operand *c* of row *r* reads (its substitution rule): rows with equal keys
    share a gathered or staged copy."""
    rule = rules[f"op{c}_r{r}"]
    return (c, tuple(rule.arguments), str(rule.expression))


def subscript(name: str, *idx: Any) -> Any:
    """``name[idx...]`` (or ``name`` without indices)."""
    return prim.Subscript(prim.Variable(name), tuple(idx)) if idx else prim.Variable(name)


def element_kernel(
    t_unit: lp.TranslationUnit, e: BatchedEinsum, stages: Sequence[Stage], *,
    vec: int, work_items: int, acc: Sequence[int], rows_per_pass: int, unroll: int,
    local_operator: bool, flat_copy: bool = False,
) -> lp.TranslationUnit:
    """The per-element program of element-batched *e* (see the module docstring).

    :arg vec: elements per work-item (vector lanes; 1: scalar code). Ignored in lane mode
        (*stages* made with a lane index): the lanes are that index.
    :arg work_items: work-items per work-group (``l.0``).
    :arg acc: accumulators per stage (clipped to the accumulator index's length).
    :arg rows_per_pass: rows sharing the loops of each stage.
    :arg unroll: reduction loops of at most this length are unrolled.
    :arg local_operator: stage element-independent operands in local memory.
    :arg flat_copy: stage them with one flat index split over all the work-items
        (:func:`flat_local_copy`; GPUs); else spread over their first index only (what
        runs on CPUs, where a work-group's items run in turn anyway).
    """
    knl = kernel_of(t_unit)
    el = element_index(e)
    if el is None:
        raise RecipeError(f"an element-batched kernel of {e}: {element_reason(e)} (the "
                          "recipe's applies() should have said so)")
    nsym = str(e.lengths[el])
    lane_idx = stages[0].lane
    V = int(e.lengths[lane_idx]) if lane_idx else vec
    skip = {el, lane_idx}
    blk = prim.Variable("eb")
    rules = knl.substitutions
    bounds: dict[str, int | str] = {}
    # lanes are read and written one by one: unrolled (OpenCL has no dynamic lane index)
    tags: dict[str, str] = {"lane": "unr"} | ({"ev": "vec"} if V > 1 else {})
    spread: list[str] = []
    temps: list[Any] = []
    insns: list[Any] = []
    priorities: list[list[str]] = []
    vdims = ("vec",) if V > 1 else ("c",)

    def temp(name: str, shape: tuple[int, ...], dtype: Any, space: Any = None) -> None:
        if space is lp.AddressSpace.LOCAL:
            temps.append(lp.TemporaryVariable(name, dtype, shape=shape, address_space=space))
            return
        dims = ",".join(("c",) * (len(shape) - 1) + vdims)
        temps.append(lp.TemporaryVariable(name, dtype, shape=shape, dim_tags=cast(Any, dims),
                                          address_space=lp.AddressSpace.PRIVATE))

    def loops(idx: Sequence[str], suffix: str) -> dict[str, Any]:
        return loop_names(e, idx, suffix, bounds)

    def element(lane: Any) -> Any:
        return blk * V + lane

    def rule_key(r: int, c: int) -> tuple[Any, ...]:
        return operand_key(rules, r, c)

    # {{{ gather element operands, stage operator operands

    gathered: dict[tuple[Any, ...], str] = {}
    staged: dict[tuple[Any, ...], str] = {}
    for r in range(e.nrows):
        for c in range(e.noperands):
            key, idx = rule_key(r, c), e.in_indices[c]
            rest = [i for i in idx if i not in skip]
            dt = np.result_type(*(cast(Array, f).dtype for f in e.arguments[r][c]))
            shape = tuple(int(e.lengths[i]) for i in rest)
            if el in idx and key not in gathered and lane_idx not in idx:
                name = gathered[key] = f"p{len(gathered)}"
                names = loops(rest, name)
                temp(name, (*shape, V), dt)
                # one lane at a time: clamped elements, or (lane mode, an operand without
                # the lane index) one value broadcast to every lane
                ei = blk if lane_idx else prim.Min((element(prim.Variable("lane")),
                                                    prim.Variable(nsym) - 1))
                args = [ei if i == el else names[i] for i in idx]
                insns.append(lp.Assignment(
                    subscript(name, *(names[i] for i in rest), prim.Variable("lane")),
                    prim.Variable(f"op{c}_r{r}")(*args), id=f"load_{name}",
                    within_inames=frozenset({"eb", "lane", *(v.name for v in names.values())})))
            elif el not in idx and local_operator and key not in staged and rest:
                name = staged[key] = f"l{len(staged)}"
                if flat_copy and work_items > 1:
                    temp(name, shape, dt, lp.AddressSpace.LOCAL)
                    insns.append(flat_local_copy(name, f"op{c}_r{r}", shape, bounds))
                    spread.append(f"f_{name}")
                    continue
                names = loops(rest, name)
                if work_items > 1:
                    spread.append(names[rest[0]].name)
                temp(name, shape, dt, lp.AddressSpace.LOCAL)
                insns.append(lp.Assignment(
                    subscript(name, *names.values()), prim.Variable(f"op{c}_r{r}")(*names.values()),
                    id=f"copy_{name}",
                    within_inames=frozenset(v.name for v in names.values())))

    # }}}

    # {{{ stages

    nst = len(stages)
    loads = [i.id for i in insns]
    pre = list(loads)
    passes = [list(range(r, min(r + rows_per_pass, e.nrows)))
              for r in range(0, e.nrows, rows_per_pass)]
    # passes one after the other, stages in order inside each: a fixed order keeps
    # loopy's scheduler from searching
    for p, rows in enumerate(passes):
        for s, st in enumerate(stages):
            a = accumulator_index(e, st)
            red = [i for i in stage_indices(e, stages, s) if i not in st.out]
            K = min(acc[s], int(e.lengths[a])) if a else 1
            tag = f"s{s}p{p}"
            others = [i for i in st.out if i != a]
            names = loops([*others, *red], tag)
            outer = [names[i].name for i in others]
            n_a = int(e.lengths[a]) if a else 1
            if a is not None:
                oname = f"{a}_{tag}o"
                bounds[oname] = -(-n_a // K)
                outer.append(oname)
            unrolled = [names[i].name for i in red if int(e.lengths[i]) <= unroll]
            rolled = [names[i].name for i in red if int(e.lengths[i]) > unroll]
            tags.update({n: "unr" for n in unrolled})
            priorities.append([*outer, *rolled, *unrolled])
            base = {"eb", *outer}
            group: list[Any] = []
            for r in rows:
                accn, dt = f"a{s}_r{r}", e.value_dtype(r)
                temp(accn, (K, V), dt)
                if s < nst - 1:
                    temp(f"w{s}_r{r}", (*(int(e.lengths[i]) for i in st.out), V), dt)
                for k in range(K):
                    if a is not None:
                        names[a] = prim.Variable(oname) * K + k
                    guard = frozenset({prim.Comparison(names[a], "<", n_a)}
                                      if a is not None and n_a % K else ())
                    group += _stage_row(e, stages, s, r, k, names, accn, dt, gathered, staged,
                                        rule_key, base, [*unrolled, *rolled], guard, el,
                                        element, nsym, s == nst - 1, pre, V, lane_idx)
            insns += group
            pre = loads + [i.id for i in group if i.id.startswith("store")]

    # }}}

    # {{{ domain and the kernel

    slanes = [] if lane_idx else [f"slane{r}" for r in range(e.nrows)]
    cons = [f"0 <= eb and {1 if lane_idx else V}*eb < {nsym}",
            *([f"0 <= ev < {V}"] if V > 1 else []),
            f"0 <= lane < {V}",
            *(f"0 <= {s} < {V}" for s in slanes)]
    cons += [f"0 <= {i} < {n}" for i, n in bounds.items()]
    inames = ["eb", *(["ev"] if V > 1 else []), "lane", *slanes, *bounds]
    tags.update({s: "unr" for s in slanes})
    domain = f"[{nsym}] -> {{[{', '.join(inames)}]: {' and '.join(cons)}}}"
    new = rewritten_kernel(knl, domain, insns, temps)
    new = lp.tag_inames(new, tags)
    if lane_idx:  # whole-vector access to the element-blocked arrays and the output
        blocked = {cast(Array, f).name: cast(Array, f).ndim for _, c, f in e.factors()
                   if lane_idx in e.in_indices[c]}
        blocked |= {f"out{r}": len(e.out_indices) for r in range(e.nrows)}
        for name, nd in blocked.items():
            new = lp.tag_array_axes(new, name, ",".join(["c"] * (nd - 1) + ["vec"]))
    for first in spread:  # local-memory copies spread over the work-items
        new = lp.split_iname(new, first, work_items, inner_tag="l.0")
    if work_items > 1:
        new = lp.split_iname(new, "eb", work_items, outer_iname="eb_g", inner_iname="eb_l",
                             outer_tag="g.0", inner_tag="l.0")
    else:
        new = lp.tag_inames(new, {"eb": "g.0"})
    return finish_element_kernel(new, "id:copy_*" if staged else None, priorities, nsym)

    # }}}


def flat_local_copy(name: str, rule: str, shape: Sequence[int], bounds: dict[str, Any]
                    ) -> lp.Assignment:
    """Copy a C-order operand of *shape* (read through *rule*) into the local array *name*
    of the same shape, over one flat index ``f_{name}`` (added to *bounds*) that the caller
    splits over the work-items: consecutive work-items read consecutive addresses (the
    flat offset on the operand's last index reaches the entries that follow)."""
    f = prim.Variable(f"f_{name}")
    bounds[f.name] = math.prod(shape)
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    where = [f if st == 1 and not k else prim.Remainder(f, n) if st == 1
             else prim.FloorDiv(f, st) if not k else prim.Remainder(prim.FloorDiv(f, st), n)
             for k, (st, n) in enumerate(zip(strides, shape, strict=True))]
    return lp.Assignment(subscript(name, *where),
                         prim.Variable(rule)(*([0] * (len(shape) - 1)), f),
                         id=f"copy_{name}", within_inames=frozenset({f.name}))


def rewritten_kernel(knl: lp.LoopKernel, domain: str | Sequence[str], insns: Sequence[Any],
                     temps: Sequence[Any]) -> lp.TranslationUnit:
    """A new kernel in place of the reference kernel *knl*: its name, target, arguments and
    operand substitution rules (the normalised form), with *domain* (or several), *insns*
    and the temporaries *temps*; dependencies are the ones the statements give."""
    data: list[Any] = [*knl.args, *temps]
    return lp.make_kernel(
        domain, [*knl.substitutions.values(), *insns], data, name=knl.name,
        target=knl.target, lang_version=(2018, 2), seq_dependencies=False,
        silenced_warnings=["vectorize_failed", "v1_scheduler_fallback", "write_race*",
                           "read_no_write*"])


def finish_element_kernel(knl: lp.TranslationUnit, copies: str | None,
                          priorities: Sequence[Sequence[str]], nsym: str) -> lp.TranslationUnit:
    """The common end of the per-element kernels: the local-memory copies (*copies*, a
    match expression) run in every work-group, the loop priorities, loopy's access checks
    off (the construction orders every access and clamps every element index; the checks
    cost seconds on kernels of this size), and at least one element."""
    if copies:
        knl = lp.add_inames_for_unused_hw_axes(knl, within=copies)
    for order in priorities:
        if len(order) > 1:
            knl = lp.prioritize_loops(knl, ",".join(order))
    knl = lp.set_options(knl, enforce_variable_access_ordered="no_check",
                         enforce_array_accesses_within_bounds="no_check")
    return lp.assume(knl, f"{nsym} >= 1")


def _stage_row(e: BatchedEinsum, stages: Sequence[Stage], s: int, r: int, k: int,
               names: dict[str, Any], accn: str, dt: Any, gathered: dict[Any, str],
               staged: dict[Any, str], rule_key: Any, base: set[str], red: list[str],
               guard: frozenset[Any], el: str, element: Any, nsym: str, last: bool,
               pre: Sequence[str], vec: int, lane_idx: str | None) -> list[Any]:
    """Accumulator *k* of row *r* in stage *s*: its initialisation, its update inside the
    reduction loops and its store (a private temporary, or the output lane by lane; in
    lane mode as whole vectors)."""
    st = stages[s]
    skip = {el, lane_idx}
    # the vector lane iname (none with one lane: an iname of length 1 would enclose every
    # stage and tie loopy's scheduler)
    ev: Any = prim.Variable("ev") if vec > 1 else 0
    evs = {"ev"} if vec > 1 else set()
    factors = []
    for c in st.inputs:
        if c == "w":
            factors.append(subscript(f"w{s - 1}_r{r}", *(names[i] for i in stages[s - 1].out), ev))
            continue
        key = rule_key(r, int(c))
        rest = [names[i] for i in e.in_indices[int(c)] if i not in skip]
        if key in gathered:
            factors.append(subscript(gathered[key], *rest, ev))
        elif key in staged:
            factors.append(subscript(staged[key], *rest))
        elif el in e.in_indices[int(c)]:  # lane mode: whole vectors, straight from global
            args = [prim.Variable("eb") if i == el else ev if i == lane_idx else names[i]
                    for i in e.in_indices[int(c)]]
            factors.append(prim.Variable(f"op{c}_r{r}")(*args))
        else:
            factors.append(prim.Variable(f"op{c}_r{r}")(*rest))
    cell = subscript(accn, k, ev)
    sfx = f"{s}_r{r}_k{k}"
    deps = set(pre) | ({f"store{s - 1}_r{r}_k*"} if s else set())
    out = [
        lp.Assignment(cell, dt.type(0), id=f"init{sfx}", predicates=guard,
                      within_inames=frozenset({*base, *evs})),
        lp.Assignment(cell, cell + prim.Product(tuple(factors)), id=f"upd{sfx}",
                      depends_on=frozenset({*deps, f"init{sfx}"}), predicates=guard,
                      within_inames=frozenset({*base, *evs, *red})),
    ]
    if not last:
        out.append(lp.Assignment(
            subscript(f"w{s}_r{r}", *(names[i] for i in st.out), ev), cell, id=f"store{sfx}",
            depends_on=frozenset({f"upd{sfx}"}), predicates=guard,
            within_inames=frozenset({*base, *evs})))
        return out
    if lane_idx:
        idx = [prim.Variable("eb") if i == el else ev if i == lane_idx else names[i]
               for i in e.out_indices]
        out.append(lp.Assignment(
            subscript(f"out{r}", *idx), cell, id=f"store{sfx}", depends_on=frozenset({f"upd{sfx}"}),
            within_inames=frozenset({*base, *evs}), predicates=guard))
        return out
    lane = prim.Variable(f"slane{r}")
    idx = [element(lane) if i == el else names[i] for i in e.out_indices]
    out.append(lp.Assignment(
        subscript(f"out{r}", *idx), subscript(accn, k, lane), id=f"store{sfx}",
        depends_on=frozenset({f"upd{sfx}"}),
        within_inames=frozenset({*base, lane.name}),
        predicates=guard.union([cast(Any, prim.Comparison(element(lane), "<",
                                                           prim.Variable(nsym)))])))
    return out


# }}}

# vim: foldmethod=marker

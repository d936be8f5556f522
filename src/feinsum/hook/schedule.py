"""The default parallel schedule the hook gives the statements that are not einsums.

When the hook transforms a program it owns the whole kernel: the einsums get their
recipes, and every other unit of statements (consecutive statements with the same loops,
see :mod:`feinsum.matching.assemble`) gets the schedule this module makes, so that no
statement is left to run on one work-item:

* on a CPU, the longest loop (the element loop of a DG program) is cut into as many
  chunks as keep every core busy several times over (``CHUNKS_PER_CORE`` a core; 256
  entries a chunk when its length is only known at run time), a work-group a chunk; the
  other loops stay loops inside it, the contiguous one innermost, which the OpenCL
  compiler vectorises;
* on a GPU, the output's contiguous loop goes to ``GPU_LANES`` work-items of a group
  (coalesced) when it is at least that long, the longest other loop to the groups;
  otherwise the longest loop goes to work-items and groups.

Only loops whose iterations are independent are spread (every statement writes elements
indexed by the loop, and reads what the unit writes only where it writes it); a unit with
none stays sequential. Loops the unit shares with other statements are first duplicated
for it, so that the schedule of one unit never changes another's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import pymbolic.primitives as prim

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.devices.opencl import DeviceInfo
    from feinsum.matching.assemble import Schedule

#: Work-groups a CPU core gets (load balance against launch cost).
CHUNKS_PER_CORE = 8
#: Entries a CPU work-group takes along a loop whose length is a run-time parameter.
SYMBOLIC_CHUNK = 256
#: Work-items along the contiguous loop on a GPU.
GPU_LANES = 64
#: What a length known only at run time counts as when loops are compared.
_LONG = 1 << 40


def default_schedule(device: DeviceInfo) -> Schedule:
    """``schedule(kernel, statement_ids) -> kernel`` for :func:`~feinsum.matching.assemble.
    assemble` on *device*."""
    def schedule(knl: lp.LoopKernel, insn_ids: frozenset[str]) -> lp.LoopKernel:
        return schedule_unit(knl, insn_ids, device)

    def chunked(knl: lp.LoopKernel, insn_ids: frozenset[str], hint: Any) -> lp.LoopKernel | None:
        return chunked_unit(knl, insn_ids, hint, device)

    schedule.chunked = chunked  # type: ignore[attr-defined]
    # what assembly may keep in local memory per work-group (in a work-item's private
    # memory where groups have one item), besides the recipes' own
    schedule.local_memory = device.local_mem_size // 2  # type: ignore[attr-defined]
    schedule.private_memory = int(  # type: ignore[attr-defined]
        device.group_private_bytes // 2 if device.is_cpu
        else device.private_bytes_per_work_item)
    return schedule


def schedule_unit(knl: lp.LoopKernel, insn_ids: frozenset[str], device: DeviceInfo
                  ) -> lp.LoopKernel:
    """*knl* with the statements *insn_ids* (one loop nest) spread over work-groups (and
    work-items on GPUs); unchanged when they run in no loop."""
    import loopy as lp

    insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
    loops = set().union(*(set(i.within_inames) for i in insns))
    if not loops:
        return knl
    knl = _own_loops(knl, insn_ids, loops)
    insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
    loops = set().union(*(set(i.within_inames) for i in insns))
    extents = {i: _extent(knl, i) for i in loops}
    if any(x is None for x in extents.values()):
        return knl  # a loop that does not start at 0 or depends on another: leave it
    loops = _independent(knl, insns, loops)
    if not loops:
        return knl  # every loop carries a dependence: the statements stay sequential
    order = _output_order(insns, loops)
    size = {i: (x if isinstance(x, int) else _LONG) for i, x in extents.items()}

    def longest(candidates: Iterable[str]) -> str | None:
        cands = list(candidates)
        if not cands:
            return None
        return max(cands, key=lambda i: (size[i], -order.index(i) if i in order else -99))

    within = " or ".join(f"id:{i}" for i in sorted(insn_ids))
    if device.is_cpu:
        outer = longest(loops)
        if outer is None or size[outer] <= 1:
            return knl
        n = extents[outer]
        chunk = (SYMBOLIC_CHUNK if not isinstance(n, int)
                 else max(1, math.ceil(n / (CHUNKS_PER_CORE * max(1, device.compute_units)))))
        if chunk == 1:
            return lp.tag_inames(knl, {outer: "g.0"})
        inner = _fresh(knl, f"{outer}_inner")
        knl = lp.split_iname(knl, outer, chunk, outer_tag="g.0", inner_iname=inner,
                             within=within)
        return _contiguous_last(knl, insns, [inner, *sorted(loops - {outer})])
    lanes = min(GPU_LANES, device.max_work_group_size)
    flat = _gpu_flat(knl, insn_ids, insns, loops, extents, lanes)
    if flat is not None:
        return flat
    contiguous = _contiguous(knl, insns, loops)
    if contiguous is not None and size[contiguous] >= lanes:
        knl = lp.split_iname(knl, contiguous, lanes, outer_tag="g.0", inner_tag="l.0",
                             within=within)
        other = longest(loops - {contiguous})
        if other is not None and size[other] > 1:
            knl = lp.tag_inames(knl, {other: "g.1"})
        return knl
    outer = longest(loops)
    if outer is None or size[outer] <= 1:
        return knl
    return lp.split_iname(knl, outer, lanes, outer_tag="g.0", inner_tag="l.0", within=within)


# {{{ the layouts of feinsum.hook.flatten


def _fresh(knl: lp.LoopKernel, stem: str) -> str:
    from feinsum.matching.assemble import fresh_name
    from feinsum.matching.normalize import kernel_names

    return fresh_name(stem, kernel_names(knl))


def _by_stride(knl: lp.LoopKernel, insns: list[Any], loops: Iterable[str]) -> list[str]:
    """*loops* in the order of the strides of the first statement's output axes they index
    (largest first: the contiguous loop last), the others first by name."""
    strides: dict[str, Any] = {}
    for insn in insns:
        a = getattr(insn, "assignee", None)
        if isinstance(a, prim.Subscript) and isinstance(a.aggregate, prim.Variable):
            decl = knl.arg_dict.get(a.aggregate.name) or knl.temporary_variables.get(
                a.aggregate.name)
            for idx, tag in zip(a.index_tuple, getattr(decl, "dim_tags", None) or (),
                                strict=False):
                st = getattr(tag, "stride", None)
                if isinstance(idx, prim.Variable) and isinstance(st, int):
                    strides[idx.name] = st
            break
    loops = sorted(loops)
    return ([n for n in loops if n not in strides]
            + sorted((n for n in loops if n in strides), key=lambda n: -strides[n]))


def _contiguous_last(knl: lp.LoopKernel, insns: list[Any], loops: list[str]) -> lp.LoopKernel:
    """The loops of a CPU chunk nested with the output's contiguous loop innermost."""
    from feinsum.hook.flatten import prioritized

    first, rest = loops[0], _by_stride(knl, insns, loops[1:])
    return prioritized(knl, [first, *rest])  # type: ignore[no-any-return]


def _gpu_flat(knl: lp.LoopKernel, insn_ids: frozenset[str], insns: list[Any],
              loops: set[str], extents: dict[str, Any], lanes: int) -> lp.LoopKernel | None:
    """Every loop of the unit flattened over groups of *lanes* work-items (None where the
    unit's loops have lengths known only at the call, or its statements different loops)."""
    from feinsum.hook.flatten import flattened

    if not all(isinstance(extents[n], int) for n in loops):
        return None
    order = _by_stride(knl, insns, loops)
    sizes = [int(cast(int, extents[n])) for n in order]
    return flattened(knl, insn_ids, order, sizes, lanes)  # type: ignore[no-any-return]


def chunked_unit(knl: lp.LoopKernel, insn_ids: frozenset[str], hint: Any,
                 device: DeviceInfo) -> lp.LoopKernel | None:
    """The unit *insn_ids* with its element loop in the blocks *hint* (``(array, axis,
    block, work-group size)``, :func:`feinsum.matching.merge.chunk_hint`) gives, one a
    work-group, and as many work-items per group: None where the unit does not index that
    axis of that array with one of its loops, or its loops are not all independent."""
    import loopy as lp

    from feinsum.hook.flatten import flattened
    from feinsum.spec.formulas import walk

    array, axis, block, local = hint
    insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
    loops = set().union(*(set(i.within_inames) for i in insns))
    if not loops or set(local) - {0}:
        return None
    knl = _own_loops(knl, insn_ids, loops)
    insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
    loops = set().union(*(set(i.within_inames) for i in insns))
    extents = {i: _extent(knl, i) for i in loops}
    if any(not isinstance(x, int) for x in extents.values()) or _independent(
            knl, insns, loops) != loops:
        return None
    found = {e.index_tuple[axis].name for insn in insns
             for e in [*walk(getattr(insn, "expression", 0)), *insn.assignees]
             if isinstance(e, prim.Subscript) and getattr(e.aggregate, "name", None) == array
             and len(e.index_tuple) > axis and isinstance(e.index_tuple[axis], prim.Variable)
             and e.index_tuple[axis].name in loops}
    if len(found) != 1:
        return None
    (element,) = found
    if local:  # as many work-items as the einsum's groups, the block flattened over them
        order = [element, *[n for n in _by_stride(knl, insns, loops) if n != element]]
        sizes = [int(cast(int, extents[n])) for n in order]
        return flattened(knl, insn_ids, order, sizes, int(local[0]),  # type: ignore[no-any-return]
                         (element, block, int(cast(int, extents[element]))))
    within = " or ".join(f"id:{i}" for i in sorted(insn_ids))
    inner = _fresh(knl, f"{element}_inner")
    knl = lp.split_iname(knl, element, block, outer_tag="g.0", inner_iname=inner,
                         within=within)
    return _contiguous_last(knl, insns, [inner, *sorted(loops - {element})])


# }}}


def _independent(knl: lp.LoopKernel, insns: list[Any], loops: set[str]) -> set[str]:
    """The loops whose iterations are independent: every statement writes an array element
    indexed by the loop (iterations write different elements), and reads what the unit
    writes only at the element it writes (no value flows between iterations). Private
    temporaries are each work-item's own."""
    from loopy.kernel.data import AddressSpace

    from feinsum.spec.formulas import walk

    def private(name: str) -> bool:
        tv = knl.temporary_variables.get(name)
        return tv is not None and tv.address_space != AddressSpace.GLOBAL

    written: dict[str, set[Any]] = {}
    ok = set(loops)
    for insn in insns:
        for a in getattr(insn, "assignees", ()):
            if isinstance(a, prim.Variable) and private(a.name):
                continue
            if not (isinstance(a, prim.Subscript) and isinstance(a.aggregate, prim.Variable)):
                return set()
            if private(a.aggregate.name):
                continue
            written.setdefault(a.aggregate.name, set()).add(a.index_tuple)
            ok &= {i.name for i in a.index_tuple if isinstance(i, prim.Variable)}
    for insn in insns:
        for e in walk(getattr(insn, "expression", 0)):
            if isinstance(e, prim.Subscript) and isinstance(e.aggregate, prim.Variable) and (
                e.aggregate.name in written and {e.index_tuple} != written[e.aggregate.name]
            ):
                return set()
    return ok


def _own_loops(knl: lp.LoopKernel, insn_ids: frozenset[str], loops: set[str]) -> lp.LoopKernel:
    """*knl* with every loop of *loops* that statements outside *insn_ids* also use
    duplicated for *insn_ids*."""
    import loopy as lp

    shared = sorted(i for i in loops if any(
        i in insn.within_inames or i in insn.reduction_inames()
        for insn in knl.instructions if insn.id not in insn_ids))
    if not shared:
        return knl
    within = " or ".join(f"id:{i}" for i in sorted(insn_ids))
    return lp.duplicate_inames(knl, shared, within=within)  # type: ignore[no-any-return]


def _extent(knl: lp.LoopKernel, iname: str) -> Any | None:
    from feinsum.matching.split import loop_extent

    return loop_extent(knl, iname)


def _contiguous(knl: lp.LoopKernel, insns: list[Any], loops: set[str]) -> str | None:
    """The loop that indexes the stride-1 axis of the first statement's output."""
    for insn in insns:
        assignee = getattr(insn, "assignee", None)
        if not (isinstance(assignee, prim.Subscript)
                and isinstance(assignee.aggregate, prim.Variable)):
            continue
        decl = knl.arg_dict.get(assignee.aggregate.name) or knl.temporary_variables.get(
            assignee.aggregate.name)
        for idx, tag in zip(assignee.index_tuple, getattr(decl, "dim_tags", None) or (),
                            strict=False):
            if getattr(tag, "stride", None) == 1 and isinstance(idx, prim.Variable) and (
                idx.name in loops
            ):
                return idx.name
        break
    return None


def _output_order(insns: list[Any], loops: set[str]) -> list[str]:
    """The loops in the order the first statement's output is indexed by them (slowest
    first), then the others by name."""
    order: list[str] = []
    for insn in insns:
        assignee = getattr(insn, "assignee", None)
        if isinstance(assignee, prim.Subscript):
            order = [i.name for i in assignee.index_tuple
                     if isinstance(i, prim.Variable) and i.name in loops]
            break
    return order + sorted(loops - set(order))


# vim: foldmethod=marker

"""What a unit's statements say about its loops, for the default schedule
(:mod:`feinsum.hook.schedule`): which loops' iterations are independent, which loop
indexes the output's stride-1 axis, and the order of the loops by the output's strides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

if TYPE_CHECKING:
    import loopy as lp


def independent_loops(knl: lp.LoopKernel, insns: list[Any], loops: set[str]) -> set[str]:
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


def contiguous_loop(knl: lp.LoopKernel, insns: list[Any], loops: set[str]) -> str | None:
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


def loop_order(knl: lp.LoopKernel, insns: list[Any], loops: set[str]) -> list[str]:
    """The loops that index the first statement's output, by decreasing stride of the
    axis they index (in the output's axis order where a stride is not a number), then the
    others by name."""
    order: list[str] = []
    for insn in insns:
        assignee = getattr(insn, "assignee", None)
        if not isinstance(assignee, prim.Subscript):
            continue
        axes = [(k, i.name) for k, i in enumerate(assignee.index_tuple)
                if isinstance(i, prim.Variable) and i.name in loops]
        decl = (knl.arg_dict.get(assignee.aggregate.name)
                or knl.temporary_variables.get(assignee.aggregate.name)
                if isinstance(assignee.aggregate, prim.Variable) else None)
        strides = [getattr(t, "stride", None) for t in getattr(decl, "dim_tags", None) or ()]
        known = {k: st for k, st in enumerate(strides) if isinstance(st, int)}
        if all(k in known for k, _ in axes):
            axes.sort(key=lambda kn: -known[kn[0]])
        order = [n for _, n in axes]
        break
    return list(dict.fromkeys(order)) + sorted(loops - set(order))

"""The default parallel schedule the hook gives the statements that are not einsums.

When the hook transforms a program it owns the whole kernel: the einsums get their
recipes, and every other unit of statements (consecutive statements with the same loops,
see :mod:`feinsum.matching.assemble`) gets the schedule this module makes, so that no
statement is left to run on one work-item. The policy (:func:`decide`):

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
none stays sequential.

The mechanism (:class:`DefaultSchedule`): each unit is described by its *shape* (its
loops' lengths, which of them are independent, which one is contiguous), the policy is
asked once per shape, and every unit's loops are then rewritten in one pass over the
kernel (:func:`apply_plans`): a loop a unit spreads becomes loops of the unit's own (a
copy of its domain, split or tagged), so the schedule of one unit never changes another's
and no loopy transformation is run per unit over the whole kernel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

from feinsum.hook.report import Clock

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.devices.opencl import DeviceInfo

#: Work-groups a CPU core gets (load balance against launch cost).
CHUNKS_PER_CORE = 8
#: Entries a CPU work-group takes along a loop whose length is a run-time parameter.
SYMBOLIC_CHUNK = 256
#: Work-items along the contiguous loop on a GPU.
GPU_LANES = 64
#: What a length known only at run time counts as when loops are compared.
_LONG = 1 << 40


# {{{ the policy: what to do with a unit of a given shape


@dataclass(frozen=True)
class UnitShape:
    """What the policy sees of a unit: its loops (output order first, then by name) as
    lengths (None: known only at run time), which are independent, and the position of
    the one indexing the output's stride-1 axis (None: none)."""

    lengths: tuple[int | None, ...]
    independent: tuple[bool, ...]
    contiguous: int | None


@dataclass(frozen=True)
class LoopAction:
    """Loop number ``loop`` of a shape: split by ``split`` (None: not split, only given
    ``outer_tag``), the outer part tagged ``outer_tag``, the inner ``inner_tag``."""

    loop: int
    split: int | None
    outer_tag: str | None
    inner_tag: str | None = None


def decide(shape: UnitShape, device: DeviceInfo) -> tuple[LoopAction, ...]:
    """The default schedule of a unit of *shape* on *device* (see the module docstring)."""
    size = [_LONG if n is None else n for n in shape.lengths]
    free = [k for k, ok in enumerate(shape.independent) if ok]

    def longest(candidates: Iterable[int]) -> int | None:
        cands = list(candidates)
        return max(cands, key=lambda k: (size[k], -k)) if cands else None

    if device.is_cpu:
        outer = longest(free)
        if outer is None or size[outer] <= 1:
            return ()
        n = shape.lengths[outer]
        chunk = (SYMBOLIC_CHUNK if n is None
                 else max(1, math.ceil(n / (CHUNKS_PER_CORE * max(1, device.compute_units)))))
        return (LoopAction(outer, None if chunk == 1 else chunk, "g.0"),)
    lanes = min(GPU_LANES, device.max_work_group_size)
    c = shape.contiguous
    if c is not None and c in free and size[c] >= lanes:
        other = longest(k for k in free if k != c)
        return (LoopAction(c, lanes, "g.0", "l.0"),
                *((LoopAction(other, None, "g.1"),) if other is not None and size[other] > 1
                  else ()))
    outer = longest(free)
    if outer is None or size[outer] <= 1:
        return ()
    return (LoopAction(outer, lanes, "g.0", "l.0"),)


# }}}


# {{{ the mechanism: shapes, plans, one pass


@dataclass(frozen=True)
class UnitPlan:
    """What is done to one unit: its statements, and per loop it spreads (by name) the
    action and the loop's domain (parameters and that loop only)."""

    insn_ids: frozenset[str]
    actions: tuple[tuple[str, LoopAction, Any], ...]


class DefaultSchedule:
    """The hook's default schedule on one device, for :func:`~feinsum.matching.assemble.
    assemble`: :meth:`plan` per unit (the policy asked once per shape), :meth:`apply`
    once per kernel. ``decided`` counts the shapes the policy was asked about."""

    def __init__(self, device: DeviceInfo, clock: Clock | None = None) -> None:
        self.device = device
        self.clock = Clock() if clock is None else clock
        self._decisions: dict[UnitShape, tuple[LoopAction, ...]] = {}

    @property
    def decided(self) -> int:
        return len(self._decisions)

    def plan(self, knl: lp.LoopKernel, insn_ids: frozenset[str],
             memo: dict[str, Any] | None = None) -> UnitPlan | None:
        """The plan for the statements *insn_ids* (one loop nest) of *knl*, or None when
        they stay as they are (no loop, or none that can be spread). *memo*: the
        loops' domains and lengths, shared by the units of one kernel."""
        with self.clock("scheduling"):
            return self._plan(knl, insn_ids, memo)

    def _plan(self, knl: lp.LoopKernel, insn_ids: frozenset[str],
              memo: dict[str, Any] | None) -> UnitPlan | None:
        insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
        loops = set().union(*(set(i.within_inames) for i in insns))
        if not loops:
            return None
        memo = {} if memo is None else memo
        for i in loops:
            if i not in memo:
                memo[i] = _domain_and_extent(knl, i)
        if any(memo[i] is None for i in loops):
            return None  # a loop that does not start at 0 or depends on another
        free = _independent(knl, insns, loops)
        order = _output_order(insns, loops)
        contiguous = _contiguous(knl, insns, loops)
        shape = UnitShape(
            tuple(memo[i][1] if isinstance(memo[i][1], int) else None for i in order),
            tuple(i in free for i in order),
            None if contiguous is None else order.index(contiguous))
        actions = self._decisions.get(shape)
        if actions is None:
            actions = self._decisions[shape] = decide(shape, self.device)
        if not actions:
            return None
        return UnitPlan(insn_ids, tuple((order[a.loop], a, memo[order[a.loop]][0])
                                        for a in actions))

    def apply(self, knl: lp.LoopKernel, plans: Sequence[UnitPlan]) -> lp.LoopKernel:
        with self.clock("scheduling"):
            return apply_plans(knl, plans)


def apply_plans(knl: lp.LoopKernel, plans: Sequence[UnitPlan]) -> lp.LoopKernel:
    """*knl* with every plan carried out, in one pass: each loop a unit spreads is replaced,
    in that unit's statements only, by loops of its own over a copy of its domain (split:
    ``outer * split + inner``), tagged as the plan says; loops no statement uses any more
    are removed."""
    import islpy as isl
    import loopy as lp
    from loopy.symbolic import SubstitutionMapper
    from pymbolic import var
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.matching.assemble import fresh_name
    from feinsum.matching.normalize import kernel_names

    if not plans:
        return knl
    taken = kernel_names(knl)
    domains = list(knl.domains)
    tags: dict[str, str] = {}
    new_insns: dict[str, Any] = {}
    replaced: set[str] = set()
    for plan in plans:
        subst: dict[str, Any] = {}
        within: dict[str, set[str]] = {}
        for old, action, dom in plan.actions:
            if action.split is None:
                new = fresh_name(old, taken)
                domains.append(dom.set_dim_name(isl.dim_type.set, 0, new))
                subst[old], within[old] = var(new), {new}
                if action.outer_tag:
                    tags[new] = action.outer_tag
            else:
                outer = fresh_name(f"{old}_outer", taken)
                inner = fresh_name(f"{old}_inner", taken)
                domains.append(_split_domain(dom, action.split, outer, inner))
                subst[old] = var(outer) * action.split + var(inner)
                within[old] = {outer, inner}
                if action.outer_tag:
                    tags[outer] = action.outer_tag
                if action.inner_tag:
                    tags[inner] = action.inner_tag
            replaced.add(old)
        mapper = SubstitutionMapper(make_subst_func(subst))
        for insn_id in plan.insn_ids:
            insn = new_insns.get(insn_id, knl.id_to_insn[insn_id])
            names = set(insn.within_inames)
            for old, new_names in within.items():
                if old in names:
                    names = (names - {old}) | new_names
            new_insns[insn_id] = insn.with_transformed_expressions(mapper).copy(
                within_inames=frozenset(names))
    from loopy.kernel.data import Iname

    inames = dict(knl.inames)
    for dom in domains[len(knl.domains):]:
        for k in range(dom.dim(isl.dim_type.set)):
            name = str(dom.get_dim_name(isl.dim_type.set, k))
            inames[name] = Iname(name, frozenset())
    knl = knl.copy(domains=domains, inames=inames,
                   instructions=[new_insns.get(i.id, i) for i in knl.instructions])
    if tags:
        knl = lp.tag_inames(knl, tags)
    unused = {i for i in replaced
              if not any(i in insn.within_inames or i in insn.reduction_inames()
                         for insn in knl.instructions)}
    if unused:
        knl = lp.remove_unused_inames(knl, sorted(unused))
        knl = knl.copy(loop_priority=frozenset(
            p for p in knl.loop_priority if not unused & set(p)))
    return knl


def _split_domain(dom: Any, split: int, outer: str, inner: str) -> Any:
    """``{[outer, inner]: 0 <= inner < split and outer*split + inner in dom}`` (*dom*: the
    loop's domain, its parameters and the loop only)."""
    import islpy as isl

    old = dom.get_dim_name(isl.dim_type.set, 0)
    s = dom.insert_dims(isl.dim_type.set, 1, 2)
    s = s.set_dim_name(isl.dim_type.set, 1, outer).set_dim_name(isl.dim_type.set, 2, inner)
    var = isl.affs_from_space(s.space)
    s = s & var[inner].ge_set(var[0]) & var[inner].lt_set(var[0] + split)
    s = s & var[old].eq_set(var[outer] * split + var[inner])
    result = s.project_out(isl.dim_type.set, 0, 1)
    if isinstance(result, isl.Set):
        (result,) = result.coalesce().get_basic_sets()
    return result


def _domain_and_extent(knl: lp.LoopKernel, iname: str) -> tuple[Any, Any] | None:
    """The domain of loop *iname* alone (over the kernel's parameters) and its length, if
    it starts at 0 and its bounds involve no other loop."""
    import islpy as isl

    from feinsum.matching.split import loop_extent

    extent = loop_extent(knl, iname)
    if extent is None:
        return None
    dom = knl.get_inames_domain(frozenset([iname]))
    dom = dom.project_out_except([iname], [isl.dim_type.set])
    if isinstance(dom, isl.Set):
        if dom.n_basic_set() != 1:
            return None
        dom = dom.get_basic_sets()[0]
    return dom.remove_redundancies(), extent


# }}}


# {{{ what a unit's statements say


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
    return list(dict.fromkeys(order)) + sorted(loops - set(order))


# }}}


# vim: foldmethod=marker

"""The default parallel schedule the hook gives the statements that are not einsums.

When the hook transforms a program it owns the whole kernel: the einsums get their
recipes, and every other unit of statements (consecutive statements with the same loops,
see :mod:`feinsum.matching.assemble`) gets the schedule this module makes, so that no
statement is left to run on one work-item. The policy (:func:`decide`):

* on a CPU, the longest loop (the element loop of a DG program) is cut into as many
  chunks as keep every core busy several times over (``CHUNKS_PER_CORE`` a core; 256
  entries a chunk when its length is only known at run time), a work-group a chunk; the
  other loops stay loops inside it, nested with the output's contiguous loop innermost,
  which the OpenCL compiler vectorises (loopy would otherwise nest them by name: in the
  measured DG step, the element loop innermost at stride 35, and the elementwise kernel
  took 2.4x its einsums);
* on a GPU, a unit whose loops all have known lengths and are all independent is
  *flattened*: its loops, in the order of the output's strides, become one flat index
  over all their entries (35 nodes x E elements: one loop of 35E), split into work-groups
  of ``GPU_LANES`` work-items: consecutive work-items write consecutive entries
  (coalesced), every group is full but the last (:mod:`feinsum.hook.flatten`); otherwise
  the output's contiguous loop goes to ``GPU_LANES`` work-items of a group when it is at
  least that long, the longest other loop to the groups, else the longest loop goes to
  work-items and groups;
* next to a transformed einsum whose work-group ``g`` writes block ``g`` of an array's
  axis (:func:`feinsum.matching.merge.chunk_hint`: the elements of a DG program), a unit
  that indexes that axis with one of its loops cuts that loop into the same blocks, a
  work-group each, with as many work-items as the einsum's groups (the rest of the block
  flattened over them), so that it can share the einsum's launch
  (:mod:`feinsum.matching.merge`); the caller gives the unit the plain default where it
  then cannot.

Only loops whose iterations are independent are spread (every statement writes elements
indexed by the loop, and reads what the unit writes only where it writes it); a unit with
none stays sequential -- except, on a GPU, statements without loops that each reduce into
one value (``any(isnan(u))``, a sum over a reversed array: reductions that are not
einsums): the longest reduction loop of each is shared by the ``GPU_LANES`` work-items
of a group (loopy's local-parallel reduction) rather than run by one work-item
(:class:`ReduceAction`).

The mechanism (:class:`DefaultSchedule`): each unit is described by its *shape* (its
loops' lengths, which of them are independent, which one is contiguous, whether every
statement runs in all of them, the neighbouring einsum's blocks), the policy is asked
once per shape, and every unit's loops are then rewritten in one pass over the
kernel (:func:`apply_plans`): a loop a unit spreads becomes loops of the unit's own (a
copy of its domain, split, tagged or flattened), so the schedule of one unit never changes
another's and no loopy transformation is run per unit over the whole kernel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

from feinsum.hook.payoff import LAUNCH_CODE_LIMIT
from feinsum.hook.report import Clock
from feinsum.hook.unit_loops import contiguous_loop, independent_loops, loop_order

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
    """What the policy sees of a unit: its loops (the output's axes by decreasing stride,
    then the others by name) as lengths (None: known only at run time), which are
    independent, the position of the one indexing the output's stride-1 axis (None:
    none), whether every statement runs in all the loops and in no reduction (*exact*),
    and *block*: ``(loop, size, work-items)`` where a neighbouring einsum's work-group
    ``g`` takes block ``g`` of *size* entries along the axis loop *loop* indexes, with
    *work-items* a group (None: no such einsum)."""

    lengths: tuple[int | None, ...]
    independent: tuple[bool, ...]
    contiguous: int | None
    exact: bool = False
    block: tuple[int, int, int] | None = None


@dataclass(frozen=True)
class LoopAction:
    """Loop number ``loop`` of a shape: split by ``split`` (None: not split, only given
    ``outer_tag``), the outer part tagged ``outer_tag``, the inner ``inner_tag``. With
    neither a split nor a tag, the unit only gets a copy of its own (to be nested)."""

    loop: int
    split: int | None
    outer_tag: str | None
    inner_tag: str | None = None


@dataclass(frozen=True)
class NestAction:
    """The loops ``loops`` of a shape (the inner part of a split one) nested in this order,
    outermost first (each must have a :class:`LoopAction`)."""

    loops: tuple[int, ...]


@dataclass(frozen=True)
class FlatAction:
    """The loops ``loops`` of a shape (slowest first; all of them) flattened into one
    index over work-groups of ``lanes`` work-items (``g.0``, ``l.0``); with ``block``
    ``(loop, size)``, loop *loop* is first cut into blocks of *size*, a work-group each,
    and the rest of the block flattened over its work-items (:mod:`feinsum.hook.flatten`)."""

    loops: tuple[int, ...]
    lanes: int
    block: tuple[int, int] | None = None


@dataclass(frozen=True)
class ReduceAction:
    """Reduction loop ``loop`` of a unit of statements without loops (reductions into one
    value) split by ``lanes``, the inner part on the work-items of one group (``l.0``)."""

    loop: int
    lanes: int


Action = LoopAction | NestAction | FlatAction | ReduceAction


def decide(shape: UnitShape, device: DeviceInfo) -> tuple[Action, ...]:
    """The default schedule of a unit of *shape* on *device* (see the module docstring)."""
    size = [_LONG if n is None else n for n in shape.lengths]
    free = [k for k, ok in enumerate(shape.independent) if ok]
    every = range(len(size))
    known = all(isinstance(n, int) for n in shape.lengths)

    def longest(candidates: Iterable[int]) -> int | None:
        cands = list(candidates)
        return max(cands, key=lambda k: (size[k], -k)) if cands else None

    blocked = _block_actions(shape)
    if blocked is not None:
        return blocked
    if device.is_cpu:
        outer = longest(free)
        if outer is None or size[outer] <= 1:
            return ()
        n = shape.lengths[outer]
        chunk = (SYMBOLIC_CHUNK if n is None
                 else max(1, math.ceil(n / (CHUNKS_PER_CORE * max(1, device.compute_units)))))
        if chunk == 1:
            return (LoopAction(outer, None, "g.0"),
                    *_nested([k for k in free if k != outer]))
        return _chunked(outer, chunk, free)
    lanes = min(GPU_LANES, device.max_work_group_size)
    if known and shape.exact and len(free) == len(size) and math.prod(size) > 1:
        return (FlatAction(tuple(every), lanes),)
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


def _block_actions(shape: UnitShape) -> tuple[Action, ...] | None:
    """The actions that follow the shape's *block* (None: it has none, or they cannot:
    a length known only at run time, a loop whose iterations depend on each other, or,
    to be flattened over several work-items, statements outside some of the loops)."""
    if shape.block is None or None in shape.lengths or not all(shape.independent):
        return None
    loop, block, items = shape.block
    every = range(len(shape.lengths))
    if items == 1:
        return _chunked(loop, block, every)
    if not shape.exact:
        return None
    return (FlatAction((loop, *(k for k in every if k != loop)), items, (loop, block)),)


def _chunked(loop: int, chunk: int, free: Sequence[int]) -> tuple[Action, ...]:
    """Loop *loop* in chunks of *chunk*, a work-group each, the chunk's entries and the
    other independent loops nested inside it in the shape's order (contiguous last)."""
    rest = [k for k in free if k != loop]
    return (LoopAction(loop, chunk, "g.0"), *(LoopAction(k, None, None) for k in rest),
            *((NestAction((loop, *rest)),) if rest else ()))


def _nested(loops: Sequence[int]) -> tuple[Action, ...]:
    if len(loops) < 2:
        return ()
    return (*(LoopAction(k, None, None) for k in loops), NestAction(tuple(loops)))


# }}}


# {{{ the mechanism: shapes, plans, one pass


@dataclass(frozen=True)
class UnitPlan:
    """What is done to one unit: its statements, its loops in the shape's order with each
    loop's domain (parameters and that loop only) and length, the policy's actions, and
    whether they follow a neighbouring einsum's blocks (*chunked*)."""

    insn_ids: frozenset[str]
    loops: tuple[str, ...]
    domains: tuple[Any, ...]
    lengths: tuple[int | None, ...]
    actions: tuple[Action, ...]
    chunked: bool = False


class DefaultSchedule:
    """The hook's default schedule on one device, for :func:`~feinsum.matching.assemble.
    assemble`: :meth:`plan` per unit (the policy asked once per shape), :meth:`apply`
    once per kernel. ``decided`` counts the shapes the policy was asked about;
    ``local_memory`` and ``private_memory`` are what assembly may keep per work-group in
    local memory (in a work-item's private memory where groups have one work-item)
    besides the recipes' own (:mod:`feinsum.matching.demote`)."""

    def __init__(self, device: DeviceInfo, clock: Clock | None = None) -> None:
        self.device = device
        self.clock = Clock() if clock is None else clock
        self._decisions: dict[UnitShape, tuple[Action, ...]] = {}
        self.local_memory = device.local_mem_size // 2
        self.private_memory = int(device.group_private_bytes // 2 if device.is_cpu
                                  else device.private_bytes_per_work_item)
        self.launch_statements = LAUNCH_CODE_LIMIT

    @property
    def decided(self) -> int:
        return len(self._decisions)

    def plan(self, knl: lp.LoopKernel, insn_ids: frozenset[str],
             memo: dict[str, Any] | None = None, hint: Any = None) -> UnitPlan | None:
        """The plan for the statements *insn_ids* (one loop nest) of *knl*, or None when
        they stay as they are (no loop, or none that can be spread). *memo*: the
        loops' domains and lengths, shared by the units of one kernel; *hint*: the blocks
        of a neighbouring einsum (:func:`feinsum.matching.merge.chunk_hint`)."""
        with self.clock("scheduling"):
            return self._plan(knl, insn_ids, {} if memo is None else memo, hint)

    def _plan(self, knl: lp.LoopKernel, insn_ids: frozenset[str], memo: dict[str, Any],
              hint: Any) -> UnitPlan | None:
        insns = [knl.id_to_insn[i] for i in sorted(insn_ids)]
        loops = set().union(*(set(i.within_inames) for i in insns))
        if not loops:
            return self._reduction_plan(knl, insns, memo)
        _remember(knl, loops, memo)
        if any(memo[i] is None for i in loops):
            return None  # a loop that does not start at 0 or depends on another
        free = independent_loops(knl, insns, loops)
        order = loop_order(knl, insns, loops)
        contiguous = contiguous_loop(knl, insns, loops)
        lengths = tuple(memo[i][1] if isinstance(memo[i][1], int) else None for i in order)
        exact = all(set(i.within_inames) == loops and not i.reduction_inames() for i in insns)
        shape = UnitShape(lengths, tuple(i in free for i in order),
                          None if contiguous is None else order.index(contiguous), exact,
                          _block(insns, order, hint))
        actions = self._decisions.get(shape)
        if actions is None:
            actions = self._decisions[shape] = decide(shape, self.device)
        if not actions:
            return None
        return UnitPlan(insn_ids, tuple(order), tuple(memo[i][0] for i in order), lengths,
                        actions, _block_actions(shape) is not None)

    def _reduction_plan(self, knl: lp.LoopKernel, insns: list[Any], memo: dict[str, Any]
                        ) -> UnitPlan | None:
        """On a GPU, for statements without loops that each reduce into one value: each
        one's longest reduction loop (known lengths first) shared by the work-items of a
        group."""
        from loopy.symbolic import Reduction

        if self.device.is_cpu:
            return None
        lanes = min(GPU_LANES, self.device.max_work_group_size)
        loops: list[str] = []
        for insn in insns:
            red = getattr(insn, "expression", None)
            if (not isinstance(red, Reduction) or insn.predicates
                    or getattr(red.operation, "arg_count", 1) != 1):
                return None  # argmin/argmax reduce pairs; other statements read results
            _remember(knl, red.inames, memo)
            spans = {str(i): memo[i][1] for i in red.inames if memo[i] is not None}
            if not spans:
                return None
            loop = max(sorted(spans), key=lambda i: spans[i] if isinstance(spans[i], int)
                       else _LONG)
            if (isinstance(spans[loop], int) and spans[loop] < 2 * lanes) or loop in loops:
                return None
            loops.append(loop)
        lengths = tuple(memo[i][1] if isinstance(memo[i][1], int) else None for i in loops)
        return UnitPlan(frozenset(i.id for i in insns), tuple(loops),
                        tuple(memo[i][0] for i in loops), lengths,
                        tuple(ReduceAction(k, lanes) for k in range(len(loops))))

    def apply(self, knl: lp.LoopKernel, plans: Sequence[UnitPlan]) -> lp.LoopKernel:
        with self.clock("scheduling"):
            return apply_plans(knl, plans)


def _block(insns: Sequence[Any], order: Sequence[str], hint: Any
           ) -> tuple[int, int, int] | None:
    """The shape's *block* for *hint* ``(array, axis, block, work-group size)``: the
    position of the one loop that indexes that axis of that array in the statements, the
    block, the work-items a group; None where there is no such loop, or the einsum's
    groups are not one-dimensional."""
    from feinsum.spec.formulas import walk

    if hint is None:
        return None
    array, axis, block, local = hint
    if set(local) - {0}:
        return None
    found = {e.index_tuple[axis].name for insn in insns
             for e in [*walk(getattr(insn, "expression", 0)), *insn.assignees]
             if isinstance(e, prim.Subscript) and getattr(e.aggregate, "name", None) == array
             and len(e.index_tuple) > axis and isinstance(e.index_tuple[axis], prim.Variable)
             and e.index_tuple[axis].name in order}
    if len(found) != 1:
        return None
    return order.index(found.pop()), int(block), int(local.get(0, 1))


def apply_plans(knl: lp.LoopKernel, plans: Sequence[UnitPlan]) -> lp.LoopKernel:
    """*knl* with every plan carried out, in one pass: each loop a unit spreads (or nests)
    is replaced, in that unit's statements only, by loops of its own over a copy of its
    domain (split: ``outer * split + inner``; flattened: :mod:`feinsum.hook.flatten`),
    tagged and nested as the plan says; loops no statement uses any more are removed."""
    import islpy as isl
    import loopy as lp
    from loopy.symbolic import SubstitutionMapper
    from pymbolic import var
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.hook.flatten import flat_loops
    from feinsum.matching.assemble import fresh_name
    from feinsum.matching.normalize import kernel_names

    if not plans:
        return knl
    taken = kernel_names(knl)
    domains = list(knl.domains)
    tags: dict[str, str] = {}
    new_insns: dict[str, Any] = {}
    replaced: set[str] = set()
    priorities: set[tuple[str, ...]] = set()
    for plan in plans:
        subst: dict[str, Any] = {}
        reduced: dict[str, tuple[str, str]] = {}
        within: dict[str, set[str]] = {}
        nested: dict[int, str] = {}
        guards: list[Any] = []
        for action in plan.actions:
            if isinstance(action, NestAction):
                continue
            if isinstance(action, ReduceAction):
                old, dom = plan.loops[action.loop], plan.domains[action.loop]
                outer = fresh_name(f"{old}_outer", taken)
                inner = fresh_name(f"{old}_inner", taken)
                domains.append(_split_domain(dom, action.lanes, outer, inner))
                subst[old] = var(outer) * action.lanes + var(inner)
                reduced[old] = (outer, inner)
                tags[inner] = "l.0"
                replaced.add(old)
                continue
            if isinstance(action, FlatAction):
                flattened = [plan.loops[k] for k in action.loops]
                lengths = [int(plan.lengths[k] or 0) for k in action.loops]
                block = (None if action.block is None
                         else (plan.loops[action.block[0]], action.block[1]))
                flat = flat_loops(flattened, lengths, action.lanes, block,
                                  lambda stem: fresh_name(stem, taken))
                domains.append(flat.domain())
                subst.update(flat.subst)
                within.update({n: set(flat.sizes) for n in flattened})
                guards += flat.guards
                tags.update(flat.tags)
                replaced.update(flattened)
                continue
            old, dom = plan.loops[action.loop], plan.domains[action.loop]
            if action.split is None:
                new = fresh_name(old, taken)
                domains.append(dom.set_dim_name(isl.dim_type.set, 0, new))
                subst[old], within[old] = var(new), {new}
                nested[action.loop] = new
                if action.outer_tag:
                    tags[new] = action.outer_tag
            else:
                outer = fresh_name(f"{old}_outer", taken)
                inner = fresh_name(f"{old}_inner", taken)
                domains.append(_split_domain(dom, action.split, outer, inner))
                subst[old] = var(outer) * action.split + var(inner)
                within[old] = {outer, inner}
                nested[action.loop] = inner
                if action.outer_tag:
                    tags[outer] = action.outer_tag
                if action.inner_tag:
                    tags[inner] = action.inner_tag
            replaced.add(old)
        priorities.update(tuple(nested[k] for k in a.loops) for a in plan.actions
                          if isinstance(a, NestAction))
        mapper = SubstitutionMapper(make_subst_func(subst))
        for insn_id in plan.insn_ids:
            insn = new_insns.get(insn_id, knl.id_to_insn[insn_id])
            names = set(insn.within_inames)
            for old, new_names in within.items():
                if old in names:
                    names = (names - {old}) | new_names
            if reduced:  # the reductions' loops first: loopy's mapper wants them variables
                insn = insn.with_transformed_expressions(_reduction_renamer(reduced))
            insn = insn.with_transformed_expressions(mapper)
            new_insns[insn_id] = insn.copy(within_inames=frozenset(names), predicates=(
                frozenset(insn.predicates) | frozenset(guards)))
    from loopy.kernel.data import Iname

    inames = dict(knl.inames)
    for dom in domains[len(knl.domains):]:
        for k in range(dom.dim(isl.dim_type.set)):
            name = str(dom.get_dim_name(isl.dim_type.set, k))
            inames[name] = Iname(name, frozenset())
    # loopy's tree writes a shared reduction's result from one work-item; its check still
    # sees the group's work-items write it
    races = [f"write_race({i})" for p in plans for i in sorted(p.insn_ids)
             if any(isinstance(a, ReduceAction) for a in p.actions)]
    knl = knl.copy(domains=domains, inames=inames,
                   loop_priority=frozenset(knl.loop_priority) | priorities,
                   instructions=[new_insns.get(i.id, i) for i in knl.instructions],
                   silenced_warnings=frozenset(knl.silenced_warnings) | frozenset(races))
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


def _reduction_renamer(reduced: dict[str, tuple[str, str]]) -> Any:
    """A mapper that writes a reduction over a loop split into ``(outer, inner)`` by
    *reduced* as a reduction over ``inner`` (the work-items) of the reduction over
    ``outer`` and its other loops (each work-item's own, in sequence)."""
    from loopy.symbolic import IdentityMapper, Reduction

    class Renamer(IdentityMapper):  # type: ignore[misc]
        def map_reduction(self, expr: Any, *args: Any) -> Any:
            body = self.rec(expr.expr, *args)
            split = [str(i) for i in expr.inames if str(i) in reduced]
            if not split:
                return Reduction(expr.operation, expr.inames, body, expr.allow_simultaneous)
            (old,) = split
            outer, inner = reduced[old]
            rest = tuple(outer if str(i) == old else i for i in expr.inames)
            return Reduction(expr.operation, (inner,), Reduction(
                expr.operation, rest, body, expr.allow_simultaneous), expr.allow_simultaneous)

    return Renamer()


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


def _remember(knl: lp.LoopKernel, inames: Iterable[str], memo: dict[str, Any]) -> None:
    """Each loop's domain and length (:func:`_domain_and_extent`) in *memo*, once."""
    for i in inames:
        if i not in memo:
            memo[i] = _domain_and_extent(knl, i)


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


# vim: foldmethod=marker

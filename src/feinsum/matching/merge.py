"""Units of an assembled kernel that can share one device launch.

:func:`~feinsum.matching.assemble.assemble` runs each unit (a transformed einsum, or
consecutive other statements) on a grid of its own, and separates two units by a global
barrier, which ends a device kernel. That barrier is only needed when a work-group of the
later unit reads or writes what *another* work-group of the earlier one touches. Element-
batched programs rarely do: a DG step's divergence, lift and inverse mass matrix each give
work-group ``g`` the same block of elements, and each reads the others' results only on
its own elements. Two consecutive units share a launch (:func:`launch_groups`) when

* both run on the same group axes and the same work-group size (every statement of a
  launch uses all its axes: loopy's rule), and neither has a global barrier of its own;
* for every global array both touch, one of them writing it, no entry is touched by
  work-group ``g`` of one and work-group ``g' != g`` of the other: checked exactly with
  isl on the access maps ``{[g] -> [entry]}`` of their statements (``min``/``max`` in
  indices are exact, other indices widen to the whole axis, a C statement's accesses to
  the whole array, except the entries a ``vstoreN`` writes along its contiguous axis);
* with a limit (the hook's ``LAUNCH_CODE_LIMIT``), the launch's statements once unrolled
  stay within it.

Inside a launch, units follow one another in each work-group; a work-group barrier with a
global memory fence separates them when the group has several work-items, and loopy is
told (``no_sync_with``) that no global barrier is needed between them.
:func:`chunk_hint` reads off the block of an array's axis each work-group of a unit
writes, so that the other statements can be given the same blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pymbolic.primitives as prim

from feinsum.matching.size import unrolled_statements

#: an access whose entries cannot be described: every entry of the array
ALL: Any = "all"


@dataclass(frozen=True)
class Unit:
    """What deciding launches needs of one unit: its group axes, its work-group size
    (axis -> size), whether it has a global barrier, and per global array its accesses
    (isl maps ``{[g...] -> [entry]}`` or :data:`ALL`, with whether each writes)."""

    groups: tuple[int, ...]
    local: tuple[tuple[int, Any], ...]
    barrier: bool
    accesses: Mapping[str, tuple[tuple[Any, bool], ...]]


# {{{ access maps


def _hw(knl: Any, iname: str, kind: Any) -> int | None:
    for t in knl.inames[iname].tags:
        if isinstance(t, kind):
            return int(t.axis)
    return None


def _global_arrays(knl: Any) -> set[str]:
    from loopy.kernel.data import AddressSpace, ArrayArg

    return ({a.name for a in knl.args if isinstance(a, ArrayArg)}
            | {n for n, tv in knl.temporary_variables.items()
               if tv.address_space == AddressSpace.GLOBAL})


def _group_inames(knl: Any, insn: Any) -> dict[int, str]:
    from loopy.kernel.data import GroupInameTag

    out = {}
    for i in insn.within_inames:
        axis = _hw(knl, i, GroupInameTag)
        if axis is not None:
            out[axis] = i
    return out


def _access(knl: Any, insn: Any, sub: Any, groups: Mapping[int, str],
            widen: frozenset[int] = frozenset()) -> Any:
    """``{[g...] -> [entry]}`` of statement *insn* reading or writing *sub* (axes *widen*
    taking any value); :data:`ALL` if it cannot be described."""
    import islpy as isl
    from loopy.symbolic import guarded_pwaff_from_expr

    name = _name(sub)
    idx = sub.index_tuple if isinstance(sub, prim.Subscript) else ()
    decl = knl.arg_dict.get(name) or knl.temporary_variables.get(name)
    shape = getattr(decl, "shape", None)
    inames = set(insn.within_inames) | set(insn.reduction_inames())
    try:
        dom = knl.get_inames_domain(frozenset(inames))
        dom = dom.project_out_except(sorted(inames), [isl.dim_type.set])
        dom = isl.Set.from_basic_set(dom) if isinstance(dom, isl.BasicSet) else dom
        space = dom.space
        pieces = []
        for k, x in enumerate(idx):
            pw = None
            if k not in widen:
                try:
                    pw = guarded_pwaff_from_expr(space, x, ())
                except Exception:  # not quasi-affine: any entry of the axis
                    pw = None
            if pw is None:
                n = shape[k] if isinstance(shape, tuple) else None
                if not isinstance(n, int):
                    return ALL
                m = isl.Map.from_domain(dom).add_dims(isl.dim_type.out, 1)
                m = m.lower_bound_val(isl.dim_type.out, 0, isl.Val.int_from_si(m.get_ctx(), 0))
                m = m.upper_bound_val(isl.dim_type.out, 0,
                                      isl.Val.int_from_si(m.get_ctx(), n - 1))
                pieces.append(m.set_dim_name(isl.dim_type.out, 0, f"feinsum_x{k}"))
            else:
                m = isl.Map.from_pw_aff(pw).intersect_domain(dom)
                pieces.append(m.set_dim_name(isl.dim_type.out, 0, f"feinsum_x{k}"))
        acc = isl.Map.from_domain(dom) if not pieces else pieces[0]
        for m in pieces[1:]:
            acc = acc.flat_range_product(m)
        names = [groups[a] for a in sorted(groups)]
        acc = acc.project_out_except(names, [isl.dim_type.in_])
        order = [acc.get_dim_name(isl.dim_type.in_, k)
                 for k in range(acc.dim(isl.dim_type.in_))]
        if order != names:  # group inames not in axis order: no exact answer
            return ALL
        for k in range(len(names)):
            acc = acc.set_dim_name(isl.dim_type.in_, k, f"feinsum_g{k}")
        return acc.reset_tuple_id(isl.dim_type.in_).reset_tuple_id(isl.dim_type.out).coalesce()
    except Exception:  # an unusual domain: every entry
        return ALL


def unit(knl: Any, insn_ids: Sequence[str]) -> Unit | None:
    """The :class:`Unit` of statements *insn_ids* of *knl*; None if they run on no group
    axis, on different group axes, or with group axes loopy does not tag alike."""
    from loopy.kernel.data import LocalInameTag
    from loopy.kernel.instruction import BarrierInstruction, CInstruction

    from feinsum.spec.formulas import walk

    arrays = _global_arrays(knl)
    axes: set[tuple[int, ...]] = set()
    local: dict[int, Any] = {}
    barrier = False
    accesses: dict[str, list[tuple[Any, bool]]] = {}
    for i in insn_ids:
        insn = knl.id_to_insn[i]
        if isinstance(insn, BarrierInstruction):
            barrier = barrier or insn.synchronization_kind == "global"
            continue
        groups = _group_inames(knl, insn)
        axes.add(tuple(sorted(groups)))
        for n in insn.within_inames:
            axis = _hw(knl, n, LocalInameTag)
            if axis is not None:
                size = _size(knl, n)
                if size is None:
                    return None
                local[axis] = max(local.get(axis, 1), size)
        if isinstance(insn, CInstruction):
            for (sub, write) in _c_accesses(knl, insn, arrays):
                accesses.setdefault(_name(sub), []).append(
                    (ALL if sub is ALL else _access(knl, insn, sub, groups,
                                                   _contiguous_axes(knl, sub)), write))
            for v in set(insn.read_variables) & arrays:
                accesses.setdefault(v, []).append((ALL, False))
            continue
        for a in insn.assignees:
            agg = _name(a)
            if agg in arrays:
                accesses.setdefault(agg, []).append((_access(knl, insn, a, groups), True))
        exprs = [getattr(insn, "expression", 0), *insn.predicates]
        for e in (x for ex in exprs for x in walk(ex)):
            if isinstance(e, prim.Subscript) and getattr(e.aggregate, "name", None) in arrays:
                accesses.setdefault(_name(e), []).append(
                    (_access(knl, insn, e, groups), False))
        for name in sorted(_bare(exprs) & arrays):  # read as a whole (a pointer...)
            accesses.setdefault(name, []).append((ALL, False))
    if len(axes) != 1 or not next(iter(axes)):
        return None
    return Unit(next(iter(axes)), tuple(sorted(local.items())), barrier,
                {k: tuple(v) for k, v in accesses.items()})


def _bare(exprs: Sequence[Any]) -> set[str]:
    """The variables *exprs* use other than as the array of a subscript."""
    from pymbolic.mapper.dependency import DependencyMapper

    deps: Any = DependencyMapper(composite_leaves=False, include_subscripts=False)
    out: set[str] = set()
    for e in exprs:
        try:
            found = deps(_no_subscripts(e))
        except Exception:  # an expression pymbolic cannot walk: every variable it names
            found = set()
        out |= {v.name for v in found if isinstance(v, prim.Variable)}
    return out


def _no_subscripts(expr: Any) -> Any:
    from loopy.symbolic import IdentityMapper

    class Drop(IdentityMapper):  # type: ignore[misc]
        def map_subscript(self, e: Any, *args: Any) -> Any:
            return prim.Subscript(prim.Variable("feinsum_array"),
                                  tuple(self.rec(i) for i in e.index_tuple))

    return Drop()(expr) if isinstance(expr, prim.ExpressionNode) else expr


def _name(sub: Any) -> str:
    if isinstance(sub, prim.Subscript):
        return str(getattr(sub.aggregate, "name", ""))
    return str(getattr(sub, "name", sub))


def _c_accesses(knl: Any, insn: Any, arrays: set[str]) -> list[tuple[Any, bool]]:
    out = []
    for a in insn.assignees:
        if isinstance(a, prim.Subscript) and _name(a) in arrays:
            out.append((a, True))
    return out


def _contiguous_axes(knl: Any, sub: Any) -> frozenset[int]:
    decl = knl.arg_dict.get(sub.aggregate.name) or knl.temporary_variables.get(
        sub.aggregate.name)
    return frozenset(k for k, t in enumerate(getattr(decl, "dim_tags", None) or ())
                     if getattr(t, "stride", None) == 1)


def _size(knl: Any, iname: str) -> int | None:
    """The most values loop *iname* takes (its work-items along a local axis)."""
    from loopy.symbolic import pw_aff_to_expr

    try:
        size = pw_aff_to_expr(knl.get_iname_bounds(iname, constants_only=True).size)
    except Exception:  # bounds loopy cannot give as constants
        return None
    return int(size) if isinstance(size, int) else None


# }}}


def _apart(a: Any, b: Any) -> bool:
    """Whether no entry is accessed by group ``g`` in *a* and group ``g' != g`` in *b*."""
    import islpy as isl

    if a is ALL or b is ALL:
        return bool((a is not ALL and a.is_empty()) or (b is not ALL and b.is_empty()))
    try:
        a, b = isl.align_two(a, b)
        pairs = a.apply_range(b.reverse())
        same = isl.Map.identity(pairs.get_space())
        return bool(pairs.subtract(same).is_empty())
    except Exception:  # spaces isl cannot align: assume they meet
        return False


def compatible(earlier: Unit, later: Unit) -> str | None:
    """None if *later* can run in the launch of *earlier*, else why not."""
    if earlier.barrier or later.barrier:
        return "a global barrier of its own"
    if earlier.groups != later.groups:
        return f"group axes {earlier.groups} and {later.groups}"
    if earlier.local != later.local:
        return f"work-group sizes {dict(earlier.local)} and {dict(later.local)}"
    for name in sorted(set(earlier.accesses) & set(later.accesses)):
        for a, wa in earlier.accesses[name]:
            for b, wb in later.accesses[name]:
                if (wa or wb) and not _apart(a, b):
                    return f"work-groups touch each other's entries of {name!r}"
    return None


def launch_groups(knl: Any, unit_ids: Sequence[frozenset[str]], hw: Sequence[bool],
                  max_statements: int | None = None) -> list[int]:
    """For each unit, the index of the first unit of its launch (units run on hardware
    axes share a launch with the previous ones when :func:`compatible` with each, and,
    with *max_statements*, while the launch's statements once unrolled stay within it:
    a device compiler's time grows faster than the size of the function it compiles)."""
    units = [unit(knl, sorted(u)) if h else None for u, h in zip(unit_ids, hw, strict=True)]
    sizes = ([unrolled_statements(knl, u) for u in unit_ids] if max_statements is not None
             else [0] * len(unit_ids))
    first: list[int] = []
    for k, u in enumerate(units):
        start = first[k - 1] if k else 0
        if k and u is not None and all(
                units[j] is not None and compatible(units[j], u) is None  # type: ignore[arg-type]
                for j in range(start, k)) and (
                max_statements is None or sum(sizes[start:k + 1]) <= max_statements):
            first.append(start)
        else:
            first.append(k)
    return first


def chunk_hint(knl: Any, insn_ids: Sequence[str]) -> tuple[str, int, int, Any] | None:
    """``(array, axis, block, work-group size)``: work-group ``g`` of the statements
    *insn_ids* writes exactly the entries ``block*g <= x < block*(g+1)`` along *axis* of
    *array* (and all of them along the others); None if no written array is so divided."""
    import islpy as isl

    u = unit(knl, insn_ids)
    if u is None or len(u.groups) != 1:
        return None
    for name, accs in sorted(u.accesses.items()):
        writes = [a for a, w in accs if w]
        if not writes or any(a is ALL for a in writes):
            continue
        m = writes[0]
        for a in writes[1:]:
            m = m.union(a)
        for axis in range(m.dim(isl.dim_type.out)):
            block = _block(m, axis)
            if block is not None:
                return name, axis, block, dict(u.local)
    return None


def _block(m: Any, axis: int) -> int | None:
    import islpy as isl

    try:
        n_out = m.dim(isl.dim_type.out)
        keep = m.project_out(isl.dim_type.out, axis + 1, n_out - axis - 1)
        keep = keep.project_out(isl.dim_type.out, 0, axis)
        high = keep.fix_val(isl.dim_type.in_, 0, 0).range().dim_max(0)
        if not high.is_cst():
            return None
        block = int(high.get_pieces()[0][1].get_constant_val().to_python()) + 1
        if block < 2:
            return None
        g = keep.get_dim_name(isl.dim_type.in_, 0)
        x = keep.get_dim_name(isl.dim_type.out, 0)
        want = isl.Map(f"{{ [{g}] -> [{x}] : {block}*{g} <= {x} < {block}*{g} + {block} }}")
        keep, want = isl.align_two(keep, want)
        want = want.intersect_range(keep.range())
        return block if keep.is_equal(want) else None
    except Exception:  # a shape isl cannot answer: no block
        return None


# {{{ scheduling and barriers


def schedule_rest(knl: Any, keys: Sequence[Any], unit_ids: Sequence[frozenset[str]],
                  schedule: Any) -> tuple[Any, int]:
    """*knl* with *schedule* (:class:`~feinsum.matching.assemble.Schedule`) applied to
    every unit of other statements (*keys*: the units' ``("part", k)`` / ``("rest",
    loops)`` keys) that runs on no hardware axis yet, and how many: planned per unit, each
    with the blocks of the nearest transformed einsum (before it, else after) as a hint,
    and applied in one pass. A unit cut into an einsum's blocks that then cannot share its
    launch is planned again without them (a second pass, only then)."""
    from loopy.kernel.data import HardwareConcurrentTag

    def has_hw_axes(unit: Iterable[str]) -> bool:
        return any(isinstance(t, HardwareConcurrentTag) for i in unit
                   for n in knl.id_to_insn[i].within_inames for t in knl.inames[n].tags)

    kinds = [key[0] for key in keys]
    hints: dict[int, Any] = {}
    memo: dict[str, Any] = {}
    plans: dict[int, Any] = {}
    near: dict[int, int] = {}
    for k, (key, unit) in enumerate(zip(keys, unit_ids, strict=True)):
        if key[0] != "rest" or key[1] is None or has_hw_axes(unit):
            continue
        j = next((j for j in [*range(k - 1, -1, -1), *range(k + 1, len(kinds))]
                  if kinds[j] == "part"), None)
        if j is not None and j not in hints:
            hints[j] = chunk_hint(knl, sorted(unit_ids[j]))
        plan = schedule.plan(knl, unit, memo, None if j is None else hints[j])
        if plan is not None:
            plans[k] = plan
            if getattr(plan, "chunked", False) and j is not None:
                near[k] = j
    new = schedule.apply(knl, list(plans.values()))
    apart = [k for k, j in near.items() if not _joins(new, unit_ids, j, k)]
    if apart:  # the einsum's blocks did not let them share its launch: the default
        for k in apart:
            plan = schedule.plan(knl, unit_ids[k], memo)
            if plan is None:
                del plans[k]
            else:
                plans[k] = plan
        new = schedule.apply(knl, list(plans.values()))
    return new, len(plans)


def _joins(knl: Any, unit_ids: Sequence[frozenset[str]], part: int, rest: int) -> bool:
    """Whether unit *rest* can share the launch of the einsum unit *part* next to it."""
    a, b = unit(knl, sorted(unit_ids[part])), unit(knl, sorted(unit_ids[rest]))
    if a is None or b is None:
        return False
    return (compatible(a, b) if part < rest else compatible(b, a)) is None


def _has_local_axes(knl: Any, insn_ids: Iterable[str]) -> bool:
    from loopy.kernel.data import LocalInameTag

    return any(isinstance(t, LocalInameTag) for i in insn_ids
               for n in knl.id_to_insn[i].within_inames for t in knl.inames[n].tags)


def with_barriers(knl: Any, unit_ids: Sequence[frozenset[str]], first: Sequence[int],
                  cuts: Sequence[int], fresh: Callable[[str], str]) -> list[Any]:
    """The statements of *knl*, unit after unit, with a global barrier before each unit of
    *cuts*, a work-group barrier (global memory fence) between units of one launch that
    has several work-items per group, and ``no_sync_with`` telling loopy that units of one
    launch need no global barrier between them (*first*: see :func:`launch_groups`)."""
    from loopy.kernel.instruction import BarrierInstruction

    insns = {insn.id: insn for insn in knl.instructions}
    position = {insn.id: k for k, insn in enumerate(knl.instructions)}
    result: list[Any] = []
    last: str | None = None
    for k, unit in enumerate(unit_ids):
        shared: frozenset[tuple[str, str]] = frozenset()
        inner = first[k] != k
        if k in cuts or (inner and _has_local_axes(knl, unit)):
            bid = fresh("feinsum_gbarrier" if k in cuts else "feinsum_lbarrier")
            before = frozenset().union(*unit_ids[first[k - 1]:k])
            result.append(BarrierInstruction(
                id=bid, depends_on=before | ({last} if last else set()),
                synchronization_kind="global" if k in cuts else "local", mem_kind="global",
                within_inames=frozenset()))
            last = bid
        if inner:
            shared = frozenset((i, "global") for j in range(first[k], k) for i in unit_ids[j])
        for i in sorted(unit, key=position.__getitem__):
            insn = insns[i]
            deps = insn.depends_on | ({last} if last else set())
            result.append(insn.copy(depends_on=deps, no_sync_with=insn.no_sync_with | shared))
    return result


# }}}

# vim: foldmethod=marker

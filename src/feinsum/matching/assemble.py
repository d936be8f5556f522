"""Putting transformed einsums in place of the matched statements of a user's kernel.

:func:`assemble` takes the user's kernel and any number of :class:`Part` s (a match and
the kernel a recipe made of its canonical form) and returns one kernel in which

* every matched statement is replaced by its part's statements, renamed to the user's
  names (inames keep the user's names where those are free; names the recipe derived,
  ``i0_inner``, follow them), with the user's argument list and declarations (an array
  the matcher saw without its length-1 axes gets them back, indexed by 0; an array
  passed with an offset keeps it, also in the recipe's C statements);
* every other statement, temporary and substitution rule of the user's kernel is kept;
  loops and temporaries only the matched statements used go;
* the statements are ordered by their dependencies, as *units*: each part is one, and
  consecutive other statements with the same loops form one (a part's own include the
  elementwise statements fused into it, :mod:`feinsum.matching.fusion`). A global
  barrier separates two units when either runs on hardware axes, so each runs as a
  device kernel with its own grid; *schedule* (if given) gives every unit of other
  statements a parallel schedule of its own (the hook's default one,
  :mod:`feinsum.hook.schedule`): planned per unit, applied to the kernel in one pass.
  With a schedule, units whose work-groups touch only their own entries share a launch
  (:mod:`feinsum.matching.merge`), and the global temporaries that then live inside one
  launch move to local or private memory (:mod:`feinsum.matching.demote`).

The result computes what the user's kernel did (up to the einsums' floating-point
reassociation); a kernel that cannot be assembled so raises
:class:`~feinsum.RecipeFailure` saying why, and the caller keeps the user's kernel.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import RecipeFailure
from feinsum.matching.combined import combined_kernel

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.matching.fusion import Fusion
    from feinsum.matching.model import Match


class Schedule(Protocol):
    """A parallel schedule for the units of other statements: ``plan(kernel, statement_ids,
    memo, hint)`` for each unit (None: leave it; *memo* is shared by the units of one
    kernel; *hint*: the blocks of the nearest transformed einsum, see
    :func:`feinsum.matching.merge.chunk_hint`, or None), then ``apply(kernel, plans)``
    once. A plan whose ``chunked`` is true follows the hint (:func:`~feinsum.matching.
    merge.schedule_rest` plans it again without one where it cannot share the einsum's
    launch). ``local_memory`` and ``private_memory``: the bytes per work-group (per
    work-item) that launch-internal temporaries may take (:mod:`feinsum.matching.demote`);
    ``launch_statements``: the statements (once unrolled) units may have together to share
    a launch (:func:`feinsum.matching.merge.launch_groups`)."""

    local_memory: int
    private_memory: int
    launch_statements: int

    def plan(self, knl: Any, insn_ids: frozenset[str], memo: dict[str, Any],
             hint: Any = None) -> Any | None:
        ...

    def apply(self, knl: Any, plans: Sequence[Any]) -> Any:
        ...


@dataclass(frozen=True)
class Part:
    """One transformed einsum: the match and the recipe's kernel, in canonical names
    (lengths fixed, substitution rules expanded, loop nests pinned), with the reference
    kernel it was made from, the callables the recipe's translation unit added, and why
    loopy cannot schedule it, if it cannot."""

    match: Match
    kernel: lp.LoopKernel
    reference: lp.LoopKernel
    callables: Mapping[str, Any] = field(default_factory=dict)
    #: why loopy cannot schedule the kernel (None: it can)
    problem: str | None = None
    #: the elementwise work fused into the kernel (:mod:`feinsum.matching.fusion`)
    fusion: Fusion | None = None

    @property
    def insn_ids(self) -> tuple[str, ...]:
        """The user's statements the part computes: the match's and those fused in."""
        extra = () if self.fusion is None else self.fusion.statements
        return (*self.match.all_insn_ids, *extra)

    @property
    def names(self) -> dict[str, str]:
        """Canonical name -> the user's name, for every name of the part's kernel."""
        names = dict(self.match.from_canonical)
        if self.fusion is not None:
            names.update(self.fusion.names)
        return names

    @property
    def arrays(self) -> set[str]:
        """The user's arrays the part reads or writes."""
        names = self.names
        used = {names.get(a.name, a.name) for a in self.kernel.args}
        dropped = set() if self.fusion is None else set(self.fusion.dropped)
        return ({a.name for a in self.match.einsum.arrays}
                | {o for row in self.match.outputs for o in row} | used) - dropped


# {{{ helpers


def _names_in_rules(knl: Any) -> set[str]:
    from feinsum.spec.formulas import walk

    names: set[str] = set()
    for rule in knl.substitutions.values():
        found: set[str] = set()
        for e in walk(rule.expression):
            if hasattr(e, "name"):
                found.add(e.name)
            inames = getattr(e, "inames", None)
            if inames:
                found.update(inames)
        names |= found - set(rule.arguments)
    return names


def _insn_names(insns: Iterable[Any]) -> set[str]:
    names: set[str] = set()
    for insn in insns:
        names |= set(insn.within_inames) | set(insn.reduction_inames())
        names |= set(insn.dependency_names()) | set(insn.assignee_var_names())
    return names


def has_hw_axes(knl: Any, insn_ids: Iterable[str] | None = None) -> bool:
    """Whether (the statements *insn_ids* of) *knl* run on hardware-parallel loops."""
    from loopy.kernel.data import HardwareConcurrentTag

    if insn_ids is None:
        inames: Iterable[str] = knl.inames
    else:
        inames = {i for s in insn_ids for i in knl.id_to_insn[s].within_inames}
    return any(isinstance(t, HardwareConcurrentTag)
               for iname in inames for t in knl.inames[iname].tags)


def fresh_name(stem: str, taken: set[str]) -> str:
    """*stem*, or ``stem_0``, ``stem_1``... whichever is not in *taken* (then taken)."""
    name, k = stem, 0
    while name in taken:
        name = f"{stem}_{k}"
        k += 1
    taken.add(name)
    return name


# }}}


# {{{ one part, in the user's names


def _place(part: Part, taken: set[str], ids: set[str]) -> Any:
    """The part's kernel renamed to the user's names (inames and temporaries unique
    against *taken*, statement ids against *ids*; both updated)."""
    from feinsum.matching.normalize import kernel_names, rename_kernel, resolve_names

    tk = part.kernel
    to_user = part.names
    names = kernel_names(tk)
    arg_names = {a.name for a in tk.args}
    exact = {c: u for c, u in to_user.items() if c in arg_names}
    avoid = taken - set(exact.values())
    for c, u in to_user.items():
        if c in names and c not in arg_names and u not in avoid:
            exact[c] = u
    derive = set(tk.all_inames()) | set(tk.temporary_variables)
    mapping = resolve_names(names, exact, avoid, derive, to_user)
    id_map = {insn.id: fresh_name(insn.id, ids) for insn in tk.instructions}
    tk = rename_kernel(tk, mapping, id_map)
    taken |= set(tk.all_inames()) | set(tk.temporary_variables)
    return _unsqueeze(tk, part.match.squeezed)


def _unsqueeze(tk: Any, squeezed: Mapping[str, tuple[int, ...]]) -> Any:
    """Accesses to arrays the matcher saw without their length-1 axes get them back."""
    if not squeezed:
        return tk
    from loopy.kernel.instruction import CInstruction
    from loopy.symbolic import IdentityMapper

    class Unsqueeze(IdentityMapper):  # type: ignore[misc]
        def map_subscript(self, e: Any, *args: Any) -> Any:
            e = super().map_subscript(e, *args)
            if isinstance(e.aggregate, prim.Variable) and e.aggregate.name in squeezed:
                idx = list(e.index_tuple)
                for k in squeezed[e.aggregate.name]:
                    idx.insert(k, 0)
                return prim.Subscript(e.aggregate, tuple(idx))
            return e

    mapper = Unsqueeze()
    insns = []
    for insn in tk.instructions:
        if isinstance(insn, CInstruction):
            insn = insn.copy(assignees=tuple(mapper(a) for a in insn.assignees))
        else:
            insn = insn.with_transformed_expressions(mapper)
        insns.append(insn)
    return tk.copy(instructions=insns)


# }}}


# {{{ arguments


def _arguments(base: Any, parts: Sequence[Part], placed: Sequence[Any], rest_names: set[str]
               ) -> tuple[list[Any], dict[str, str]]:
    """The final argument list (the user's, in order, then what recipes added), and the
    offset variable of every array argument a part's C statements must offset by hand."""
    import loopy as lp
    from loopy.types import NumpyType

    chosen: dict[str, Any] = {}
    changed_by: dict[str, str] = {}
    added: dict[str, Any] = {}
    user_args = {a.name: a for a in base.args}
    for part, tk in zip(parts, placed, strict=True):
        to_user = part.names
        fixed = part.match.canonical_lengths
        ref_args = {to_user.get(a.name, a.name): a for a in part.reference.args
                    if a.name not in fixed}
        for ta in tk.args:
            if ta.name in base.temporary_variables:
                continue
            ua = user_args.get(ta.name)
            if ua is None:
                if ta.name in added and added[ta.name] != ta:
                    raise RecipeFailure(f"two transformed einsums add different arguments "
                                        f"named {ta.name!r}")
                added[ta.name] = ta
                continue
            if isinstance(ua, lp.ValueArg):
                if not isinstance(ua.dtype, NumpyType):
                    chosen.setdefault(ua.name, ua.copy(dtype=ta.dtype))
                continue
            ra = ref_args.get(ua.name)
            if ra is not None and same_layout(ra, ta, to_user, fixed):
                if not isinstance(ua.dtype, NumpyType):
                    chosen.setdefault(ua.name, ua.copy(dtype=ta.dtype))
                continue
            # the recipe declared this array its own way
            if ua.name in rest_names or ua.name in changed_by:
                raise RecipeFailure(
                    f"the recipe changes the layout of argument {ua.name!r}, which other "
                    f"statements of kernel {base.name!r} also use")
            if ua.name in part.match.squeezed or getattr(ua, "offset", 0) not in (0, None):
                raise RecipeFailure(
                    f"the recipe changes the layout of argument {ua.name!r}, which the kernel "
                    "declares with length-1 axes or an offset")
            changed_by[ua.name] = part.match.kernel_name
            chosen[ua.name] = ta
    args = [chosen.get(a.name, a) for a in base.args]
    offsets = _c_offsets(args, placed)
    names = {a.name for a in args}
    for name, off in offsets.items():
        k = next(i for i, a in enumerate(args) if a.name == name)
        args[k] = args[k].copy(offset=off)
        if off not in names:
            args.append(lp.ValueArg(off, dtype=np.int32))
            names.add(off)
    args.extend(a for n, a in added.items() if n not in names)
    return args, offsets


def _c_offsets(args: Sequence[Any], placed: Sequence[Any]) -> dict[str, str]:
    """Array arguments passed with an offset that C statements of the parts address
    directly: name -> the offset variable to add."""
    from loopy.kernel.instruction import CInstruction
    from loopy.typing import auto

    used: set[str] = set()
    for tk in placed:
        for insn in tk.instructions:
            if isinstance(insn, CInstruction):
                used |= set(re.findall(r"\b[A-Za-z_]\w*\b", insn.code))
    taken = {a.name for a in args}
    result: dict[str, str] = {}
    for a in args:
        off = getattr(a, "offset", 0)
        if a.name not in used or off in (0, None):
            continue
        result[a.name] = off if isinstance(off, str) else fresh_name(f"{a.name}_offset", taken)
        if off is not auto and not isinstance(off, str):
            raise RecipeFailure(f"argument {a.name!r} has offset {off!r}: give it as "
                                "lp.auto or a length parameter")
    return result


def _offset_c_code(tk: Any, offsets: Mapping[str, str]) -> Any:
    from loopy.kernel.instruction import CInstruction

    if not offsets:
        return tk
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, offsets)) + r")\b")
    insns = []
    for insn in tk.instructions:
        if isinstance(insn, CInstruction) and pattern.search(insn.code):
            code = pattern.sub(lambda m: f"({m.group(1)} + {offsets[m.group(1)]})", insn.code)
            insn = insn.copy(code=code, read_variables=frozenset(insn.read_variables)
                             | {offsets[n] for n in offsets if n in insn.code})
        insns.append(insn)
    return tk.copy(instructions=insns)


# }}}


def same_layout(ref_arg: Any, t_arg: Any, to_user: Mapping[str, str],
                 fixed: Mapping[str, int]) -> bool:
    """Whether the recipe left an argument's shape and strides as the reference had them."""
    import loopy as lp
    from pymbolic import var
    from pymbolic.mapper.substitutor import SubstitutionMapper, make_subst_func

    if isinstance(ref_arg, lp.ValueArg) or isinstance(t_arg, lp.ValueArg):
        return isinstance(ref_arg, lp.ValueArg) and isinstance(t_arg, lp.ValueArg)
    subst: dict[str, Any] = dict(fixed)
    subst.update({k: var(v) for k, v in to_user.items() if k not in fixed})
    smap = SubstitutionMapper(make_subst_func(subst))

    def norm(x: Any) -> Any:
        return None if x is None else tuple(smap(s) if not isinstance(s, int) else s for s in x)

    try:
        ref_shape = norm(ref_arg.shape)
        ref_strides = norm(tuple(getattr(t, "stride", None) for t in ref_arg.dim_tags or ()))
    except Exception:  # odd shapes: treat as changed
        return False
    t_strides = tuple(getattr(t, "stride", None) for t in t_arg.dim_tags or ())
    return _same_values(ref_shape, t_arg.shape) and _same_values(ref_strides, t_strides)


def _same_values(a: Any, b: Any) -> bool:
    """Whether two tuples of shape or stride expressions are equal as functions of their
    variables (``1*n*3`` and ``3*n``): compared at a few integer points."""
    from pymbolic import evaluate
    from pymbolic.mapper.dependency import DependencyMapper

    if a is None or b is None or len(a) != len(b):
        return a is None and b is None
    deps: Any = DependencyMapper(composite_leaves=False)
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        if x is None or y is None:
            return False
        names = sorted({v.name for e in (x, y) if not isinstance(e, (int, float))
                        for v in deps(e)})
        for point in (7, 31, 1000):
            env = {n: point + k for k, n in enumerate(names)}
            try:
                if evaluate(x, env) != evaluate(y, env):
                    return False
            except Exception:  # not arithmetic: unequal
                return False
    return True


# }}}


# {{{ order: units and barriers


def _order(user: Any, parts: Sequence[Part], rest: Sequence[Any]) -> list[Any]:
    """Statement ids of the rest and part indices, in an order that respects every
    dependency (ties: the user's statement order)."""
    position = {insn.id: k for k, insn in enumerate(user.instructions)}
    owner: dict[str, int] = {}
    for k, p in enumerate(parts):
        for i in p.insn_ids:
            owner[i] = k

    def node(dep: str) -> Any:
        return owner.get(dep, dep)

    deps: dict[Any, set[Any]] = {}
    for insn in rest:
        deps[insn.id] = {node(d) for d in insn.depends_on if d in position}
    for k, p in enumerate(parts):
        ids = set(p.insn_ids)
        deps[k] = {node(d) for i in ids for d in user.id_to_insn[i].depends_on
                   if d in position and d not in ids}
    for n in deps:
        deps[n].discard(n)
    rank = {n: (position[n] if isinstance(n, str) else
                min(position[i] for i in parts[n].insn_ids)) for n in deps}
    users: dict[Any, set[Any]] = {n: set() for n in deps}
    for n, ds in deps.items():
        for d in ds:
            users[d].add(n)
    waiting = {n: len(ds) for n, ds in deps.items()}
    ready = [(rank[n], str(n), n) for n, c in waiting.items() if c == 0]
    heapq.heapify(ready)
    order: list[Any] = []
    while ready:
        _, _, n = heapq.heappop(ready)
        order.append(n)
        for u in users[n]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (rank[u], str(u), u))
    if len(order) != len(deps):
        raise RecipeFailure(f"kernel {user.name!r}: the statements' dependencies form a cycle "
                            "once the einsums are replaced")
    return order


def _units(order: Sequence[Any], user: Any, by_scheduling: bool) -> list[tuple[Any, list[Any]]]:
    """Consecutive nodes grouped into units: (key, nodes); a part is a unit of its own."""
    units: list[tuple[Any, list[Any]]] = []
    for n in order:
        if isinstance(n, int):
            units.append((("part", n), [n]))
            continue
        key = ("rest", frozenset(user.id_to_insn[n].within_inames) if by_scheduling else None)
        if units and units[-1][0] == key:
            units[-1][1].append(n)
        else:
            units.append((key, [n]))
    return units


# }}}


@dataclass(frozen=True)
class Assembled:
    """The assembled kernel, and how many units of other statements *schedule* was
    applied to."""

    kernel: lp.LoopKernel
    scheduled: int = 0
    #: per unit, the first unit of its launch (:func:`feinsum.matching.merge.launch_groups`)
    launches: tuple[int, ...] = ()


def assemble(user: lp.LoopKernel, parts: Sequence[Part], *,
             schedule: Schedule | None = None) -> Assembled:
    """The user's kernel with every part in place of its matched statements (see the
    module docstring)."""
    import loopy as lp

    from feinsum.matching.normalize import kernel_names

    matched_ids = {i for p in parts for i in p.insn_ids}
    if len(matched_ids) != sum(len(p.insn_ids) for p in parts):
        raise RecipeFailure("two transformed einsums claim the same statement")
    matched = [user.id_to_insn[i] for i in matched_ids]
    rest = [insn for insn in user.instructions if insn.id not in matched_ids]

    # {{{ the rest of the user's kernel

    used = _insn_names(rest) | _names_in_rules(user)
    # the einsums' own inputs and outputs stay, whoever else reads them
    io = {a for p in parts for a in p.arrays}
    mine = _insn_names(matched)
    drop_inames = {i for i in mine & set(user.all_inames()) if i not in used}
    drop_temps = {t for t in mine & set(user.temporary_variables) if t not in used | io}
    base = user.copy(
        instructions=rest,
        temporary_variables={k: v for k, v in user.temporary_variables.items()
                             if k not in drop_temps})
    if drop_inames:
        base = lp.remove_unused_inames(base, inames=sorted(drop_inames))

    # }}}

    taken = kernel_names(base)
    ids = set(base.id_to_insn)
    placed = [_place(p, taken, ids) for p in parts]
    args, offsets = _arguments(base, parts, placed, used)
    placed = [_offset_c_code(tk, offsets) for tk in placed]

    # {{{ statements, in units

    part_ids = [frozenset(insn.id for insn in tk.instructions) for tk in placed]
    owner = {i: k for k, p in enumerate(parts) for i in p.insn_ids}

    def redirect(deps: Iterable[str]) -> frozenset[str]:
        out: set[str] = set()
        for d in deps:
            out |= part_ids[owner[d]] if d in owner else {d}
        return frozenset(out)

    order = _order(user, parts, rest)
    units = _units(order, user, schedule is not None)
    new: dict[str, Any] = {}
    unit_ids: list[frozenset[str]] = []
    for _, nodes in units:
        members: set[str] = set()
        for n in nodes:
            if isinstance(n, int):
                ext = {d for i in parts[n].insn_ids
                       for d in user.id_to_insn[i].depends_on} - set(parts[n].insn_ids)
                extra = redirect(d for d in ext if d in user.id_to_insn)
                for insn in placed[n].instructions:
                    new[insn.id] = insn.copy(depends_on=insn.depends_on | extra)
                members |= part_ids[n]
            else:
                insn = user.id_to_insn[n]
                new[n] = insn.copy(depends_on=redirect(insn.depends_on))
                members.add(n)
        unit_ids.append(frozenset(members))

    # }}}

    knl = combined_kernel(base, placed, args, list(new.values()))
    from feinsum.matching.merge import launch_groups, schedule_rest, with_barriers

    scheduled = 0
    if schedule is not None:
        knl, scheduled = schedule_rest(knl, [key for key, _ in units], unit_ids, schedule)
    hw = [has_hw_axes(knl, unit) for unit in unit_ids]
    first = (launch_groups(knl, unit_ids, hw, schedule.launch_statements)
             if schedule is not None
             else list(range(len(unit_ids))))
    cuts = [k for k in range(1, len(unit_ids)) if (hw[k] or hw[k - 1]) and first[k] == k]
    _check_private(knl, unit_ids, cuts)
    result = with_barriers(knl, unit_ids, first, cuts, lambda stem: fresh_name(stem, ids))
    if schedule is not None:
        from feinsum.matching.demote import demote, privatize

        knl, _ = privatize(knl.copy(instructions=result), unit_ids, first,
                           schedule.private_memory)
        knl, _ = demote(knl, unit_ids, first, schedule.local_memory,
                        schedule.private_memory)
        result = list(knl.instructions)
    return Assembled(knl.copy(instructions=result), scheduled, tuple(first))


def _check_private(knl: Any, unit_ids: Sequence[frozenset[str]], cuts: Sequence[int]) -> None:
    """A private or local temporary must not be used on both sides of a global barrier
    (the barrier ends its life)."""
    from loopy.kernel.data import AddressSpace

    where: dict[str, set[int]] = {}
    for k, unit in enumerate(unit_ids):
        for i in unit:
            insn = knl.id_to_insn[i]
            for v in set(insn.dependency_names()) | set(insn.assignee_var_names()):
                tv = knl.temporary_variables.get(v)
                if tv is not None and tv.address_space != AddressSpace.GLOBAL:
                    where.setdefault(v, set()).add(k)
    for name, units in sorted(where.items()):
        if any(min(units) < c <= max(units) for c in cuts):
            raise RecipeFailure(
                f"kernel {knl.name!r}: the private temporary {name!r} is used on both sides "
                "of a transformed einsum (a global barrier would end its life between them); "
                "make it a global temporary")


# vim: foldmethod=marker

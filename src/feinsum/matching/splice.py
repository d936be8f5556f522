"""Putting a transformed einsum in place of the matched statements of a larger kernel.

Used by :func:`feinsum.apply_transform` when the kernel has statements besides the
matched ones. The user's kernel keeps every other statement, temporary, substitution
rule and iname; the matched statements (and the loops and accumulators only they
used) are removed; the transformed einsum's domains, statements, temporaries and
inames are added (inames keep the user's names where those are free, otherwise get
fresh ones). Dependencies on the matched statements are redirected to the new ones.
If the recipe parallelised the einsum over hardware axes, global barriers separate it
from the other statements, so that each runs as its own device kernel with its own
grid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from feinsum.errors import RecipeFailure

if TYPE_CHECKING:
    from feinsum.matching.match import Match


def _names_in_rules(knl: Any) -> set[str]:
    from feinsum.formulas import walk

    names: set[str] = set()
    for rule in knl.substitutions.values():
        for e in walk(rule.expression):
            if hasattr(e, "name"):
                names.add(e.name)
            inames = getattr(e, "inames", None)
            if inames:
                names.update(inames)
    return names


def _insn_names(insns: Iterable[Any]) -> set[str]:
    names: set[str] = set()
    for insn in insns:
        names |= set(insn.within_inames) | set(insn.reduction_inames())
        names |= set(insn.dependency_names()) | set(insn.assignee_var_names())
    return names


def _has_hw_axes(knl: Any) -> bool:
    from loopy.kernel.data import HardwareConcurrentTag

    return any(isinstance(t, HardwareConcurrentTag)
               for iname in knl.inames.values() for t in iname.tags)


def _fresh(stem: str, taken: set[str]) -> str:
    if stem not in taken:
        taken.add(stem)
        return stem
    k = 0
    while f"{stem}_{k}" in taken:
        k += 1
    taken.add(f"{stem}_{k}")
    return f"{stem}_{k}"


def splice(user: Any, tk: Any, ref: Any, match: Match, rest: list[Any]) -> Any:
    """The user's kernel with the matched statements replaced by transformed kernel *tk*
    (canonical names, substitution rules expanded)."""
    import islpy as isl
    import loopy as lp
    from loopy.kernel.instruction import BarrierInstruction

    from feinsum.matching.normalize import kernel_names, rename_kernel, resolve_names
    from feinsum.matching.replay import _same_layout

    matched_ids = set(match.all_insn_ids)
    matched = [user.id_to_insn[i] for i in match.all_insn_ids]

    # {{{ the rest of the user's kernel

    used = _insn_names(rest) | _names_in_rules(user)
    mine = _insn_names(matched)
    drop_inames = {i for i in mine & set(user.all_inames()) if i not in used}
    drop_temps = {t for t in mine & set(user.temporary_variables) if t not in used}
    base = user.copy(
        instructions=rest,
        temporary_variables={k: v for k, v in user.temporary_variables.items()
                             if k not in drop_temps},
    )
    if drop_inames:
        base = lp.remove_unused_inames(base, inames=sorted(drop_inames))

    # }}}

    # {{{ names for the transformed einsum

    to_user = dict(match.from_canonical)
    names = kernel_names(tk)
    arg_names = {a.name for a in tk.args}
    base_names = kernel_names(base)
    exact = {c: u for c, u in to_user.items() if c in arg_names}
    taken = base_names - set(exact.values())
    for c, u in to_user.items():
        if c in names and c not in arg_names and u not in taken:
            exact[c] = u
    derive = set(tk.all_inames()) | set(tk.temporary_variables)
    mapping = resolve_names(names, exact, taken, derive, to_user)
    ids: set[str] = set(base.id_to_insn)
    id_map = {insn.id: _fresh(insn.id, ids) for insn in tk.instructions}
    tk = rename_kernel(tk, mapping, id_map)

    # }}}

    # {{{ arguments: the user's, plus any the recipe added

    ref_to_user = {c: u for c, u in to_user.items()}
    fixed = match.canonical_lengths
    ref_args = {ref_to_user.get(a.name, a.name): a for a in ref.args if a.name not in fixed}
    t_args = {a.name: a for a in tk.args if a.name not in base.temporary_variables}
    args = []
    from loopy.types import NumpyType

    for ua in base.args:
        ta = t_args.pop(ua.name, None)
        if ta is None or isinstance(ua, lp.ValueArg):
            if ta is not None and not isinstance(ua.dtype, NumpyType):
                ua = ua.copy(dtype=ta.dtype)
            args.append(ua)
            continue
        ra = ref_args.get(ua.name)
        if ra is not None and _same_layout(ra, ta, ref_to_user, fixed):
            args.append(ua if isinstance(ua.dtype, NumpyType) else ua.copy(dtype=ta.dtype))
        elif ua.name in used:
            raise RecipeFailure(
                f"the recipe changes the layout of argument {ua.name!r}, which other statements "
                f"of kernel {user.name!r} also use: apply it to a kernel holding only the einsum"
            )
        else:
            args.append(ta)
    args.extend(t_args.values())

    # }}}

    # {{{ statements and dependencies

    external = set().union(*(insn.depends_on for insn in matched)) - matched_ids
    t_ids = {insn.id for insn in tk.instructions}
    new_insns: list[Any] = []
    barriers = _has_hw_axes(tk)
    if barriers:
        # everything that does not depend on the einsum runs before it
        depends_on_einsum: set[str] = set()
        changed = True
        while changed:
            changed = False
            for insn in rest:
                if insn.id not in depends_on_einsum and (
                    insn.depends_on & (matched_ids | depends_on_einsum)
                ):
                    depends_on_einsum.add(insn.id)
                    changed = True
        before = _fresh("feinsum_gbarrier_before", ids)
        after = _fresh("feinsum_gbarrier_after", ids)
        pre = {i.id for i in rest if i.id not in depends_on_einsum} | external
        new_insns.append(BarrierInstruction(
            id=before, depends_on=frozenset(pre), synchronization_kind="global",
            mem_kind="global", within_inames=frozenset()))
        new_insns.append(BarrierInstruction(
            id=after, depends_on=frozenset(t_ids), synchronization_kind="global",
            mem_kind="global", within_inames=frozenset()))
        t_extra, redirect = frozenset([before]), frozenset([after])
    else:
        t_extra, redirect = frozenset(external), frozenset(t_ids)
    for insn in tk.instructions:
        new_insns.append(insn.copy(depends_on=insn.depends_on | t_extra))
    for insn in rest:
        if insn.depends_on & matched_ids:
            insn = insn.copy(depends_on=(insn.depends_on - matched_ids) | redirect)
        new_insns.append(insn)

    # }}}

    assumptions = base.assumptions
    if not tk.assumptions.is_universe():
        a, b = isl.align_two(base.assumptions, tk.assumptions)
        assumptions = (a & b).params()
    temps = dict(base.temporary_variables)
    temps.update(tk.temporary_variables)
    inames = dict(base.inames)
    inames.update(tk.inames)
    opts = list(dict.fromkeys([*(base.options.build_options or []),
                               *(tk.options.build_options or [])]))
    return base.copy(
        domains=[*base.domains, *tk.domains],
        instructions=new_insns,
        args=args,
        temporary_variables=temps,
        inames=inames,
        assumptions=assumptions,
        loop_priority=base.loop_priority | tk.loop_priority,
        iname_slab_increments=type(base.iname_slab_increments)(
            {**dict(base.iname_slab_increments), **dict(tk.iname_slab_increments)}),
        options=base.options.copy(build_options=opts),
        preambles=tuple(dict.fromkeys([*base.preambles, *tk.preambles])),
        preamble_generators=tuple(dict.fromkeys([*base.preamble_generators,
                                                 *tk.preamble_generators])),
        silenced_warnings=frozenset(base.silenced_warnings) | frozenset(tk.silenced_warnings),
    )


# vim: foldmethod=marker

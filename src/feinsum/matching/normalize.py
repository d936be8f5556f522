"""The normalised form of a match, and renaming kernels between canonical and user names.

The normalised form of a :class:`~feinsum.matching.Match` is exactly what
:func:`feinsum.generate_loopy` makes of the canonical specification
(``match.canonical``): kernel ``einsum``, inames ``i0, i1, ...``, arrays
``a0, ...``, one substitution rule ``op{c}_r{r}`` per operand, statements ``row{r}``
writing ``out{r}`` (and ``out{r}_index``). Recipes only ever see that form. Building
the transformed kernel from it and renaming at the end is what makes replay give the
same code (modulo names) whatever the user called things and in whatever order the
statements came.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.matching.match import Match

_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9]*|_|[0-9]+")


def normalized_t_unit(match: Match) -> lp.TranslationUnit:
    """``feinsum.generate_loopy(match.canonical)``: what a recipe receives."""
    from feinsum.lowering.kernel import generate_loopy

    return generate_loopy(match.canonical)


def kernel_names(knl: lp.LoopKernel) -> set[str]:
    """Every name in the kernel's variable namespace (args, temporaries, inames, rules)."""
    return (set(knl.arg_dict) | set(knl.temporary_variables) | set(knl.all_inames())
            | set(knl.substitutions))


def derived_name(name: str, mapping: Mapping[str, str]) -> str:
    """*name* with every ``_``-separated token that *mapping* renames replaced
    (``i0_inner`` -> ``e_inner``, ``a1_fetch`` -> ``D_fetch``)."""
    if name in mapping or "_" not in name:
        return mapping.get(name, name)
    parts = name.split("_")
    return "_".join(mapping.get(p, p) for p in parts)


def resolve_names(names: Iterable[str], exact: Mapping[str, str], reserved: Iterable[str],
                  derive: Iterable[str] = (), tokens: Mapping[str, str] | None = None
                  ) -> dict[str, str]:
    """A renaming of *names* (a kernel's names): those in *exact* get exactly that name, those
    in *derive* a name derived token by token from *exact*; the others keep their name. Any
    derived or kept name that clashes with another final name or with *reserved* is made
    unique (``name_0``, ``name_1``...). *tokens* (default: *exact*) renames the tokens of
    derived names. Deterministic."""
    tokens = exact if tokens is None else tokens
    names = sorted(set(names))
    reserved = set(reserved)
    result: dict[str, str] = {}
    final: set[str] = set()
    for n in names:
        if n in exact:
            target = exact[n]
            if target in final:
                raise ValueError(f"two names map to {target!r}")
            result[n] = target
            final.add(target)
    taken = final | reserved
    derive = set(derive)
    for n in names:
        if n in exact:
            continue
        want = derived_name(n, tokens) if n in derive else n
        candidates = [want, n] if want != n else [n]
        chosen = next((c for c in candidates if c not in taken), None)
        if chosen is None:
            k = 0
            while f"{want}_{k}" in taken:
                k += 1
            chosen = f"{want}_{k}"
        result[n] = chosen
        taken.add(chosen)
    return {k: v for k, v in result.items() if k != v}


def rename_kernel(knl: lp.LoopKernel, mapping: Mapping[str, str],
                  insn_ids: Mapping[str, str] | None = None) -> lp.LoopKernel:
    """Rename arguments, temporaries and inames of *knl* all at once (cycles allowed), and
    optionally statement ids. The kernel must have no substitution rules left (expand
    them first: code generation expands them anyway)."""
    import islpy as isl
    from loopy.symbolic import SubstitutionMapper
    from pymbolic import var
    from pymbolic.mapper.substitutor import make_subst_func

    if knl.substitutions:
        raise ValueError("rename_kernel needs a kernel without substitution rules")
    mapping = {k: v for k, v in mapping.items() if k != v}
    insn_ids = {k: v for k, v in (insn_ids or {}).items() if k != v}
    if not mapping and not insn_ids:
        return knl
    smap = SubstitutionMapper(make_subst_func({k: var(v) for k, v in mapping.items()}))

    def ren(name: str) -> str:
        return mapping.get(name, name)

    def ren_id(i: str) -> str:
        return insn_ids.get(i, i)

    from loopy.kernel.array import ArrayBase
    from loopy.kernel.instruction import CInstruction

    args = []
    for a in knl.args:
        if isinstance(a, ArrayBase):
            a = a.map_exprs(smap)
        args.append(a.copy(name=ren(a.name)))
    temps = {}
    for tv in knl.temporary_variables.values():
        tv = tv.map_exprs(smap)
        temps[ren(tv.name)] = tv.copy(name=ren(tv.name))

    def ren_set(s: Any) -> Any:
        for dt in (isl.dim_type.param, isl.dim_type.set):
            for k in range(s.dim(dt)):
                n = s.get_dim_name(dt, k)
                if n in mapping:
                    s = s.set_dim_name(dt, k, mapping[n])
        return s

    domains = [ren_set(d) for d in knl.domains]
    assumptions = ren_set(knl.assumptions)
    insns = []
    for insn in knl.instructions:
        insn = insn.with_transformed_expressions(smap)
        kw: dict[str, Any] = {"within_inames": frozenset(ren(i) for i in insn.within_inames)}
        if insn_ids:
            kw["id"] = ren_id(insn.id)
            kw["depends_on"] = frozenset(ren_id(d) for d in insn.depends_on)
            kw["no_sync_with"] = frozenset((ren_id(i), s) for i, s in insn.no_sync_with)
        if isinstance(insn, CInstruction):  # its code names variables too
            kw["code"] = re.sub(r"\b[A-Za-z_]\w*\b", lambda m: ren(m.group(0)), insn.code)
            kw["read_variables"] = frozenset(ren(v) for v in insn.read_variables)
        insns.append(insn.copy(**kw))
    inames = {ren(n): iname.copy(name=ren(n)) for n, iname in knl.inames.items()}
    priority = frozenset(tuple(ren(i) for i in p) for p in knl.loop_priority)
    slabs = {ren(k): v for k, v in knl.iname_slab_increments.items()}
    return knl.copy(
        args=args,
        temporary_variables=temps,
        domains=domains,
        assumptions=assumptions,
        instructions=insns,
        inames=inames,
        loop_priority=priority,
        iname_slab_increments=type(knl.iname_slab_increments)(slabs)
        if not isinstance(knl.iname_slab_increments, dict) else slabs,
    )


def canonical_to_user(match: Match) -> dict[str, str]:
    """Canonical name -> the kernel's name, for indices, arrays, outputs and the length
    symbols the kernel leaves symbolic."""
    return dict(match.from_canonical)


# vim: foldmethod=marker

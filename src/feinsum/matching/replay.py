"""Replay: apply a recipe written for the canonical specification to the user's kernel.

The contract every recipe relies on (``docs/compiler-guide.rst``):

1. the matched statements are *normalised*: the recipe receives exactly
   ``feinsum.generate_loopy(match.canonical)`` and the canonical specification, never
   the user's kernel;
2. the recipe returns a transformed translation unit;
3. the names are mapped back: inames, arrays, outputs and length parameters take the
   kernel's names again (names the recipe derived, such as ``i0_inner``, follow:
   ``e_inner``), the kernel takes its own name, and its argument list is the user's
   (order and declarations), so callers still pass the same arrays; long lengths the
   kernel had fixed (which the canonical form makes symbolic) are fixed again;
4. the rest of the program is untouched: other kernels of the translation unit as
   they were, and other statements of the same kernel kept, with their dependencies on
   the matched statements redirected to the transformed ones (and global barriers
   around them when the recipe parallelised the einsum over work-groups).

Because the transformed einsum is always built from the canonical form, replaying a
configuration on two kernels that differ only in names and statement order gives the
same generated code up to those names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from feinsum.errors import EinsumMatchError, FeinsumError, RecipeFailure

if TYPE_CHECKING:
    import loopy as lp

    from feinsum.matching.assemble import Part
    from feinsum.matching.match import Match


def _call_recipe(recipe: Any, t_unit: lp.TranslationUnit, params: Mapping[str, Any],
                 e: Any, device: Any) -> lp.TranslationUnit:
    import loopy as lp

    if isinstance(recipe, str):
        from feinsum.recipes import get_recipe

        recipe = get_recipe(recipe)
    from feinsum.recipes import Recipe

    if isinstance(recipe, Recipe):
        return recipe.apply(t_unit, params, e, device)
    apply = getattr(recipe, "apply", None)
    if not callable(apply):
        raise FeinsumError(f"{recipe!r} is not a recipe: it has no apply(t_unit, params, e, "
                           "device)")
    from feinsum.recipes import as_device_info

    name = getattr(recipe, "name", type(recipe).__name__)
    try:
        result = apply(t_unit, dict(params), e, as_device_info(device))
    except FeinsumError:
        raise
    except Exception as exc:
        raise RecipeFailure(f"recipe {name!r} raised in apply() with {dict(params)!r}: "
                            f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(result, lp.TranslationUnit):
        raise RecipeFailure(f"recipe {name!r}: apply() returned {type(result).__name__}, not a "
                            "loopy.TranslationUnit")
    return result


def _check_current(t_unit: Any, match: Match) -> Any:
    """The user's kernel, after checking that *match* still describes it."""
    from loopy.match import Id, Or

    from feinsum.matching.match import _get_kernel, match_einsum

    knl = _get_kernel(t_unit, match.kernel_name)
    ids = set(knl.id_to_insn)
    missing = [i for i in match.all_insn_ids if i not in ids]
    if missing:
        raise EinsumMatchError(
            f"kernel {match.kernel_name!r} has no statement {missing[0]!r}: the match is for "
            "another version of the kernel"
        )
    dtypes = {a.name: a.dtype for a in match.einsum.arrays}
    again = match_einsum(t_unit, within=Or(tuple(Id(i) for i in match.all_insn_ids)),
                         kernel_name=match.kernel_name, dtypes=dtypes)
    if again.einsum != match.einsum or again.outputs != match.outputs:
        raise EinsumMatchError(
            f"kernel {match.kernel_name!r}: statements {', '.join(match.all_insn_ids)} now "
            f"compute {again.einsum}, not {match.einsum}: the match is stale"
        )
    return knl


def transformed_einsum(match: Match, recipe: Any, params: Mapping[str, Any], device: Any
                       ) -> Part:
    """The recipe's kernel for the match's canonical einsum (lengths fixed, substitution
    rules expanded, loop nests pinned) as a :class:`~feinsum.matching.assemble.Part`."""
    import loopy as lp

    from feinsum.lowering.kernel import KERNEL_NAME
    from feinsum.matching.assemble import Part
    from feinsum.matching.normalize import normalized_t_unit

    ref = normalized_t_unit(match)
    result = _call_recipe(recipe, ref, params, match.canonical, device)
    name = getattr(recipe, "name", recipe)
    try:
        tk = result[KERNEL_NAME]
    except (KeyError, LookupError) as exc:
        raise RecipeFailure(f"recipe {name!r} returned no kernel {KERNEL_NAME!r}") from exc
    try:
        if match.canonical_lengths:
            tk = lp.fix_parameters(_fixed_c_code(tk, match.canonical_lengths),
                                   **match.canonical_lengths)  # type: ignore[arg-type]
        tk = lp.expand_subst(tk)
    except Exception as exc:
        raise RecipeFailure(f"the kernel recipe {name!r} made cannot take the kernel's fixed "
                            f"lengths {match.canonical_lengths}: {type(exc).__name__}: "
                            f"{exc}") from exc
    tk, problem = pin_loop_nests(result.with_kernel(tk) if tk.name in result.callables_table
                                 else result, tk)
    extra = {k: v for k, v in result.callables_table.items() if k != KERNEL_NAME}
    return Part(match, tk, ref[KERNEL_NAME], cast(Any, extra), problem)


def _fixed_c_code(tk: Any, values: Mapping[str, int]) -> Any:
    """*tk* with the lengths *values* written into the code of its C statements (a vector
    load's bound), which ``lp.fix_parameters`` leaves as it is: else the code names a
    length the kernel no longer declares, and the device compiler refuses it."""
    import re

    from loopy.kernel.instruction import CInstruction

    pattern = re.compile(r"\b(" + "|".join(map(re.escape, values)) + r")\b")
    insns = []
    for insn in tk.instructions:
        if isinstance(insn, CInstruction) and pattern.search(insn.code):
            insn = insn.copy(
                code=pattern.sub(lambda m: f"({int(values[m.group(1)])})", insn.code),
                read_variables=frozenset(insn.read_variables) - set(values))
        insns.append(insn)
    return tk.copy(instructions=insns)


def loop_nests(t_unit: lp.TranslationUnit, name: str) -> set[tuple[str, ...]]:
    """The loop nests (outermost first) of kernel *name* in loopy's linearization."""
    import loopy as lp
    from loopy.schedule import EnterLoop, LeaveLoop, RunInstruction

    with lp.CacheMode(False):  # feinsum's kernels do not hit loopy's caches across processes
        t = lp.linearize(lp.preprocess_program(lp.infer_unknown_types(t_unit)))
    nests: set[tuple[str, ...]] = set()
    stack: list[str] = []
    for item in t[name].linearization or ():
        if isinstance(item, EnterLoop):
            stack.append(item.iname)
        elif isinstance(item, LeaveLoop):
            stack.pop()
        elif isinstance(item, RunInstruction) and len(stack) > 1:
            nests.add(tuple(stack))
    return nests


def pin_loop_nests(t_unit: lp.TranslationUnit, tk: lp.LoopKernel
                   ) -> tuple[lp.LoopKernel, str | None]:
    """*tk* with loop priorities that fix the loop nesting loopy chooses for it now, and
    None; or *tk* unchanged and why loopy cannot schedule it.

    loopy breaks ties between loops by their names; the transformed einsum is scheduled
    here, in canonical names, and the nests are recorded as priorities, so that the
    kernel renamed to the user's names nests its loops in the same order."""
    try:
        nests = loop_nests(t_unit, tk.name)
    except Exception as exc:  # any loopy failure: the kernel cannot be scheduled as it is
        text = str(exc).splitlines()[0] if str(exc) else ""
        return tk, f"{type(exc).__name__}: {text}"[:300]
    inames = set(tk.all_inames())
    pins = {tuple(i for i in nest if i in inames) for nest in nests}
    pins = {p for p in pins if len(p) > 1}
    return tk.copy(loop_priority=frozenset(tk.loop_priority | pins)), None


def merge_callables(t_unit: Any, knl: Any, parts: Any) -> Any:
    """*t_unit* with kernel *knl* replaced and the callables the parts' recipes added."""
    t_unit = t_unit.with_kernel(knl)
    extra = {k: v for p in parts for k, v in p.callables.items()
             if k not in t_unit.callables_table}
    if extra:
        table = dict(t_unit.callables_table)
        table.update(extra)
        t_unit = t_unit.copy(callables_table=type(t_unit.callables_table)(table))
    return t_unit


def apply_transform(t_unit: lp.TranslationUnit, match: Match, recipe: Any,
                    params: Mapping[str, Any], *, device: Any = None) -> lp.TranslationUnit:
    """Apply *recipe* (a :class:`feinsum.recipes.Recipe`, its name, or any object with
    ``apply(t_unit, params, e, device)``) with configuration *params* to the statements of
    *t_unit* that *match* describes, and return the new translation unit.

    The recipe transforms ``generate_loopy(match.canonical)``; the result is renamed back
    to the kernel's names and put in place of the matched statements (see the module
    docstring for the contract). Raises :class:`~feinsum.EinsumMatchError` if *match* no
    longer describes *t_unit*, :class:`~feinsum.InvalidConfigurationError` for a bad
    configuration and :class:`~feinsum.RecipeFailure` if the recipe raises.
    """
    from feinsum.matching.match import Match

    if not isinstance(match, Match):
        raise EinsumMatchError(f"expected a feinsum Match (from feinsum.find_einsums or "
                               f"feinsum.match_einsum), got {type(match).__name__}")
    user = _check_current(t_unit, match)
    from loopy.kernel.data import AddressSpace

    for outs in match.outputs:
        for name in outs:
            tv = user.temporary_variables.get(name)
            if tv is not None and tv.address_space != AddressSpace.GLOBAL:
                raise EinsumMatchError(
                    f"kernel {user.name!r}: output {name!r} is a temporary outside global "
                    "memory; a transformed einsum may run on other work-items or as a device "
                    "kernel of its own, so make it a global temporary or an argument"
                )
    part = transformed_einsum(match, recipe, params, device)
    from feinsum.matching.assemble import assemble

    try:
        new = assemble(user, [part]).kernel
        return merge_callables(t_unit, new, [part])
    except FeinsumError:
        raise
    except Exception as exc:
        name = getattr(recipe, "name", recipe)
        raise RecipeFailure(
            f"the kernel recipe {name!r} made could not be put back into kernel "
            f"{user.name!r}: {type(exc).__name__}: {exc}"
        ) from exc


# vim: foldmethod=marker

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
from typing import TYPE_CHECKING, Any

from feinsum.errors import EinsumMatchError, FeinsumError, RecipeFailure

if TYPE_CHECKING:
    import loopy as lp

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
                       ) -> tuple[lp.LoopKernel, lp.TranslationUnit, lp.LoopKernel]:
    """(the recipe's kernel with lengths fixed and substitution rules expanded, the recipe's
    translation unit, the untransformed reference kernel), in canonical names."""
    import loopy as lp

    from feinsum.lowering import KERNEL_NAME
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
            tk = lp.fix_parameters(tk, **match.canonical_lengths)  # type: ignore[arg-type]
        tk = lp.expand_subst(tk)
    except Exception as exc:
        raise RecipeFailure(f"the kernel recipe {name!r} made cannot take the kernel's fixed "
                            f"lengths {match.canonical_lengths}: {type(exc).__name__}: "
                            f"{exc}") from exc
    tk = pin_loop_nests(result.with_kernel(tk) if tk.name in result.callables_table
                        else result, tk)
    return tk, result, ref[KERNEL_NAME]


def loop_nests(t_unit: lp.TranslationUnit, name: str) -> set[tuple[str, ...]]:
    """The loop nests (outermost first) of kernel *name* in loopy's linearization."""
    import loopy as lp
    from loopy.schedule import EnterLoop, LeaveLoop, RunInstruction

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


def pin_loop_nests(t_unit: lp.TranslationUnit, tk: lp.LoopKernel) -> lp.LoopKernel:
    """*tk* with loop priorities that fix the loop nesting loopy chooses for it now.

    loopy breaks ties between loops by their names; the transformed einsum is scheduled
    here, in canonical names, and the nests are recorded as priorities, so that the
    kernel renamed to the user's names nests its loops in the same order."""
    try:
        nests = loop_nests(t_unit, tk.name)
    except Exception:  # a kernel loopy cannot schedule without more information
        return tk
    inames = set(tk.all_inames())
    pins = {tuple(i for i in nest if i in inames) for nest in nests}
    pins = {p for p in pins if len(p) > 1}
    return tk.copy(loop_priority=frozenset(tk.loop_priority | pins))


def _arg_declarations(tk: Any, user: Any, ref: Any, to_user: Mapping[str, str],
                      fixed: Mapping[str, int]) -> list[Any]:
    """The final argument list: the user's arguments in the user's order (their own
    declarations where the recipe left the argument as the reference kernel had it,
    with dtypes filled in), then arguments the recipe added."""
    import loopy as lp
    from loopy.types import NumpyType

    t_args = {a.name: a for a in tk.args}
    ref_args = {to_user.get(a.name, a.name): a for a in ref.args if a.name not in fixed}
    result = []
    for ua in user.args:
        ta = t_args.pop(ua.name, None)
        if ta is None:
            result.append(ua)
            continue
        ra = ref_args.get(ua.name)
        untouched = ra is not None and _same_layout(ra, ta, to_user, fixed)
        if untouched and not isinstance(ua, lp.ValueArg):
            chosen = ua
            if not isinstance(ua.dtype, NumpyType):
                chosen = ua.copy(dtype=ta.dtype)
        elif isinstance(ua, lp.ValueArg):
            chosen = ua if isinstance(ua.dtype, NumpyType) else ua.copy(dtype=ta.dtype)
        else:
            chosen = ta
        result.append(chosen)
    result.extend(t_args.values())
    return result


def _same_layout(ref_arg: Any, t_arg: Any, to_user: Mapping[str, str],
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
    return ref_shape == t_arg.shape and ref_strides == t_strides


def _merge_callables(t_unit: Any, result: Any, knl: Any) -> Any:
    """*t_unit* with kernel *knl* replaced and the recipe's extra callables added."""
    from feinsum.lowering import KERNEL_NAME

    t_unit = t_unit.with_kernel(knl)
    extra = {k: v for k, v in result.callables_table.items()
             if k != KERNEL_NAME and k not in t_unit.callables_table}
    if extra:
        table = dict(t_unit.callables_table)
        table.update(extra)
        t_unit = t_unit.copy(callables_table=type(t_unit.callables_table)(table))
    return t_unit


def _merge_options(user: Any, tk: Any) -> Any:
    opts = list(dict.fromkeys([*(user.options.build_options or []),
                               *(tk.options.build_options or [])]))
    return user.options.copy(build_options=opts)


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
    tk, result, ref = transformed_einsum(match, recipe, params, device)
    matched = set(match.all_insn_ids)
    rest = [insn for insn in user.instructions if insn.id not in matched]
    try:
        if rest:
            from feinsum.matching.splice import splice

            new = splice(user, tk, ref, match, rest)
        else:
            new = _replace(user, tk, ref, match)
        return _merge_callables(t_unit, result, new)
    except FeinsumError:
        raise
    except Exception as exc:
        name = getattr(recipe, "name", recipe)
        raise RecipeFailure(
            f"the kernel recipe {name!r} made could not be put back into kernel "
            f"{user.name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def _replace(user: Any, tk: Any, ref: Any, match: Match) -> Any:
    """The kernel is only the einsum: the transformed kernel, renamed to the user's names."""
    from feinsum.matching.normalize import kernel_names, rename_kernel, resolve_names

    to_user = {k: v for k, v in match.from_canonical.items()}
    names = kernel_names(tk)
    exact = {k: v for k, v in to_user.items() if k in names}
    user_only = {a.name for a in user.args} - set(exact.values())
    derive = set(tk.all_inames()) | set(tk.temporary_variables)
    mapping = resolve_names(names, exact, user_only, derive, to_user)
    tk = rename_kernel(tk, mapping)
    # inputs that are global temporaries of the user's kernel stay temporaries
    temps = dict(tk.temporary_variables)
    for name, tv in user.temporary_variables.items():
        if name in tk.arg_dict:
            temps[name] = tv
    tk = tk.copy(args=[a for a in tk.args if a.name not in user.temporary_variables],
                 temporary_variables=temps)
    args = _arg_declarations(tk, user, ref, to_user, match.canonical_lengths)
    return tk.copy(name=user.name, args=args, options=_merge_options(user, tk),
                   target=user.target)


# vim: foldmethod=marker

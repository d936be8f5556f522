"""One kernel of a program through the hook: prepare, match, plan, assemble.

1. :func:`feinsum.matching.prepare_kernel` rewrites what compilers emit into what the
   matcher reads (exactly: the prepared kernel computes what the kernel did);
2. :func:`feinsum.matching.survey_einsums` finds the einsums and says why each other
   reduction is not one;
3. the :class:`~feinsum.hook.planning.Planner` decides each einsum's transformed kernel,
   or leaves it to the default schedule (too little work, the time budget spent, or the
   caller's *keep*: see :mod:`feinsum.hook.payoff`);
4. :func:`feinsum.matching.assemble.assemble` puts them in place and gives every other
   statement the default parallel schedule; a part that cannot be assembled is left out
   (its statements stay as they were, the report says why).

A kernel in which nothing is transformed is returned unchanged (unless *schedule_all*).
A program that runs once gets the default schedule only (*run_once*: no matching). loopy
must then run the changed kernels (:mod:`feinsum.hook.check`, once for the whole program,
by :func:`feinsum.transform_program`), else the group that keeps the kernel from running
is given back (:mod:`feinsum.hook.culprit`), else the kernel is kept as it was
(:func:`reverted`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from feinsum.errors import FeinsumError, RecipeFailure
from feinsum.hook.report import GroupReport, KernelReport

if TYPE_CHECKING:
    from feinsum.hook.planning import Plan, Planner
    from feinsum.matching.assemble import Assembled, Part, Schedule
    from feinsum.matching.constants import Scaled
    from feinsum.matching.fusion import Fusion


def kernel_names(t_unit: Any) -> list[str]:
    """The names of the loopy kernels of *t_unit* (not other callables)."""
    from loopy.kernel.function_interface import CallableKernel

    return [name for name, c in t_unit.callables_table.items()
            if isinstance(c, CallableKernel)]


def transform_kernel(t_unit: Any, name: str, planner: Planner, schedule: Schedule,
                     schedule_all: bool = False, *, run_once: bool = False,
                     keep: Mapping[tuple[str, ...], str] | None = None
                     ) -> tuple[Any, list[GroupReport], KernelReport]:
    """*t_unit* with kernel *name* transformed, the reports of its groups, and its own.
    *schedule_all*: a kernel without einsums gets the default schedule too; *run_once*:
    only the default schedule, nothing matched; *keep*: the groups (by their statements,
    ``all_insn_ids``) left to the default schedule whatever they would get, and why."""
    from feinsum.matching.constants import with_constants, without_constants
    from feinsum.matching.match import survey_einsums
    from feinsum.matching.prepare import prepare_kernel

    knl = t_unit[name]
    if run_once:
        with planner.clock("transformation"):
            new_knl, _, units = _assemble_all(knl, [], schedule)
        if not units:
            return t_unit, [], KernelReport(name, "unchanged")
        return t_unit.with_kernel(new_knl), [], KernelReport(name, "scheduled",
                                                             scheduled=units)
    with planner.clock("matching"):
        try:
            prepared = prepare_kernel(knl)
        except Exception as exc:  # a rewrite met a kernel it does not know: match as is
            from feinsum.matching.prepare import Prepared

            prepared = Prepared(knl, (f"not prepared ({type(exc).__name__}: {exc})",))
        t_prep = (t_unit.with_kernel(prepared.kernel) if prepared.kernel is not knl
                  else t_unit)
        survey = survey_einsums(t_prep, kernel_name=name, scalar_arrays=True)
        scaled = [without_constants(m) for m in survey.matches]
        cores = [m if s is None else s.core for m, s in zip(survey.matches, scaled,
                                                             strict=True)]
        declared = prepared.kernel.arg_dict.get
        fusions = [f if s is None else with_constants(f, s, declared) for f, s in zip(
            _fusions(prepared.kernel, cores), scaled, strict=True)]
    plans = []
    as_matched: list[Any] | None = None
    for k, (m, fusion) in enumerate(zip(cores, fusions, strict=True)):
        why = (keep or {}).get(m.all_insn_ids) or planner.leave(m)
        if why:
            plans.append(planner.left(m, why))
            continue
        s, original = scaled[k], survey.matches[k]
        arrays = _scalar_arrays(original, prepared.kernel)
        plan = (_plan_scaled(planner, s, fusion, declared) if s is not None
                else None if arrays else planner.plan(m, fusion))
        if plan is None and arrays:  # only its stores can read a 0-d array argument
            plan = planner.left(original, f"it reads the 0-d array argument {arrays[0]!r} "
                                "as a factor, which only a sum's stores can apply, and the "
                                "recipe's kernel took no epilogue")
        elif plan is None:  # the factors cannot go into the stores: the einsum as matched
            if as_matched is None:
                with planner.clock("matching"):
                    as_matched = _fusions(prepared.kernel, survey.matches)
            plan = planner.plan(original, as_matched[k])
        elif plan.report.recipe == "generic" or _scales_an_operand(m, plan):
            # a factor folded into an operand may do (and shares the plain core's records)
            plan = _plan_folded(planner, prepared.kernel, cores, k, s) or plan
        plans.append(plan)
    kreport = KernelReport(name, "unchanged", prepared.changes, survey.rejected)
    if not any(p.part is not None for p in plans) and not schedule_all:
        return t_unit, [p.report for p in plans], kreport
    with planner.clock("transformation"):
        new_knl, plans, units = _assemble_all(prepared.kernel, plans, schedule)
    parts = [p.part for p in plans if p.part is not None]
    if not parts and not units:
        return t_unit, [p.report for p in plans], kreport
    from feinsum.matching.replay import merge_callables

    action: Literal["transformed", "scheduled"] = "transformed" if parts else "scheduled"
    return (merge_callables(t_prep, new_knl, parts), [p.report for p in plans],
            replace(kreport, action=action, scheduled=units))


def _scalar_arrays(m: Any, knl: Any) -> list[str]:
    """The 0-d array arguments of *knl* that match *m* reads as scalars (the matcher's
    ``scalar_arrays``): the einsum as matched would take them as ``ValueArg`` s."""
    import loopy as lp

    return [a.name for a in m.einsum.arrays if a.ndim == 0
            and isinstance(knl.arg_dict.get(a.name), lp.ArrayArg)]


def _scales_an_operand(m: Any, plan: Plan) -> bool:
    """Whether *plan* is gemm_gpu's for a match with more than two operands with indices
    (its factors multiplied into an operand's copies,
    :mod:`feinsum.toolbox.gemm_operands`): folded, the same product is the plain one's,
    whose records it then shares."""
    e = m.einsum
    return plan.report.recipe == "gemm_gpu" and sum(
        1 for c in range(e.noperands) if e.in_indices[c]) > 2


def _plan_folded(planner: Planner, knl: Any, cores: Sequence[Any], k: int,
                 scaled: Scaled | None) -> Plan | None:
    """The plan of match ``cores[k]`` with columns folded into another's loads
    (:mod:`feinsum.matching.folding`; its constants in the stores if *scaled*), if that
    gets a recipe other than the generic schedule and the expressions fused."""
    from feinsum.matching.constants import with_constants
    from feinsum.matching.folding import fold_columns, with_folds

    folded = fold_columns(cores[k])
    if folded is None:
        return None

    def declared(name: str) -> Any:
        return knl.arg_dict.get(name) or knl.temporary_variables.get(name)

    with planner.clock("matching"):
        fusion = _fusions(knl, [folded.core if j == k else m for j, m in enumerate(cores)])[k]
    fusion = with_folds(fusion, folded, cores[k], declared)
    if scaled is not None:
        fusion = with_constants(fusion, replace(scaled, core=folded.core), declared)
    plan = _with_factors(planner.plan(folded.core, fusion))
    return None if plan is None or plan.report.recipe == "generic" else plan


def _plan_scaled(planner: Planner, scaled: Scaled, fusion: Fusion,
                 declared: Callable[[str], Any]) -> Plan | None:
    """The plan of a match's core with its constant and scalar factors in the stores
    (:mod:`feinsum.matching.constants`): with all of *fusion*, else with the factors
    alone; None where the recipe's kernel takes neither."""
    from feinsum.matching.constants import with_constants
    from feinsum.matching.fusion import Fusion

    alone = with_constants(Fusion(None, notes=fusion.notes), scaled, declared)
    for attempt in (fusion, alone) if fusion.statements else (fusion,):
        plan = planner.plan(scaled.core, attempt)
        if plan.part is None or plan.report.fused:
            return _with_factors(plan)
    return None


def _with_factors(plan: Plan) -> Plan | None:
    """*plan* of a core (an einsum without some of its factors) if its part computes the
    factors (its fused expressions), without the plain part to fall back on, which lacks
    them; else None."""
    if plan.part is None or not plan.report.fused:
        return None
    return replace(plan, plain=None)


def _fusions(knl: Any, matches: Sequence[Any]) -> list[Any]:
    """What can be fused into each match (:func:`feinsum.matching.fusion.find_fusions`);
    nothing where the analysis fails on a kernel it does not know."""
    from feinsum.matching.fusion import Fusion, find_fusions

    try:
        return find_fusions(knl, matches)
    except Exception as exc:  # an unusual kernel: fuse nothing, say why
        return [Fusion(None, notes=(f"nothing fused ({type(exc).__name__}: {exc})",))
                for _ in matches]


def reverted(groups: Sequence[GroupReport], kreport: KernelReport, problem: str
             ) -> tuple[list[GroupReport], KernelReport]:
    """The reports of a kernel kept as it was because what the hook made of it cannot run
    (:mod:`feinsum.hook.check`: loopy cannot schedule it or generate its code, or the
    device cannot build the code)."""
    note = f"the transformed kernel cannot run: {problem}"
    return ([replace(g, action="failed", note=_add(g.note, note)) if g.transformed else g
             for g in groups], replace(kreport, action="reverted", scheduled=0, note=note))


def _assemble_all(knl: Any, plans: Sequence[Plan], schedule: Schedule
                  ) -> tuple[Any, list[Plan], int]:
    """The kernel with every planned part in place, the plans as carried out (a part that
    cannot be put in place is dropped, one at a time, and its report says why), and how
    many units of other statements got the default schedule."""
    plans = list(plans)
    parts = [p.part for p in plans if p.part is not None]
    try:
        done = _assemble(knl, parts, schedule)
        return done.kernel, plans, done.scheduled
    except FeinsumError as exc:
        if not any(p.plain is not None for p in plans):
            pass
        else:  # without the fused expressions
            plans = [_unfused(p, exc) for p in plans]
            try:
                done = _assemble(knl, [p.part for p in plans if p.part is not None], schedule)
                return done.kernel, plans, done.scheduled
            except FeinsumError:
                pass
    kept: list[Part] = []
    for k, plan in enumerate(plans):
        if plan.part is None:
            continue
        try:
            _assemble(knl, [*kept, plan.part], schedule)
            kept.append(plan.part)
        except FeinsumError as exc:
            plans[k] = _failed(plan, exc)
    try:
        done = _assemble(knl, kept, schedule)
    except FeinsumError:
        return knl, [_failed(p, RecipeFailure("no part fits")) if p.part is not None else p
                     for p in plans], 0
    return done.kernel, plans, done.scheduled


def _assemble(knl: Any, parts: Sequence[Part], schedule: Schedule) -> Assembled:
    from feinsum.matching.assemble import assemble

    try:
        return assemble(knl, parts, schedule=schedule)
    except FeinsumError:
        raise
    except Exception as exc:  # loopy refused a step: the part does not fit
        raise RecipeFailure(f"assembling kernel {knl.name!r}: {type(exc).__name__}: "
                            f"{exc}") from exc


def _unfused(plan: Plan, exc: BaseException) -> Plan:
    """*plan* with its plain part, if it had fused expressions."""
    if plan.plain is None:
        return plan
    note = f"{', '.join(plan.report.fused)}: not fused (the kernel could not be assembled: {exc})"
    return replace(plan, part=plan.plain, plain=None, report=replace(
        plan.report, fused=(), not_fused=(*plan.report.not_fused, note)))


def _failed(plan: Plan, exc: BaseException) -> Plan:
    from feinsum.hook.planning import Plan

    note = f"could not be put in place: {exc}"
    return Plan(None, replace(plan.report, action="failed", note=_add(plan.report.note, note)))


def _add(note: str, more: str) -> str:
    return f"{note}; {more}" if note else more


# vim: foldmethod=marker

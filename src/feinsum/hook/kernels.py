"""One kernel of a program through the hook: prepare, match, plan, assemble, check.

1. :func:`feinsum.matching.prepare_kernel` rewrites what compilers emit into what the
   matcher reads (exactly: the prepared kernel computes what the kernel did);
2. :func:`feinsum.matching.survey_einsums` finds the einsums and says why each other
   reduction is not one;
3. the :class:`~feinsum.hook.planning.Planner` decides each einsum's transformed kernel;
4. :func:`feinsum.matching.assemble.assemble` puts them in place and gives every other
   statement the default parallel schedule; a part that cannot be assembled is left out
   (its statements stay as they were, the report says why);
5. loopy must schedule the changed kernels (:func:`schedule_problem`, run once for the
   whole program by :func:`feinsum.transform_program`), else the kernel is kept as it
   was (:func:`reverted`). A kernel in which nothing is transformed is returned
   unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from feinsum.errors import FeinsumError, RecipeFailure
from feinsum.hook.report import GroupReport, KernelReport

if TYPE_CHECKING:
    from feinsum.hook.planning import Plan, Planner
    from feinsum.matching.assemble import Assembled, Part, Schedule


def transform_kernel(t_unit: Any, name: str, planner: Planner, schedule: Schedule,
                     schedule_all: bool = False
                     ) -> tuple[Any, list[GroupReport], KernelReport]:
    """*t_unit* with kernel *name* transformed, the reports of its groups, and its own.
    *schedule_all*: a kernel without einsums gets the default schedule too."""
    from feinsum.matching.match import survey_einsums
    from feinsum.matching.prepare import prepare_kernel

    knl = t_unit[name]
    try:
        prepared = prepare_kernel(knl)
    except Exception as exc:  # a rewrite met a kernel it does not know: match it as it is
        from feinsum.matching.prepare import Prepared

        prepared = Prepared(knl, (f"not prepared ({type(exc).__name__}: {exc})",))
    t_prep = t_unit.with_kernel(prepared.kernel) if prepared.kernel is not knl else t_unit
    survey = survey_einsums(t_prep, kernel_name=name)
    fusions = _fusions(prepared.kernel, survey.matches)
    plans = [planner.plan(m, f) for m, f in zip(survey.matches, fusions, strict=True)]
    kreport = KernelReport(name, "unchanged", prepared.changes, survey.rejected)
    if not any(p.part is not None for p in plans) and not schedule_all:
        return t_unit, [p.report for p in plans], kreport
    new_knl, plans, units = _assemble_all(prepared.kernel, plans, schedule)
    parts = [p.part for p in plans if p.part is not None]
    if not parts and not units:
        return t_unit, [p.report for p in plans], kreport
    from feinsum.matching.replay import merge_callables

    action: Literal["transformed", "scheduled"] = "transformed" if parts else "scheduled"
    return (merge_callables(t_prep, new_knl, parts), [p.report for p in plans],
            replace(kreport, action=action, scheduled=units))


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
    """The reports of a kernel kept as it was because loopy cannot schedule what the hook
    made of it."""
    note = f"loopy cannot schedule the transformed kernel: {problem}"
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


def _typed_for_check(t_unit: Any) -> Any:
    """*t_unit* with every type inferred, for scheduling only: the types loopy learns only
    at the call (a length parameter's, an input's) are taken as int32 and float64, which
    does not change how it schedules. None if even that leaves types unknown."""
    import loopy as lp
    import numpy as np
    from loopy.types import NumpyType

    try:
        return lp.infer_unknown_types(t_unit, expect_completion=True)
    except Exception:  # loopy's inference failing is expected here: fill in and retry
        pass
    for clbl in t_unit.callables_table.values():
        knl = getattr(clbl, "subkernel", None)
        if knl is None:
            continue
        guess = {a.name: (np.int32 if isinstance(a, lp.ValueArg) else np.float64)
                 for a in knl.args if not isinstance(a.dtype, NumpyType)}
        if guess:
            t_unit = t_unit.with_kernel(lp.add_dtypes(knl, guess))
    try:
        return lp.infer_unknown_types(t_unit, expect_completion=True)
    except Exception:  # still unknown: the caller's code generation will check
        return None


def schedule_problem(t_unit: Any, names: Sequence[str]) -> str | None:
    """Why loopy cannot schedule the kernels *names* of *t_unit* (None: it can). A program
    whose types loopy cannot infer yet (dtypes given only at the call) is not checked:
    its caller's code generation will.

    Checked: a schedule exists and passes loopy's pre-codegen checks. Left to the
    caller's code generation: loopy's check that accesses are ordered, and its on-disk
    caches (which feinsum's kernels do not hit across processes), the bulk of the time."""
    import loopy as lp
    from loopy.check import pre_codegen_callable_checks
    from loopy.schedule import get_one_linearized_kernel

    typed = _typed_for_check(t_unit)
    if typed is None:  # types known only at the call: nothing to check here
        return None
    try:
        with lp.CacheMode(False):
            for name in names:
                typed = typed.with_kernel(lp.set_options(
                    typed[name], enforce_variable_access_ordered="no_check"))
            t = lp.preprocess_program(typed)
            for name in names:
                linearized = get_one_linearized_kernel(t[name], t.callables_table)
                # what code generation checks first (hardware axes every statement uses...)
                pre_codegen_callable_checks(linearized, t.callables_table)
    except Exception as exc:  # any loopy failure means: not usable
        text = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {text}"[:300]
    return None


# vim: foldmethod=marker

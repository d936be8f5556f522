"""Preparing a compiler's loopy kernel for matching: rewrites that keep what the kernel
computes and put its einsums in the form the matcher reads.

Array compilers write einsums in ways a person writing loopy would not. pytato, for one,
inlines reductions into the elementwise expressions that use them
(``out = sin(sum(...)) + 0.5*sum(...)``), holds reduction bounds in private temporaries
assigned constants (``_pt_sum_r0_ubound = 3``), and loops once over the length-1 axes of
broadcast arrays. :func:`prepare_kernel` undoes each of these, one small function at a
time, each returning a new kernel (as loopy's transformations do):

* :func:`inline_constant_bounds`: a domain parameter held in a scalar temporary that one
  unconditional statement assigns an integer constant becomes that constant;
* :func:`remove_unit_loops`: a loop that runs exactly once (``r = 0``, ``0 <= r < 1``)
  becomes its index value (``sum(r, f(r))`` over one value is ``f(0)``);
* :func:`~feinsum.matching.unflatten.unflatten_loops`: a loop over the flat index of a
  reshaped array (``u[(f % 35E) // 35, f % 35]``) becomes one loop per axis;
* :func:`~feinsum.matching.split.split_reductions`: a reduction inside an elementwise
  expression (or inside another reduction) moves to a statement of its own writing a
  global temporary, which the expression then reads;
* :func:`~feinsum.matching.split.materialize_operands`: an operand of a sum that is an
  expression, or reads an array at a constant index, is computed once into a global
  temporary (each value was computed once per term that used it);
* :func:`~feinsum.matching.split.promote_private_results`: a statement that writes a
  reduction into a private scalar temporary read by other statements of its loops
  writes a global temporary instead, so that the einsum can run on other work-items
  than its readers.

Each rewrite is exact (no reassociation): the prepared kernel computes what the original
did, and a kernel none of them applies to is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

if TYPE_CHECKING:
    import loopy as lp

#: Reductions that over a single value are that value.
_IDEMPOTENT = frozenset({"sum", "product", "max", "min", "feinsum_max", "feinsum_min",
                         "logsumexp", "feinsum_logsumexp"})


@dataclass(frozen=True)
class Prepared:
    """A prepared kernel and what was done to it, one line per rewrite."""

    kernel: lp.LoopKernel
    changes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.changes)


def prepare_kernel(knl: lp.LoopKernel) -> Prepared:
    """Apply every rewrite of this module to *knl* (see the module docstring); a rewrite
    that fails on the kernel is left out (the changes say so), the others still apply."""
    from feinsum.matching.split import (
        materialize_operands,
        promote_private_results,
        split_reductions,
    )
    from feinsum.matching.unflatten import unflatten_loops

    changes: list[str] = []
    for step in (inline_constant_bounds, remove_unit_loops, unflatten_loops, split_reductions,
                 materialize_operands, promote_private_results):
        try:
            knl, done = step(knl)
        except Exception as exc:  # a kernel this rewrite does not know: the others go on
            done = [f"{step.__name__} not applied ({type(exc).__name__}: {exc})"]
        changes.extend(done)
    return Prepared(knl, tuple(changes))


# {{{ helpers


def _integer_value(expr: Any) -> int | None:
    """The value of *expr* if it is an integer constant expression, else None."""
    from pymbolic import evaluate

    if isinstance(expr, bool):
        return None
    if isinstance(expr, int):
        return expr
    try:
        value: Any = evaluate(expr, {})
    except Exception:  # any free variable or call: not a constant
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and float(value).is_integer():
        return int(value)
    return None


def _without_statements(knl: lp.LoopKernel, drop: Mapping[str, Any]) -> list[Any]:
    """The statements of *knl* except those in *drop*, with dependencies on a dropped
    statement replaced by that statement's own dependencies."""
    def expand(deps: Iterable[str], seen: frozenset[str] = frozenset()) -> frozenset[str]:
        out: set[str] = set()
        for d in deps:
            if d in drop and d not in seen:
                out |= expand(drop[d].depends_on, seen | {d})
            elif d not in drop:
                out.add(d)
        return frozenset(out)

    return [insn.copy(depends_on=expand(insn.depends_on)) for insn in knl.instructions
            if insn.id not in drop]


def _is_implementation_tagged(knl: lp.LoopKernel, iname: str) -> bool:
    from loopy.kernel.data import InameImplementationTag

    return any(isinstance(t, InameImplementationTag) for t in knl.inames[iname].tags)


def _reduction_op_name(red: Any) -> str:
    from feinsum.spec.formulas import reduction_name

    return reduction_name(red)


# }}}


# {{{ constant bounds


def inline_constant_bounds(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """Domain parameters that are scalar temporaries assigned an integer constant by one
    unconditional statement become that constant; the statements and temporaries go."""
    import islpy as isl
    from loopy.kernel.instruction import Assignment

    params: set[str] = set()
    for dom in knl.domains:
        params.update(str(n) for n in dom.get_var_names(isl.dim_type.param))
    values: dict[str, int] = {}
    drop: dict[str, Any] = {}
    for name in sorted(params):
        tv = knl.temporary_variables.get(name)
        if tv is None or tv.shape not in ((), None):
            continue
        writers = [insn for insn in knl.instructions if name in insn.assignee_var_names()]
        if len(writers) != 1:
            continue
        (w,) = writers
        if not isinstance(w, Assignment) or w.predicates or len(w.assignee_var_names()) != 1:
            continue
        value = _integer_value(w.expression)
        if value is None:
            continue
        values[name] = value
        drop[w.id] = w
    if not values:
        return knl, []
    from loopy.symbolic import SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    smap = SubstitutionMapper(make_subst_func(values))
    knl = knl.copy(
        instructions=[i.with_transformed_expressions(smap) if hasattr(i, "expression") else i
                      for i in _without_statements(knl, drop)],
        temporary_variables={k: v for k, v in knl.temporary_variables.items()
                             if k not in values},
        domains=[_fix_dims(d, values, "param") for d in knl.domains],
        assumptions=_fix_dims(knl.assumptions, values, "param"))
    shown = ", ".join(f"{k} = {v}" for k, v in values.items())
    return knl, [f"loop bounds held in temporaries replaced by their constant values ({shown})"]


# }}}


def _fix_dims(dom: Any, values: Mapping[str, int], kind: str) -> Any:
    """*dom* with its dimensions of *kind* (``"param"``, ``"set"``) named in *values* fixed
    to those values and projected out."""
    import islpy as isl

    dim = getattr(isl.dim_type, kind)
    for name, value in values.items():
        found = dom.get_var_dict().get(name)
        if found is None or found[0] != dim:
            continue
        dom = dom.fix_val(dim, found[1], value).project_out(dim, found[1], 1)
    return dom


# {{{ loops that run once


def _single_value(knl: lp.LoopKernel, iname: str) -> int | None:
    """The one value loop *iname* takes, if it takes exactly one constant value."""
    import islpy as isl

    try:
        dom = knl.get_inames_domain(frozenset([iname]))
        dom = dom.project_out_except([iname], [isl.dim_type.set])
        if dom.dim(isl.dim_type.param):
            dom = dom.project_out(isl.dim_type.param, 0, dom.dim(isl.dim_type.param))
        lo, hi = dom.to_set().dim_min(0), dom.to_set().dim_max(0)
    except Exception:  # an unusual domain: leave the loop alone
        return None
    if not (lo.is_cst() and hi.is_cst()):
        return None
    low = _pw_constant(lo)
    high = _pw_constant(hi)
    if low is None or low != high:
        return None
    return low


def _pw_constant(pw: Any) -> int | None:
    pieces = pw.get_pieces()
    if len(pieces) != 1:
        return None
    _, aff = pieces[0]
    value = aff.get_constant_val()
    if not value.is_int():
        return None
    return int(value.to_python())


def _unit_loop_mapper(values: Mapping[str, int]) -> Any:
    from loopy.symbolic import IdentityMapper, Reduction

    class UnitLoops(IdentityMapper):  # type: ignore[misc]
        def map_variable(self, expr: Any, *args: Any) -> Any:
            return values.get(expr.name, expr)

        def map_reduction(self, expr: Any, *args: Any) -> Any:
            body = self.rec(expr.expr, *args)
            kept = tuple(i for i in expr.inames if i not in values)
            if len(kept) == len(expr.inames):
                return Reduction(expr.operation, expr.inames, body, expr.allow_simultaneous)
            if kept:
                return Reduction(expr.operation, kept, body, expr.allow_simultaneous)
            return body

    return UnitLoops()


def remove_unit_loops(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """Untagged loops that run exactly once become their index value in every statement
    (a reduction over them alone becomes its body); the loops go."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import walk

    # reductions whose single term is not their value (argmin's index, a custom op) keep
    # their unit loops
    keep: set[str] = set()
    for insn in knl.instructions:
        for e in _insn_expressions(insn):
            for sub in walk(e):
                if isinstance(sub, Reduction) and _reduction_op_name(sub) not in _IDEMPOTENT:
                    keep.update(str(i) for i in sub.inames)
    for rule in knl.substitutions.values():
        keep.update(v.name for v in walk(rule.expression) if isinstance(v, prim.Variable))
    values: dict[str, int] = {}
    for iname in sorted(knl.all_inames()):
        if iname in keep or _is_implementation_tagged(knl, iname):
            continue
        value = _single_value(knl, iname)
        if value is not None:
            values[iname] = value
    if not values:
        return knl, []
    mapper = _unit_loop_mapper(values)
    insns = []
    for insn in knl.instructions:
        if not hasattr(insn, "expression"):
            if set(insn.within_inames) & set(values):
                return knl, []  # a barrier or C statement inside the loop: leave it
            insns.append(insn)
            continue
        insn = insn.with_transformed_expressions(mapper)
        insns.append(insn.copy(within_inames=frozenset(insn.within_inames) - set(values)))

    domains = [_fix_dims(d, values, "set") for d in knl.domains]
    inames = {k: v for k, v in knl.inames.items() if k not in values}
    priority = frozenset(p for p in (tuple(i for i in nest if i not in values)
                                     for nest in knl.loop_priority) if len(p) > 1)
    knl = knl.copy(instructions=insns, domains=domains, inames=inames, loop_priority=priority)
    shown = ", ".join(f"{k} = {v}" for k, v in values.items())
    return knl, [f"loops that run once replaced by their index value ({shown})"]


def _insn_expressions(insn: Any) -> list[Any]:
    if not hasattr(insn, "expression"):
        return []
    return [insn.expression, *insn.assignees, *insn.predicates]


# }}}


# vim: foldmethod=marker

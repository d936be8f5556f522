"""Reductions out of elementwise expressions, and einsum results out of private memory.

Two rewrites of :mod:`feinsum.matching.prepare`, both exact:

* :func:`split_reductions`: ``out[e, i] = sin(sum(j, D[i, j]*u[e, j])) + 0.5*sum(...)``
  becomes ``t0[e, i] = sum(j, D[i, j]*u[e, j])``, ``t1[...] = sum(...)`` and ``out[e, i] =
  sin(t0[e, i]) + 0.5*t1[...]``, with ``t0``, ``t1`` global temporaries indexed by the
  loops each reduction uses (in their own copies of those loops). A reduction that is a
  factor of a product (``jac[e]*sum(j, ...)``) stays: the matcher reads a product of
  sums as one sum.
* :func:`promote_private_results`: ``acc = sum(j, ...)`` into a private scalar ``acc``
  inside loops ``e, i``, read by other statements of those loops, becomes a write of
  ``acc_g[e, i]`` in global memory, read as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import pymbolic.primitives as prim

from feinsum.matching.kernel import dependencies

if TYPE_CHECKING:
    import loopy as lp



# {{{ finding reductions in the wrong place


def _misplaced_reductions(expr: Any) -> tuple[list[Any], list[Any]]:
    """The reductions of a statement's right-hand side that must move to statements of
    their own: (those outside the main reduction, those inside its body). The main
    reduction is the first that is a factor of the top-level product (with the
    reductions of the same kind directly nested in it: one reduction over more
    indices); the matcher reads the rest of that product as factors of it."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name

    outside: list[Any] = []
    inside: list[Any] = []
    main: list[Any] = []

    def top(e: Any) -> None:
        if isinstance(e, Reduction):
            if main:
                outside.append(e)
                return
            main.append(e)
            body = e.expr
            while isinstance(body, Reduction) and reduction_name(body) == reduction_name(e):
                body = body.expr
            inside.extend(_outermost_reductions(body))
        elif isinstance(e, prim.Product):
            for c in e.children:
                top(c)
        elif isinstance(e, prim.Power) and isinstance(e.exponent, int) and e.exponent >= 1:
            top(e.base)
        else:
            outside.extend(_outermost_reductions(e))

    top(expr)
    return outside, inside


def _outermost_reductions(expr: Any) -> list[Any]:
    from loopy.symbolic import Reduction

    if isinstance(expr, Reduction):
        return [expr]
    return [r for c in _children(expr) for r in _outermost_reductions(c)]


def _children(expr: Any) -> Sequence[Any]:
    from loopy.symbolic import Reduction

    if isinstance(expr, Reduction):
        return [expr.expr]
    if isinstance(expr, (prim.Sum, prim.Product, prim.LogicalAnd, prim.LogicalOr)):
        return list(expr.children)
    if isinstance(expr, (prim.Quotient, prim.FloorDiv, prim.Remainder)):
        return [expr.numerator, expr.denominator]
    if isinstance(expr, prim.Power):
        return [expr.base, expr.exponent]
    if isinstance(expr, prim.Call):
        return list(expr.parameters)
    if isinstance(expr, prim.Comparison):
        return [expr.left, expr.right]
    if isinstance(expr, prim.If):
        return [expr.condition, expr.then, expr.else_]
    if isinstance(expr, prim.LogicalNot):
        return [expr.child]
    if isinstance(expr, tuple):
        return list(expr)
    return []


def _free_inames(red: Any, inames: set[str]) -> list[str]:
    """The loop indices *red* uses that it does not bind, in order of first use."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import walk

    bound: set[str] = set()
    order: list[str] = []
    for e in walk(red):
        if isinstance(e, Reduction):
            bound.update(e.inames)
    for e in walk(red):
        if isinstance(e, prim.Variable) and e.name in inames and e.name not in bound and (
            e.name not in order
        ):
            order.append(e.name)
    return order


def _reads_only_global(knl: lp.LoopKernel, red: Any) -> bool:
    """Whether *red* reads only arguments and global temporaries (a private value
    computed in the statement's loops cannot move to other loops)."""
    from loopy.kernel.data import AddressSpace

    from feinsum.spec.formulas import walk

    for e in walk(red):
        if isinstance(e, prim.Variable):
            tv = knl.temporary_variables.get(e.name)
            if tv is not None and tv.address_space != AddressSpace.GLOBAL:
                return False
            if e.name in knl.substitutions:
                return False
        elif isinstance(e, prim.Call) and isinstance(e.function, prim.Variable) and (
            e.function.name in knl.substitutions
        ):
            return False
    return True


# }}}


# {{{ loop extents


def loop_extent(knl: lp.LoopKernel, iname: str) -> Any | None:
    """The number of values loop *iname* takes, as an expression of the kernel's
    parameters, if it starts at 0 and its bounds involve no other loop."""
    import islpy as isl
    from loopy.symbolic import pw_aff_to_expr

    if not _rectangular(knl, iname):
        return None
    dom = knl.get_inames_domain(frozenset([iname]))
    proj = dom.project_out_except([iname], [isl.dim_type.set])
    try:
        low = pw_aff_to_expr(proj.to_set().dim_min(0))
        high = pw_aff_to_expr(proj.to_set().dim_max(0))
    except Exception:  # piecewise bounds
        return None
    if low != 0:
        return None
    return high + 1


def _rectangular(knl: lp.LoopKernel, iname: str) -> bool:
    import islpy as isl

    dom = knl.get_inames_domain(frozenset([iname]))
    for c in dom.get_constraints():
        names = {k for k, v in c.get_coefficients_by_name().items()
                 if k != 1 and not v.is_zero()}
        if iname in names and any(
            dom.get_var_dict()[n][0] == isl.dim_type.set for n in names - {iname}
        ):
            return False
    return True


# }}}


def split_reductions(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """Every reduction of a statement but its main one moves to a statement of its own
    (see the module docstring); repeated until none is left. A reduction inside the main
    reduction's body moves only if its result is no larger than the largest array the
    statement reads (a feature sum ``sum(d, (x[i,d] - y[j,d])**2)`` of a kernel
    reduction stays: it would be an M x N matrix)."""
    changes: list[str] = []

    def find(knl: Any, insn: Any) -> list[Any]:
        outside, inside = _misplaced_reductions(insn.expression)
        return outside + [r for r in inside if _small(knl, insn, r)]

    for _ in range(64):  # nesting depth bound: each round lifts the outermost ones
        knl, done = _lift(knl, find, "reduction")
        if not done:
            break
        changes.extend(done)
    return knl, changes


def materialize_operands(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """Operands of a sum reduction that are expressions (``q[k, e, j]*q[1, e, j]/q[0, e,
    j]``) or read an array at a constant index (``D[0, i, j]``) are computed once into a
    global temporary, which the reduction then reads: each value is then computed once,
    not once per term that uses it, and the einsum's operands are plain arrays. Only
    operands that do not depend on every loop of the statement (so their values are
    reused) and are no larger than the largest array the statement reads."""
    def find(knl: Any, insn: Any) -> list[Any]:
        return [f for f in _operands(insn.expression)
                if _needs_array(knl, f) and _reused(knl, insn, f) and _small(knl, insn, f)]

    return _lift(knl, find, "operand")


# {{{ lifting subexpressions into statements of their own


def _lift(knl: lp.LoopKernel, find: Any, what: str) -> tuple[lp.LoopKernel, list[str]]:
    """Every subexpression ``find(knl, statement)`` names (in unconditional assignments)
    computed by a statement of its own into a global temporary indexed by the loops it
    uses (in copies of those loops), and read from there."""
    from loopy.kernel.data import AddressSpace, TemporaryVariable
    from loopy.kernel.instruction import Assignment

    from feinsum.matching.normalize import kernel_names

    inames = set(knl.all_inames())
    taken = kernel_names(knl) | set(knl.id_to_insn)
    new_insns: list[Any] = []
    temps = dict(knl.temporary_variables)
    domains: list[Any] = []
    new_inames: dict[str, Any] = {}
    done: list[str] = []
    for insn in knl.instructions:
        if not isinstance(insn, Assignment) or insn.predicates:
            new_insns.append(insn)
            continue
        lifted: dict[Any, Any] = {}
        extra: list[Any] = []
        for expr in find(knl, insn):
            if expr in lifted:
                continue
            free = _free_inames(expr, inames)
            extents = [loop_extent(knl, i) for i in free]
            if None in extents or not _reads_only_global(knl, expr):
                continue
            bound = _bound_inames(expr)
            bound_extents = [loop_extent(knl, i) for i in bound]
            if None in bound_extents:
                continue
            order = _output_order(insn, free)
            extents = [extents[free.index(i)] for i in order]
            tname = _fresh(f"{_stem(insn.id)}_{what[:3]}", taken)
            sid = _fresh(f"{insn.id}_{what[:3]}", taken)
            # the statement gets its own copies of the loops it runs in and reduces over
            own = {i: _fresh(f"{i}_{what[:3]}", taken) for i in [*order, *bound]}
            temps[tname] = TemporaryVariable(
                tname, dtype=None, shape=tuple(cast(list[Any], extents)),
                address_space=AddressSpace.GLOBAL)
            lifted[expr] = prim.Subscript(prim.Variable(tname),
                                          tuple(prim.Variable(i) for i in order)) \
                if order else prim.Variable(tname)
            if order or bound:
                domains.append(_box(knl, [own[i] for i in [*order, *bound]],
                                    [*extents, *bound_extents]))
                new_inames.update({own[i]: knl.inames[i].copy(name=own[i], tags=frozenset())
                                   for i in [*order, *bound]})
            extra.append(Assignment(
                _rename(lifted[expr], own), _rename(expr, own), id=sid,
                depends_on=_writers_before(knl, insn, expr),
                within_inames=frozenset(own[i] for i in order)))
            done.append(f"statement {insn.id!r}: {what} {_short(expr)} computed by statement "
                        f"{sid!r} into global temporary {tname!r}")
        if not lifted:
            new_insns.append(insn)
            continue
        new_insns.extend(extra)
        new_insns.append(insn.copy(
            expression=_replace(insn.expression, lifted),
            depends_on=frozenset(insn.depends_on) | {x.id for x in extra}))
    if not done:
        return knl, []
    import loopy as lp

    knl = knl.copy(instructions=new_insns, temporary_variables=temps,
                   domains=[*knl.domains, *domains], inames={**knl.inames, **new_inames})
    # the loops only the lifted expressions used (their copies replace them) go
    used = {i for insn in knl.instructions
            for i in (*insn.within_inames, *insn.reduction_inames())}
    unused = sorted(set(inames) - used)
    return (lp.remove_unused_inames(knl, inames=unused) if unused else knl), done


def _box(knl: lp.LoopKernel, names: list[str], extents: list[Any]) -> Any:
    """The domain ``0 <= names[k] < extents[k]`` (extents in the kernel's parameters)."""
    import islpy as isl
    from pymbolic.mapper.dependency import DependencyMapper

    params = sorted({getattr(v, "name", "") for x in extents if not isinstance(x, int)
                     for v in DependencyMapper(composite_leaves=False)(x)})
    cond = " and ".join(f"0 <= {n} < {x}" for n, x in zip(names, extents, strict=True))
    text = f"[{', '.join(params)}] -> {{ [{', '.join(names)}] : {cond} }}"
    return isl.BasicSet(text)


def _rename(expr: Any, names: dict[str, str]) -> Any:
    """*expr* with the loop indices *names* renames renamed, reduction loops included."""
    from loopy.symbolic import IdentityMapper, Reduction

    class Rename(IdentityMapper):  # type: ignore[misc]
        def map_variable(self, e: Any, *args: Any) -> Any:
            return prim.Variable(names[e.name]) if e.name in names else e

        def map_reduction(self, e: Any, *args: Any) -> Any:
            return Reduction(e.operation, tuple(names.get(i, i) for i in e.inames),
                             self.rec(e.expr, *args), e.allow_simultaneous)

    return Rename()(expr)


def _bound_inames(expr: Any) -> list[str]:
    """The loop indices the reductions of *expr* bind, in order of first appearance."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import walk

    found: list[str] = []
    for e in walk(expr):
        if isinstance(e, Reduction):
            found.extend(i for i in e.inames if i not in found)
    return found


def _writers_before(knl: lp.LoopKernel, insn: Any, expr: Any) -> frozenset[str]:
    """The statements *insn* depends on (directly or not) that write what *expr* reads:
    what a statement computing *expr* must follow (depending on the others too would tie
    it to loops it does not run in)."""
    from loopy.symbolic import get_dependencies

    reads = set(get_dependencies(expr))
    return frozenset(d for d in dependencies(knl.id_to_insn, insn.id)
                     if set(knl.id_to_insn[d].assignee_var_names()) & reads)


def _replace(expr: Any, replacements: dict[Any, Any]) -> Any:
    """*expr* with every subexpression that is a key of *replacements* replaced."""
    from loopy.symbolic import IdentityMapper

    class Replace(IdentityMapper):  # type: ignore[misc]
        def rec(self, expr: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            try:
                if expr in replacements:
                    return replacements[expr]
            except TypeError:  # unhashable: not one of them
                pass
            return super().rec(expr, *args, **kwargs)

    return Replace().rec(expr)


def _operands(expr: Any) -> list[Any]:
    """The factors of the body of *expr*'s main sum reduction (none if it has none)."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import reduction_name

    def factors(e: Any) -> list[Any]:
        if isinstance(e, prim.Product):
            return [f for c in e.children for f in factors(c)]
        if isinstance(e, prim.Power) and isinstance(e.exponent, int) and e.exponent >= 1:
            return factors(e.base)
        return [e]

    for f in factors(expr):
        if isinstance(f, Reduction) and reduction_name(f) in ("sum", "feinsum_sum"):
            body = f.expr
            while isinstance(body, Reduction) and reduction_name(body) == reduction_name(f):
                body = body.expr
            return factors(body)
    return []


def _needs_array(knl: lp.LoopKernel, f: Any) -> bool:
    """Whether operand *f* is something the matcher reads only as a formula: not a number,
    a scalar, a substitution rule or a plain access (loop indices, or 0 at a length-1
    axis)."""
    from loopy.symbolic import Reduction

    from feinsum.spec.formulas import walk

    if isinstance(f, (int, float, complex, prim.Variable)):
        return False
    if any(isinstance(e, Reduction) for e in walk(f)):
        return False
    if isinstance(f, prim.Call) and isinstance(f.function, prim.Variable) and (
        f.function.name in knl.substitutions
    ):
        return False
    if isinstance(f, prim.Subscript) and isinstance(f.aggregate, prim.Variable):
        decl = knl.arg_dict.get(f.aggregate.name) or knl.temporary_variables.get(
            f.aggregate.name)
        shape = getattr(decl, "shape", None)
        if not isinstance(shape, tuple) or len(shape) != len(f.index_tuple):
            return False
        return not all(
            (isinstance(i, prim.Variable) and i.name in knl.all_inames())
            or (i == 0 and n == 1) for i, n in zip(f.index_tuple, shape, strict=True))
    return True


def _reused(knl: lp.LoopKernel, insn: Any, f: Any) -> bool:
    """Whether *f* leaves out a loop of the statement (its values are used more than
    once)."""
    loops = set(insn.within_inames) | set(insn.reduction_inames())
    return not loops <= set(_free_inames(f, set(knl.all_inames())))


#: how many times the data a statement touches a lifted value may take
_GROWTH = 4


def _small(knl: lp.LoopKernel, insn: Any, expr: Any) -> bool:
    """Whether *expr*, computed for every value of the loops it uses, takes at most
    ``_GROWTH`` times the entries of the arrays the statement reads and writes (lengths
    known only at run time compared at a large value): a gradient inside a divergence
    (three times its input) is lifted, the M x N matrix of a kernel reduction's feature
    sum is not."""
    from pymbolic import evaluate
    from pymbolic.mapper.dependency import DependencyMapper

    from feinsum.spec.formulas import walk

    big = 1 << 20

    def size(shape: Any) -> float:
        total = 1.0
        for n in shape:
            names = {getattr(v, "name", "") for v in DependencyMapper(
                composite_leaves=False)(n)} if not isinstance(n, int) else set()
            total *= float(evaluate(n, dict.fromkeys(names, big)) if names else n)
        return total

    free = _free_inames(expr, set(knl.all_inames()))
    extents = [loop_extent(knl, i) for i in free]
    if None in extents:
        return False
    touched: dict[str, float] = {}
    for e in [*walk(insn.expression), insn.assignee]:
        if isinstance(e, prim.Subscript) and isinstance(e.aggregate, prim.Variable):
            decl = knl.arg_dict.get(e.aggregate.name) or knl.temporary_variables.get(
                e.aggregate.name)
            shape = getattr(decl, "shape", None)
            if isinstance(shape, tuple):
                touched[e.aggregate.name] = size(shape)
    return size(extents) <= _GROWTH * sum(touched.values())


# }}}


def _output_order(insn: Any, free: list[str]) -> list[str]:
    """*free* with the indices of the statement's output first, in the output's order."""
    out: list[str] = []
    assignee = insn.assignee
    if isinstance(assignee, prim.Subscript):
        out = [i.name for i in assignee.index_tuple
               if isinstance(i, prim.Variable) and i.name in free]
    return out + [i for i in free if i not in out]


def _stem(name: str) -> str:
    return name[:-len("_store")] if name.endswith("_store") else name


def _fresh(stem: str, taken: set[str]) -> str:
    k = 0
    while f"{stem}{k}" in taken:
        k += 1
    taken.add(f"{stem}{k}")
    return f"{stem}{k}"


def _short(expr: Any) -> str:
    text = str(expr)
    return text if len(text) <= 60 else text[:57] + "..."


# {{{ private results


def promote_private_results(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """A private scalar temporary written once, by a reduction, inside loops ``W``, and
    read only by statements inside all of ``W``, becomes a global temporary indexed by
    ``W``."""
    import loopy as lp
    from loopy.kernel.data import AddressSpace
    from loopy.kernel.instruction import Assignment
    from loopy.symbolic import Reduction, SubstitutionMapper
    from pymbolic.mapper.substitutor import make_subst_func

    from feinsum.matching.normalize import kernel_names

    taken = kernel_names(knl)
    done: list[str] = []
    for name, tv in sorted(knl.temporary_variables.items()):
        if tv.address_space == AddressSpace.GLOBAL or tv.shape not in ((), None):
            continue
        writers = [i for i in knl.instructions if name in i.assignee_var_names()]
        if len(writers) != 1 or not isinstance(writers[0], Assignment):
            continue
        (w,) = writers
        if not isinstance(w.expression, Reduction) or w.predicates or not w.within_inames:
            continue
        readers = [i for i in knl.instructions if name in i.read_dependency_names()
                   and i.id != w.id]
        if not readers or any(not set(r.within_inames) >= set(w.within_inames)
                              or w.id not in dependencies(knl.id_to_insn, r.id)
                              for r in readers):
            continue
        order = _output_order(readers[0], sorted(w.within_inames))
        extents = [loop_extent(knl, i) for i in order]
        if any(x is None for x in extents):
            continue
        gname = _fresh(f"{name}_g", taken)
        access = prim.Subscript(prim.Variable(gname), tuple(prim.Variable(i) for i in order))
        smap = SubstitutionMapper(make_subst_func({name: access}))
        ids = {w.id} | {r.id for r in readers}
        knl = knl.copy(
            instructions=[i.with_transformed_expressions(smap) if i.id in ids else i
                          for i in knl.instructions],
            temporary_variables={
                **{k: v for k, v in knl.temporary_variables.items() if k != name},
                gname: tv.copy(name=gname, shape=tuple(extents), dim_tags=None,
                               address_space=AddressSpace.GLOBAL, dtype=tv.dtype
                               if tv.dtype is not None else lp.auto)})
        done.append(f"private result {name!r} of statement {w.id!r} kept in global "
                    f"temporary {gname!r}")
    return knl, done


# }}}

# vim: foldmethod=marker

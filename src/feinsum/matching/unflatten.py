"""Flat loops over reshaped arrays, read as loops over the arrays' axes.

pytato reshapes a C-contiguous array by flattening its index: ``actx.np.vdot(u, v)`` of
two ``(E, 35)`` arrays, or ``actx.np.sum(u.reshape(-1) ** 2)``, reduce over one index
``0 <= f < 35E`` and read ``u[(f % 35E) // 35, f % 35]``. The matcher holds plain loop
indices only, so it refused these, and the reduction ran on one work-item.

:func:`unflatten_loops` splits such a loop into one loop per *digit* of its index
(``f = 35*f_0 + f_1`` with ``0 <= f_0 < E``, ``0 <= f_1 < 35``) where every use of the
index is a digit, the same digits everywhere: the reads become ``u[f_0, f_1]``. The terms
keep their order (C order), so the kernel computes exactly what it did.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pymbolic.primitives as prim

if TYPE_CHECKING:
    import loopy as lp

#: a digit of a flat index: ``(f % P) // D`` (``P`` a multiple of ``D``)
Digit = tuple[int, int]


def _digit(expr: Any, f: str, n: int) -> Digit | None:
    """The digit *expr* reads of the flat index *f* over ``[0, n)``, if it is one:
    ``(f % P) // D``, ``f % P``, ``f // D`` or ``f`` (pytato writes ``(0 + f*1)`` for
    ``f``)."""
    def is_f(x: Any) -> bool:
        if isinstance(x, prim.Variable):
            return x.name == f
        if isinstance(x, (prim.Sum, prim.Product)):
            unit = 0 if isinstance(x, prim.Sum) else 1
            rest = [c for c in x.children if not (isinstance(c, int) and c == unit)]
            return len(rest) == 1 and is_f(rest[0])
        return False

    if is_f(expr):
        return (n, 1)
    if isinstance(expr, prim.Remainder) and is_f(expr.numerator) and isinstance(
            expr.denominator, int):
        return (expr.denominator, 1)
    if isinstance(expr, prim.FloorDiv) and isinstance(expr.denominator, int):
        num = expr.numerator
        if is_f(num):
            return (n, expr.denominator)
        if isinstance(num, prim.Remainder) and is_f(num.numerator) and isinstance(
                num.denominator, int):
            return (num.denominator, expr.denominator)
    return None


def _digit_mapper(f: str, n: int, found: set[Digit], names: dict[Digit, str] | None
                  ) -> Any:
    """A mapper that records in *found* each digit of *f* an expression reads (the whole
    index where it is read otherwise), or, given *names*, replaces each by its loop."""
    from loopy.symbolic import IdentityMapper, Reduction

    class Digits(IdentityMapper):  # type: ignore[misc]
        def _as_digit(self, expr: Any, *args: Any) -> Any:
            d = _digit(expr, f, n)
            if d is None:
                return None
            found.add(d)
            return prim.Variable(names[d]) if names is not None and d in names else expr

        def map_variable(self, expr: Any, *args: Any) -> Any:
            got = self._as_digit(expr)
            return got if got is not None else expr

        def map_floor_div(self, expr: Any, *args: Any) -> Any:
            got = self._as_digit(expr)
            return got if got is not None else super().map_floor_div(expr, *args)

        def map_remainder(self, expr: Any, *args: Any) -> Any:
            got = self._as_digit(expr)
            return got if got is not None else super().map_remainder(expr, *args)

        def map_sum(self, expr: Any, *args: Any) -> Any:
            got = self._as_digit(expr)
            return got if got is not None else super().map_sum(expr, *args)

        def map_reduction(self, expr: Any, *args: Any) -> Any:
            body = self.rec(expr.expr, *args)
            inames = tuple(expr.inames)
            if names is not None and f in inames:
                at = inames.index(f)
                inames = (*inames[:at], *_ordered(names), *inames[at + 1:])
            return Reduction(expr.operation, inames, body, expr.allow_simultaneous)

    return Digits()


def _ordered(names: dict[Digit, str]) -> list[str]:
    """The digits' loops, most significant first."""
    return [names[d] for d in sorted(names, reverse=True)]


def _slots(digits: set[Digit], n: int) -> list[Digit] | None:
    """The digits as consecutive slots of one mixed-radix split of ``[0, n)`` (each
    ``(P, D)`` with ``D`` the next boundary after ``P``), or None where they are not."""
    bounds = sorted({n, 1, *(p for p, _ in digits), *(d for _, d in digits)}, reverse=True)
    slots = list(itertools.pairwise(bounds))
    if bounds[0] != n or any(b <= 0 or a % b for a, b in slots):
        return None
    if len(slots) < 2 or not digits <= set(slots):
        return None
    return slots


def _flat_length(knl: lp.LoopKernel, f: str) -> int | None:
    """``n`` if loop *f* has a domain of its own, exactly ``0 <= f < n``."""
    import islpy as isl

    doms = [d for d in knl.domains if f in d.get_var_names(isl.dim_type.set)]
    if len(doms) != 1 or doms[0].get_var_names(isl.dim_type.set) != [f] or doms[0].dim(
            isl.dim_type.param):
        return None
    dom = doms[0]
    hi = dom.to_set().dim_max(0)
    if not hi.is_cst():
        return None
    pieces = hi.get_pieces()
    if len(pieces) != 1:
        return None
    n = int(pieces[0][1].get_constant_val().to_python()) + 1
    box = isl.BasicSet(f"{{ [{f}] : 0 <= {f} < {n} }}")
    return n if n > 1 and dom.is_equal(box) else None


def _in_digits(knl: lp.LoopKernel) -> set[str]:
    """The names read inside a ``%`` or ``//`` of some statement (the only loops worth a
    look: a large kernel has many)."""
    from loopy.symbolic import get_dependencies

    from feinsum.spec.formulas import walk

    found: set[str] = set()
    for insn in knl.instructions:
        if hasattr(insn, "expression"):
            for expr in (insn.expression, *insn.assignees, *insn.predicates):
                for sub in walk(expr):
                    if isinstance(sub, (prim.FloorDiv, prim.Remainder)):
                        found |= {str(n) for n in get_dependencies(sub)}
    return found


def unflatten_loops(knl: lp.LoopKernel) -> tuple[lp.LoopKernel, list[str]]:
    """Each untagged loop over a flat index whose every use is a digit of one mixed-radix
    split (see the module docstring) becomes one loop per digit."""
    import islpy as isl
    from loopy.kernel.data import Iname

    from feinsum.spec.formulas import walk

    in_rules = {v.name for r in knl.substitutions.values() for v in walk(r.expression)
                if isinstance(v, prim.Variable)}
    changes = []
    for f in sorted(knl.all_inames() & _in_digits(knl)):
        if f in in_rules or knl.iname_tags(f) or any(
                f in i.within_inames for i in knl.instructions if not hasattr(i, "expression")):
            continue
        n = _flat_length(knl, f)
        if n is None:
            continue
        found: set[Digit] = set()
        reader = _digit_mapper(f, n, found, None)
        for insn in knl.instructions:
            if hasattr(insn, "expression"):
                insn.with_transformed_expressions(reader)
        slots = _slots(found, n)
        if slots is None:
            continue
        gen = knl.get_var_name_generator()
        names = {s: gen(f"{f}_{k}") for k, s in enumerate(slots)}
        writer = _digit_mapper(f, n, set(), names)
        new = _ordered(names)
        insns = []
        for insn in knl.instructions:
            if hasattr(insn, "expression"):
                insn = insn.with_transformed_expressions(writer)
            if f in insn.within_inames:
                insn = insn.copy(within_inames=(insn.within_inames - {f}) | set(new))
            insns.append(insn)
        box = " and ".join(f"0 <= {names[s]} < {s[0] // s[1]}" for s in slots)
        domain = isl.BasicSet(f"{{ [{', '.join(new)}] : {box} }}")
        knl = knl.copy(
            instructions=insns,
            domains=[domain if f in d.get_var_names(isl.dim_type.set) else d
                     for d in knl.domains],
            inames={**{k: v for k, v in knl.inames.items() if k != f},
                    **{x: Iname(x, frozenset()) for x in new}},
            loop_priority=frozenset(p for p in (tuple(i for i in nest if i != f)
                                                for nest in knl.loop_priority) if len(p) > 1))
        lengths = " x ".join(str(s[0] // s[1]) for s in slots)
        changes.append(f"loop {f} over a flattened array split into {', '.join(new)} "
                       f"({lengths})")
    return knl, changes

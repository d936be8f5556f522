"""A long sum into one value on CPUs: contiguous chunks of the terms per work-group, read as
whole OpenCL vectors and summed in vector registers.

A dot product (``j,j->``), the sum of a field (``ej->``), an inner product of fields
(``ej,ej->``), a squared norm (``ej->`` of ``abs(u)**2``: formula operands are computed on
the vectors). PoCL runs each work-group on one core and vectorizes a work-group's loop over
its work-items only where no loop runs inside it, so a sum reduced in one work-item's loop
waits on one chain of scalar additions (a dot product of 1e7 float64: 11 ms on this
project's 2 cores, numpy 4.5 ms). :func:`cpu_split_kernel` deals the terms to ``G``
work-groups of one work-item, each a contiguous chunk of whole vectors of ``vec`` terms
(``vloadN`` of every operand, :mod:`feinsum.toolbox.cvec`), ``blocks`` vectors at a time
into as many vector accumulators (independent chains). Each group adds its accumulators'
lanes into a partial sum in global memory; a second device kernel adds the ``G`` partials
and the last ``N mod vec`` terms in one work-item.

The sum is added in a fixed order (each chunk's lanes and blocks, then the groups), not in
the reference kernel's: like numpy's pairwise and BLAS sums, it differs from the sequential
sum by rounding only.
"""

from __future__ import annotations

import functools
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
from loopy.symbolic import IdentityMapper, Reduction, SubstitutionMapper
from pymbolic.mapper.substitutor import make_subst_func

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox import cvec
from feinsum.toolbox.core import kernel_of
from feinsum.toolbox.dense import rewritten_kernel, subscript
from feinsum.toolbox.split import flat_values, split_reason, total_terms


def cpu_split_reason(e: BatchedEinsum) -> str | None:
    """Why *e* is not a long sum :func:`cpu_split_kernel` computes (None: it is)."""
    if (why := split_reason(e)) is not None:
        return why
    if e.reduction != "sum":
        return f"the reduction is {e.reduction!r}: sums only (vector lanes add)"
    if e.out_indices:
        return "output indices: one value per row only"
    if any(np.dtype(e.value_dtype(r)) not in (np.float32, np.float64) for r in range(e.nrows)):
        return "the values are not float32 or float64 (OpenCL vectors of real floats only)"
    terms = vector_terms(e)
    return terms if isinstance(terms, str) else None


@functools.lru_cache(maxsize=256)
def vector_terms(e: BatchedEinsum) -> list[tuple[Any, tuple[str, ...]]] | str:
    """Per row, the term of the reference kernel with each array it reads replaced by
    ``name[ev]`` (a lane of a vector loaded from array ``name``), and the arrays; or why
    a term reads something else than the value-typed arrays of the einsum, stored in C
    order, at exactly the reduction indices (a feature reduction inside a formula, a
    shifted or another index, another dtype)."""
    from feinsum.lowering.kernel import generate_loopy

    knl = kernel_of(generate_loopy(e))
    rules = knl.substitutions
    red = tuple(e.reduction_indices)
    out = []
    for r in range(e.nrows):
        arrays: dict[str, None] = {}
        factors: list[Any] = []
        for c in range(e.noperands):
            expr: Any = prim.Variable(f"op{c}_r{r}")(*(prim.Variable(i) for i in red))
            while isinstance(expr, prim.Call) and cast(Any, expr.function).name in rules:
                rule = rules[cast(Any, expr.function).name]  # an operand's, a formula's
                expr = _substitute(rule.expression, dict(zip(
                    rule.arguments, expr.parameters, strict=True)))
            found = _ArrayReads(red)
            try:
                factors.append(found(expr))
            except ValueError as exc:
                return f"operand {c}: {exc}"
            for name in found.names:
                arg = knl.arg_dict[name]
                if not isinstance(arg, lp.ArrayArg) or arg.dtype is None or (
                        arg.dtype.numpy_dtype != np.dtype(e.value_dtype(r))):
                    return f"operand {c} reads {name}, which is not of the value type"
                arrays[name] = None
        if any(len(a.shape) > 1 and a.order != "C" for a in e.arrays if a.name in arrays):
            return (f"an array is not stored in C order: the terms (indices "
                    f"{' '.join(red)}) are not at consecutive addresses")
        out.append((prim.Product(tuple(factors)) if len(factors) > 1 else factors[0],
                    tuple(arrays)))
    return out


def _substitute(expr: Any, values: dict[str, Any]) -> Any:
    """*expr* with the variables named in *values* replaced (loopy's reductions too)."""
    return SubstitutionMapper(make_subst_func(values))(expr)


class _ArrayReads(IdentityMapper):  # type: ignore[misc]
    """An expression with each ``a[reduction indices]`` replaced by ``a[ev]``; raises
    ValueError at any other subscript or a reduction."""

    def __init__(self, red: tuple[str, ...]) -> None:
        super().__init__()
        self.red, self.names = red, list[str]()

    def map_subscript(self, x: prim.Subscript) -> Any:
        if tuple(str(i) for i in x.index_tuple) != self.red or not isinstance(
                x.aggregate, prim.Variable):
            raise ValueError(f"{x} is not an array read at the reduction indices "
                             f"{', '.join(self.red)}")
        self.names.append(x.aggregate.name)
        return prim.Subscript(prim.Variable(f"vec_{x.aggregate.name}"), (prim.Variable("ev"),))

    def map_reduction(self, x: Any) -> Any:
        raise ValueError("a reduction inside the term (a formula's feature index)")


def cpu_split_kernel(t_unit: lp.TranslationUnit, e: BatchedEinsum, groups: int, blocks: int,
                     vec: int) -> lp.TranslationUnit:
    """The two-kernel program of :mod:`this module <feinsum.toolbox.split_cpu>` for the
    reference kernel of *e* (:func:`cpu_split_reason` must be None): *groups* work-groups,
    *blocks* vector accumulators of *vec* lanes each."""
    knl = kernel_of(t_unit)
    rows = [i for i in knl.instructions if isinstance(i, lp.Assignment)]
    G, B, V = groups, blocks, vec
    total = total_terms(e)
    syms = sorted({str(n) for n in e.lengths.values() if isinstance(n, str)})
    params = f"[{', '.join(syms)}] -> " if syms else ""
    rg, rt = prim.Variable("rg"), prim.Variable("rt")
    ev = prim.Variable("ev")
    # vectors per group: blocks of B vectors, enough that G chunks cover every vector
    chunk = B * prim.FloorDiv(total + (B * G * V - 1), B * G * V)
    domains = [f"{params}{{[rg, rt, ib, ev, hb, hv]: 0 <= rg < {G} and 0 <= rt and "
               f"rt*{B * G * V} < {total} and 0 <= ib, hb < {B} and 0 <= ev, hv < {V}}}",
               f"{{[gg]: 0 <= gg < {G}}}",
               f"{params}{{[ts]: 0 <= ts < {total} and ts >= {V}*floor(({total})/{V})}}"]
    temps: list[Any] = []
    insns: list[Any] = []
    sweep = frozenset({"rg", "rt"})
    for r, insn in enumerate(rows):
        dt = np.dtype(e.value_dtype(r))
        ctype = "double" if dt.itemsize == 8 else "float"
        acc, part = f"acc{r}", f"part{r}"
        temps += [lp.TemporaryVariable(acc, dt, shape=(B, V), dim_tags=cast(Any, "c,vec")),
                  lp.TemporaryVariable(part, dt, shape=(G,),
                                       address_space=lp.AddressSpace.GLOBAL)]
        insns.append(lp.Assignment(subscript(acc, prim.Variable("ib"), ev), dt.type(0),
                                   id=f"init{r}", within_inames=frozenset({"rg", "ib", "ev"})))
        updates = []
        template, arrays = cast(list[Any], vector_terms(e))[r]
        for b in range(B):  # statements of their own: the loads bind C names per copy
            start = (rg * chunk + rt * B + b) * V
            loads, names = [], {}
            for name in arrays:
                arg = cvec.array_arg(knl, name)
                names[f"vec_{name}"] = prim.Variable(f"v{r}_{name}_{b}")
                temps.append(lp.TemporaryVariable(names[f"vec_{name}"].name, dt, shape=(V,),
                                                  dim_tags=cast(Any, "vec")))
                idx = [0] * (len(cast(Any, arg.shape)) - 1) + [start]  # C order: flat offset
                loads.append(f"load{r}_{name}_{b}")
                insns.append(cvec.vload_clamped(arg, idx, start, total,
                                                names[f"vec_{name}"].name, V, ctype,
                                                id=loads[-1], within=sweep))
            cell = subscript(acc, b, ev)
            updates.append(f"upd{r}_{b}")
            insns.append(lp.Assignment(
                cell, cell + _substitute(template, names), id=updates[-1],
                depends_on=frozenset({f"init{r}", *loads}), within_inames=sweep | {"ev"},
                predicates=frozenset({cast(Any, prim.Comparison(start, "<=", total - V))})))
        terms = prim.Product(tuple(prim.Variable(f"op{c}_r{r}")(*_flat(e, prim.Variable("ts")))
                                   for c in range(e.noperands)))
        insns += [
            lp.Assignment(subscript(part, rg), Reduction(
                "sum", ("hb", "hv"), subscript(acc, prim.Variable("hb"), prim.Variable("hv"))),
                id=f"part{r}", depends_on=frozenset(updates), within_inames=frozenset({"rg"})),
            lp.Assignment(insn.assignee, Reduction("sum", ("gg",), subscript(
                part, prim.Variable("gg"))) + Reduction("sum", ("ts",), terms),
                id=f"total{r}", depends_on=frozenset({"gbarrier"})),
        ]
    insns.append(lp.BarrierInstruction(
        id="gbarrier", synchronization_kind="global", mem_kind="global",
        depends_on=frozenset(f"part{r}" for r in range(len(rows)))))
    new = rewritten_kernel(knl, domains, insns, temps)
    new = lp.tag_inames(new, {"rg": "g.0", "ib": "unr", "ev": "vec", "hb": "unr",
                              "hv": "unr"})
    return lp.set_options(new, enforce_variable_access_ordered="no_check",
                          enforce_array_accesses_within_bounds="no_check")


def _flat(e: BatchedEinsum, f: Any) -> list[Any]:
    """The reduction indices (C order) at flat index *f*."""
    values = flat_values(e, f)
    return [values[i] for i in e.reduction_indices]

"""Vector register tiles for two-operand contractions on CPUs (the contraction recipe's
``vector`` scheme): each work-item owns a tile of the output whose contiguous index runs
along OpenCL vectors, loaded whole from the operand that carries it
(:mod:`feinsum.toolbox.cvec`) and updated with broadcast entries of the other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import loopy as lp
import numpy as np
import pymbolic.primitives as prim

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox import cvec as cvec
from feinsum.toolbox.core import kernel_of
from feinsum.toolbox.dense import rewritten_kernel, subscript


def _whole_vectors(knl: lp.LoopKernel, rule: Any, idx: Sequence[str], x: str, vec: int,
                   dtype: np.dtype[Any]) -> lp.ArrayArg | None:
    """The array operand *rule* reads, if vectors along *x* can be loaded whole from it:
    the rule is ``A[idx...]`` of a global array of *dtype* (the accumulators') whose *x*
    axis is contiguous, and *vec* is a ``vloadN`` width."""
    expr = rule.expression
    if vec not in cvec.WIDTHS or not (isinstance(expr, prim.Subscript)
                                      and isinstance(expr.aggregate, prim.Variable)):
        return None
    args = tuple(rule.arguments)
    if tuple(str(i) for i in expr.index_tuple) != args or args != tuple(idx) or x not in idx:
        return None
    arg = knl.arg_dict.get(expr.aggregate.name)
    if not isinstance(arg, lp.ArrayArg) or arg.dtype is None or (
            arg.dtype.numpy_dtype != dtype):
        return None
    return arg if cvec.contiguous_axis(arg, list(idx).index(x)) else None


def vector_tile_kernel(
    t_unit: lp.TranslationUnit, e: BatchedEinsum, *, x: str, y: str, b: int, vec: int,
    tx: int, ty: int, work_items: int, a: int | None = None, scales: Sequence[int] = (),
) -> lp.TranslationUnit:
    """A contraction kernel for CPUs: each work-item owns ``ty`` entries of output index
    *y* times ``tx`` OpenCL vectors of ``vec`` consecutive entries of the contiguous
    output index *x* (read from operand column *b*). For every point of the reduction
    loops it gathers its ``tx`` vectors of operand *b* lane by lane (indices past the end
    clamped; one ``vloadN`` per vector when *x* is that operand's contiguous axis and the
    operand a plain array of the value type), broadcasts ``ty`` entries of the other
    operand and updates ``tx x ty``
    vector accumulators, written as separate statements in one loop nest. Other output
    indices: ``g.2`` (the first) and loops. Lanes outside the output are not stored.
    *a*: the other operand's column (default: the other of two); *scales*: columns of
    scalar operands, which multiply each sum as it is stored."""
    knl = kernel_of(t_unit)
    a = 1 - b if a is None else a
    rules, V = knl.substitutions, vec
    red = sorted(e.reduction_indices, key=lambda i: isinstance(e.lengths[i], str))
    rest = [i for i in e.out_indices if i not in (x, y)]
    length = {i: prim.Variable(str(n)) if isinstance(n, str) else n
              for i, n in e.lengths.items()}
    xb, yb, lane = prim.Variable("xb"), prim.Variable("yb"), prim.Variable("lane")
    ev: Any = prim.Variable("ev") if V > 1 else 0
    evs = {"ev"} if V > 1 else set()
    loop = {i: prim.Variable(i) for i in [*red, *rest]}
    vdims = "c,c,vec" if V > 1 else "c,c,c"
    temps: list[Any] = []
    insns: list[Any] = []
    core = {"xb", "yb", *rest}

    def clamp(v: Any, n: Any) -> Any:
        return prim.Min((v, n - 1))

    for r in range(e.nrows):
        acc = f"acc_r{r}"
        # one temporary per B vector: loopy then sees exactly which statements touch it
        # (a vector load writes it as a whole)
        bts = [f"b_r{r}_{c}" for c in range(tx)]
        temps += [lp.TemporaryVariable(bt, e.value_dtype(r), shape=(V,),
                                       dim_tags=cast(Any, "vec" if V > 1 else "c"))
                  for bt in bts]
        temps.append(lp.TemporaryVariable(acc, e.value_dtype(r), shape=(ty, tx, V),
                                          dim_tags=cast(Any, vdims)))
        loads = []
        whole = _whole_vectors(knl, rules[f"op{b}_r{r}"], e.in_indices[b], x, V,
                               e.value_dtype(r))
        for c in range(tx):
            loads.append(f"ld{r}_{c}")
            if whole is not None:  # one vloadN per vector inside the range
                x0 = xb * (tx * V) + c * V
                insns.append(cvec.vload_clamped(
                    whole, [x0 if i == x else loop[i] for i in e.in_indices[b]], x0,
                    length[x], bts[c], V, "double" if e.value_dtype(r).itemsize == 8
                    else "float", id=loads[-1], within=frozenset({*core, *red})))
                continue
            xi = clamp(xb * (tx * V) + c * V + lane, length[x])
            args = [xi if i == x else loop[i] for i in e.in_indices[b]]
            insns.append(lp.Assignment(
                subscript(bts[c], lane), prim.Variable(f"op{b}_r{r}")(*args), id=loads[-1],
                within_inames=frozenset({*core, *red, "lane"})))
        for t in range(ty):
            yi = clamp(yb * ty + t, length[y])
            a_args = [yi if i == y else loop[i] for i in e.in_indices[a]]
            a_val = prim.Variable(f"op{a}_r{r}")(*a_args)
            for c in range(tx):
                cell, sfx = subscript(acc, t, c, ev), f"{r}_{t}_{c}"
                pair = (a_val, subscript(bts[c], ev)) if b > a else (subscript(bts[c], ev),
                                                                     a_val)
                insns += [
                    lp.Assignment(cell, e.value_dtype(r).type(0), id=f"init{sfx}",
                                  within_inames=frozenset({*core, *evs})),
                    lp.Assignment(cell, cell + prim.Product(pair), id=f"upd{sfx}",
                                  depends_on=frozenset({f"init{sfx}", *loads}),
                                  within_inames=frozenset({*core, *red, *evs})),
                ]
                xo = xb * (tx * V) + c * V + prim.Variable(f"sl{r}")
                ys = yb * ty + t
                idx = [xo if i == x else ys if i == y else loop[i] for i in e.out_indices]
                total = subscript(acc, t, c, prim.Variable(f"sl{r}"))
                if scales:
                    total = prim.Product((total, *(prim.Variable(f"op{k}_r{r}")
                                                   for k in scales)))
                insns.append(lp.Assignment(
                    subscript(f"out{r}", *idx), total,
                    id=f"store{sfx}", depends_on=frozenset({f"upd{sfx}"}),
                    within_inames=frozenset({*core, f"sl{r}"}),
                    predicates=frozenset({cast(Any, prim.Comparison(xo, "<", length[x])),
                                          cast(Any, prim.Comparison(ys, "<", length[y]))})))
    syms = sorted({str(n) for n in e.lengths.values() if isinstance(n, str)})

    def bound(i: str) -> str:
        return str(e.lengths[i])

    cons = [f"0 <= xb and {tx * V}*xb < {bound(x)}", f"0 <= yb and {ty}*yb < {bound(y)}",
            f"0 <= lane < {V}", *(f"0 <= sl{r} < {V}" for r in range(e.nrows)),
            *(f"0 <= {i} < {bound(i)}" for i in [*red, *rest])]
    names = ["xb", "yb", "lane", *(f"sl{r}" for r in range(e.nrows)), *red, *rest]
    if V > 1:
        cons.append(f"0 <= ev < {V}")
        names.append("ev")
    domain = f"[{', '.join(syms)}] -> {{[{', '.join(names)}]: {' and '.join(cons)}}}"
    new = rewritten_kernel(knl, domain, insns, temps)
    tags = {"lane": "unr", "ev": "vec" if V > 1 else None,
            **{f"sl{r}": "unr" for r in range(e.nrows)}}
    if rest:
        tags[rest[0]] = "g.2"
    new = lp.tag_inames(new, {k: v for k, v in tags.items() if v})
    new = lp.tag_inames(new, {"xb": "g.0"})
    if work_items > 1:
        new = lp.split_iname(new, "yb", work_items, outer_tag="g.1", inner_tag="l.0")
    else:
        new = lp.tag_inames(new, {"yb": "g.1"})
    new = lp.prioritize_loops(new, ",".join([*rest[1:], *red])) if len(
        [*rest[1:], *red]) > 1 else new
    new = lp.set_options(new, enforce_variable_access_ordered="no_check",
                         enforce_array_accesses_within_bounds="no_check")
    return lp.assume(new, " and ".join(f"{s} >= 1" for s in syms)) if syms else new

"""A GEMM kernel's stores (a step of :mod:`feinsum.toolbox.gemm`): the register tile's sums
to the output, or to the split-K slices and their sums to the output; where an operand
combines the sums (:attr:`feinsum.toolbox.gemm_view.Roles.carried`: DG's gradient),
``out[x, e, i] = sum_r J[x, r, e] acc[r]`` for every ``x``."""

from __future__ import annotations

from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum.spec.model import BatchedEinsum
from feinsum.toolbox.dense import subscript
from feinsum.toolbox.gemm_view import (
    Roles,
    Tiling,
    components,
    operand_entry,
    register_offset,
)

_V = prim.Variable


def stores(e: BatchedEinsum, r: Roles, t: Tiling, lens: dict[str, Any]) -> list[Any]:
    """The accumulators to the output (inside it), or to the split-K slices and, after a
    global barrier, their sums to the output."""
    spy, spx = _V("spy"), _V("spx")
    gm = _V("gy") * t.bm + register_offset(t.ly, t.vw, _V("ly"), spy)
    gn = _V("gx") * t.bn + register_offset(t.lx, t.vw, _V("lx"), spx)
    inside: Any = frozenset(  # none where fixed lengths are multiples of the blocks
        prim.Comparison(g, "<", n) for g, n, block in ((gm, lens["Y"], t.bm),
                                                       (gn, lens["X"], t.bn))
        if not (isinstance(n, int) and n % block == 0))
    cell = subscript("acc", spy, spx)
    within = frozenset({"gx", "gy", "lx", "ly", *r.rest, "spx", "spy"})
    if t.split == 1:
        idx = {**components(e, r.y, gm), **components(e, r.x, gn),
               **{i: _V(i) for i in r.rest}, **{i: _V(spread_iname(i)) for i in r.spread}}
        value = _combined(e, r, idx, spy, spx) if r.carried else cell
        return [lp.Assignment(subscript("out0", *(idx[i] for i in e.out_indices)),
                              _scaled(value, r), id="store", predicates=inside,
                              within_inames=within | {spread_iname(i) for i in r.spread},
                              depends_on=frozenset({"fma"}))]
    sm, sn = _V("sm"), _V("sn")
    idx = {**components(e, r.y, sm), **components(e, r.x, sn)}
    total = lp.Reduction("sum", ("ss",), subscript("slices", _V("ss"), sm, sn))
    return [
        lp.Assignment(subscript("slices", _V("gs"), gm, gn), cell, id="store",
                      predicates=inside, depends_on=frozenset({"fma"}),
                      within_inames=within | {"gs"}),
        lp.BarrierInstruction("slices_done", synchronization_kind="global",
                              depends_on=frozenset({"store"})),
        lp.Assignment(subscript("out0", *(idx[i] for i in e.out_indices)),
                      _scaled(total, r), id="sum_slices", within_inames=frozenset({"sm", "sn"}),
                      depends_on=frozenset({"slices_done"}))]


def _scaled(value: Any, r: Roles) -> Any:
    """*value* times the scalar operands (:attr:`Roles.scales`)."""
    return prim.Product((value, *(_V(f"op{c}_r0") for c in r.scales))) if r.scales else value


def spread_iname(index: str) -> str:
    """The stores' loop over the spread output index *index* (:attr:`Roles.spread`)."""
    return f"sp_{index}"


def _combined(e: BatchedEinsum, r: Roles, idx: dict[str, Any], spy: Any, spx: Any) -> Any:
    """``sum_r J[..., r, ...] acc[r, spy, spx]`` over the carried index (unrolled), the
    combining operand at *idx*."""
    (carried,), c = r.carried, int(r.combine or 0)
    return prim.Sum(tuple(
        prim.Product((operand_entry(e, c, {**idx, carried: k}), subscript("acc", k, spy, spx)))
        for k in range(int(e.lengths[carried]))))

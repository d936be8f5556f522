"""Work-items that share a row pool their partial accumulators (:attr:`Tiling.split
<feinsum.reductions.row_tiles.Tiling.split>` of ``transforms/tiled_1d.py``)."""

from __future__ import annotations

from typing import Any

import pymbolic.primitives as prim

from feinsum.lowering.reduction_updates import Updater
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt


def combine_split(form: ka.Form, upd: Updater, S: int, K: int, R: int, nt: int, state: str,
                  row_inames: frozenset[str], after: list[str], temps: list[Any],
                  insns: list[Any]) -> list[str]:
    """Statements (appended to *insns*) by which the ``S`` work-items of each row pool their
    partial accumulators: each writes its own into local memory, then item ``js = 0``
    folds in those of items ``1 .. S-1`` (:meth:`Updater.combine`: ties by index, as the
    items' terms interleave); the ids the stores follow."""
    import loopy as lp

    loc = lp.AddressSpace.LOCAL
    temps.append(lp.TemporaryVariable("part_l", form.dtype, shape=(S, R, nt, K),
                                      address_space=loc))
    if upd.needs_aux:
        temps.append(lp.TemporaryVariable("part_laux", upd.aux_dtype, shape=(S, R, nt, K),
                                          address_space=loc))
    il, js, jsc = kt.var("il"), kt.var("js"), kt.var("jsc")

    def mine(name: str, r: int, k: int) -> Any:
        return kt.sub(name, r, k) if R > 1 else kt.sub(name, k)

    writes: list[str] = []
    for r in range(R):
        for k in range(nt):
            pairs = [(kt.sub("part_l", js, r, k, il), mine(state, r, k))]
            if upd.needs_aux:
                pairs.append((kt.sub("part_laux", js, r, k, il), mine("aux", r, k)))
            got = kt.assignments(pairs, f"part_{k}_r{r}", row_inames, after=after)
            insns += got
            writes += [a.id for a in got]
    folds: list[str] = []
    first = frozenset({prim.Comparison(js, "==", 0)})
    for r in range(R):
        for k in range(nt):
            got = kt.assignments(upd.combine(
                mine(state, r, k), mine("aux", r, k), kt.sub("part_l", jsc, r, k, il),
                kt.sub("part_laux", jsc, r, k, il)), f"fold_{k}_r{r}", row_inames | {"jsc"},
                after=writes, chain=True, predicates=first)
            insns += got
            folds += [a.id for a in got]
    return folds

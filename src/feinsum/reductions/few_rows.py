"""KeOps' GpuConv2D scheme on GPUs: few output rows, many reduction terms
(``transforms/tiled_2d_gpu.py``).

With a fixed number of rows ``M`` (``M = 16`` or ``64``, ``N = 1e6``) the row-parallel
schemes leave the GPU idle. Here the terms are dealt to the lanes: ``G`` work-groups of
``K`` work-items cover ``G*K`` consecutive terms per sweep (``j = (t*G + g)*K + l``: each
warp reads consecutive j-points, coalesced), every work-item keeps the i-variables and
accumulators of a block of ``R`` rows in private registers and folds each of its terms into
all of them (:class:`feinsum.lowering.reduction_updates.Updater`, in increasing ``j``). The
``ceil(M/R)`` row blocks are a second grid axis (``g.1``), so any ``M`` fits the registers;
the last block's rows past ``M`` compute on row ``M - 1`` and are not stored. A tree over
local memory then combines the ``K`` partial accumulators of each row of the group
(:meth:`Updater.combine`: argmin ties by index, log-sum-exp pairs rescaled) into a global
``(terms, M, G)`` buffer; after a global barrier a second device kernel, one work-group of
``K`` work-items per row, combines the ``G`` partials of its row the same way and stores
the results. Nothing of size ``M x N`` is stored.
"""

from __future__ import annotations

from typing import Any

import pymbolic.primitives as prim

from feinsum.lowering.reduction_updates import Updater, register_math, rewrite_math
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt

#: The most private values a work-item keeps: rows of its block x (i-values + accumulators).
MAX_PRIVATE = 96


def row_form(e: Any) -> ka.Form | str:
    """The spec as a kernel reduction of few rows (a fixed ``M``), or why it is not one."""
    form = ka.analyze(e, short_rows=True)
    if isinstance(form, str):
        return form
    if not isinstance(form.m, int):
        return "the rows are many (a symbolic M): the 1D schemes fit"
    if row_values(form) > MAX_PRIVATE:
        return (f"one row's {row_values(form)} i-values and accumulators exceed "
                f"{MAX_PRIVATE} private values")
    return form


def _i_reads(form: ka.Form) -> list[prim.Subscript]:
    """The distinct reads of i-variables in the row terms (the row index symbolic)."""
    from loopy.symbolic import WalkMapper

    names = {a.name for a in form.i_arrays}
    found: dict[Any, None] = {}

    class W(WalkMapper):  # type: ignore[misc]
        def map_subscript(self, x: prim.Subscript) -> None:
            if getattr(x.aggregate, "name", None) in names:
                found.setdefault(x, None)

    for term in ka.row_terms(form):
        for f in term.factors:
            W()(f)
    return list(found)


def row_values(form: ka.Form) -> int:
    """Private values a work-item keeps per row of its block: i-values and accumulators."""
    return len(_i_reads(form)) + ka.accumulator_values(form)


def max_block(form: ka.Form) -> int:
    """The most rows a block may have (:data:`MAX_PRIVATE` private values), at most ``M``."""
    return max(1, min(int(form.m), MAX_PRIVATE // row_values(form)))


def _tree(upd: Updater, acc: str, aux: str, nt: int, rows: list[Any], lane: str, width: int,
          tag: str, within: frozenset[str], after: set[str]) -> tuple[list[Any], set[str]]:
    """Statements combining ``acc[t, row, 0:width]`` (and ``aux``) into position 0, by
    halving: lanes below ``s`` fold in lane ``l + s``."""
    out: list[Any] = []
    deps = set(after)
    s = width // 2
    while s >= 1:
        ids = set()
        for t in range(nt):
            for r in rows:
                here = (t, r, kt.var(lane))
                there = (t, r, kt.var(lane) + s)
                pairs = upd.combine(kt.sub(acc, *here), kt.sub(aux, *here),
                                    kt.sub(acc, *there), kt.sub(aux, *there))
                got = kt.assignments(pairs, f"{tag}{s}_{t}_{r}", within, after=deps,
                                     chain=True, predicates=frozenset(
                                         {prim.Comparison(kt.var(lane), "<", s)}))
                out += got
                ids |= {a.id for a in got}
        deps = ids
        s //= 2
    return out, deps


def few_rows_kernel(e: Any, K: int, G: int, math: str = "accurate", R: int | None = None
                    ) -> Any:
    """The two-kernel GpuConv2D translation unit of ``e`` (see the module docstring):
    ``G`` work-groups of ``K`` work-items (a power of two) deal the terms, for each block
    of ``R`` rows (``R <= K``; default: all ``M`` rows in one block)."""
    import loopy as lp

    form = row_form(e)
    if isinstance(form, str):
        from feinsum.errors import SpecificationError

        raise SpecificationError(f"the few-rows template does not fit the spec: {form}")
    M = int(form.m)
    R = M if R is None else R
    if not 1 <= R <= min(M, K):
        from feinsum.errors import SpecificationError

        raise SpecificationError(f"a block of R = {R} rows needs 1 <= R <= min(M, K) = "
                                 f"{min(M, K)}: choose a smaller R")
    nb = -(-M // R)
    base = kt.var("fr_b") * R if nb > 1 else 0

    def row_of(r: Any) -> Any:
        return kt.clamp(base + r, M) if nb * R > M else base + r

    upd = Updater(e.reduction, form.dtype, math, scalar=True)
    priv, loc, glob = lp.AddressSpace.PRIVATE, lp.AddressSpace.LOCAL, lp.AddressSpace.GLOBAL
    g, lane = kt.var("fr_g"), kt.var("fr_l")
    j = (kt.var("fr_t") * G + g) * K + lane
    variant = {form.i, form.j, *(a.name for a in (*form.i_arrays, *form.j_arrays))}
    terms = [ka.RowTerm(term.row, term.short, tuple(
        rewrite_math(f, math, form.dtype, lambda x: not ka.depends_on(x, variant))
        for f in term.factors)) for term in ka.row_terms(form)]
    nt = len(terms)
    reads = _i_reads(form)
    slot = {x: n for n, x in enumerate(reads)}
    item = frozenset({"fr_g", "fr_l", *(["fr_b"] if nb > 1 else [])})
    aux_temps = ("aux", "part_laux", "part_aux", "red_laux", "aux2")
    temps: list[Any] = [
        lp.TemporaryVariable("xp", form.dtype, shape=(R, max(1, len(reads))),
                             address_space=priv),
        lp.TemporaryVariable("acc", form.dtype, shape=(nt, R), address_space=priv),
        lp.TemporaryVariable("aux", upd.aux_dtype, shape=(nt, R), address_space=priv),
        lp.TemporaryVariable("part_l", form.dtype, shape=(nt, R, K), address_space=loc),
        lp.TemporaryVariable("part_laux", upd.aux_dtype, shape=(nt, R, K), address_space=loc),
        lp.TemporaryVariable("part", form.dtype, shape=(nt, M, G), address_space=glob),
        lp.TemporaryVariable("part_aux", upd.aux_dtype, shape=(nt, M, G),
                             address_space=glob),
        lp.TemporaryVariable("red_l", form.dtype, shape=(nt, 1, K), address_space=loc),
        lp.TemporaryVariable("red_laux", upd.aux_dtype, shape=(nt, 1, K), address_space=loc),
        lp.TemporaryVariable("acc2", form.dtype, shape=(nt,), address_space=priv),
        lp.TemporaryVariable("aux2", upd.aux_dtype, shape=(nt,), address_space=priv),
    ]
    if not upd.needs_aux:
        temps = [v for v in temps if v.name not in aux_temps]
    insns: list[Any] = []
    packs = []
    for r in range(R):
        for x, n in slot.items():
            src = kt.Rewriter(lambda name, idx: None, {form.i: row_of(r)})(x)
            insns.append(lp.Assignment(kt.sub("xp", r, n), src, id=f"pack_{r}_{n}",
                                       within_inames=item))
            packs.append(f"pack_{r}_{n}")
    hot = item | {"fr_t"}
    aux_of = upd.needs_aux
    init_ids = []
    for r in range(R):
        for k in range(nt):
            inits = kt.assignments(upd.init(kt.sub("acc", k, r), kt.sub("aux", k, r)),
                                   f"init_{k}_{r}", item)
            insns += inits
            init_ids += [a.id for a in inits]
    upd_ids: list[str] = []
    for r in range(R):
        def to_private(name: str, idx: tuple[Any, ...], r: int = r) -> Any:
            x = prim.Subscript(prim.Variable(name), idx)
            return kt.sub("xp", r, slot[x]) if x in slot else None

        for k, term in enumerate(terms):
            acc, aux = kt.sub("acc", k, r), kt.sub("aux", k, r)
            rw_i = kt.Rewriter(to_private)
            value = kt.Rewriter(lambda name, idx: None, {form.i: row_of(r), form.j: j})(
                ka.product([rw_i(f) for f in term.factors]))
            upds = kt.assignments(upd.update(acc, aux, value, j), f"upd_{k}_{r}", hot,
                                  after={*packs, *init_ids}, chain=True)
            insns += upds
            upd_ids += [a.id for a in upds]
    tol_ids = []
    for r in range(R):
        for k in range(nt):
            pairs = [(kt.sub("part_l", k, r, lane), kt.sub("acc", k, r))]
            if aux_of:
                pairs.append((kt.sub("part_laux", k, r, lane), kt.sub("aux", k, r)))
            stores = kt.assignments(pairs, f"tol_{k}_{r}", item, after=set(upd_ids))
            insns += stores
            tol_ids += [a.id for a in stores]
    tree, last = _tree(upd, "part_l", "part_laux", nt, list(range(R)), "fr_l", K, "tree", item,
                       set(tol_ids))
    insns += tree
    # lane r stores the block's row r's partial (an index of the lane: the store is the
    # lane's own); rows past M (the last block's) are not stored
    rows_lanes = frozenset({prim.Comparison(lane, "<", R), *(
        [prim.Comparison(base + lane, "<", M)] if nb * R > M else [])})
    outs = []
    for k in range(nt):
        pairs = [(kt.sub("part", k, base + lane, g), kt.sub("part_l", k, lane, 0))]
        if aux_of:
            pairs.append((kt.sub("part_aux", k, base + lane, g),
                          kt.sub("part_laux", k, lane, 0)))
        got = kt.assignments(pairs, f"part_{k}", item, after=last, predicates=rows_lanes)
        insns += got
        outs += [a.id for a in got]
    insns.append(lp.BarrierInstruction("gb", synchronization_kind="global",
                                       depends_on=frozenset(outs)))
    # {{{ second kernel: work-group r2 combines row r2's G partials

    row2, l2 = kt.var("fr_r"), kt.var("fr_l2")
    item2 = frozenset({"fr_r", "fr_l2"})
    ids2: set[str] = {"gb"}
    for k in range(nt):
        acc, aux = kt.sub("acc2", k), kt.sub("aux2", k)
        inits = kt.assignments(upd.init(acc, aux), f"init2_{k}", item2, after={"gb"})
        p = kt.var("fr_p") * K + l2
        combs = kt.assignments(upd.combine(acc, aux, kt.sub("part", k, row2, p),
                                           kt.sub("part_aux", k, row2, p)),
                               f"comb2_{k}", item2 | {"fr_p"}, after={a.id for a in inits},
                               chain=True)
        pairs = [(kt.sub("red_l", k, 0, l2), acc)]
        if aux_of:
            pairs.append((kt.sub("red_laux", k, 0, l2), aux))
        stores = kt.assignments(pairs, f"tol2_{k}", item2, after={a.id for a in combs})
        insns += [*inits, *combs, *stores]
        ids2 |= {a.id for a in (*inits, *combs, *stores)}
    tree2, last2 = _tree(upd, "red_l", "red_laux", nt, [0], "fr_l2", K, "tree2_", item2, ids2)
    insns += tree2
    for k, term in enumerate(terms):
        insns += kt.assignments(
            kt.output_stores(form, upd, term, row2, kt.sub("red_l", k, 0, 0),
                             kt.sub("red_laux", k, 0, 0)), f"out_{k}", item2, after=last2,
            predicates=frozenset({prim.Comparison(l2, "==", 0)}))

    # }}}
    domains = [
        f"{{[fr_b, fr_g, fr_l]: 0 <= fr_b < {nb} and 0 <= fr_g < {G} and 0 <= fr_l < {K}}}"
        if nb > 1 else f"{{[fr_g, fr_l]: 0 <= fr_g < {G} and 0 <= fr_l < {K}}}",
        kt.domain_prefix(form.n, "fr_g", "fr_l") + (
            f"{{[fr_t]: 0 <= fr_t and {K * G}*fr_t + {K}*fr_g + fr_l < {form.n}}}"),
        f"{{[fr_r, fr_l2]: 0 <= fr_r < {M} and 0 <= fr_l2 < {K}}}",
        f"[fr_l2] -> {{[fr_p]: 0 <= fr_p and {K}*fr_p + fr_l2 < {G}}}",
    ]
    tags = {"fr_g": "g.0", "fr_l": "l.0", "fr_r": "g.0", "fr_l2": "l.0",
            **({"fr_b": "g.1"} if nb > 1 else {})}
    knl = kt.template_kernel(e, domains, insns, temps, tags, silenced=[
        "read_no_write(*)", "v1_scheduler_fallback", "unused_inames", "write_race(part_*)",
        "write_race(out_*)", "iname-order"])
    return register_math(knl, math)

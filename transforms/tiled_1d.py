"""tiled_1d: KeOps' GpuConv1D scheme for kernel reductions.

A work-group of ``K`` work-items owns ``K`` consecutive output rows, one per work-item,
whose i-variables sit in private registers. The ``j`` loop runs in tiles of ``K``: the
work-items load one tile of the j-variables cooperatively into local memory (one
point each), a barrier, then every work-item folds the ``K`` terms of the tile into its
private accumulator (:class:`feinsum.lowering.reduction_updates.Updater`), a barrier. Rows past
``M`` compute on row ``M-1`` and are not stored; the last tile is padded and its
missing terms skipped. ``unroll`` unrolls the in-tile loop. Nothing of size ``M x N``
is ever stored.
"""

from __future__ import annotations

from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum.lowering.reduction_updates import Updater
from feinsum.recipes import Boolean, Constraint, ParameterSpace, PowersOfTwo, Recipe, at_most
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt

#: Rows per work-group on CPUs (PoCL runs the group's items as a loop: a short one).
CPU_TILE = 32


def _applies(e: Any, device: Any) -> str | None:
    form = ka.analyze(e)
    return form if isinstance(form, str) else None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = ka.analyze(e)
    per_point = 1 if isinstance(form, str) else sum(
        ka.n_short(a) * a.dtype.itemsize for a in form.j_arrays)
    return ParameterSpace(
        K=PowersOfTwo(16, 1024), unroll=Boolean(), denorms_are_zero=Boolean(),
        constraints=[
            at_most("work_group", lambda p: p["K"], device.max_work_group_size,
                       "K <= max_work_group_size"),
            at_most("local_memory", lambda p: p["K"] * per_point, device.local_mem_size,
                       "K x bytes per j-point <= local_mem_size"),
            Constraint("unroll_small_tiles", lambda p: not p["unroll"] or p["K"] <= 256,
                       "unroll only tiles of at most 256"),
        ],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    form = ka.analyze(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    k = CPU_TILE if device.is_cpu else 4 * device.default_work_items
    return {"K": min(k, device.max_work_group_size), "unroll": False,
            "denorms_are_zero": single}


def build(e: Any, K: int, unroll: bool = False) -> lp.TranslationUnit:
    """The GpuConv1D kernel of the kernel reduction ``e`` (see the module docstring)."""
    form = kt.template_form(e)
    upd = Updater(e.reduction, form.dtype)
    mexpr, nexpr = kt.length_expr(form.m), kt.length_expr(form.n)
    io, il, jt, jl, jj = (prim.Variable(v) for v in ("io", "il", "jt", "jl", "jj"))
    row = io * K + il
    jrow = jt * K + jj
    priv, loc = lp.AddressSpace.PRIVATE, lp.AddressSpace.LOCAL
    i_names = {a.name: a for a in form.i_arrays}
    j_names = {a.name: a for a in form.j_arrays}
    temps: list[Any] = []
    insns: list[Any] = []
    row_inames = frozenset({"io", "il"})
    pack_ids = []
    for a in form.i_arrays:
        temps.append(lp.TemporaryVariable(f"{a.name}_p", a.dtype, shape=(ka.n_short(a),),
                                          address_space=priv))
        for s in range(ka.n_short(a)):
            src = kt.sub(a.name, *ka.short_index(a, s, kt.clamp(row, mexpr)))
            insns.append(lp.Assignment(kt.sub(f"{a.name}_p", s), src,
                                       id=f"pack_{a.name}_{s}", within_inames=row_inames))
            pack_ids.append(f"pack_{a.name}_{s}")
    load_ids = []
    for a in form.j_arrays:
        temps.append(lp.TemporaryVariable(f"{a.name}_l", a.dtype, shape=(K, ka.n_short(a)),
                                          address_space=loc))
        for s in range(ka.n_short(a)):
            src = kt.sub(a.name, *ka.short_index(a, s, kt.clamp(jt * K + jl, nexpr)))
            insns.append(lp.Assignment(kt.sub(f"{a.name}_l", jl, s), src,
                                       id=f"load_{a.name}_{s}",
                                       within_inames=frozenset({"io", "jt", "jl"})))
            load_ids.append(f"load_{a.name}_{s}")

    def rewrite(name: str, idx: tuple[Any, ...]) -> Any:
        if name in i_names:
            return kt.sub(f"{name}_p", ka.flat_short(i_names[name], idx))
        if name in j_names:
            return kt.sub(f"{name}_l", jj, ka.flat_short(j_names[name], idx))
        return None

    rw = kt.Rewriter(rewrite, {form.i: row, form.j: jrow})
    terms = ka.row_terms(form)
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(nt,), address_space=priv))
    temps.append(lp.TemporaryVariable("val", form.dtype, shape=(nt,), address_space=priv))
    if upd.needs_aux:
        temps.append(lp.TemporaryVariable("aux", upd.aux_dtype, shape=(nt,), address_space=priv))
    hot = frozenset({"io", "il", "jt", "jj"})
    in_range = frozenset[Any]({prim.Comparison(jrow, "<", nexpr)})
    init_ids: list[str] = []
    update_ids: list[str] = []
    for t, term in enumerate(terms):
        acc, aux, val = kt.sub("acc", t), kt.sub("aux", t), kt.sub("val", t)
        inits = kt.assignments(upd.init(acc, aux), f"init_{t}", row_inames)
        init_ids += [a.id for a in inits]
        insns += [*inits, lp.Assignment(val, rw(ka.product(term.factors)), id=f"val_{t}",
                                        within_inames=hot, predicates=in_range,
                                        depends_on=frozenset({*pack_ids, *load_ids}))]
        upds = kt.assignments(upd.update(acc, aux, val, jrow), f"upd_{t}", hot, after=init_ids,
                              chain=True, first=f"val_{t}", predicates=in_range)
        insns += upds
        update_ids += [a.id for a in upds]
    store_pred = frozenset[Any]({prim.Comparison(row, "<", mexpr)})
    for t, term in enumerate(terms):
        stores = kt.output_stores(form, upd, term, row, kt.sub("acc", t), kt.sub("aux", t))
        insns += kt.assignments(stores, f"store_{t}", row_inames, after=update_ids,
                                predicates=store_pred)
    pre = kt.domain_prefix(form.m, form.n)
    domains = [
        f"{pre}{{[io]: 0 <= io and {K}*io < {form.m}}}",
        f"{{[il, jl, jj]: 0 <= il, jl, jj < {K}}}",
        f"{pre}{{[jt]: 0 <= jt and {K}*jt < {form.n}}}",
    ]
    tags = {"io": "g.0", "il": "l.0", "jl": "l.0"}
    if unroll:
        tags["jj"] = "unr"
    return kt.template_kernel(e, domains, insns, temps, tags)


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """One row per work-item, j-variables in local-memory tiles of K: KeOps' GpuConv1D."""
    return build(e, params["K"], params["unroll"])


RECIPE = Recipe("tiled_1d", applies=_applies, space=_space, default=_default, apply=_apply)

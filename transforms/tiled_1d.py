"""tiled_1d: KeOps' GpuConv1D scheme for kernel reductions.

A work-group of ``K`` work-items owns ``K`` consecutive output rows, one per work-item,
whose i-variables sit in private registers. The ``j`` loop runs in tiles of ``K``: the
work-items load one tile of the j-variables cooperatively into local memory (one
point each), a barrier, then every work-item folds the ``K`` terms of the tile into its
private accumulator (:class:`feinsum.kernel_templates.Updater`), a barrier. Rows past
``M`` compute on row ``M-1`` and are not stored; the last tile is padded and its
missing terms skipped. ``unroll`` unrolls the in-tile loop. Nothing of size ``M x N``
is ever stored.
"""

from __future__ import annotations

from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum import kernel_templates as kt
from feinsum.recipes import Boolean, Constraint, ParameterSpace, PowersOfTwo, Recipe, at_most


def _applies(e: Any, device: Any) -> str | None:
    form = kt.analyze(e)
    return form if isinstance(form, str) else None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = kt.analyze(e)
    per_point = 1 if isinstance(form, str) else sum(
        kt.n_short(a) * a.dtype.itemsize for a in form.j_arrays)
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
    form = kt.analyze(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    k = 32 if device.is_cpu else 256
    return {"K": min(k, device.max_work_group_size), "unroll": False,
            "denorms_are_zero": single}


def build(e: Any, K: int, unroll: bool = False) -> lp.TranslationUnit:
    """The GpuConv1D kernel of the kernel reduction ``e`` (see the module docstring)."""
    form = kt.analyze(e)
    assert not isinstance(form, str), form
    upd = kt.Updater(e.reduction, form.dtype)
    m, n = kt.length_str(form.m), kt.length_str(form.n)
    mexpr, nexpr = kt.length_expr(form.m), kt.length_expr(form.n)
    io, il, jt, jl, jj = (prim.Variable(v) for v in ("io", "il", "jt", "jl", "jj"))
    row = io * K + il
    jrow = jt * K + jj
    priv, loc = lp.AddressSpace.PRIVATE, lp.AddressSpace.LOCAL
    i_names = {a.name: a for a in form.i_arrays}
    j_names = {a.name: a for a in form.j_arrays}
    temps: list[Any] = []
    insns: list[Any] = []

    def clamp(r: Any, bound: Any) -> Any:
        return prim.If(prim.Comparison(r, "<", bound), r, bound - 1)

    row_inames = frozenset({"io", "il"})
    pack_ids = []
    for a in form.i_arrays:
        temps.append(lp.TemporaryVariable(f"{a.name}_p", a.dtype, shape=(kt.n_short(a),),
                                          address_space=priv))
        for s in range(kt.n_short(a)):
            insns.append(lp.Assignment(kt.sub(f"{a.name}_p", s),
                                       kt.sub(a.name, *kt.short_index(a, s, clamp(row, mexpr))),
                                       id=f"pack_{a.name}_{s}", within_inames=row_inames))
            pack_ids.append(f"pack_{a.name}_{s}")
    load_ids = []
    for a in form.j_arrays:
        temps.append(lp.TemporaryVariable(f"{a.name}_l", a.dtype, shape=(K, kt.n_short(a)),
                                          address_space=loc))
        for s in range(kt.n_short(a)):
            src = kt.sub(a.name, *kt.short_index(a, s, clamp(jt * K + jl, nexpr)))
            insns.append(lp.Assignment(kt.sub(f"{a.name}_l", jl, s), src,
                                       id=f"load_{a.name}_{s}",
                                       within_inames=frozenset({"io", "jt", "jl"})))
            load_ids.append(f"load_{a.name}_{s}")

    def rewrite(name: str, idx: tuple[Any, ...]) -> Any:
        if name in i_names:
            return kt.sub(f"{name}_p", kt.flat_short(i_names[name], idx))
        if name in j_names:
            return kt.sub(f"{name}_l", jj, kt.flat_short(j_names[name], idx))
        return None

    rw = kt.Rewriter(rewrite, {form.i: row, form.j: jrow})
    terms = kt.row_terms(form)
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(nt,), address_space=priv))
    temps.append(lp.TemporaryVariable("val", form.dtype, shape=(nt,), address_space=priv))
    if upd.needs_aux:
        aux_dt = upd.index_dtype if e.reduction in ("argmin", "argmax") else form.dtype
        temps.append(lp.TemporaryVariable("aux", aux_dt, shape=(nt,), address_space=priv))
    hot = frozenset({"io", "il", "jt", "jj"})
    in_range = frozenset({prim.Comparison(jrow, "<", nexpr)})
    init_ids, update_ids = [], []
    for t, term in enumerate(terms):
        acc, aux, val = kt.sub("acc", t), kt.sub("aux", t), kt.sub("val", t)
        for k, (lhs, rhs) in enumerate(upd.init(acc, aux)):
            insns.append(lp.Assignment(lhs, rhs, id=f"init_{t}_{k}", within_inames=row_inames))
            init_ids.append(f"init_{t}_{k}")
        insns.append(lp.Assignment(val, rw(kt.product(term.factors)), id=f"val_{t}",
                                   within_inames=hot, predicates=in_range,
                                   depends_on=frozenset({*pack_ids, *load_ids})))
        prev = f"val_{t}"
        for k, (lhs, rhs) in enumerate(upd.update(acc, aux, val, jrow)):
            sid = f"upd_{t}_{k}"
            insns.append(lp.Assignment(lhs, rhs, id=sid, within_inames=hot, predicates=in_range,
                                       depends_on=frozenset({prev, *init_ids})))
            update_ids.append(sid)
            prev = sid
    store_pred = frozenset({prim.Comparison(row, "<", mexpr)})
    for t, term in enumerate(terms):
        acc, aux = kt.sub("acc", t), kt.sub("aux", t)
        stores = [(kt.out_access(form, f"out{term.row}", row, term.short), upd.result(acc, aux))]
        if e.reduction in ("argmin", "argmax"):
            stores.append((kt.out_access(form, f"out{term.row}_index", row, term.short), aux))
        for k, (lhs, rhs) in enumerate(stores):
            insns.append(lp.Assignment(lhs, rhs, id=f"store_{t}_{k}", within_inames=row_inames,
                                       predicates=store_pred,
                                       depends_on=frozenset(update_ids)))
    params = [s for s in (form.m, form.n) if isinstance(s, str)]
    pre = "[" + ", ".join(dict.fromkeys(params)) + "] -> " if params else ""
    domains = [
        f"{pre}{{[io]: 0 <= io and {K}*io < {m}}}",
        f"{{[il, jl, jj]: 0 <= il, jl, jj < {K}}}",
        f"{pre}{{[jt]: 0 <= jt and {K}*jt < {n}}}",
    ]
    knl = lp.make_kernel(
        domains, insns, [*kt.reference_args(e), *temps], name="einsum",
        lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
        silenced_warnings=["read_no_write(*)"],
    )
    tags = {"io": "g.0", "il": "l.0", "jl": "l.0"}
    if unroll:
        tags["jj"] = "unr"
    return lp.tag_inames(knl, tags)


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """One row per work-item, j-variables in local-memory tiles of K: KeOps' GpuConv1D."""
    return build(e, params["K"], params["unroll"])


RECIPE = Recipe("tiled_1d", applies=_applies, space=_space, default=_default, apply=_apply)

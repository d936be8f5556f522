"""kernel_vec_cpu: kernel reductions on CPUs, V consecutive rows per OpenCL vector register.

Each work-item owns ``U`` vectors of ``V`` consecutive output rows (``U*V`` rows): it packs
its rows' i-variables into private vector registers (structure of arrays; rows past ``M``
repeat row ``M-1`` and are never stored), then walks every ``j`` once, broadcasting the
j-variables, and folds each term into vector accumulators with explicit select
statements (:class:`feinsum.kernel_templates.Updater`): one ``exp`` evaluates ``V`` pairs
with AVX-512, which PoCL does not do across work-items by itself. The ``U`` vectors give
independent dependency chains (latency hiding). Lengths stay runtime parameters.
"""

from __future__ import annotations

from typing import Any

import loopy as lp
import pymbolic.primitives as prim

from feinsum import kernel_templates as kt
from feinsum.recipes import (
    Boolean,
    Choice,
    Constraint,
    IntRange,
    ParameterSpace,
    Recipe,
)


def _applies(e: Any, device: Any) -> str | None:
    form = kt.analyze(e)
    if isinstance(form, str):
        return form
    if not device.is_cpu:
        return "a CPU scheme (GPUs: tiled_1d)"
    return None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = kt.analyze(e)
    nv = 1 if isinstance(form, str) else form.nvalues
    return ParameterSpace(
        V=Choice([4, 8, 16]), U=IntRange(1, 4), denorms_are_zero=Boolean(),
        constraints=[Constraint(
            "registers", lambda p: p["U"] * nv <= kt.MAX_ACCUMULATORS,
            f"U x {nv} accumulators <= {kt.MAX_ACCUMULATORS}")],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    form = kt.analyze(e)
    nv = 1 if isinstance(form, str) else form.nvalues
    itemsize = 4 if isinstance(form, str) else form.dtype.itemsize
    width = device.native_vector_width_float if itemsize == 4 else (
        device.native_vector_width_double)
    v = 16 if itemsize == 4 else 8
    if width and width < 4:
        v = 8 if itemsize == 4 else 4
    u = 2 if 2 * nv <= kt.MAX_ACCUMULATORS else 1
    return {"V": v, "U": u, "denorms_are_zero": itemsize == 4}


def build(e: Any, V: int, U: int) -> lp.TranslationUnit:
    """The vector-layout kernel of the kernel reduction ``e`` (see the module docstring)."""
    kt.enable_vector_calls()
    form = kt.analyze(e)
    assert not isinstance(form, str), form
    upd = kt.Updater(e.reduction, form.dtype)
    m, n = kt.length_str(form.m), kt.length_str(form.n)
    mexpr = kt.length_expr(form.m)
    ii, io, j = prim.Variable("ii"), prim.Variable("io"), prim.Variable("j")
    i_names = {a.name: a for a in form.i_arrays}
    temps: list[Any] = []
    insns: list[Any] = []

    def row(u: int, lane: Any) -> Any:
        return io * (U * V) + u * V + lane

    def clamp(r: Any) -> Any:
        return prim.If(prim.Comparison(r, "<", mexpr), r, mexpr - 1)

    # {{{ pack the i-variables into vectors

    pack_ids = []
    for a in form.i_arrays:
        ns = kt.n_short(a)
        temps.append(lp.TemporaryVariable(f"{a.name}_v", a.dtype, shape=(U, ns, V),
                                          dim_tags="c,c,vec"))
        for u in range(U):
            for s in range(ns):
                pid = f"pack_{a.name}_{u}_{s}"
                insns.append(lp.Assignment(
                    kt.sub(f"{a.name}_v", u, s, ii),
                    kt.sub(a.name, *kt.short_index(a, s, clamp(row(u, ii)))),
                    id=pid, within_inames=frozenset({"io", "ii"})))
                pack_ids.append(pid)

    # }}}

    terms = kt.row_terms(form)
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(U, nt, V), dim_tags="c,c,vec"))
    if upd.needs_aux:
        aux_dt = upd.index_dtype if e.reduction in ("argmin", "argmax") else form.dtype
        temps.append(lp.TemporaryVariable("aux", aux_dt, shape=(U, nt, V), dim_tags="c,c,vec"))
    hot = frozenset({"io", "j", "ii"})
    fac_temps: dict[Any, str] = {}
    update_ids: list[str] = []
    init_ids: list[str] = []
    for u in range(U):
        def to_vec(name: str, idx: tuple[Any, ...], u: int = u) -> Any:
            a = i_names.get(name)
            return None if a is None else kt.sub(f"{name}_v", u, kt.flat_short(a, idx), ii)

        rewrite = kt.Rewriter(to_vec)
        fac_temps.clear()
        for t, term in enumerate(terms):
            acc, aux = kt.sub("acc", u, t, ii), kt.sub("aux", u, t, ii)
            my_inits = [f"init_{u}_{t}_{k}" for k in range(2)]
            for sid, (lhs, rhs) in zip(my_inits, upd.init(acc, aux), strict=False):
                insns.append(lp.Assignment(lhs, rhs, id=sid,
                                           within_inames=frozenset({"io", "ii"})))
                init_ids.append(sid)
            factors = []
            for f in term.factors:
                g = rewrite(f)
                if kt.depends_on(g, {f"{a}_v" for a in i_names}) and not isinstance(
                        g, prim.Subscript):
                    if g not in fac_temps:
                        name = f"f{u}_{len(fac_temps)}"
                        fac_temps[g] = name
                        temps.append(lp.TemporaryVariable(name, form.dtype, shape=(V,),
                                                          dim_tags="vec"))
                        insns.append(lp.Assignment(kt.sub(name, ii), g, id=f"fac_{name}",
                                                   within_inames=hot,
                                                   depends_on=frozenset(pack_ids)))
                    g = kt.sub(fac_temps[g], ii)
                factors.append(g)
            value = kt.product(factors)
            deps = {f"fac_{fn}" for fn in fac_temps.values()}
            prev: str | None = None
            for k, (lhs, rhs) in enumerate(upd.update(acc, aux, value, j)):
                sid = f"upd_{u}_{t}_{k}"
                insns.append(lp.Assignment(
                    lhs, rhs, id=sid, within_inames=hot,
                    depends_on=frozenset({*deps, *init_ids, *pack_ids,
                                          *([prev] if prev else [])})))
                update_ids.append(sid)
                prev = sid

    # {{{ store, lane by lane, rows < M only

    lane = prim.Variable("is")
    for u in range(U):
        r = row(u, lane)
        for t, term in enumerate(terms):
            acc, aux = kt.sub("acc", u, t, lane), kt.sub("aux", u, t, lane)
            stores = [(kt.out_access(form, f"out{term.row}", r, term.short),
                       upd.result(acc, aux))]
            if e.reduction in ("argmin", "argmax"):
                stores.append((kt.out_access(form, f"out{term.row}_index", r, term.short), aux))
            for k, (lhs, rhs) in enumerate(stores):
                insns.append(lp.Assignment(
                    lhs, rhs, id=f"store_{u}_{t}_{k}", within_inames=frozenset({"io", "is"}),
                    depends_on=frozenset(update_ids),
                    predicates=frozenset({prim.Comparison(r, "<", mexpr)})))

    # }}}

    params = [s for s in (form.m, form.n) if isinstance(s, str)]
    pre = "[" + ", ".join(dict.fromkeys(params)) + "] -> " if params else ""
    domains = [
        f"{pre}{{[io]: 0 <= io and {U * V}*io < {m}}}",
        f"{{[ii, is]: 0 <= ii < {V} and 0 <= is < {V}}}",
        f"{pre}{{[j]: 0 <= j < {n}}}",
    ]
    knl = lp.make_kernel(
        domains, insns, [*kt.reference_args(e), *temps], name="einsum",
        lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
        silenced_warnings=["vectorize_failed", "read_no_write(*)", "v1_scheduler_fallback"],
    )
    return lp.tag_inames(knl, {"io": "g.0", "ii": "vec", "is": "unr"})


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Rows in OpenCL vectors (structure of arrays), j-variables broadcast: the CPU scheme."""
    return build(e, params["V"], params["U"])


RECIPE = Recipe(
    "kernel_vec_cpu", applies=_applies, space=_space, default=_default, apply=_apply,
)

"""Kernel templates for kernel reductions ``out[i, e...] = Red_j value(i, j, e...)``.

The KeOps-style recipes (``transforms/kernel_vec_cpu.py``, ``tiled_1d.py``, ``tiled_2d.py``,
``block_sparse.py``) restructure the reference kernel so much that they write a new loopy
kernel from the spec (analysed by :mod:`feinsum.reductions.analysis`, reductions folded by
:mod:`feinsum.lowering.reduction_updates`) instead of tagging the reference one. Here are
:func:`vec_kernel`, the vector-layout template three of them share, and the scaffolding
every template writes with (accesses, output stores, statement chains, the kernel itself).

Every template returns a kernel named ``einsum`` with the reference kernel's arguments
(arrays, outputs ``out{r}``/``out{r}_index``, int32 length symbols; see
:func:`template_kernel`) so that results can be validated against
:func:`feinsum.evaluate`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pymbolic.primitives as prim

from feinsum.errors import SpecificationError
from feinsum.lowering.reduction_updates import (
    Updater,
    enable_vector_calls,
    register_math,
    rewrite_math,
)
from feinsum.reductions.analysis import (
    Form,
    RowTerm,
    analyze,
    depends_on,
    flat_short,
    n_short,
    product,
    row_terms,
    short_index,
)
from feinsum.spec.model import INDEX_REDUCTIONS, BatchedEinsum, Length

#: how many accumulators (vectors) a work-item may keep: beyond that, registers spill
MAX_ACCUMULATORS = 64

# loopy parses dim_tags strings (its annotations say tag objects)
_VEC3: Any = "c,c,vec"
_VEC1: Any = "vec"


# {{{ kernel scaffolding


def template_form(e: BatchedEinsum, *, block_sparse: bool = False, short_rows: bool = False
                  ) -> Form:
    """:func:`~feinsum.reductions.analysis.analyze`, raising
    :class:`~feinsum.errors.SpecificationError` when the spec is no kernel reduction."""
    form = analyze(e, block_sparse=block_sparse, short_rows=short_rows)
    if isinstance(form, str):
        raise SpecificationError(f"this kernel template does not fit the spec: {form}")
    return form


def reference_args(e: BatchedEinsum) -> list[Any]:
    """The reference kernel's arguments (arrays, outputs, length symbols), in its order."""
    from dataclasses import replace

    from feinsum.lowering.kernel import generate_loopy

    dense = replace(e, block_sparse=None) if e.block_sparse is not None else e
    return list(generate_loopy(dense).default_entrypoint.args)


def length_expr(n: Length) -> Any:
    """A length as an expression (a variable for a symbol)."""
    return prim.Variable(n) if isinstance(n, str) else n


def var(name: str) -> prim.Variable:
    """The variable ``name``."""
    return prim.Variable(name)


def sub(name: str, *idx: Any) -> Any:
    """``name[idx...]`` (the variable itself without indices)."""
    return prim.Subscript(prim.Variable(name), tuple(idx)) if idx else prim.Variable(name)


def out_access(form: Form, name: str, row_expr: Any, short: Sequence[Any]) -> Any:
    """``out{r}[...]`` with the row index ``row_expr`` and short indices in spec order."""
    fixed = dict(zip(form.short_out, short, strict=True))
    idx = tuple(row_expr if k == form.i else fixed[k] for k in form.e.out_indices)
    return prim.Subscript(prim.Variable(name), idx)


class Rewriter:
    """Rewrites array accesses of factor expressions: ``fn(name, index_tuple)`` returns a
    replacement or ``None`` (keep); ``variables`` maps index names to expressions (the
    spec's ``i`` and ``j`` to the template's row and reduction expressions)."""

    def __init__(self, fn: Any, variables: dict[str, Any] | None = None) -> None:
        from loopy.symbolic import IdentityMapper

        outer = fn
        names = dict(variables or {})

        class M(IdentityMapper):  # type: ignore[misc]
            def map_subscript(self, expr: prim.Subscript) -> Any:
                idx = tuple(self.rec(i) for i in expr.index_tuple)
                agg: Any = expr.aggregate
                new = outer(agg.name, idx)
                return new if new is not None else prim.Subscript(expr.aggregate, idx)

            def map_variable(self, expr: prim.Variable) -> Any:
                return names.get(expr.name, expr)

        self.mapper = M()

    def __call__(self, expr: Any) -> Any:
        return self.mapper(expr)


def clamp(r: Any, bound: Any) -> Any:
    """``r`` if below ``bound``, else ``bound - 1`` (rows past the end compute on the last)."""
    return prim.If(prim.Comparison(r, "<", bound), r, bound - 1)


def domain_prefix(*names: Length) -> str:
    """``"[n0, n1] -> "`` for the symbolic lengths (and other parameter names) among
    ``names``, in order and once each; ``""`` when there is none."""
    params = [str(n) for n in names if isinstance(n, str)]
    return "[" + ", ".join(dict.fromkeys(params)) + "] -> " if params else ""


def output_stores(form: Form, upd: Updater, term: RowTerm, row_expr: Any, acc: Any, aux: Any
                  ) -> list[tuple[Any, Any]]:
    """(assignee, expression) pairs storing accumulator ``term`` of row ``row_expr``: its
    result into ``out{r}`` and, for argmin/argmax, its index into ``out{r}_index``."""
    stores = [(out_access(form, f"out{term.row}", row_expr, term.short), upd.result(acc, aux))]
    if form.e.reduction in INDEX_REDUCTIONS:
        stores.append((out_access(form, f"out{term.row}_index", row_expr, term.short), aux))
    return stores


def assignments(pairs: Sequence[tuple[Any, Any]], prefix: str, within: Iterable[str], *,
                after: Iterable[str] = (), chain: bool = False, first: str | None = None,
                **kwargs: Any) -> list[Any]:
    """``loopy.Assignment`` s of (assignee, expression) ``pairs`` with ids
    ``{prefix}_{k}``, in the loops ``within``, each after the statements ``after``, the
    first also after ``first``. With ``chain`` each follows the previous one, as the pairs
    of :meth:`Updater.update` must. ``kwargs`` go to every assignment."""
    import loopy as lp

    out = []
    prev = first
    for k, (lhs, rhs) in enumerate(pairs):
        sid = f"{prefix}_{k}"
        out.append(lp.Assignment(lhs, rhs, id=sid, within_inames=frozenset(within),
                                 depends_on=frozenset({*after, *([prev] if prev else [])}),
                                 **kwargs))
        prev = sid if chain else None
    return out


def template_kernel(e: BatchedEinsum, domains: list[str], insns: list[Any], temps: list[Any],
                    tags: dict[str, str], *, extra_args: Sequence[Any] = (),
                    silenced: Sequence[str] = ("read_no_write(*)",)) -> Any:
    """The kernel ``einsum`` of a template: the reference kernel's arguments, then
    ``extra_args`` (host-prepared inputs) and the temporaries, inames tagged."""
    import loopy as lp

    knl = lp.make_kernel(
        domains, insns, [*reference_args(e), *extra_args, *temps], name="einsum",
        lang_version=(2018, 2), target=lp.PyOpenCLTarget(), silenced_warnings=list(silenced),
    )
    return lp.tag_inames(knl, tags)


# }}}


# {{{ the vector-layout kernel (kernel_vec_cpu, tiled_2d, block_sparse recipes)


def vec_kernel(e: BatchedEinsum, V: int, U: int, *, block_sparse: bool = False,
               nsplit: int = 1, tile: int = 1, math: str = "accurate") -> Any:
    """The CPU vector-layout kernel (``transforms/kernel_vec_cpu.py``): each work-item owns
    ``U`` vectors of ``V`` consecutive output rows, i-variables packed into private
    vectors (rows past the end repeat the last row and are not stored), j-variables
    broadcast, accumulators in vectors.

    ``block_sparse``: work-item ``io`` follows row ``io`` of a host-prepared launch table
    ``launch[nblocks, 3]`` (cluster ``k``, first row, end row; see
    :func:`feinsum.reductions.ranges.launch_table`) and reduces over the cluster's ranges
    ``redranges_j[slices_i[k-1]:slices_i[k]]`` (none when ``k < 0``) with data-dependent
    loop bounds.

    ``nsplit > 1`` (KeOps' GpuConv2D, for few rows and many terms): the reduction index
    is dealt to ``nsplit`` work-items per row block (second grid axis ``jb``) in tiles
    of ``tile`` consecutive terms, cyclically (``j = (jt*nsplit + jb)*tile + jj``), so
    each work-item reads its own stretches of the j-variables (``tile = 1``: every
    ``nsplit``-th term, which makes every work-item touch every cache line). They write
    partial accumulators to a global ``(terms, M, nsplit)`` buffer; after a global
    barrier, a second device kernel combines them (:meth:`Updater.combine`) and writes
    the outputs.

    ``math``: the ``exp``/``log`` flavour
    (:data:`feinsum.lowering.reduction_updates.MATH_MODES`).
    """
    import loopy as lp

    enable_vector_calls()
    split = nsplit > 1
    if split and block_sparse:
        raise SpecificationError(
            "a block-sparse reduction cannot also be split over j (nsplit > 1)")
    form = template_form(e, block_sparse=block_sparse)
    upd = Updater(e.reduction, form.dtype, math)
    ii, io = var("ii"), var("io")
    tiled = split and tile > 1
    if tiled:
        j: Any = (var("jt") * nsplit + var("jb")) * tile + var("jj")
    elif split:
        j = var("jl") * nsplit + var("jb")
    else:
        j = var("j")
    i_names = {a.name: a for a in form.i_arrays}
    temps: list[Any] = []
    insns: list[Any] = []
    outer = frozenset({"io"})
    row_inames = {"io", "jb"} if split else {"io"}
    setup: set[str]
    if block_sparse:
        from feinsum.reductions.ranges import RANGE_DTYPE, range_args

        priv = lp.AddressSpace.PRIVATE
        temps += [lp.TemporaryVariable(name, RANGE_DTYPE, shape=(), address_space=priv)
                  for name in ("kc", "rstart", "rend", "sstart", "send", "jstart", "jend")]
        kc = var("kc")
        insns += [
            lp.Assignment("kc", sub("launch", io, 0), id="kc", within_inames=outer),
            lp.Assignment("rstart", sub("launch", io, 1), id="rstart", within_inames=outer),
            lp.Assignment("rend", sub("launch", io, 2), id="rend", within_inames=outer),
            lp.Assignment("sstart", prim.If(prim.Comparison(kc, ">", 0),
                                            sub("slices_i", kc - 1), 0),
                          id="sstart", within_inames=outer, depends_on=frozenset({"kc"})),
            lp.Assignment("send", prim.If(prim.Comparison(kc, ">=", 0), sub("slices_i", kc), 0),
                          id="send", within_inames=outer, depends_on=frozenset({"kc"})),
            lp.Assignment("jstart", sub("redranges_j", var("s"), 0), id="jstart",
                          within_inames=frozenset({"io", "s"}),
                          depends_on=frozenset({"sstart", "send"})),
            lp.Assignment("jend", sub("redranges_j", var("s"), 1), id="jend",
                          within_inames=frozenset({"io", "s"}),
                          depends_on=frozenset({"sstart", "send"})),
        ]
        first: Any = var("rstart")
        end: Any = var("rend")
        setup = {"kc", "rstart", "rend"}
    else:
        first, end = io * (U * V), length_expr(form.m)
        setup = set()

    def row(u: int, lane: Any) -> Any:
        return first + u * V + lane

    pack_ids = []
    for a in form.i_arrays:
        ns = n_short(a)
        temps.append(lp.TemporaryVariable(f"{a.name}_v", a.dtype, shape=(U, ns, V),
                                          dim_tags=_VEC3))
        for u in range(U):
            for s in range(ns):
                pid = f"pack_{a.name}_{u}_{s}"
                insns.append(lp.Assignment(
                    sub(f"{a.name}_v", u, s, ii),
                    sub(a.name, *short_index(a, s, clamp(row(u, ii), end))),
                    id=pid, within_inames=frozenset({*row_inames, "ii"}),
                    depends_on=frozenset(setup)))
                pack_ids.append(pid)

    variant = {form.i, form.j, *i_names, *(a.name for a in form.j_arrays)}
    terms = [RowTerm(t.row, t.short, tuple(
        rewrite_math(f, math, form.dtype, lambda x: not depends_on(x, variant))
        for f in t.factors)) for t in row_terms(form)]
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(U, nt, V), dim_tags=_VEC3))
    if upd.needs_aux:
        temps.append(lp.TemporaryVariable("aux", upd.aux_dtype, shape=(U, nt, V),
                                          dim_tags=_VEC3))
    hot = frozenset({"io", "s", "j", "ii"} if block_sparse else
                    {"io", "jb", "jt", "jj", "ii"} if tiled else
                    {"io", "jb", "jl", "ii"} if split else {"io", "j", "ii"})
    hot_deps = {"jstart", "jend"} if block_sparse else set()
    fac_temps: dict[Any, str] = {}
    update_ids: list[str] = []
    init_ids: list[str] = []
    for u in range(U):
        def to_vec(name: str, idx: tuple[Any, ...], u: int = u) -> Any:
            a = i_names.get(name)
            return None if a is None else sub(f"{name}_v", u, flat_short(a, idx), ii)

        rewrite = Rewriter(to_vec, {form.i: row(u, ii), form.j: j})
        fac_temps.clear()
        for t, term in enumerate(terms):
            acc, aux = sub("acc", u, t, ii), sub("aux", u, t, ii)
            inits = assignments(upd.init(acc, aux), f"init_{u}_{t}", {*row_inames, "ii"})
            insns += inits
            init_ids += [a.id for a in inits]
            factors = []
            for f in term.factors:
                g = rewrite(f)
                if depends_on(g, {f"{a}_v" for a in i_names}) and not isinstance(
                        g, prim.Subscript):
                    if g not in fac_temps:
                        name = f"f{u}_{len(fac_temps)}"
                        fac_temps[g] = name
                        temps.append(lp.TemporaryVariable(name, form.dtype, shape=(V,),
                                                          dim_tags=_VEC1))
                        insns.append(lp.Assignment(
                            sub(name, ii), g, id=f"fac_{name}", within_inames=hot,
                            depends_on=frozenset({*pack_ids, *hot_deps})))
                    g = sub(fac_temps[g], ii)
                factors.append(g)
            value = product(factors)
            deps = {f"fac_{fn}" for fn in fac_temps.values()} | hot_deps
            upds = assignments(upd.update(acc, aux, value, j, ordered=not block_sparse),
                               f"upd_{u}_{t}", hot, after={*deps, *init_ids, *pack_ids},
                               chain=True)
            insns += upds
            update_ids += [a.id for a in upds]

    lane = var("is")
    nstore = 2 if (upd.needs_aux if split else e.reduction in INDEX_REDUCTIONS) else 1
    store_ids = [f"store_{u}_{t}_{k}" for u in range(U) for t in range(nt) for k in range(nstore)]
    # rows of distinct stores never coincide (loopy cannot tell with data-dependent rows)
    nosync = frozenset((sid, "any") for sid in store_ids) if block_sparse else frozenset()
    for u in range(U):
        r = row(u, lane)
        for t, term in enumerate(terms):
            acc, aux = sub("acc", u, t, lane), sub("aux", u, t, lane)
            if split:  # partial accumulators, combined by the second kernel
                stores = [(sub("part", t, r, var("jb")), acc)]
                if upd.needs_aux:
                    stores.append((sub("part_aux", t, r, var("jb")), aux))
            else:
                stores = output_stores(form, upd, term, r, acc, aux)
            for k, (lhs, rhs) in enumerate(stores):
                sid = f"store_{u}_{t}_{k}"
                insns.append(lp.Assignment(
                    lhs, rhs, id=sid, within_inames=frozenset({*row_inames, "is"}),
                    depends_on=frozenset({*update_ids, *init_ids, *setup}),
                    no_sync_with=frozenset(x for x in nosync if x[0] != sid),
                    predicates=frozenset[Any]({prim.Comparison(r, "<", end)})))

    if split:
        # {{{ second pass: combine the nsplit partial accumulators of every row

        glob = lp.AddressSpace.GLOBAL
        mexpr = length_expr(form.m)
        temps.append(lp.TemporaryVariable("part", form.dtype, shape=(nt, mexpr, nsplit),
                                          address_space=glob))
        if upd.needs_aux:
            temps.append(lp.TemporaryVariable("part_aux", upd.aux_dtype,
                                              shape=(nt, mexpr, nsplit), address_space=glob))
            temps.append(lp.TemporaryVariable("acc2_aux", upd.aux_dtype, shape=(nt,),
                                              address_space=lp.AddressSpace.PRIVATE))
        temps.append(lp.TemporaryVariable("acc2", form.dtype, shape=(nt,),
                                          address_space=lp.AddressSpace.PRIVATE))
        insns.append(lp.BarrierInstruction("gb", synchronization_kind="global",
                                           depends_on=frozenset(store_ids)))
        r2, jb2 = var("r2"), var("jb2")
        ids2: list[str] = []
        for t, term in enumerate(terms):
            acc, aux = sub("acc2", t), sub("acc2_aux", t)
            inits = assignments(upd.init(acc, aux), f"init2_{t}", {"r2"}, after={"gb"})
            ids2 += [a.id for a in inits]
            combs = assignments(upd.combine(acc, aux, sub("part", t, r2, jb2),
                                            sub("part_aux", t, r2, jb2)),
                                f"comb_{t}", {"r2", "jb2"}, after={"gb", *ids2}, chain=True)
            ids2 += [a.id for a in combs]
            insns += [*inits, *combs, *assignments(
                output_stores(form, upd, term, r2, acc, aux), f"out2_{t}", {"r2"},
                after={"gb", *ids2})]

        # }}}

    pre = domain_prefix(form.m, form.n)
    lanes = f"{{[ii, is]: 0 <= ii < {V} and 0 <= is < {V}}}"
    extra: list[Any] = []
    if block_sparse:
        domains = [
            "[nblocks] -> {[io]: 0 <= io < nblocks}",
            "[sstart, send] -> {[s]: sstart <= s < send}",
            "[jstart, jend] -> {[j]: jstart <= j < jend}",
            lanes,
        ]
        extra = [*range_args(),
                 lp.GlobalArg("launch", RANGE_DTYPE, shape=(var("nblocks"), 3)),
                 lp.ValueArg("nblocks", RANGE_DTYPE)]
    elif split:
        domains = [
            f"{pre}{{[io]: 0 <= io and {U * V}*io < {form.m}}}",
            lanes,
            # jl's domain under jb's: work-items without terms (jb >= N) still store
            f"{{[jb]: 0 <= jb < {nsplit}}}",
            domain_prefix(form.m, form.n, "jb") + (
                f"{{[jt, jj]: 0 <= jt and 0 <= jj < {tile} and "
                f"{nsplit * tile}*jt + {tile}*jb + jj < {form.n}}}" if tiled else
                f"{{[jl]: 0 <= jl and {nsplit}*jl + jb < {form.n}}}"),
            f"{pre}{{[r2, jb2]: 0 <= r2 < {form.m} and 0 <= jb2 < {nsplit}}}",
        ]
    else:
        domains = [
            f"{pre}{{[io]: 0 <= io and {U * V}*io < {form.m}}}",
            lanes,
            f"{pre}{{[j]: 0 <= j < {form.n}}}",
        ]
    tags = {"io": "g.0", "ii": "vec", "is": "unr"}
    if split:
        tags.update({"jb": "g.1", "r2": "g.0"})
    return register_math(template_kernel(
        e, domains, insns, temps, tags, extra_args=extra, silenced=[
            "vectorize_failed", "read_no_write(*)", "v1_scheduler_fallback", "unused_inames",
            "write_race(store_*)", "iname-order"]), math)


# }}}

# vim: foldmethod=marker

"""The GpuConv1D kernel of kernel reductions and its GPU options (``transforms/tiled_1d.py``).

A work-group of ``K`` work-items owns ``K * rows`` consecutive output rows, ``rows`` per
work-item (rows ``r*K + il`` of the group: stores stay coalesced), whose i-variables sit in
private registers. The ``j`` loop runs in tiles of ``K``: the work-items load one tile of
the j-variables cooperatively into local memory (one point each), a barrier, then every
work-item folds the ``K`` terms of the tile into the private accumulators of its rows
(:class:`feinsum.lowering.reduction_updates.Updater`), a barrier. Rows past ``M`` compute on
row ``M-1`` and are not stored. Nothing of size ``M x N`` is ever stored.

:class:`Tiling` names the options: ``rows`` per work-item (each j-point read from local
memory serves ``rows`` pairs); ``peel`` the last, partial tile into a loop of its own so
that the main tile loop has no bounds check (and the compiler can unroll it);
``unroll`` the in-tile loop by a factor (``K``: completely); ``pack`` each j-point's
values into one OpenCL vector of local memory (``float4`` (y0, y1, y2, b): one wide load
instead of four); ``math`` the ``exp``/``log`` flavour
(:data:`feinsum.lowering.reduction_updates.MATH_MODES`); ``split`` work-items per row along
``l.1`` (tiles of ``K x split`` points, each item folding its ``K``; their partials pooled
by :mod:`feinsum.reductions.row_split`). With every option off
(:attr:`Tiling.classic`) the code is the plain GpuConv1D kernel: the last tile padded and
its missing terms skipped by a bounds check in the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.lowering.reduction_updates import (
    LOG2E,
    OnNewMinimum,
    Updater,
    is_base2,
    register_math,
    rewrite_math,
    scale_value,
)
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt
from feinsum.reductions.row_split import combine_split

_VEC2: Any = "c,vec"  # loopy parses dim_tags strings (its annotations say tag objects)

#: The vector widths a packed j-point may take (OpenCL's, without 3: a float3 takes 4).
PACK_WIDTHS = (2, 4, 8, 16)


@dataclass(frozen=True)
class Tiling:
    """The options of :func:`tiled_kernel` (see the module docstring)."""

    K: int
    rows: int = 1
    unroll: int = 1
    peel: bool = False
    pack: bool = False
    math: str = "accurate"
    #: min/argmin over terms never negative: a NaN term carried as -1 (no NaN tests per
    #: term; :attr:`feinsum.lowering.reduction_updates.Updater.nonnegative`)
    clamp_nan: bool = False
    #: argmin with ``clamp_nan``: each chunk of ``unroll`` terms takes its minimum only (one
    #: ``fmin`` per term), its index is looked for only in a chunk that holds a row's new
    #: minimum (:meth:`feinsum.lowering.reduction_updates.Updater.lazy_index`)
    lazy_index: bool = False
    #: work-items per row along ``l.1``, each folding its share of every tile (a work-group
    #: of ``K x split`` items, tiles of ``K x split`` points); their partial accumulators
    #: are combined through local memory before the store
    split: int = 1

    @property
    def classic(self) -> bool:
        """Whether this is the plain GpuConv1D kernel (one row per work-item, the bounds
        check in the tile loop, scalar j-variables, accurate ``exp``)."""
        return (self.rows == 1 and not self.peel and not self.pack and self.math == "accurate"
                and self.split == 1)


def point_values(form: ka.Form) -> int:
    """How many values one j-point has (every j-variable's short entries)."""
    return sum(ka.n_short(a) for a in form.j_arrays)


def pack_width(form: ka.Form) -> int | None:
    """The vector width of a packed j-point (its values padded to :data:`PACK_WIDTHS`), or
    None when packing does not apply: fewer than 2 values, more than 16, or j-variables of
    different dtypes."""
    n = point_values(form)
    if n < 2 or len({a.dtype for a in form.j_arrays}) != 1:
        return None
    return next((w for w in PACK_WIDTHS if w >= n), None)


def local_bytes(form: ka.Form, K: int, pack: bool) -> int:
    """Local memory of a tile of ``K`` j-points."""
    if pack and (w := pack_width(form)):
        return K * w * form.j_arrays[0].dtype.itemsize
    return K * sum(ka.n_short(a) * a.dtype.itemsize for a in form.j_arrays)


def group_local_bytes(form: ka.Form, K: int, rows: int, split: int, pack: bool) -> int:
    """Local memory of a work-group: a tile of ``K x split`` j-points and, with
    ``split > 1``, the partial accumulators its work-items pool (an index as wide as a
    value)."""
    pooled = K * split * rows * ka.accumulator_values(form) * form.dtype.itemsize
    return local_bytes(form, K * split, pack) + (pooled if split > 1 else 0)


def keeps_chunks(form: ka.Form, lazy_index: bool) -> bool:
    """Whether the GPU kernel folds terms in chunks of ``unroll`` kept in registers
    (log-sum-exp rescaling once per chunk, the lazy argmin)."""
    return form.e.reduction == "logsumexp" or lazy_index


def private_values(form: ka.Form, rows: int) -> int:
    """Registers (values) a work-item keeps for its rows: i-variables and accumulators."""
    i_vals = sum(ka.n_short(a) for a in form.i_arrays)
    return rows * (i_vals + ka.accumulator_values(form))


#: Warps per compute unit a GPU default keeps busy: 4 per scheduler of a 4-scheduler unit,
#: what the exponential's and the local loads' latencies need.
WARPS_PER_UNIT = 16
#: Work-items per row a GPU default uses at most (:attr:`Tiling.split`).
MAX_SPLIT = 8


def gpu_rows(form: ka.Form, device: Any, most: int, lengths: dict[str, int], K: int = 64,
             budget: int = 64) -> tuple[int, int]:
    """Rows per work-item and work-items per row (``split``) on a GPU, for work-groups of
    ``K`` work-items per split: *most* rows, halved while the private values exceed
    *budget*; then, where ``M`` (the spec's, or *lengths*') rows would make fewer than
    :data:`WARPS_PER_UNIT` warps per compute unit, ``split`` doubled (up to
    :data:`MAX_SPLIT`, the work-group and local memory permitting) and, past that, rows
    halved. Each row more saves local loads; a split keeps the warps a device needs to
    hide the latencies: at ``M`` = 1e5 on a 132-unit GPU four rows per item and one item
    per row leave 6 warps per unit (the H200 model: 8.2 ms; 3.9 ms at one row, 2.8 ms at
    four rows split four ways)."""
    rows = most
    while rows > 1 and private_values(form, rows) > budget:
        rows //= 2
    m = form.m if isinstance(form.m, int) else lengths.get(str(form.m))
    if m is None:
        return rows, 1
    lanes = (device.subgroup_width or 32) * WARPS_PER_UNIT * (device.compute_units or 1)

    def fits(split: int) -> bool:
        return (split <= MAX_SPLIT and K * split <= (device.max_work_group_size or 256)
                and group_local_bytes(form, K, rows, split, pack_width(form) is not None)
                <= (device.local_mem_size or 16384))

    split = 1
    while m * split < rows * lanes and fits(2 * split):
        split *= 2
    while rows > 1 and m * split < rows * lanes:
        rows //= 2
    return rows, split


#: Vendors whose ``native_exp2`` is the hardware's base-2 exponential at about 2 ulp (NVIDIA's
#: ``ex2.approx``, AMD's ``v_exp_f32``): there the GPU defaults use it.
NATIVE_EXP2_VENDORS = ("NVIDIA", "Advanced Micro Devices")


def default_math(form: ka.Form | str, device: Any) -> str:
    """The ``math`` flavour of the kernel-reduction recipes' defaults: ``accurate`` on CPUs
    (their code stays as it was), ``native_exp2`` for float32 on the GPUs of
    :data:`NATIVE_EXP2_VENDORS`, else ``exp2`` (accurate to OpenCL's 3 ulp; the folded
    constant adds the rounding of one product to the argument)."""
    if device.is_cpu or isinstance(form, str):
        return "accurate"
    single = form.dtype.itemsize == 4
    vendor = device.vendor or ""
    return "native_exp2" if single and any(v in vendor for v in NATIVE_EXP2_VENDORS) else "exp2"


def _hoist(expr: Any, variant: set[str], names: dict[Any, str]) -> Any:
    """*expr* with each product that reads none of *variant* replaced by a variable
    ``cst{k}`` (*names*: product -> name, filled in)."""
    from loopy.symbolic import IdentityMapper

    class M(IdentityMapper):  # type: ignore[misc]
        def map_product(self, p: prim.Product) -> Any:
            if not ka.depends_on(p, variant) and any(
                    isinstance(c, (prim.Variable, prim.Subscript)) for c in p.children):
                return kt.var(names.setdefault(p, f"cst{len(names)}"))
            return super().map_product(p)

    return M()(expr)


def _j_read(x: Any, j_arrays: dict[str, Any]) -> tuple[str, int] | None:
    """``(name, short position)`` if *x* reads a j-variable, else None."""
    name = getattr(getattr(x, "aggregate", None), "name", None)
    if not isinstance(x, prim.Subscript) or name not in j_arrays:
        return None
    return name, ka.flat_short(j_arrays[name], x.index_tuple)


def _scaled_read(p: Any, j_arrays: dict[str, Any]) -> tuple[str, int] | None:
    """The j-variable read of a product ``c * read`` of a constant ``c``, else None."""
    c = p.children
    return _j_read(c[1], j_arrays) if len(c) == 2 and isinstance(c[0], np.floating) else None


def _load_scales(terms: list[ka.RowTerm], j_arrays: dict[str, Any]
                 ) -> dict[tuple[str, int], Any]:
    """The j-variable values that every term reads only as ``c * value``, with one
    constant ``c`` (the base-2 log-sum-exp's ``log2 e * b``): ``(name, short position)
    -> c``. They are scaled once, as a work-group loads them, instead of once per pair."""
    from loopy.symbolic import WalkMapper

    seen: dict[tuple[str, int], set[Any]] = {}

    class W(WalkMapper):  # type: ignore[misc]
        def map_product(self, p: prim.Product) -> None:
            if (key := _scaled_read(p, j_arrays)) is not None:
                seen.setdefault(key, set()).add(p.children[0])
                return
            for x in p.children:
                self.rec(x)

        def map_subscript(self, x: prim.Subscript) -> None:
            if (key := _j_read(x, j_arrays)) is not None:
                seen.setdefault(key, set()).add(None)

    for term in terms:
        for f in term.factors:
            W()(f)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1 and None not in v}


def tiled_kernel(e: Any, t: Tiling) -> Any:
    """The GpuConv1D kernel of the kernel reduction ``e`` with the options *t*."""
    import loopy as lp

    form = kt.template_form(e)
    upd = Updater(e.reduction, form.dtype, t.math, scalar=not t.classic,
                  nonnegative=ka.checked_clamp_nan(form, t.clamp_nan))
    if t.lazy_index and not upd.finds_index_lazily:
        from feinsum.errors import InvalidConfigurationError

        raise InvalidConfigurationError(
            "lazy_index needs an argmin over terms never negative with clamp_nan: set it "
            "to false for this einsum")
    K, R, S = t.K, t.rows, t.split
    T = K * S  # points per tile
    split_inames = ("js",) if S > 1 else ()

    def in_tile(x: Any) -> Any:  # a point of the tile: after the shares of items js' < js
        return kt.var("js") * K + x if S > 1 else x
    width = pack_width(form) if t.pack else None
    mexpr, nexpr = kt.length_expr(form.m), kt.length_expr(form.n)
    io, il = kt.var("io"), kt.var("il")
    priv, loc = lp.AddressSpace.PRIVATE, lp.AddressSpace.LOCAL
    i_names = {a.name: a for a in form.i_arrays}
    j_names = {a.name: a for a in form.j_arrays}
    offset = {a.name: sum(ka.n_short(b) for b in form.j_arrays[:k])
              for k, a in enumerate(form.j_arrays)}

    def at(r: int, *idx: Any) -> tuple[Any, ...]:  # private arrays get a row axis if R > 1
        return (r, *idx) if R > 1 else idx

    def suffix(r: int) -> str:
        return f"_r{r}" if R > 1 else ""

    def row(r: int) -> Any:
        return io * (K * R) + il if r == 0 else io * (K * R) + r * K + il

    def local_ref(name: str, point: Any, s: Any) -> Any:
        if width:
            return kt.sub("jp_l", point, offset[name] + s)
        return kt.sub(f"{name}_l", point, s)

    temps: list[Any] = []
    insns: list[Any] = []
    row_inames = frozenset({"io", "il", *split_inames})
    pack_ids = []
    for a in form.i_arrays:
        ns = ka.n_short(a)
        temps.append(lp.TemporaryVariable(f"{a.name}_p", a.dtype, shape=at(R, ns),
                                          address_space=priv))
        for r in range(R):
            for s in range(ns):
                src = kt.sub(a.name, *ka.short_index(a, s, kt.clamp(row(r), mexpr)))
                pid = f"pack_{a.name}_{s}{suffix(r)}"
                insns.append(lp.Assignment(kt.sub(f"{a.name}_p", *at(r, s)), src, id=pid,
                                           within_inames=row_inames))
                pack_ids.append(pid)
    if width:
        temps.append(lp.TemporaryVariable("jp_l", form.j_arrays[0].dtype, shape=(T, width),
                                          dim_tags=_VEC2, address_space=loc))
    else:
        temps += [lp.TemporaryVariable(f"{a.name}_l", a.dtype, shape=(T, ka.n_short(a)),
                                       address_space=loc) for a in form.j_arrays]

    def loads(tile: str, jl: str, tag: str, clamp: bool, after: frozenset[str]
              ) -> list[str]:
        slot = in_tile(kt.var(jl))
        point = kt.var(tile) * T + slot
        ids = []
        for a in form.j_arrays:
            for s in range(ka.n_short(a)):
                src = kt.sub(a.name, *ka.short_index(
                    a, s, kt.clamp(point, nexpr) if clamp else point))
                if (a.name, s) in scales:
                    src = prim.Product((scales[a.name, s], src))
                lid = f"load{tag}_{a.name}_{s}"
                insns.append(lp.Assignment(local_ref(a.name, slot, s), src, id=lid,
                                           within_inames=frozenset({"io", tile, jl,
                                                                    *split_inames}),
                                           depends_on=after))
                ids.append(lid)
        return ids

    variant = {form.i, form.j, *i_names, *j_names}
    terms = [ka.RowTerm(term.row, term.short, tuple(
        rewrite_math(f, t.math, form.dtype, lambda x: not ka.depends_on(x, variant))
        for f in term.factors)) for term in ka.row_terms(form)]
    lazy = t.lazy_index
    chunked = (keeps_chunks(form, False) and not t.classic) or lazy
    U = min(t.unroll, K) if chunked else 1
    if chunked and not lazy and is_base2(t.math):  # log-sum-exp in base 2: log2 e folded in
        terms = [ka.RowTerm(term.row, term.short, (scale_value(
            term.factors[0], form.dtype.type(LOG2E), lambda x: not ka.depends_on(x, variant)),
            *term.factors[1:])) for term in terms]
    if not t.classic:  # loop-invariant products (the folded exp2 constant) computed once
        hoisted: dict[Any, str] = {}
        terms = [ka.RowTerm(term.row, term.short, tuple(
            _hoist(f, variant, hoisted) for f in term.factors)) for term in terms]
        for expr, name in hoisted.items():
            temps.append(lp.TemporaryVariable(name, form.dtype, shape=(),
                                              address_space=priv))
            insns.append(lp.Assignment(kt.var(name), expr, id=f"hoist_{name}",
                                       within_inames=row_inames))
            pack_ids.append(f"hoist_{name}")
    scales = _load_scales(terms, j_names) if not t.classic else {}
    if scales:
        from loopy.symbolic import IdentityMapper

        class Unscale(IdentityMapper):  # type: ignore[misc]
            def map_product(self, p: prim.Product) -> Any:
                if _scaled_read(p, j_names) in scales:
                    return p.children[1]
                return super().map_product(p)

        terms = [ka.RowTerm(term.row, term.short, tuple(Unscale()(f) for f in term.factors))
                 for term in terms]
    nt = len(terms)
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=at(R, nt), address_space=priv))
    temps.append(lp.TemporaryVariable("val", form.dtype, shape=(*at(R, nt), *(
        (U,) if chunked else ())), address_space=priv))
    if chunked:
        temps += [lp.TemporaryVariable(x, form.dtype, shape=at(R, nt), address_space=priv)
                  for x in (("new",) if lazy else ("shift", "new"))]
    if lazy:
        temps += [lp.TemporaryVariable(f"hit_{k}{suffix(r)}", np.int32, shape=(),
                                       address_space=priv) for r in range(R) for k in range(nt)]
    if upd.needs_aux:
        temps.append(lp.TemporaryVariable("aux", upd.aux_dtype, shape=at(R, nt),
                                          address_space=priv))
    scratch = upd.scalar and e.reduction == "logsumexp" and not chunked
    if scratch:
        temps.append(lp.TemporaryVariable("dif", form.dtype, shape=at(R, nt),
                                          address_space=priv))
    init_ids: list[str] = []
    shared: dict[Any, str] = {}  # factors computed once per pair and row (not classic)

    def updates(tile: str, jj: str, tag: str, bounded: bool, after: dict[tuple[int, int], str],
                deps: frozenset[str], chunk: tuple[str, int] | None = None
                ) -> tuple[dict[tuple[int, int], str], list[str]]:
        """The val/update statements of one tile loop: the last update id of each (row,
        term) accumulator, and the ids of the statements reading local memory. *chunk*:
        (chunk loop, terms per chunk) of chunked log-sum-exp."""
        point = in_tile(kt.var(jj) if chunk is None else
                        kt.var(chunk[0]) * chunk[1] + kt.var(jj))
        jrow = kt.var(tile) * T + point
        hot = frozenset({"io", "il", tile, jj, *split_inames, *(chunk[:1] if chunk else ())})
        preds = frozenset[Any]({prim.Comparison(jrow, "<", nexpr)}) if bounded and not (
            chunk) else frozenset()
        last: dict[tuple[int, int], str] = {}
        readers: list[str] = []
        for r in range(R):
            def rewrite(name: str, idx: tuple[Any, ...], r: int = r) -> Any:
                if name in i_names:
                    return kt.sub(f"{name}_p", *at(r, ka.flat_short(i_names[name], idx)))
                if name in j_names:
                    return local_ref(name, point, ka.flat_short(j_names[name], idx))
                return None

            rw = kt.Rewriter(rewrite, {form.i: row(r), form.j: jrow})
            local_fac: dict[Any, str] = {}
            for k, term in enumerate(terms):
                factors = [rw(f) for f in term.factors]
                if not t.classic:
                    for n, g in enumerate(factors):
                        if isinstance(g, (prim.Subscript, prim.Variable)) or not ka.depends_on(
                                g, {f"{a}_p" for a in i_names}):
                            continue
                        if g not in local_fac:
                            fname = shared.setdefault(g, f"fac{len(shared)}")
                            fid = f"{fname}{tag}{suffix(r)}"
                            local_fac[g] = fid
                            if fname not in {v.name for v in temps}:
                                temps.append(lp.TemporaryVariable(fname, form.dtype, shape=(),
                                                                  address_space=priv))
                            insns.append(lp.Assignment(kt.var(fname), g, id=fid,
                                                       within_inames=hot, predicates=preds,
                                                       depends_on=deps | set(pack_ids)))
                            readers.append(fid)
                        factors[n] = kt.var(shared[g])
                acc, aux, val = (kt.sub(x, *at(r, k)) for x in ("acc", "aux", "val"))
                if not after:  # the first tile loop: the accumulator's initialisation first
                    shift = [(kt.sub("shift", *at(r, k)), upd.chunk_start)] if (
                        chunked and not lazy) else []
                    inits = kt.assignments([*upd.init(acc, aux), *shift],
                                           f"init_{k}{suffix(r)}", row_inames)
                    init_ids.extend(a.id for a in inits)
                    insns.extend(inits)
                vid: str | None = None  # sums: acc + value in one expression (one FMA)
                prev = {after[r, k]} if after else set()  # the last loop's use of val
                inputs = deps | {*pack_ids, *local_fac.values(), *prev}
                value = ka.product(factors)
                if chunk is not None:
                    last[r, k] = (lazy_updates if lazy else chunk_updates)(
                        r, k, tile, jj, chunk, value, jrow if bounded else None, inputs,
                        readers)
                    continue
                if t.classic or e.reduction != "sum":
                    vid = f"val{tag}_{k}{suffix(r)}"
                    insns.append(lp.Assignment(val, value, id=vid, within_inames=hot,
                                               predicates=preds, depends_on=inputs))
                    readers.append(vid)
                    value = val
                dif = kt.sub("dif", *at(r, k)) if scratch else None
                upds = kt.assignments(upd.update(acc, aux, value, jrow, scratch=dif),
                                      f"upd{tag}_{k}{suffix(r)}", hot,
                                      after={*init_ids, *prev, *(() if vid else inputs)},
                                      chain=True, first=vid, predicates=preds)
                insns.extend(upds)
                readers += [a.id for a in upds if ka.depends_on(a.expression, {"jp_l"} | {
                    f"{n}_l" for n in j_names})]
                last[r, k] = upds[-1].id
        return last, readers

    def chunk_values(r: int, k: int, sfx: str, inames: frozenset[str], jj: str, value: Any,
                     jrow: Any, past_n: float, inputs: frozenset[str] | set[str],
                     readers: list[str]) -> str:
        """The chunk's values of accumulator (r, k) (*past_n* past N when *jrow* is given);
        the id of their assignment."""
        if jrow is not None:
            value = prim.If(prim.Comparison(jrow, "<", nexpr), value,
                            form.dtype.type(past_n))
        vid = f"val_{sfx}"
        insns.append(lp.Assignment(kt.sub("val", *at(r, k), kt.var(jj)), value, id=vid,
                                   within_inames=inames | {jj},
                                   depends_on=frozenset(inputs)))
        readers.append(vid)
        return vid

    def chunk_updates(r: int, k: int, tile: str, jj: str, chunk: tuple[str, int], value: Any,
                      jrow: Any, inputs: frozenset[str] | set[str], readers: list[str]
                      ) -> str:
        """Chunked log-sum-exp of accumulator (r, k): the chunk's values (-inf past N when
        *jrow* is given), their maximum, the sum moved to it, one exp per term."""
        jo = chunk[0]
        sfx, inames = f"{tile}_{k}{suffix(r)}", frozenset({"io", "il", tile, jo,
                                                           *split_inames})
        acc, aux, sh, new = (kt.sub(x, *at(r, k)) for x in ("acc", "aux", "shift", "new"))
        vid = chunk_values(r, k, sfx, inames, jj, value, jrow, -np.inf, inputs, readers)
        prev = {*init_ids, *chunk_last.get((r, k), ())}
        mx = kt.assignments(upd.chunk_max(acc, kt.sub("val", *at(r, k), kt.var(f"{jj}m"))),
                            f"max_{sfx}", inames | {f"{jj}m"}, after={vid, *prev})
        rs = kt.assignments(upd.chunk_rescale(acc, aux, sh, new), f"rescale_{sfx}", inames,
                            after={mx[-1].id, *prev}, chain=True)
        sm = kt.assignments(upd.chunk_term(aux, sh, kt.sub("val", *at(r, k), kt.var(
            f"{jj}s"))), f"upd_{sfx}", inames | {f"{jj}s"}, after={rs[-1].id, vid})
        insns.extend([*mx, *rs, *sm])
        chunk_last[r, k] = (sm[-1].id,)
        return sm[-1].id

    def lazy_updates(r: int, k: int, tile: str, jj: str, chunk: tuple[str, int],
                     value: Any, jrow: Any, inputs: frozenset[str] | set[str],
                     readers: list[str]) -> str:
        """Lazy argmin of accumulator (r, k): the chunk's terms as carried (+inf past N
        when *jrow* is given), their minimum, and in a branch taken only when it is below
        the accumulator the index of the first term equal to it."""
        jo, size = chunk
        sfx, inames = f"{tile}_{k}{suffix(r)}", frozenset({"io", "il", tile, jo,
                                                           *split_inames})
        acc, aux, best = (kt.sub(x, *at(r, k)) for x in ("acc", "aux", "new"))
        hit = kt.var(f"hit_{k}{suffix(r)}")
        vid = chunk_values(r, k, sfx, inames, jj, upd.carried(value), jrow, np.inf, inputs,
                           readers)
        prev = {*init_ids, *chunk_last.get((r, k), ())}
        back = (size - 1) - kt.var(f"{jj}f{r}")
        start = kt.assignments([(best, acc)], f"start_{sfx}", inames, after=prev)
        mins = kt.assignments(upd.lazy_minimum(best, kt.sub("val", *at(r, k), kt.var(
            f"{jj}m"))), f"min_{sfx}", inames | {f"{jj}m"}, after={vid, start[0].id})
        test = kt.assignments([(hit, upd.lazy_found(best, acc))], f"hit_{sfx}", inames,
                              after={mins[-1].id})
        find = kt.assignments(upd.lazy_index(
            aux, kt.sub("val", *at(r, k), back), best,
            kt.var(tile) * T + in_tile(kt.var(jo) * size + back)), f"find_{sfx}",
            inames | {f"{jj}f{r}"}, after={test[0].id, vid, *prev}, chain=True,
            predicates=frozenset({hit}), tags=frozenset({OnNewMinimum()}))
        take = kt.assignments([(acc, best)], f"upd_{sfx}", inames,
                              after={find[-1].id, test[0].id})
        insns.extend([*start, *mins, *test, *find, *take])
        chunk_last[r, k] = (take[0].id,)
        return take[0].id

    chunk_last: dict[tuple[int, int], tuple[str, ...]] = {}

    def chunk_inames(jj: str) -> tuple[str, ...]:
        # a chunk's terms, their maximum or minimum, their sum or (one loop per row) index
        return (jj, f"{jj}m", *((f"{jj}f{r}" for r in range(R)) if lazy else (f"{jj}s",)))

    pre = kt.domain_prefix(form.m, form.n)
    domains = [f"{pre}{{[io]: 0 <= io and {K * R}*io < {form.m}}}"]
    if chunked:
        main_loads = loads("jt", "jl", "", not t.peel, frozenset())
        last, readers = updates("jt", "ju", "", not t.peel, {}, frozenset(main_loads),
                                ("jo", U))
        domains += [f"{{[il, jl, jo]: 0 <= il, jl < {K} and 0 <= jo < {K // U}}}",
                    f"{{[{', '.join(chunk_inames('ju'))}]: 0 <= "
                    f"{', '.join(chunk_inames('ju'))} < {U}}}"]
        if t.peel:
            tail_loads = loads("jt2", "jl2", "_tail", True, frozenset(readers))
            updates("jt2", "ju2", "_tail", True, last, frozenset(tail_loads), ("jo2", 1))
            domains += [f"{{[jl2, jo2]: 0 <= jl2, jo2 < {K}}}",
                        f"{{[{', '.join(chunk_inames('ju2'))}]: 0 <= "
                        f"{', '.join(chunk_inames('ju2'))} < 1}}",
                        f"{pre}{{[jt]: 0 <= jt and {T}*jt + {T} <= {form.n}}}",
                        f"{pre}{{[jt2]: 0 <= jt2 and {T}*jt2 < {form.n} < {T}*jt2 + {T}}}"]
        else:
            domains.append(f"{pre}{{[jt]: 0 <= jt and {T}*jt < {form.n}}}")
    elif t.peel:
        main_loads = loads("jt", "jl", "", False, frozenset())
        last, readers = updates("jt", "jj", "", False, {}, frozenset(main_loads))
        tail_loads = loads("jt2", "jl2", "_tail", True, frozenset(readers))
        last, _ = updates("jt2", "jj2", "_tail", True, last, frozenset(tail_loads))
        domains += [
            f"{{[il, jl, jj, jl2, jj2]: 0 <= il, jl, jj, jl2, jj2 < {K}}}",
            f"{pre}{{[jt]: 0 <= jt and {T}*jt + {T} <= {form.n}}}",
            f"{pre}{{[jt2]: 0 <= jt2 and {T}*jt2 < {form.n} < {T}*jt2 + {T}}}",
        ]
    else:
        last, _ = updates("jt", "jj", "", True, {},
                          frozenset(loads("jt", "jl", "", True, frozenset())))
        domains += [f"{{[il, jl, jj]: 0 <= il, jl, jj < {K}}}",
                    f"{pre}{{[jt]: 0 <= jt and {T}*jt < {form.n}}}"]
    update_ids = [x for x in (a.id for a in insns) if x.startswith("upd")]
    state = "shift" if chunked and not lazy else "acc"
    if S > 1:
        update_ids = combine_split(form, upd, S, K, R, nt, state, row_inames, update_ids,
                                    temps, insns)
        domains.append(f"{{[js, jsc]: 0 <= js < {S} and 1 <= jsc < {S}}}")
    for r in range(R):
        store_pred = frozenset[Any]({prim.Comparison(row(r), "<", mexpr), *(
            [prim.Comparison(kt.var("js"), "==", 0)] if S > 1 else [])})
        for k, term in enumerate(terms):
            stores = kt.output_stores(form, upd, term, row(r), kt.sub(state, *at(r, k)),
                                      kt.sub("aux", *at(r, k)))
            insns += kt.assignments(stores, f"store_{k}{suffix(r)}", row_inames,
                                    after=update_ids, predicates=store_pred)
    tags = {"io": "g.0", "il": "l.0", "jl": "l.0", **({"js": "l.1"} if S > 1 else {})}
    if t.peel:
        tags["jl2"] = "l.0"
    if chunked:
        tags.update({x: "unr" for x in (*chunk_inames("ju"), *(
            chunk_inames("ju2") if t.peel else ()))})
    elif t.unroll >= K:
        tags["jj"] = "unr"
    knl = kt.template_kernel(e, domains, insns, temps, tags, silenced=(
        "read_no_write(*)", *(("write_race(store_*)",) if S > 1 else ())))
    if 1 < t.unroll < K and not chunked:
        import loopy as lp

        knl = lp.split_iname(knl, "jj", t.unroll, inner_tag="unr")
        knl = lp.prioritize_loops(knl, "jt,jj_outer,jj_inner")
    return register_math(knl, t.math)

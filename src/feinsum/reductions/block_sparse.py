"""Reference lowering and evaluation of block-sparse kernel reductions.

A spec with ``block_sparse=BlockSparse(out_index="i", reduction_index="j")`` reduces,
for each output row ``i``, only over the ``j`` in the reduction ranges of ``i``'s
cluster. The ranges are data (KeOps' format, see :mod:`feinsum.reductions.ranges`), passed as
three extra inputs named after KeOps' roles (``i``: the output index, ``j``: the
reduction index, whatever the spec calls them):

``ranges_i`` ``(nranges_i, 2)``
    ``[start, end)`` of the output rows of each cluster;
``slices_i`` ``(nranges_i,)``
    cluster ``k`` reduces over ``redranges_j[slices_i[k-1]:slices_i[k]]`` (0 for ``k = 0``);
``redranges_j`` ``(nredranges_j, 2)``
    ``[start, end)`` of the reduction index of each kept cluster pair.

For a reduction over KeOps' ``i`` axis (output indexed by ``j``), pass the other half
of the 6-tuple (:func:`feinsum.reductions.ranges.swap_axes`). Rows covered by no range get the
reduction's neutral value (0 for sum, +inf for min, -inf for max and logsumexp;
argmin/argmax: +inf/-inf and index -1). Overlapping output ranges are not allowed; a
reduction index listed twice for one cluster is reduced twice (as in KeOps).

In kernels the three arrays are ``int32`` (``nranges_i`` and ``nredranges_j`` are int32
length arguments); :func:`evaluate_block_sparse` accepts ``int32`` and ``int64``.

:func:`generate_block_sparse_loopy` is what :func:`feinsum.generate_loopy` returns for a
block-sparse spec: a sequential loop over clusters, then the cluster's rows, then its
reduction ranges, with data-dependent loop bounds (one kernel serves every clustering).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pymbolic.primitives as prim

from feinsum.errors import EvaluationError, SpecificationError
from feinsum.lowering.kernel import register_block_sparse
from feinsum.reductions.ranges import RANGE_ARGS, RANGE_DTYPE, RANGE_LENGTHS, range_args
from feinsum.spec.model import INDEX_REDUCTIONS, Array, BatchedEinsum


def _form(e: BatchedEinsum) -> Any:
    """The spec as a :class:`feinsum.reductions.analysis.Form` (any dtype, any other output
    index lengths); only one reduction index is supported."""
    from feinsum.reductions import analysis as ka
    from feinsum.spec.dtypes import check_reduction_dtypes, compute_dtype

    bs = e.block_sparse
    if bs is None:
        raise SpecificationError("the spec carries no block-sparse restriction")
    if len(e.reduction_indices) != 1:
        raise SpecificationError(
            "block-sparse reductions over more than one reduction index are not supported; "
            f"this spec reduces over {', '.join(e.reduction_indices)}")
    check_reduction_dtypes(e)
    used = ka.array_indices(e)
    for a in e.arrays:
        if bs.out_index in used[a.name] and bs.reduction_index in used[a.name]:
            raise SpecificationError(
                f"array {a.name!r} is read with both {bs.out_index!r} and "
                f"{bs.reduction_index!r}: block-sparse specs take point clouds, not matrices")
    dtype = np.result_type(*(compute_dtype(e, r) for r in range(e.nrows)))
    short = tuple(k for k in e.out_indices if k != bs.out_index)
    return ka.Form(e, bs.out_index, bs.reduction_index, short, (), (), (), (), dtype)


# {{{ reference kernel


def generate_block_sparse_loopy(e: BatchedEinsum) -> Any:
    """The reference loopy kernel of a block-sparse spec (see the module docstring): the
    dense reference kernel's arguments plus ``ranges_i``, ``slices_i``, ``redranges_j``
    and the int32 lengths ``nranges_i``, ``nredranges_j``."""
    import loopy as lp

    from feinsum.lowering.reduction_updates import Updater, neutral_value
    from feinsum.reductions import analysis as ka
    from feinsum.reductions import templates as kt

    form = _form(e)
    i, j = form.i, form.j
    others = form.short_out
    lengths = e.lengths
    params = list(dict.fromkeys([*e.length_symbols, *RANGE_LENGTHS]))
    pre = "[" + ", ".join(params) + "] -> "

    def box(names: list[tuple[str, str]]) -> str:
        return " and ".join(f"0 <= {k} < {lengths[o]}" for k, o in names) if names else ""

    fill_names = [(f"{o}_fill", o) for o in e.out_indices]
    other_names = [(o, o) for o in others]
    # loopy nests a data-dependent domain under the loops of its bounds' writers: the
    # row domain (with the other output indices) under kc, s under the row, j under s
    row_params = ", ".join(["istart", "iend", *e.length_symbols])
    row_box = " and ".join([f"istart <= {i} < iend", *(box(other_names) and [box(other_names)])])
    domains = [
        pre + "{[" + ", ".join(k for k, _ in fill_names) + "]: " + box(fill_names) + "}",
        pre + "{[kc]: 0 <= kc < nranges_i}",
        "[" + row_params + "] -> {[" + ", ".join([i, *others]) + "]: " + row_box + "}",
        "[sstart, send] -> {[s]: sstart <= s < send}",
        "[jstart, jend] -> {[" + j + "]: jstart <= " + j + " < jend}",
    ]

    index_kind = e.reduction in INDEX_REDUCTIONS
    upd = Updater(e.reduction, np.dtype(form.dtype))
    dense_args = kt.reference_args(e)
    out_dtype = {a.name: a.dtype for a in dense_args}
    acc_dt = upd.index_dtype if index_kind else form.dtype
    temps = [lp.TemporaryVariable(n, RANGE_DTYPE, shape=())
             for n in ("istart", "iend", "sstart", "send", "jstart", "jend")]
    nrows = e.nrows
    priv = lp.AddressSpace.PRIVATE
    temps.append(lp.TemporaryVariable("acc", form.dtype, shape=(nrows,), address_space=priv))
    temps.append(lp.TemporaryVariable("val", form.dtype, shape=(nrows,), address_space=priv))
    if upd.needs_aux:
        temps.append(lp.TemporaryVariable("aux", acc_dt, shape=(nrows,), address_space=priv))
    insns: list[Any] = []
    kt_var = kt.var
    fill_vars = {o: kt_var(k) for k, o in fill_names}
    out_fill = tuple(fill_vars[o] for o in e.out_indices)
    out_idx = tuple(kt_var(o) for o in e.out_indices)
    fill_ids = []
    for r in range(nrows):
        neutral = neutral_value(e.reduction, np.dtype(out_dtype[f"out{r}"].numpy_dtype))
        insns.append(lp.Assignment(kt.sub(f"out{r}", *out_fill), neutral, id=f"fill{r}",
                                   within_inames=frozenset(k for k, _ in fill_names)))
        fill_ids.append(f"fill{r}")
        if index_kind:
            insns.append(lp.Assignment(kt.sub(f"out{r}_index", *out_fill), -1,
                                       id=f"fill{r}_index",
                                       within_inames=frozenset(k for k, _ in fill_names)))
            fill_ids.append(f"fill{r}_index")
    kc = kt_var("kc")
    outer = frozenset({"kc"})
    row_inames = frozenset({"kc", i, *others})
    insns += [
        lp.Assignment("istart", kt.sub("ranges_i", kc, 0), id="istart", within_inames=outer),
        lp.Assignment("iend", kt.sub("ranges_i", kc, 1), id="iend", within_inames=outer),
        lp.Assignment("sstart", prim.If(prim.Comparison(kc, ">", 0),
                                        kt.sub("slices_i", kc - 1), 0),
                      id="sstart", within_inames=row_inames),
        lp.Assignment("send", kt.sub("slices_i", kc), id="send", within_inames=row_inames),
    ]
    s_inames = row_inames | {"s"}
    j_inames = s_inames | {j}
    insns += [
        lp.Assignment("jstart", kt.sub("redranges_j", kt_var("s"), 0), id="jstart",
                      within_inames=s_inames),
        lp.Assignment("jend", kt.sub("redranges_j", kt_var("s"), 1), id="jend",
                      within_inames=s_inames),
    ]
    terms = ka.row_terms(form, unroll_short=False)
    update_ids: list[str] = []
    init_ids: list[str] = []
    for term in terms:
        r = term.row
        acc, aux, val = kt.sub("acc", r), kt.sub("aux", r), kt.sub("val", r)
        for k, (lhs, rhs) in enumerate(upd.init(acc, aux)):
            insns.append(lp.Assignment(lhs, rhs, id=f"init{r}_{k}", within_inames=row_inames,
                                       depends_on=frozenset({"istart", "iend"})))
            init_ids.append(f"init{r}_{k}")
        insns.append(lp.Assignment(val, ka.product(term.factors), id=f"val{r}",
                                   within_inames=j_inames,
                                   depends_on=frozenset({"jstart", "jend", "sstart", "send"})))
        prev = f"val{r}"
        for k, (lhs, rhs) in enumerate(upd.update(acc, aux, val, kt_var(j), ordered=False)):
            sid = f"upd{r}_{k}"
            insns.append(lp.Assignment(lhs, rhs, id=sid, within_inames=j_inames,
                                       depends_on=frozenset({prev, *init_ids})))
            update_ids.append(sid)
            prev = sid
    for term in terms:
        r = term.row
        acc, aux = kt.sub("acc", r), kt.sub("aux", r)
        deps = frozenset({*update_ids, *init_ids, *fill_ids})
        insns.append(lp.Assignment(kt.sub(f"out{r}", *out_idx), upd.result(acc, aux),
                                   id=f"store{r}", within_inames=row_inames, depends_on=deps))
        if index_kind:
            insns.append(lp.Assignment(kt.sub(f"out{r}_index", *out_idx), aux,
                                       id=f"store{r}_index", within_inames=row_inames,
                                       depends_on=deps))
    return lp.make_kernel(
        domains, insns, [*dense_args, *range_args(), *temps], name="einsum",
        lang_version=(2018, 2), target=lp.PyOpenCLTarget(),
        silenced_warnings=["read_no_write(*)"],
    )


# }}}


# {{{ numpy evaluation


def _array_axes(e: BatchedEinsum) -> dict[str, tuple[str | None, ...]]:
    """The spec index each axis of each array is read with (None: a feature index)."""
    from feinsum.spec.formulas import walk

    axes: dict[str, list[str | None]] = {a.name: [None] * a.ndim for a in e.arrays}
    for _r, c, f in e.factors():
        if isinstance(f, Array):
            for k, idx in enumerate(e.in_indices[c]):
                axes[f.name][k] = idx
            continue
        argmap = dict(zip(f.arguments, e.in_indices[c], strict=True))
        for x in walk(f.expression):
            if isinstance(x, prim.Subscript):
                agg: Any = x.aggregate
                for k, ix in enumerate(x.index_tuple):
                    iname = getattr(ix, "name", None)
                    if iname in argmap:
                        axes[agg.name][k] = argmap[iname]
    return {k: tuple(v) for k, v in axes.items()}


def _abstract(e: BatchedEinsum, axes: dict[str, tuple[str | None, ...]]) -> BatchedEinsum:
    """The dense spec with the restricted indices' lengths as fresh symbols."""
    from feinsum.spec.formulas import map_formula_arrays

    bs = e.block_sparse
    if bs is None:
        raise SpecificationError("the spec carries no block-sparse restriction")
    sym = {bs.out_index: "feinsum_bs_m", bs.reduction_index: "feinsum_bs_n"}

    def fix(a: Array) -> Array:
        shape = tuple(sym.get(ax, n) if ax is not None else n  # type: ignore[arg-type]
                      for ax, n in zip(axes[a.name], a.shape, strict=True))
        return Array(a.name, shape, a.dtype, a.order)

    args = tuple(tuple(tuple(fix(f) if isinstance(f, Array) else map_formula_arrays(f, fix)
                             for f in entry) for entry in row) for row in e.arguments)
    return BatchedEinsum(e.in_indices, e.out_indices, args, e.reduction, None)


def evaluate_block_sparse(e: BatchedEinsum, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """numpy evaluation of a block-sparse spec: ``arrays`` holds the spec's arrays and
    ``ranges_i``, ``slices_i``, ``redranges_j`` (int32 or int64). Returns
    ``{"out0": ...}`` (and ``out{r}_index``) like :func:`feinsum.evaluate`.

    Each output cluster is evaluated densely (:func:`feinsum.evaluate`) against the
    reduction points of its ranges, gathered in increasing index order, so ties of
    argmin/argmax go to the smallest index."""
    from feinsum.lowering.kernel import output_names
    from feinsum.lowering.reference import evaluate
    from feinsum.reductions.ranges import check_ranges

    form = _form(e)
    missing = [n for n in RANGE_ARGS if n not in arrays]
    if missing:
        raise EvaluationError(f"a block-sparse spec needs the array {missing[0]!r} "
                              "(see feinsum.reductions.block_sparse)")
    axes = _array_axes(e)
    dense = _abstract(e, axes)
    values = {a.name: np.asarray(arrays[a.name]) if a.name in arrays else None
              for a in e.arrays}
    for name, v in values.items():
        if v is None:
            raise EvaluationError(f"array {name!r} is missing")

    def length_of(index: str) -> int:
        for name, ax in axes.items():
            if index in ax:
                return int(values[name].shape[ax.index(index)])  # type: ignore[union-attr]
        n = e.lengths[index]
        if isinstance(n, int):
            return n
        raise EvaluationError(f"no array gives the length of {index!r}")

    m, n = length_of(form.i), length_of(form.j)
    ranges_i = np.asarray(arrays["ranges_i"])
    slices_i = np.asarray(arrays["slices_i"]).ravel()
    redranges_j = np.asarray(arrays["redranges_j"])
    for name, a in (("ranges_i", ranges_i), ("slices_i", slices_i),
                    ("redranges_j", redranges_j)):
        if a.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
            raise EvaluationError(f"{name} must be int32 or int64, got {a.dtype}")
    try:
        check_ranges(ranges_i, slices_i, redranges_j, m, n)
    except ValueError as exc:
        raise EvaluationError(str(exc)) from exc

    # outputs start at the neutral value
    from feinsum.lowering.reduction_updates import neutral_value

    names = output_names(e)
    probe = evaluate(dense, _take(values, axes, form.i, np.zeros(1, np.int64), form.j,
                                  np.zeros(1, np.int64)))
    out_axis = e.out_indices.index(form.i)
    results: dict[str, np.ndarray] = {}
    for name in names:
        shape = list(probe[name].shape)
        shape[out_axis] = m
        if name.endswith("_index"):
            results[name] = np.full(shape, -1, np.int32)
        else:
            dt = probe[name].dtype
            results[name] = np.full(shape, neutral_value(e.reduction, dt), dt)
    for k in range(ranges_i.shape[0]):
        i0, i1 = int(ranges_i[k, 0]), int(ranges_i[k, 1])
        lo = int(slices_i[k - 1]) if k > 0 else 0
        hi = int(slices_i[k])
        if i1 <= i0 or hi <= lo:
            continue
        jidx = np.concatenate([np.arange(int(a), int(b)) for a, b in redranges_j[lo:hi]])
        if jidx.size == 0:
            continue
        jidx = np.sort(jidx, kind="stable")
        got = evaluate(dense, _take(values, axes, form.i, np.arange(i0, i1), form.j, jidx))
        where = [slice(None)] * len(e.out_indices)
        where[out_axis] = slice(i0, i1)
        for name in names:
            v = got[name]
            if name.endswith("_index"):
                v = np.where(v >= 0, jidx[np.clip(v, 0, None)], -1).astype(np.int32)
            results[name][tuple(where)] = v
    return results


def _take(values: Mapping[str, Any], axes: Mapping[str, tuple[str | None, ...]], i: str,
          iidx: np.ndarray, j: str, jidx: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for name, v in values.items():
        for k, ax in enumerate(axes[name]):
            if ax == i:
                v = np.take(v, iidx, axis=k)
            elif ax == j:
                v = np.take(v, jidx, axis=k)
        out[name] = v
    return out


def dense_equivalent(e: BatchedEinsum) -> BatchedEinsum:
    """The spec without its block-sparse restriction."""
    return replace(e, block_sparse=None)


# }}}

register_block_sparse(sys.modules[__name__])

# vim: foldmethod=marker

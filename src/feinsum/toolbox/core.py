"""Shared transformation steps that recipes compose.

Every step takes a :class:`loopy.TranslationUnit` (the reference kernel of
:func:`feinsum.generate_loopy`, or one already transformed) and returns a new one,
in loopy's style; nothing is modified in place. Steps are correct for every length
(guards where a length is not a multiple of a tile); none adds an assumption on
the runtime lengths.

Iname naming: :func:`distribute` turns ``i`` into ``i_g`` (work-groups), ``i_l``
(work-items) and ``i_p`` (several per work-item; an iname not split
is only renamed ``i_g``); :func:`tile_reduction` turns ``j``
into ``j_t`` (tiles, sequential) and ``j_u`` (inside a tile);
:func:`parallel_reduction` turns ``j`` into ``j_s`` (sequential) and ``j_w`` (the
work-items that share the reduction). See ``docs/recipes.rst``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import loopy as lp
import numpy as np

from feinsum.spec.model import Array, BatchedEinsum

#: The largest fixed length :func:`fixed_short_inames` offers for full unrolling.
UNROLL_LIMIT = 32


# {{{ inspection


def kernel_of(t_unit: lp.TranslationUnit) -> lp.LoopKernel:
    """The kernel of a translation unit (the reference kernel has one, ``einsum``)."""
    return t_unit.default_entrypoint


def is_fixed(e: BatchedEinsum, index: str) -> bool:
    """Whether *index* has a fixed integer length in *e* (long axes are symbols)."""
    return isinstance(e.lengths[index], int)


def short_indices(e: BatchedEinsum, indices: Iterable[str], limit: int = UNROLL_LIMIT
                  ) -> list[str]:
    """The *indices* of *e* whose length is a fixed integer no longer than *limit*."""
    out = []
    for i in indices:
        n = e.lengths[i]
        if isinstance(n, int) and n <= limit:
            out.append(i)
    return out


def dense_only(e: BatchedEinsum, device: Any = None) -> str | None:
    """An ``applies`` for recipes of dense specs: the reason a block-sparse one is not."""
    return "block-sparse specs need a block-sparse recipe" if e.block_sparse else None


def index_operands(e: BatchedEinsum) -> tuple[list[int], tuple[int, ...]] | str:
    """The columns of the operands with indices of a dense sum of plain arrays and scalar
    factors, and the columns of the scalar ones; else why *e* is none."""
    tensors = [c for c in range(e.noperands) if e.in_indices[c]]
    if e.block_sparse is not None or e.reduction != "sum":
        return "needs a dense sum of two operands (and scalar factors)"
    if not all(isinstance(f, Array) for _, c, f in e.factors() if c in tensors):
        return "formula operands: use generic"
    return tensors, tuple(c for c in range(e.noperands) if c not in tensors)


def two_operands(e: BatchedEinsum) -> tuple[tuple[int, int], tuple[int, ...]] | str:
    """The columns of the two operands with indices of a dense sum of two operands and
    scalar factors (``ik,kj,->ij``: pytato's ``2 * (A @ B)``), and the columns of the
    scalar ones; else why *e* is none."""
    if isinstance(ops := index_operands(e), str):
        return ops
    tensors, scales = ops
    if len(tensors) != 2:
        return "needs a dense sum of two operands (and scalar factors)"
    return (tensors[0], tensors[1]), scales


def main_reduction(e: BatchedEinsum) -> str | None:
    """The reduction index worth tiling or sharing: a long (symbolic) one first, else the
    longest; ``None`` without reduction."""
    red = e.reduction_indices
    return max(red, key=lambda i: (not is_fixed(e, i), e.lengths[i] if is_fixed(e, i) else 0)
               ) if red else None


def has_formula(e: BatchedEinsum, column: int) -> bool:
    """Whether operand *column* of some row holds a formula factor."""
    return any(not isinstance(f, Array) for row in e.arguments for f in row[column])


def pow2_at_least(n: int, cap: int) -> int:
    """The smallest power of two >= *n*, at most *cap*."""
    return min(cap, 1 << max(0, n - 1).bit_length())


def operand_rules(t_unit: lp.TranslationUnit, column: int) -> list[str]:
    """The substitution rules of operand *column*, one per row: ``op{column}_r{row}``."""
    rules = kernel_of(t_unit).substitutions
    return sorted((n for n in rules if n.startswith(f"op{column}_r")),
                  key=lambda n: int(n.rsplit("_r", 1)[1]))


def inames_of(t_unit: lp.TranslationUnit) -> frozenset[str]:
    return frozenset(kernel_of(t_unit).all_inames())


def iname_length(t_unit: lp.TranslationUnit, iname: str) -> int | None:
    """The fixed trip count of *iname* (formula feature inames included), or ``None`` if
    it depends on a runtime length."""
    knl = kernel_of(t_unit)
    size = knl.get_iname_bounds(iname, constants_only=False).size
    if not size.is_cst():
        return None
    try:
        return int(knl.get_constant_iname_length(iname))
    except Exception:  # unbounded or piecewise: not a fixed length
        return None


def short_inames(t_unit: lp.TranslationUnit, inames: Iterable[str], limit: int = UNROLL_LIMIT
                 ) -> list[str]:
    """The *inames* (of the kernel) with a fixed trip count of at most *limit*."""
    out = []
    for i in inames:
        n = iname_length(t_unit, i)
        if n is not None and n <= limit:
            out.append(i)
    return out


def feature_inames(t_unit: lp.TranslationUnit, e: BatchedEinsum) -> list[str]:
    """The inames of the reference kernel that are not indices of *e*: formula feature
    indices (call it before splitting inames)."""
    return sorted(inames_of(t_unit) - set(e.indices))


def dtype_size(e: BatchedEinsum) -> int:
    """Bytes of the widest value type of the spec (sizes local/private memory)."""
    return max(np.dtype(e.value_dtype(r)).itemsize for r in range(e.nrows))


# }}}


# {{{ preparing the reference kernel


def assume_nonempty(t_unit: lp.TranslationUnit, e: BatchedEinsum) -> lp.TranslationUnit:
    """Tell loopy every length symbol of *e* is at least 1 (feinsum never has empty axes).

    Recipes should start with this: without it loopy wraps the kernel body in
    ``if (n >= 1)``, and PoCL 3 crashes or computes garbage when a barrier (local
    staging, parallel reductions) sits inside such a conditional."""
    syms = [s for s in e.length_symbols if s in kernel_of(t_unit).arg_dict]
    return lp.assume(t_unit, " and ".join(f"{s} >= 1" for s in syms)) if syms else t_unit


def silence(t_unit: lp.TranslationUnit, *warnings: str) -> lp.TranslationUnit:
    """Silence loopy warnings by name (``"v1_scheduler_fallback"``, ``"write_race*"``)."""
    knl = kernel_of(t_unit)
    return t_unit.with_kernel(knl.copy(silenced_warnings=knl.silenced_warnings | set(warnings)))


# }}}


# {{{ distributing output loops


def distribute(
    t_unit: lp.TranslationUnit,
    iname: str,
    *,
    work_items: int,
    axis: int,
    group_axis: int | None = None,
    per_item: int = 1,
    per_item_tag: str | None = "unr",
    contiguous: bool = False,
    slabs: bool = False,
) -> lp.TranslationUnit:
    """Spread the output loop *iname* over work-groups (``g.group_axis``, by default
    ``g.axis``) and work-items (``l.axis``), each work-item handling *per_item* entries
    (``{iname}_p``, tagged *per_item_tag*: ``"unr"`` unrolls them, ``"ilp"`` also
    duplicates accumulators, ``"vec"`` makes them vector lanes, ``None`` a plain loop).
    Use ``"ilp"`` when a staged tile sits inside the reduction: loopy cannot schedule an
    unrolled loop around a reduction whose tile loop holds a fetch.

    With ``contiguous=False`` a work-item's entries are *work_items* apart (neighbouring
    work-items touch neighbouring entries: coalesced on GPUs, vectorised across work-items
    by PoCL); with ``contiguous=True`` they are adjacent (what ``vec`` needs).
    ``slabs=True`` generates unguarded code for every work-group but the last (worth it
    when the length is not known to be a multiple of the tile). ``work_items=1`` and
    ``per_item=1`` tags the whole loop ``g.axis``.
    """
    g, ll, p = f"{iname}_g", f"{iname}_l", f"{iname}_p"
    gtag = f"g.{axis if group_axis is None else group_axis}"
    tile = work_items * per_item
    if tile == 1:
        return lp.rename_iname(lp.tag_inames(t_unit, {iname: gtag}), iname, g)
    slab = (0, 1) if slabs else (0, 0)
    t_unit = lp.split_iname(t_unit, iname, tile, outer_iname=g, inner_iname=f"{iname}_in",
                            outer_tag=gtag, slabs=slab)
    inner = f"{iname}_in"
    if per_item == 1:
        return lp.rename_iname(lp.tag_inames(t_unit, {inner: f"l.{axis}"}), inner, ll)
    if work_items == 1:
        return lp.rename_iname(tag(t_unit, {inner: per_item_tag}), inner, p)
    if contiguous:
        return lp.split_iname(t_unit, inner, per_item, outer_iname=ll, inner_iname=p,
                              outer_tag=f"l.{axis}", inner_tag=per_item_tag)
    return lp.split_iname(t_unit, inner, work_items, outer_iname=p, inner_iname=ll,
                          outer_tag=per_item_tag, inner_tag=f"l.{axis}")


def tag(t_unit: lp.TranslationUnit, tags: Mapping[str, str | None]) -> lp.TranslationUnit:
    """Tag inames (``{"i": "g.2", "j": "unr"}``); ``None`` entries are skipped."""
    todo: dict[str, Any] = {k: v for k, v in tags.items() if v is not None}
    return lp.tag_inames(t_unit, todo) if todo else t_unit


# }}}


# {{{ reductions


def tile_reduction(t_unit: lp.TranslationUnit, iname: str, tile: int, *, unroll: bool = True
                   ) -> lp.TranslationUnit:
    """Split reduction iname *iname* into tiles of *tile* (``{iname}_t`` sequential,
    ``{iname}_u`` inside, unrolled if *unroll*). A tile of 1 leaves the loop as it is."""
    if tile <= 1:
        return t_unit
    return lp.split_iname(t_unit, iname, tile, outer_iname=f"{iname}_t",
                          inner_iname=f"{iname}_u", inner_tag="unr" if unroll else None)


def unroll(t_unit: lp.TranslationUnit, inames: Iterable[str]) -> lp.TranslationUnit:
    """Unroll loops of fixed length completely."""
    return tag(t_unit, {i: "unr" for i in inames})


def parallel_reduction(t_unit: lp.TranslationUnit, iname: str, work_items: int, axis: int
                       ) -> lp.TranslationUnit:
    """Have *work_items* work-items (``l.axis``) share the reduction over *iname*: each
    reduces a strided part sequentially (``{iname}_s``), then loopy combines the partial
    results in local memory (``{iname}_w``). Works for every reduction operation
    (feinsum's min/max/argmin/argmax/logsumexp included)."""
    if work_items <= 1:
        return t_unit
    t_unit = lp.split_iname(t_unit, iname, work_items, outer_iname=f"{iname}_s",
                            inner_iname=f"{iname}_w", inner_tag=f"l.{axis}")
    return lp.split_reduction_outward(t_unit, f"{iname}_w")


# }}}


# {{{ staging operands


def stage(
    t_unit: lp.TranslationUnit,
    rule: str,
    sweep_inames: Sequence[str],
    *,
    address_space: str = "local",
    outer_inames: Iterable[str] | None = None,
    temporary_name: str | None = None,
    fetch_tag: str | None = "l.auto",
) -> lp.TranslationUnit:
    """Compute substitution rule *rule* (an operand ``op{c}_r{r}`` or a formula) into a
    temporary over *sweep_inames* before it is used: ``"local"`` memory shared by a
    work-group (the fetch spread over its work-items with *fetch_tag*), or ``"private"``
    memory (a register tile; sweeps of unrolled per-item inames).

    *outer_inames* are the loops the fetch sits inside (by default every iname of the
    uses that is not swept): typically the work-group inames and the reduction tile.
    """
    space = {"local": lp.AddressSpace.LOCAL, "private": lp.AddressSpace.PRIVATE}[address_space]
    kwargs: dict[str, Any] = {}
    if outer_inames is not None:
        kwargs["precompute_outer_inames"] = frozenset(outer_inames)
    insn_id = kernel_of(t_unit).get_var_name_generator()(f"{rule}_fetch")
    t_unit = lp.precompute(
        t_unit, rule, list(sweep_inames), temporary_address_space=space,
        temporary_name=temporary_name, compute_insn_id=insn_id,
        default_tag=fetch_tag if address_space == "local" else "unr", **kwargs,
    )
    # a fetch that spans fewer local axes than the kernel runs on every work-item of the
    # others: give it those axes (loopy otherwise refuses the kernel)
    return lp.add_inames_for_unused_hw_axes(t_unit, within=f"id:{insn_id}")


def stage_operand(
    t_unit: lp.TranslationUnit, column: int, sweep_inames: Sequence[str], *,
    address_space: str = "local", outer_inames: Iterable[str] | None = None,
) -> lp.TranslationUnit:
    """:func:`stage` operand *column* of every row (its rules ``op{column}_r{row}``)."""
    for rule in operand_rules(t_unit, column):
        t_unit = stage(t_unit, rule, sweep_inames, address_space=address_space,
                       outer_inames=outer_inames)
    return t_unit


def stage_plan(
    indices: Sequence[str],
    inames: Mapping[str, Sequence[str]],
    sizes: Mapping[str, int],
    local: Iterable[str],
    outer: Sequence[str],
    address_space: str = "local",
) -> tuple[list[str], list[str]] | str:
    """The ``(sweep_inames, outer_inames)`` for :func:`stage` of an operand read with
    *indices*, or the reason it cannot be staged. Works before any transformation, so
    that constraints can call it.

    :arg inames: what each index became, e.g. ``{"i": ["i_g", "i_l", "i_p"], "k": ["k_t",
        "k_u"], "d": ["d"]}`` (an index missing here stays one loop of its own name).
    :arg sizes: trip counts of the inames a tile may sweep (work-items, per-item entries,
        reduction tile, short whole loops); other inames are sequential or group loops.
    :arg local: the inames tagged ``l.*``: swept by a local fetch; for a private one,
        outer loops (each work-item stages its own tile).
    :arg outer: the loops every fetch sits in: the group inames and any sequential loop
        enclosing the reduction.
    """
    local = [n for n in local if n in sizes]
    sweep: list[str] = []
    out = [*outer, *(local if address_space == "private" else [])]
    for index in indices:
        for n in inames.get(index, [index]):
            if n in out or n in sweep:
                continue
            (sweep if n in sizes else out).append(n)
    return (sweep, out) if sweep else "nothing to share"


def footprint(sweep: Iterable[str], sizes: Mapping[str, int]) -> int:
    """Entries of a staged tile: the product of its sweep's trip counts."""
    n = 1
    for i in sweep:
        n *= sizes[i]
    return n


def stage_array(
    t_unit: lp.TranslationUnit,
    array: str,
    sweep_inames: Sequence[str],
    *,
    address_space: str = "local",
    fetch_outer_inames: Iterable[str] | None = None,
    fetch_tag: str | None = "l.auto",
) -> lp.TranslationUnit:
    """Prefetch the part of global *array* that *sweep_inames* touch into local or
    private memory (loopy's ``add_prefetch``)."""
    space = {"local": lp.AddressSpace.LOCAL, "private": lp.AddressSpace.PRIVATE}[address_space]
    return lp.add_prefetch(
        t_unit, array, list(sweep_inames), temporary_address_space=space,
        default_tag=fetch_tag if address_space == "local" else "unr",
        fetch_outer_inames=None if fetch_outer_inames is None else frozenset(fetch_outer_inames),
    )


# }}}


# {{{ OpenCL vector types


def tag_vector_axes(t_unit: lp.TranslationUnit, arrays: Iterable[str], width: int
                    ) -> lp.TranslationUnit:
    """Split the last axis of each of *arrays* (C order, a fixed length that *width*
    divides) into ``(n / width, width)`` and tag the new axis ``vec``, so that an iname
    tagged ``vec`` of *width* lanes reads and writes them as OpenCL vectors
    (``float4``...). Pair with ``distribute(..., contiguous=True, per_item_tag="vec")``.
    Accesses loopy cannot vectorise fall back to per-lane code, so the result stays
    correct.

    Caveat: on a kernel *argument* this changes the kernel's interface (``a[n]`` becomes
    ``a[n / width, width]``), which callers of feinsum kernels (measurement, the hook) do
    not expect: use it on temporaries (a staged tile) or in kernels whose recipe
    documents the reshaped arguments."""
    knl = kernel_of(t_unit)
    for name in arrays:
        arg = knl.arg_dict.get(name) or knl.temporary_variables.get(name)
        if arg is None or not arg.shape:
            continue
        n = len(cast(tuple[Any, ...], arg.shape))
        t_unit = lp.split_array_axis(t_unit, name, n - 1, width)
        tags = ",".join([*(f"N{n - 1 - k}" for k in range(n)), "vec"])
        t_unit = lp.tag_array_axes(t_unit, name, tags)
    return t_unit


# }}}


# {{{ parameters and constraints every recipe wants


def build_option_parameters(e: BatchedEinsum) -> dict[str, Any]:
    """``denorms_are_zero`` and ``fast_math`` parameters (they become OpenCL build options,
    :data:`feinsum.recipes.BUILD_OPTION_FLAGS`). ``fast_math`` assumes no NaN, so it is
    offered for sums only: min/max/argmin/argmax/logsumexp propagate NaN."""
    from feinsum.toolbox.parameters import Boolean, Choice

    return {"denorms_are_zero": Boolean(),
            "fast_math": Choice([False, True] if e.reduction == "sum" else [False])}


#: Defaults of :func:`build_option_parameters` (IEEE behaviour).
BUILD_OPTION_DEFAULTS = {"denorms_are_zero": False, "fast_math": False}

#: Work-groups larger than this take PoCL minutes to compile (and no GPU has more).
MAX_WORK_GROUP = 1024


def work_group_constraints(device: Any, *axes: str) -> list[Any]:
    """Constraints ``work_group_size`` (the product of the parameters named by *axes*, the
    work-items along ``l.0``, ``l.1``... at most ``min(max_work_group_size, 1024)``) and
    ``work_item_sizes`` (each at most the device's limit for its axis)."""
    from feinsum.toolbox.parameters import Constraint, at_most

    limit = min(MAX_WORK_GROUP, device.max_work_group_size)
    per_axis = device.max_work_item_sizes

    def total(p: Mapping[str, Any]) -> int:
        return int(np.prod([p[a] for a in axes]))

    return [
        at_most("work_group_size", total, limit,
                f"{'*'.join(axes)} <= max_work_group_size (and {MAX_WORK_GROUP})"),
        Constraint("work_item_sizes",
                   lambda p: all(p[a] <= per_axis[k] for k, a in enumerate(axes)),
                   f"{', '.join(axes)} <= max_work_item_sizes"),
    ]


# }}}


# {{{ build options and priorities


def add_build_options(t_unit: lp.TranslationUnit, options: Sequence[str]) -> lp.TranslationUnit:
    """*t_unit* with OpenCL build options appended to its kernel's (duplicates dropped)."""
    knl = kernel_of(t_unit)
    merged = list(dict.fromkeys([*(knl.options.build_options or []), *options]))
    return lp.set_options(t_unit, build_options=merged)


def prioritize(t_unit: lp.TranslationUnit, order: Sequence[str]) -> lp.TranslationUnit:
    """Ask for loops nested in *order* (outermost first), keeping the inames that exist."""
    present = inames_of(t_unit)
    order = [i for i in order if i in present]
    return lp.prioritize_loops(t_unit, ",".join(order)) if len(order) > 1 else t_unit


# }}}

# vim: foldmethod=marker

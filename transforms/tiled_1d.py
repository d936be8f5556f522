"""tiled_1d: KeOps' GpuConv1D scheme for kernel reductions, with GPU options.

A work-group of ``K`` work-items owns ``K * rows`` consecutive output rows, ``rows`` per
work-item, whose i-variables sit in private registers. The ``j`` loop runs in tiles of
``K``: the work-items load one tile of the j-variables cooperatively into local memory (one
point each), a barrier, then every work-item folds the tile's terms into the private
accumulators of its rows, a barrier (:mod:`feinsum.reductions.row_tiles`). GPU options:
``peel`` the last tile (no bounds check in the main tile loop), ``unroll`` the in-tile
loop, ``pack`` each j-point into one vector of local memory (one wide load), ``rows`` per
work-item (a j-point read serves several pairs), ``split`` work-items per row (along ``l.1``,
each folding its share of every tile; their partials combined in local memory: rows per
item without too few warps), ``math`` the ``exp``/``log`` flavour
(``native``, or ``exp2`` with the constant folded), ``clamp_nan`` (a min/argmin over terms
never negative, such as squared distances: a NaN term carried as -1, one ``fmax`` and one
``fmin`` per pair instead of NaN tests; GPUs only by default, PoCL's ``fmin``/``fmax`` are
slower than its selects), ``lazy_index`` (such an argmin's index looked for only in a chunk
of ``unroll`` terms that holds a row's new minimum; GPUs only by default). Nothing of size
``M x N`` is stored.
"""

from __future__ import annotations

from typing import Any

import loopy as lp

from feinsum.lowering.reduction_updates import MATH_MODES
from feinsum.recipes import (
    Boolean,
    Choice,
    Constraint,
    ParameterSpace,
    PowersOfTwo,
    Recipe,
    at_most,
)
from feinsum.reductions import analysis as ka
from feinsum.reductions import row_tiles as rt

#: Rows per work-group on CPUs (PoCL runs the group's items as a loop: a short one).
CPU_TILE = 32
#: Work-items per group on GPUs: several groups per compute unit, and M = 1e5 rows in
#: hundreds of groups (K x rows = 256 rows each), so that the last wave leaves few
#: compute units idle.
GPU_TILE = 64
#: Rows per work-item on GPUs at most: four independent chains, each j-point read from
#: local memory serves four pairs; fewer where M rows would leave the device short of
#: warps (:func:`~feinsum.reductions.row_tiles.gpu_rows`: one at M = 1e5 on an H200).
GPU_ROWS = 4
#: Unrolled pairs of the in-tile loop per work-item (unroll x rows) on GPUs, and unrolled
#: terms per row at most (log-sum-exp rescales its sum once per chunk of them).
GPU_UNROLLED = 64
GPU_UNROLL = 32


def _applies(e: Any, device: Any) -> str | None:
    form = ka.analyze(e)
    return form if isinstance(form, str) else None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = ka.analyze(e)
    ok = not isinstance(form, str)
    single = ok and form.dtype.itemsize == 4
    packable = ok and rt.pack_width(form) is not None
    return ParameterSpace(
        K=PowersOfTwo(16, 1024), rows=Choice([1, 2, 4, 8]), split=Choice([1, 2, 4, 8]),
        unroll=PowersOfTwo(1, 256),
        peel=Boolean(), pack=Boolean(), math=Choice(list(MATH_MODES)),
        denorms_are_zero=Boolean(),
        clamp_nan=Boolean() if ka.clamps_nan(form) else Choice([False]),
        lazy_index=Boolean() if _lazy(form) else Choice([False]),
        constraints=[
            at_most("work_group", lambda p: p["K"] * p["split"], device.max_work_group_size,
                    "K x split <= max_work_group_size"),
            at_most("local_memory", lambda p: rt.group_local_bytes(
                form, p["K"], p["rows"], p["split"], p["pack"]) if ok else 0,
                    device.local_mem_size, "K x split x (bytes per j-point + rows x bytes "
                    "per accumulator) <= local_mem_size"),
            at_most("registers", lambda p: rt.private_values(form, p["rows"]) if ok else 0,
                    64, "rows x (i-values + accumulators) <= 64 private values"),
            Constraint("unroll_within_tile", lambda p: p["unroll"] <= p["K"],
                       "unroll <= K (unroll = K: the whole tile)"),
            at_most("code_size", lambda p: p["unroll"] * p["rows"], 256,
                    "unroll x rows <= 256 unrolled pairs"),
            Constraint("pack_fits", lambda p: not p["pack"] or packable,
                       "pack needs 2 to 16 values per j-point, of one dtype"),
            Constraint("native_float32", lambda p: single or not p["math"].startswith(
                "native"), "native exp/log are float32 only"),
            Constraint("lazy_needs_clamp", lambda p: p["clamp_nan"] or not p["lazy_index"],
                       "lazy_index needs clamp_nan"),
        ],
    )


def _lazy(form: Any) -> bool:
    """Whether ``lazy_index`` applies: an argmin whose terms are never negative."""
    return ka.clamps_nan(form) and form.e.reduction == "argmin"


def _default(e: Any, device: Any, lengths: dict[str, int]) -> dict[str, Any]:
    form = ka.analyze(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    if device.is_cpu:
        return {"K": min(CPU_TILE, device.max_work_group_size), "rows": 1, "split": 1,
                "unroll": 1,
                "peel": False, "pack": False, "math": "accurate", "denorms_are_zero": single,
                "clamp_nan": False, "lazy_index": False}
    k = min(GPU_TILE, device.max_work_group_size)
    # log-sum-exp's chunks and the lazy argmin keep ``unroll`` values per row: half as many
    chunks = not isinstance(form, str) and rt.keeps_chunks(form, _lazy(form))
    rows, split = (GPU_ROWS, 1) if isinstance(form, str) else rt.gpu_rows(
        form, device, GPU_ROWS // 2 if chunks else GPU_ROWS, lengths, k)
    unrolled = GPU_UNROLLED // 2 if chunks else GPU_UNROLLED
    return {"K": k, "rows": rows, "split": split,
            "unroll": min(k, unrolled // rows, GPU_UNROLL),
            "peel": True,
            "pack": not isinstance(form, str) and rt.pack_width(form) is not None,
            "math": rt.default_math(form, device), "denorms_are_zero": single,
            "clamp_nan": ka.clamps_nan(form), "lazy_index": _lazy(form)}


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Rows in private registers, j-variables in local-memory tiles of K: GpuConv1D."""
    return rt.tiled_kernel(e, rt.Tiling(
        K=params["K"], rows=params["rows"], unroll=params["unroll"], peel=params["peel"],
        pack=params["pack"], math=params["math"], clamp_nan=params["clamp_nan"],
        lazy_index=params["lazy_index"], split=params["split"]))


def _upgrade(params: dict[str, Any]) -> dict[str, Any]:
    """A configuration of before the GPU options (``K``, ``unroll`` a boolean,
    ``denorms_are_zero``) as the plain kernel it generated; one of before ``clamp_nan``
    with the NaN tests it generated; one of before ``lazy_index`` with the index taken at
    every term; one of before ``split`` with one work-item per row."""
    if "rows" not in params and isinstance(params.get("unroll"), bool):
        params = {**params, "rows": 1, "unroll": params.get("K") if params["unroll"] else 1,
                  "peel": False, "pack": False, "math": "accurate"}
    if "clamp_nan" not in params:
        params = {**params, "clamp_nan": False}
    if "split" not in params:
        params = {**params, "split": 1}
    return params if "lazy_index" in params else {**params, "lazy_index": False}


RECIPE = Recipe("tiled_1d", applies=_applies, space=_space, default=_default, apply=_apply,
                upgrade=_upgrade)

"""tiled_2d_gpu: KeOps' GpuConv2D scheme on GPUs, for few output rows and many terms.

The reduction index is dealt to the lanes: ``G`` work-groups of ``K`` work-items sweep
the terms ``G*K`` at a time (coalesced reads of the j-variables), every work-item folds
each of its terms into the ``R`` rows of its block (i-variables and accumulators in
registers; the ``ceil(M/R)`` row blocks are a second grid axis), a tree over local memory
combines the group's partial accumulators per row, and a second device kernel combines the
``G`` partials of each row (:mod:`feinsum.reductions.few_rows`). For a fixed ``M`` (the
row-parallel schemes ``tiled_1d`` and ``tiled_2d`` need a symbolic one); GPUs only
(``tiled_2d`` is the CPU's 2D scheme). ``math``: the ``exp``/``log`` flavour, as
tiled_1d's.
"""

from __future__ import annotations

from typing import Any

import loopy as lp

from feinsum.lowering.reduction_updates import MATH_MODES
from feinsum.recipes import (
    Boolean,
    Choice,
    Constraint,
    IntRange,
    ParameterSpace,
    PowersOfTwo,
    Recipe,
    at_most,
)
from feinsum.reductions import few_rows as fr
from feinsum.reductions.row_tiles import default_math

#: Work-items per group (the default): four warps, whose partials the tree combines.
GPU_TILE = 128
#: Rows of a block (the default, at most): each term read serves 8 rows, in few enough
#: registers that 32 warps per compute unit are resident (the H200 model prefers 8 to the
#: fewest blocks for M = 16 and 64: 1.3-1.9x).
BLOCK_ROWS = 8
#: Warps per compute unit the default's grid makes (all row blocks together): what the
#: loads' and the exponential's latencies need, with registers for 2 x 16 resident.
WARPS_PER_UNIT = 32


def _groups(blocks: int, units: int, groups: int) -> int:
    """``G`` (a power of two) for ``blocks`` row blocks: about *groups* work-groups in
    all, the one of the two nearest powers of two whose grid divides into the *units*
    most evenly (the smaller on a tie)."""
    want = max(1, groups // blocks)
    low = 1 << (want.bit_length() - 1)

    def balance(g: int) -> float:
        return g * blocks / (units * -(-g * blocks // units))

    return max((low, 2 * low), key=lambda g: (balance(g), -g))


def _applies(e: Any, device: Any) -> str | None:
    if device.is_cpu:
        return "a GPU scheme (on CPUs tiled_2d deals the terms to cores)"
    form = fr.row_form(e)
    return form if isinstance(form, str) else None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = fr.row_form(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    return ParameterSpace(
        K=PowersOfTwo(32, 1024), G=PowersOfTwo(1, 4096),
        R=IntRange(1, 1 if isinstance(form, str) else fr.max_block(form)),
        math=Choice(list(MATH_MODES)), denorms_are_zero=Boolean(),
        constraints=[
            at_most("work_group", lambda p: p["K"], device.max_work_group_size,
                    "K <= max_work_group_size"),
            Constraint("block_lanes", lambda p: p["R"] <= p["K"],
                       "R <= K (lane r stores row r of the block)"),
            Constraint("native_float32", lambda p: single or not p["math"].startswith(
                "native"), "native exp/log are float32 only"),
        ],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    form = fr.row_form(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    K = min(GPU_TILE, device.max_work_group_size)
    m = 1 if isinstance(form, str) else int(form.m)
    most = 1 if isinstance(form, str) else min(fr.max_block(form), K, BLOCK_ROWS)
    blocks = -(-m // most)
    units = max(1, device.compute_units)
    items = WARPS_PER_UNIT * (device.subgroup_width or 32) * units
    return {"K": K, "G": _groups(blocks, units, -(-items // K)),
            "R": -(-m // blocks), "math": default_math(form, device),
            "denorms_are_zero": single}


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Terms on the lanes, a block of rows in registers, partials combined by a tree and a
    second kernel: KeOps' GpuConv2D on a GPU."""
    return fr.few_rows_kernel(e, params["K"], params["G"], math=params["math"],
                              R=params["R"])


RECIPE = Recipe("tiled_2d_gpu", applies=_applies, space=_space, default=_default,
                apply=_apply)

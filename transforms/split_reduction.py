"""split_reduction: a long reduction into few outputs (dot products, norms, the largest or
smallest entry of a field, a few long rows times a vector).

GPUs: ``G`` work-groups of ``K`` work-items deal the terms, flattened over the reduction
indices (``sum``, ``max`` or ``min``); a tree per work-group and a second kernel combine
the partials (:mod:`feinsum.toolbox.split`). ``unroll_outputs``: the work-item's loop over
the output entries unrolled.

CPUs, a long sum into one value per row (of arrays read at consecutive addresses, and
formulas of them): ``G`` work-groups of one work-item sum contiguous
chunks of whole OpenCL vectors of ``vec`` terms, ``blocks`` vector accumulators each; a
second kernel adds the partials and the last terms (:mod:`feinsum.toolbox.split_cpu`).
"""

from __future__ import annotations

from typing import Any

from feinsum.recipes import (
    Boolean,
    Choice,
    IntRange,
    ParameterSpace,
    PowersOfTwo,
    Recipe,
    at_most,
)
from feinsum.toolbox import cvec
from feinsum.toolbox import split as ts
from feinsum.toolbox import split_cpu as tc
from feinsum.toolbox.core import dtype_size

#: Work-items per group (the default): eight warps of NVIDIA's, four wavefronts of AMD's.
GPU_TILE = 256
#: Work-groups per core and vector accumulators per work-group of the CPU default.
CPU_GROUPS_PER_CORE, CPU_BLOCKS = 4, 4


def _applies(e: Any, device: Any) -> str | None:
    return tc.cpu_split_reason(e) if device.is_cpu else ts.split_reason(e)


def _space(e: Any, device: Any) -> ParameterSpace:
    if device.is_cpu:
        return ParameterSpace({"G": PowersOfTwo(1, 256), "blocks": IntRange(1, 8),
                               "vec": Choice(list(cvec.WIDTHS))})
    return ParameterSpace(
        {"K": PowersOfTwo(32, 1024), "G": PowersOfTwo(1, 4096), "unroll_outputs": Boolean()},
        [at_most("work_group", lambda p: p["K"], device.max_work_group_size,
                 "K <= max_work_group_size")])


def _default(e: Any, device: Any) -> dict[str, Any]:
    if device.is_cpu:
        lanes = device.native_lanes(dtype_size(e))
        groups = 1 << (CPU_GROUPS_PER_CORE * max(1, device.compute_units) - 1).bit_length()
        return {"G": min(256, groups), "blocks": CPU_BLOCKS,
                "vec": max(w for w in cvec.WIDTHS if w <= max(2, lanes))}
    return {"K": min(GPU_TILE, device.max_work_group_size),
            "G": ts.default_groups(device.compute_units), "unroll_outputs": ts.outputs(e) <= 8}


def _apply(t_unit: Any, params: dict[str, Any], e: Any, device: Any) -> Any:
    """GPUs: terms dealt over G work-groups of K work-items, partials combined by a tree
    per group and a second kernel. CPUs: chunks of whole vectors per work-group."""
    if device.is_cpu:
        return tc.cpu_split_kernel(t_unit, e, params["G"], params["blocks"], params["vec"])
    return ts.split_kernel(t_unit, e, params["K"], params["G"], params["unroll_outputs"])


RECIPE = Recipe(
    "split_reduction", applies=_applies, space=_space, default=_default, apply=_apply,
    description="A long reduction into few outputs: on GPUs the terms dealt over the whole "
    "device, partials combined by a tree per work-group and a second kernel; on CPUs a long "
    "sum in chunks of whole vectors per core.")

"""split_reduction: a long reduction into few outputs on GPUs (dot products, norms, the
largest or smallest entry of a field, a few long rows times a vector): ``G`` work-groups
of ``K`` work-items deal the terms, flattened over the reduction indices (``sum``, ``max``
or ``min``); a tree per work-group and a second kernel combine the partials
(:mod:`feinsum.toolbox.split`). ``unroll_outputs``: the work-item's loop over the output
entries unrolled. GPUs only: on a CPU, generic reduces each output in a work-item's loop.
"""

from __future__ import annotations

from typing import Any

from feinsum.recipes import Boolean, ParameterSpace, PowersOfTwo, Recipe, at_most
from feinsum.toolbox import split as ts

#: Work-items per group (the default): eight warps of NVIDIA's, four wavefronts of AMD's.
GPU_TILE = 256


def _applies(e: Any, device: Any) -> str | None:
    if device.is_cpu:
        return "a GPU schedule (on CPUs generic reduces each output in a work-item's loop)"
    return ts.split_reason(e)


def _space(e: Any, device: Any) -> ParameterSpace:
    return ParameterSpace(
        {"K": PowersOfTwo(32, 1024), "G": PowersOfTwo(1, 4096), "unroll_outputs": Boolean()},
        [at_most("work_group", lambda p: p["K"], device.max_work_group_size,
                 "K <= max_work_group_size")])


def _default(e: Any, device: Any) -> dict[str, Any]:
    return {"K": min(GPU_TILE, device.max_work_group_size),
            "G": ts.default_groups(device.compute_units), "unroll_outputs": ts.outputs(e) <= 8}


def _apply(t_unit: Any, params: dict[str, Any], e: Any, device: Any) -> Any:
    """Terms dealt over G work-groups of K work-items, partials combined by a tree per
    group and a second kernel."""
    return ts.split_kernel(t_unit, e, params["K"], params["G"], params["unroll_outputs"])


RECIPE = Recipe(
    "split_reduction", applies=_applies, space=_space, default=_default, apply=_apply,
    description="A long reduction (sum, max, min) into few outputs on GPUs: the terms dealt "
    "over the whole device, partials combined by a tree per work-group and a second "
    "kernel.")

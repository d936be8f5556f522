"""dg_operator: element-batched small dense operators (DG / high-order FEM).

For einsums with one long index, the element ``e``, in the output and only short fixed
lengths otherwise: ``ij,ej->ei`` (local operator), ``xre,rij,xej->ei`` (divergence),
``xre,rij,ej->xei`` (gradient), ``ifj,fe,fej->ei`` (face mass / lift), and their
batched forms (several fields, one row each, sharing the operator and geometric
factors). Each work-item takes ``vec`` consecutive elements as the lanes of OpenCL
vectors; ``work_items`` of them form a work-group. The element-dependent operands are
gathered into private vectors, the contraction runs in one or two stages (``last``: the
operand contracted last, ``null``: all at once), each stage computing ``acc1``/``acc2``
outputs at once with independent accumulators in one reduction loop, ``rows_per_pass``
fields sharing every loop. The operator is read from global memory (cached) or staged
in local memory (``local_operator``, on GPUs where it fits; ``staging``: by its first index,
``"rows"``, or one flat index over all the work-items, ``"flat"``). ``lanes="index"``
(element-blocked data, e.g. ``ij,bjl->bil``): the lanes are the output's last index ``l``
instead, operands read and written as whole vectors (``vec`` must then equal its
length). See :mod:`feinsum.toolbox.dense`.
"""

from __future__ import annotations

from typing import Any

from feinsum import recipes as rc
from feinsum.toolbox import dense as td

VEC = (1, 2, 4, 8, 16)
UNROLL = (1, 4, 16, 64)
STAGING = td.STAGING
#: Work-items of a default work-group on CPUs (PoCL: few, each with wide vectors).
CPU_WORK_ITEMS = 4


def _lane(e: Any, p: dict[str, Any]) -> str | None:
    return td.lane_index(e) if p["lanes"] == "index" else None


def _private_bytes(e: Any, p: dict[str, Any]) -> int:
    """Private memory per work-item: gathered operands, stage results, accumulators."""
    stages = td.element_stages(e, p["last"], _lane(e, p))
    return td.private_entries(e, stages, (p["acc1"], p["acc2"])) * td.itemsize(e) * p["vec"]


def _least_private(e: Any, last: int | None) -> int:
    """Private bytes of the smallest configuration with this plan (one lane, accumulator)."""
    return _private_bytes(e, {"last": last, "lanes": "elements", "acc1": 1, "acc2": 1, "vec": 1})


def _applies(e: Any, device: Any) -> str | None:
    if why := td.element_reason(e):
        return why
    least, limit = min(_least_private(e, c) for c in td.plans(e)), td.private_limit(device)
    return None if least <= limit else (
        f"every configuration needs {least} private bytes per work-item, more than the "
        f"{limit} of a one-subgroup work-group (private_bytes_per_work_item, GPUs: times "
        "default_work_items / subgroup_width)")


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    maxwg = min(device.max_work_group_size, device.max_work_item_sizes[0])
    lanes = 2 * td.native_lanes(e, device)
    # accumulator lanes: half the vector registers (the rest hold gathered operands)
    regs = device.vector_registers(td.itemsize(e)) // 2 * td.native_lanes(e, device)
    lasts = td.plans(e)
    B = int(e.lengths[e.out_indices[-1]]) if td.lane_index(e) else 0
    params = {
        "last": rc.Choice(lasts), "vec": rc.Choice([v for v in VEC if v <= lanes or v == B]),
        "lanes": rc.Choice(["elements", "index"]),
        "work_items": rc.PowersOfTwo(1, min(256, maxwg)),
        "acc1": rc.IntRange(1, 16), "acc2": rc.IntRange(1, 16),
        "rows_per_pass": rc.IntRange(1, e.nrows), "unroll": rc.Choice(UNROLL),
        "local_operator": rc.Boolean(), "fast_math": rc.Boolean(),
        "staging": rc.Choice(STAGING),
    }
    cons = [
        rc.at_most("work_group_size", lambda p: p["work_items"], maxwg,
                "work_items <= max_work_group_size"),
        rc.at_most("registers", lambda p: max(p["acc1"], p["acc2"]) * p["rows_per_pass"]
                * p["vec"], regs, "accumulator lanes (acc x rows_per_pass x vec) <= half "
                "the device's vector registers, in lanes"),
        rc.at_most("private_memory", lambda p: _private_bytes(e, p), lambda p: td.private_limit(
            device, p["work_items"]), "private bytes per work-item <= the device's "
            "private_bytes_per_work_item (GPUs: times default_work_items / work_items)"),
        rc.at_most("group_private", lambda p: _private_bytes(e, p) * p["work_items"],
                   device.group_private_bytes, "private bytes x work_items <= the device's "
                   "group_private_bytes (CPUs: PoCL runs a work-group on one stack)"),
        rc.at_most("local_memory", lambda p: td.operator_entries(e) * td.itemsize(e)
                   * p["local_operator"],
                device.local_mem_size, "staged operator <= local_mem_size"),
        rc.Constraint("single_stage_acc", lambda p: len(td.element_stages(e, p["last"])) > 1
                   or p["acc2"] == 1, "acc2 = 1 when the plan has one stage"),
        rc.Constraint("lane_index", lambda p: p["lanes"] == "elements" or not
                      td.lane_reason(e), "lanes='index' needs the output's last index of "
                      "length 2/4/8/16 as the last axis of every element operand that has "
                      "it: store data element-blocked, u_b[b, j, l] = u[b*B + l, j]",
                      lambda p: str(td.lane_reason(e))),
        rc.Constraint("lane_vec", lambda p: p["lanes"] == "elements" or p["vec"] == B,
                      f"vec = {B}, the lane index's length, when lanes='index'"),
    ]
    return rc.ParameterSpace(params, cons)


def _default(e: Any, device: Any) -> dict[str, Any]:
    lane, budget = td.lane_index(e), td.private_limit(device)
    last = min(td.plans(e), key=lambda c: (_least_private(e, c) > budget,
                                           td.stage_flops(e, td.element_stages(e, c, lane))))
    stages = td.element_stages(e, last, lane)
    lanes = td.native_lanes(e, device) if device.is_cpu else 1
    accs = []
    for st in stages:
        a = td.accumulator_index(e, st)
        accs.append(1 if a is None else td.accumulator_count(int(e.lengths[a]), 8))
    cfg: dict[str, Any] = {
           "last": last, "vec": min(lanes, VEC[-1]),
           "work_items": CPU_WORK_ITEMS if device.is_cpu else device.default_work_items,
           "acc1": accs[0], "acc2": accs[1] if len(accs) > 1 else 1, "rows_per_pass": 1,
           "unroll": 4, "local_operator": not device.is_cpu and td.operator_fits(e, device),
           "fast_math": False, "staging": "rows" if device.is_cpu else "flat",
           "lanes": "index" if lane else "elements"}
    if lane:
        cfg["vec"] = int(e.lengths[lane])
    def over() -> bool:
        return _private_bytes(e, cfg) > td.private_limit(device, cfg["work_items"])
    while over() and cfg["vec"] > 1 and not lane:
        cfg["vec"] //= 2
    while over() and td.private_limit(device, cfg["work_items"] // 2) > td.private_limit(
            device, cfg["work_items"]):  # a smaller GPU group's larger share
        cfg["work_items"] //= 2
    while over() and max(cfg["acc1"], cfg["acc2"]) > 1:  # A100's 7 KiB: x4 fields
        cfg["acc1" if cfg["acc1"] >= cfg["acc2"] else "acc2"] -= 1
    return cfg


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """Elements as vector lanes, element operands gathered into registers, the
    contraction in stages with several independent accumulators per loop (lane mode:
    the lane index as vector lanes)."""
    stages = td.element_stages(e, p["last"], _lane(e, p))
    return td.element_kernel(
        t_unit, e, stages, vec=p["vec"], work_items=p["work_items"],
        acc=[p["acc1"], p["acc2"]], rows_per_pass=p["rows_per_pass"], unroll=p["unroll"],
        local_operator=p["local_operator"], flat_copy=p["staging"] == "flat")


RECIPE = rc.Recipe(
    "dg_operator", applies=_applies, space=_space,
    default=_default, apply=_apply, upgrade=td.staging_upgrade,
    description="Element-batched small operators (DG): elements as vector lanes, "
    "multi-stage contraction with independent accumulators, fields sharing loops.",
)

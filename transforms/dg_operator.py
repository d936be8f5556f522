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
in local memory (``local_operator``). See :mod:`feinsum.toolbox_dense`.
"""

from __future__ import annotations

from typing import Any

from feinsum import recipes as rc
from feinsum import toolbox_dense as td

VEC = (1, 2, 4, 8, 16)
UNROLL = (1, 4, 16, 64)
#: Private memory per work-item a configuration may use (CPU: L1-resident stack).
PRIVATE_CPU, PRIVATE_GPU = 64 << 10, 8 << 10


def _itemsize(e: Any) -> int:
    return max(e.value_dtype(r).itemsize for r in range(e.nrows))


def _native_lanes(e: Any, device: Any) -> int:
    w = device.native_vector_width_double if _itemsize(e) == 8 else (
        device.native_vector_width_float)
    return max(1, int(w or 1))


def _private_bytes(e: Any, p: dict[str, Any]) -> int:
    """Private memory per work-item: gathered operands, stage results, accumulators."""
    el, size = td.element_index(e), _itemsize(e) * p["vec"]
    n = 0
    for c in range(e.noperands):
        if el in e.in_indices[c]:
            m = 1
            for i in e.in_indices[c]:
                m *= int(e.lengths[i]) if i != el else 1
            n += m * (e.nrows if c in _row_specific(e) else 1)
    stages = td.element_stages(e, p["last"])
    for st in stages[:-1]:
        m = 1
        for i in st.out:
            m *= int(e.lengths[i])
        n += m * e.nrows
    n += (p["acc1"] + p["acc2"]) * e.nrows
    return n * size


def _row_specific(e: Any) -> set[int]:
    """Operand columns whose arrays differ between rows."""
    return {c for c in range(e.noperands) if len({e.arguments[r][c] for r in range(e.nrows)}) > 1}


def _operator_bytes(e: Any) -> int:
    el, n = td.element_index(e), 0
    for c in range(e.noperands):
        if el not in e.in_indices[c]:
            m = 1
            for i in e.in_indices[c]:
                m *= int(e.lengths[i])
            n += m * (e.nrows if c in _row_specific(e) else 1)
    return n * _itemsize(e)


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    maxwg = min(device.max_work_group_size, device.max_work_item_sizes[0])
    lanes = 2 * _native_lanes(e, device)
    regs = 16 * _native_lanes(e, device)  # half of 32 vector registers, in lanes
    private = PRIVATE_CPU if device.is_cpu else PRIVATE_GPU
    lasts = [None, *range(e.noperands)] if e.noperands >= 3 else [None]
    params = {
        "last": rc.Choice(lasts), "vec": rc.Choice([v for v in VEC if v <= max(lanes, 1)]),
        "work_items": rc.PowersOfTwo(1, min(256, maxwg)),
        "acc1": rc.IntRange(1, 16), "acc2": rc.IntRange(1, 16),
        "rows_per_pass": rc.IntRange(1, e.nrows), "unroll": rc.Choice(UNROLL),
        "local_operator": rc.Boolean(), "fast_math": rc.Boolean(),
    }
    cons = [
        rc.at_most("work_group_size", lambda p: p["work_items"], maxwg,
                "work_items <= max_work_group_size"),
        rc.at_most("registers", lambda p: max(p["acc1"], p["acc2"]) * p["rows_per_pass"]
                * p["vec"], regs, "accumulator lanes (acc x rows_per_pass x vec) <= "
                "16 native vectors"),
        rc.at_most("private_memory", lambda p: _private_bytes(e, p), private,
                "private bytes per work-item <= 64 KiB on CPUs, 8 KiB on GPUs"),
        rc.at_most("local_memory", lambda p: _operator_bytes(e) * p["local_operator"],
                device.local_mem_size, "staged operator <= local_mem_size"),
        rc.Constraint("single_stage_acc", lambda p: len(td.element_stages(e, p["last"])) > 1
                   or p["acc2"] == 1, "acc2 = 1 when the plan has one stage"),
    ]
    return rc.ParameterSpace(params, cons)


def _best_acc(n: int, budget: int) -> int:
    """The accumulator count for an output of length *n*: a divisor near *budget*."""
    divs = [k for k in range(1, min(n, budget) + 1) if n % k == 0]
    return max(divs) if divs[-1] * 2 > min(n, budget) else min(n, budget)


def _default(e: Any, device: Any) -> dict[str, Any]:
    options = [None, *range(e.noperands)] if e.noperands >= 3 else [None]
    last = min(options, key=lambda c: td.stage_flops(e, td.element_stages(e, c)))
    stages = td.element_stages(e, last)
    lanes = _native_lanes(e, device) if device.is_cpu else 1
    accs = []
    for st in stages:
        a = td.accumulator_index(e, st)
        accs.append(1 if a is None else _best_acc(int(e.lengths[a]), 8))
    cfg: dict[str, Any] = {
           "last": last, "vec": min(lanes, 16), "work_items": 4 if device.is_cpu else 64,
           "acc1": accs[0], "acc2": accs[1] if len(accs) > 1 else 1, "rows_per_pass": 1,
           "unroll": 4, "local_operator": not device.is_cpu, "fast_math": False}
    while _private_bytes(e, cfg) > (PRIVATE_CPU if device.is_cpu else PRIVATE_GPU) and (
            cfg["vec"] > 1):
        cfg["vec"] //= 2
    return cfg


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """Elements as vector lanes, element operands gathered into registers, the
    contraction in stages with several independent accumulators per loop."""
    stages = td.element_stages(e, p["last"])
    return td.element_kernel(
        t_unit, e, stages, vec=p["vec"], work_items=p["work_items"],
        acc=[p["acc1"], p["acc2"]], rows_per_pass=p["rows_per_pass"], unroll=p["unroll"],
        local_operator=p["local_operator"])


RECIPE = rc.Recipe(
    "dg_operator", applies=lambda e, device: td.element_reason(e), space=_space,
    default=_default, apply=_apply,
    description="Element-batched small operators (DG): elements as vector lanes, "
    "multi-stage contraction with independent accumulators, fields sharing loops.",
)

"""dg_transposed: element-batched small operators with the output rows as vector lanes.

For the einsums of ``dg_operator`` (one long element index ``e`` in the output, short
fixed lengths otherwise: ``ij,ej->ei``, ``xre,rij,xej->ei``, ``xre,rij,ej->xei``,
``ifj,fe,fej->ei`` and their batched forms) stored in the plain ``(E, ndof)`` layouts:
the output's last, contiguous index is the vector lane (padded to whole vectors), the
operator is staged transposed in local memory once per work-group, the element operands
are broadcast scalars, each work-item computes ``elements`` elements at once, ``blocks``
times, and writes whole output rows with ``vstoreN``. ``last`` picks the contraction
plan (the operand contracted last); ``staging`` how the operator is copied into local
memory (``"rows"``: by its first index; ``"flat"``: one flat index over all the
work-items, the GPU default). See :mod:`feinsum.toolbox.transposed`.
"""

from __future__ import annotations

from typing import Any

from feinsum import recipes as rc
from feinsum.toolbox import dense as td
from feinsum.toolbox import transposed as tt

VEC = (1, 2, 4, 8, 16)
STAGING = td.STAGING
#: Default work-items and row blocks per work-item on CPUs (PoCL: one item, many blocks).
CPU_WORK_ITEMS, CPU_BLOCKS = 1, 128


def _lasts(e: Any) -> list[int | None]:
    return [c for c in td.plans(e) if tt.transposed_reason(e, td.element_stages(e, c)) is None]


def _accumulators(e: Any, device: Any) -> int:
    """Vector accumulators a work-item may keep live: 3/4 of its vector registers."""
    return int(device.vector_registers(td.itemsize(e))) * 3 // 4


def _vecs(e: Any, device: Any) -> list[int]:
    return [v for v in VEC if v <= 2 * td.native_lanes(e, device)]


def _registers(e: Any, vec: int, elements: int, native: int) -> int:
    """Vector registers the accumulators of a work-item take."""
    return tt.accumulator_vectors(e, vec, elements) * max(1, vec // native)


def _applies(e: Any, device: Any) -> str | None:
    why = tt.transposed_reason(e)
    if why is not None:
        return why
    if not _lasts(e):
        return tt.transposed_reason(e, td.element_stages(e, None))
    staged = tt.staged_entries(e, 1) * td.itemsize(e)
    if staged > device.local_mem_size:
        return (f"the operator takes {staged >> 10} KiB of local memory, the device has "
                f"{device.local_mem_size >> 10} KiB")
    least = min(_private(e, {"last": c, "vec": _vecs(e, device)[0], "elements": 1})
                for c in _lasts(e))
    if least > device.private_bytes_per_work_item:
        return (f"every configuration needs {least} private bytes per work-item, more than "
                f"the device's private_bytes_per_work_item ({device.private_bytes_per_work_item})")
    accs = _accumulators(e, device)
    fewest = min(_registers(e, v, 1, td.native_lanes(e, device)) for v in _vecs(e, device))
    if fewest > accs:
        return (f"an output row takes at least {fewest} vector accumulators at this device's "
                f"vector width, more than the {accs} registers")
    return None


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    maxwg = min(device.max_work_group_size, device.max_work_item_sizes[0])
    native = td.native_lanes(e, device)
    accs, private = _accumulators(e, device), device.private_bytes_per_work_item
    return rc.ParameterSpace(
        {"last": rc.Choice(_lasts(e)), "vec": rc.Choice(_vecs(e, device)),
         "work_items": rc.PowersOfTwo(1, min(256, maxwg)), "elements": rc.IntRange(1, 4),
         "blocks": rc.PowersOfTwo(1, 512), "unroll": rc.Choice([1, 4, 16, 64]),
         "fast_math": rc.Boolean(), "staging": rc.Choice(STAGING)},
        [rc.at_most("work_group_size", lambda p: p["work_items"], maxwg,
                    "work_items <= max_work_group_size"),
         rc.at_most("registers", lambda p: _registers(e, p["vec"], p["elements"], native),
                    accs,
                    "vector accumulators (elements x vectors per row) <= 3/4 of the "
                    "device's vector registers"),
         rc.at_most("local_memory", lambda p: tt.staged_entries(e, p["vec"]) * td.itemsize(e),
                    device.local_mem_size, "staged operator <= local_mem_size"),
         rc.at_most("private_memory", lambda p: _private(e, p), private,
                    "private bytes per work-item <= the device's private_bytes_per_work_item"),
         rc.at_most("group_private", lambda p: _private(e, p) * p["work_items"],
                    device.group_private_bytes,
                    "private bytes x work_items <= the device's group_private_bytes")])


def _private(e: Any, p: dict[str, Any]) -> int:
    stages = td.element_stages(e, p["last"])
    return tt.private_entries(e, stages, p["vec"], p["elements"]) * td.itemsize(e)


def _default(e: Any, device: Any) -> dict[str, Any]:
    lasts = _lasts(e)
    vec = min(VEC[-1], td.native_lanes(e, device)) if device.is_cpu else 1
    last = min(lasts, key=lambda c: (_private(e, {"last": c, "vec": vec, "elements": 1})
                                     > device.private_bytes_per_work_item,
                                     td.stage_flops(e, td.element_stages(e, c))))
    cfg = {"last": last, "vec": vec,
           "work_items": CPU_WORK_ITEMS if device.is_cpu else device.default_work_items,
           "elements": 2, "blocks": CPU_BLOCKS if device.is_cpu else 1, "unroll": 4,
           "fast_math": False, "staging": "rows" if device.is_cpu else "flat"}
    while not _space(e, device).is_valid(cfg) and cfg["elements"] > 1:
        cfg["elements"] -= 1
    return cfg


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """The output's last index as vector lanes, the operator staged transposed."""
    return tt.transposed_kernel(
        t_unit, e, td.element_stages(e, p["last"]), vec=p["vec"],
        work_items=p["work_items"], elements=p["elements"], blocks=p["blocks"],
        unroll=p["unroll"], flat_copy=p["staging"] == "flat")


RECIPE = rc.Recipe(
    "dg_transposed", applies=_applies, space=_space, default=_default, apply=_apply,
    upgrade=td.staging_upgrade,
    description="Element-batched small operators (DG) in plain layouts: output rows as "
    "vector lanes, operator staged transposed in local memory, whole-row vector stores.",
)

"""dg_transposed: element-batched small operators with the output rows as vector lanes.

For the einsums of ``dg_operator`` (one long element index ``e`` in the output, short
fixed lengths otherwise: ``ij,ej->ei``, ``xre,rij,xej->ei``, ``xre,rij,ej->xei``,
``ifj,fe,fej->ei`` and their batched forms) stored in the plain ``(E, ndof)`` layouts:
the output's last, contiguous index is the vector lane (padded to whole vectors), the
operator is staged transposed in local memory once per work-group, the element operands
are broadcast scalars, each work-item computes ``elements`` elements at once, ``blocks``
times, and writes whole output rows with ``vstoreN``. ``last`` picks the contraction
plan (the operand contracted last). See :mod:`feinsum.toolbox.transposed`.
"""

from __future__ import annotations

from typing import Any

from feinsum import recipes as rc
from feinsum.toolbox import dense as td
from feinsum.toolbox import transposed as tt

VEC = (1, 2, 4, 8, 16)
#: Vector accumulators a work-item may keep live (CPU: of 32 AVX-512 registers).
ACC_CPU, ACC_GPU = 24, 128
#: Private memory per work-item (CPU: L1-resident stack), and per work-group on CPUs (PoCL
#: runs a work-group on one thread's stack: 256 work-items of 100 KiB crashed it).
PRIVATE_CPU, PRIVATE_GPU, GROUP_CPU = 64 << 10, 8 << 10, 4 << 20


def _itemsize(e: Any) -> int:
    return max(e.value_dtype(r).itemsize for r in range(e.nrows))


def _lasts(e: Any) -> list[int | None]:
    return [c for c in [None, *range(e.noperands)] if (c is None or e.noperands >= 3)
            and tt.transposed_reason(e, td.element_stages(e, c)) is None]


def _native(e: Any, device: Any) -> int:
    return max(1, int((device.native_vector_width_double if _itemsize(e) == 8 else
                       device.native_vector_width_float) or 1))


def _vecs(e: Any, device: Any) -> list[int]:
    return [v for v in VEC if v <= 2 * _native(e, device)]


def _registers(e: Any, vec: int, elements: int, native: int) -> int:
    """Vector registers the accumulators of a work-item take."""
    return tt.accumulator_vectors(e, vec, elements) * max(1, vec // native)


def _applies(e: Any, device: Any) -> str | None:
    why = tt.transposed_reason(e)
    if why is not None:
        return why
    if not _lasts(e):
        return tt.transposed_reason(e, td.element_stages(e, None))
    staged = tt.staged_entries(e, 1) * _itemsize(e)
    if staged > device.local_mem_size:
        return (f"the operator takes {staged >> 10} KiB of local memory, the device has "
                f"{device.local_mem_size >> 10} KiB")
    accs = ACC_CPU if device.is_cpu else ACC_GPU
    fewest = min(_registers(e, v, 1, _native(e, device)) for v in _vecs(e, device))
    if fewest > accs:
        return (f"an output row takes at least {fewest} vector accumulators at this device's "
                f"vector width, more than the {accs} registers")
    return None


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    maxwg = min(device.max_work_group_size, device.max_work_item_sizes[0])
    native = _native(e, device)
    accs = ACC_CPU if device.is_cpu else ACC_GPU
    private = PRIVATE_CPU if device.is_cpu else PRIVATE_GPU
    return rc.ParameterSpace(
        {"last": rc.Choice(_lasts(e)), "vec": rc.Choice(_vecs(e, device)),
         "work_items": rc.PowersOfTwo(1, min(256, maxwg)), "elements": rc.IntRange(1, 4),
         "blocks": rc.PowersOfTwo(1, 512), "unroll": rc.Choice([1, 4, 16, 64]),
         "fast_math": rc.Boolean()},
        [rc.at_most("work_group_size", lambda p: p["work_items"], maxwg,
                    "work_items <= max_work_group_size"),
         rc.at_most("registers", lambda p: _registers(e, p["vec"], p["elements"], native),
                    accs,
                    f"vector accumulators (elements x vectors per row) <= {accs}"),
         rc.at_most("local_memory", lambda p: tt.staged_entries(e, p["vec"]) * _itemsize(e),
                    device.local_mem_size, "staged operator <= local_mem_size"),
         rc.at_most("private_memory", lambda p: _private(e, p), private,
                    "private bytes per work-item <= 64 KiB on CPUs, 8 KiB on GPUs"),
         rc.at_most("group_private", lambda p: _private(e, p) * p["work_items"],
                    GROUP_CPU if device.is_cpu else float("inf"),
                    "private bytes x work_items <= 4 MiB on CPUs")])


def _private(e: Any, p: dict[str, Any]) -> int:
    stages = td.element_stages(e, p["last"])
    return tt.private_entries(e, stages, p["vec"], p["elements"]) * _itemsize(e)


def _default(e: Any, device: Any) -> dict[str, Any]:
    lasts = _lasts(e)
    last = min(lasts, key=lambda c: td.stage_flops(e, td.element_stages(e, c)))
    vec = min(16, _native(e, device)) if device.is_cpu else 1
    cfg = {"last": last, "vec": vec, "work_items": 1 if device.is_cpu else 64,
           "elements": 2, "blocks": 128 if device.is_cpu else 1, "unroll": 4,
           "fast_math": False}
    while not _space(e, device).is_valid(cfg) and cfg["elements"] > 1:
        cfg["elements"] -= 1
    return cfg


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """The output's last index as vector lanes, the operator staged transposed."""
    return tt.transposed_kernel(
        t_unit, e, td.element_stages(e, p["last"]), vec=p["vec"],
        work_items=p["work_items"], elements=p["elements"], blocks=p["blocks"],
        unroll=p["unroll"])


RECIPE = rc.Recipe(
    "dg_transposed", applies=_applies, space=_space, default=_default, apply=_apply,
    description="Element-batched small operators (DG) in plain layouts: output rows as "
    "vector lanes, operator staged transposed in local memory, whole-row vector stores.",
)

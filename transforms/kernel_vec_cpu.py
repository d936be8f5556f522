"""kernel_vec_cpu: kernel reductions on CPUs, V consecutive rows per OpenCL vector register.

Each work-item owns ``U`` vectors of ``V`` consecutive output rows (``U*V`` rows): it packs
its rows' i-variables into private vector registers (structure of arrays; rows past ``M``
repeat row ``M-1`` and are never stored), then walks every ``j`` once, broadcasting the
j-variables, and folds each term into vector accumulators with explicit select
statements (:class:`feinsum.lowering.reduction_updates.Updater`): one ``exp`` evaluates ``V`` pairs
with AVX-512, which PoCL does not do across work-items by itself. The ``U`` vectors give
independent dependency chains (latency hiding). Lengths stay runtime parameters.
"""

from __future__ import annotations

from typing import Any

import loopy as lp

from feinsum.recipes import (
    Boolean,
    Choice,
    IntRange,
    ParameterSpace,
    Recipe,
    at_most,
)
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt


def _applies(e: Any, device: Any) -> str | None:
    form = ka.analyze(e)
    if isinstance(form, str):
        return form
    if not device.is_cpu:
        return "a CPU scheme (GPUs: tiled_1d)"
    return None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = ka.analyze(e)
    nv = 1 if isinstance(form, str) else form.nvalues
    size = 4 if isinstance(form, str) else form.dtype.itemsize
    regs, lanes, cpu = device.vector_registers(size), device.native_lanes(size), device.is_cpu
    return ParameterSpace(
        V=Choice([4, 8, 16]), U=IntRange(1, 4), denorms_are_zero=Boolean(),
        constraints=[at_most(
            "registers", lambda p: p["U"] * nv * (1 if cpu else -(-p["V"] // lanes)),
            2 * regs, f"U x {nv} accumulator vectors (GPUs: V / native lanes registers "
            "each) <= twice the device's vector registers")],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    form = ka.analyze(e)
    nv = 1 if isinstance(form, str) else form.nvalues
    itemsize = 4 if isinstance(form, str) else form.dtype.itemsize
    width = device.native_vector_width_float if itemsize == 4 else (
        device.native_vector_width_double)
    v = 16 if itemsize == 4 else 8
    if width and width < 4:
        v = 8 if itemsize == 4 else 4
    u = 2 if nv <= device.vector_registers(itemsize) else 1  # 2 nv <= twice the registers
    return {"V": v, "U": u, "denorms_are_zero": itemsize == 4}


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Rows in OpenCL vectors (structure of arrays), j-variables broadcast: the CPU scheme."""
    return kt.vec_kernel(e, params["V"], params["U"])


RECIPE = Recipe(
    "kernel_vec_cpu", applies=_applies, space=_space, default=_default, apply=_apply,
)

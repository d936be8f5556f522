"""tiled_2d: KeOps' GpuConv2D scheme, for few output rows and many reduction terms.

With few rows the 1D schemes have too little parallel work. Here the reduction index is
dealt to ``nsplit`` work-items per block of rows (the second grid axis ``jb``) in tiles
of ``tile`` consecutive terms, cyclically (``j = (jt*nsplit + jb)*tile + jj``: each
work-item streams its own stretches of the j-variables; ``tile = 1`` deals single terms);
each keeps its rows in OpenCL vectors (``V`` rows, ``U`` vectors, as ``kernel_vec_cpu``)
and writes its partial accumulators to a global
``(terms, M, nsplit)`` buffer (never ``M x N``). After a global barrier a second device
kernel of the same translation unit combines the partials of each row, correctly for
every reduction kind (argmin ties by index, log-sum-exp pairs rescaled). ``math``: the
``exp``/``log`` flavour, as tiled_1d's.
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
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt
from feinsum.reductions.row_tiles import default_math


def _applies(e: Any, device: Any) -> str | None:
    form = ka.analyze(e)
    return form if isinstance(form, str) else None


def _space(e: Any, device: Any) -> ParameterSpace:
    form = ka.analyze(e)
    nv = 1 if isinstance(form, str) else form.nvalues
    size = 4 if isinstance(form, str) else form.dtype.itemsize
    regs, lanes, cpu = device.vector_registers(size), device.native_lanes(size), device.is_cpu
    return ParameterSpace(
        V=Choice([4, 8, 16]), U=IntRange(1, 2), nsplit=PowersOfTwo(2, 256),
        tile=Choice([1, 8, 16, 64, 256, 1024, 4096]), math=Choice(list(MATH_MODES)),
        denorms_are_zero=Boolean(),
        constraints=[Constraint("native_float32", lambda p: size == 4 or not p[
            "math"].startswith("native"), "native exp/log are float32 only"), at_most(
            "registers", lambda p: p["U"] * nv * (1 if cpu else -(-p["V"] // lanes)),
            2 * regs, f"U x {nv} accumulator vectors (GPUs: V / native lanes registers "
            "each) <= twice the device's vector registers")],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    form = ka.analyze(e)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    # many more work-groups than cores: PoCL hands them out as cores free up, so a core
    # shared with another process does not hold the others back
    nsplit = min(256, 16 * max(1, device.compute_units))
    return {"V": 16 if single else 8, "U": 1, "nsplit": 1 << (nsplit.bit_length() - 1),
            "tile": 1024, "math": default_math(form, device), "denorms_are_zero": single}


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Rows in vectors, the reduction dealt to nsplit work-items, partials combined by a
    second kernel: KeOps' GpuConv2D."""
    return kt.vec_kernel(e, params["V"], params["U"], nsplit=params["nsplit"],
                         tile=params["tile"], math=params["math"])


RECIPE = Recipe("tiled_2d", applies=_applies, space=_space, default=_default, apply=_apply,
                upgrade=lambda p: p if "math" in p else {**p, "math": "accurate"})

"""block_sparse: block-sparse kernel reductions on CPUs, in the vector layout.

Only for specs with a :class:`~feinsum.BlockSparse` restriction. The host cuts every
output range (``ranges_i``) into blocks of ``U*V`` rows, plus blocks over the rows no
range covers (:func:`feinsum.reductions.ranges.launch_table`, computed by ``prepare`` from
the ranges: extra inputs ``launch`` ``(nblocks, 3)`` and ``nblocks``). A work-item per
block packs its rows' i-variables into OpenCL vectors, as ``kernel_vec_cpu`` does, and
walks the reduction ranges of its cluster (``redranges_j[slices_i[k-1]:slices_i[k]]``)
with data-dependent loop bounds: one compiled kernel serves every clustering.
Rows of no range get the reduction's neutral value.
"""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np

from feinsum.recipes import Boolean, Choice, IntRange, ParameterSpace, Recipe, at_most
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt


def _applies(e: Any, device: Any) -> str | None:
    form = ka.analyze(e, block_sparse=True)
    if isinstance(form, str):
        return form
    return None if device.is_cpu else "a CPU scheme"


def _space(e: Any, device: Any) -> ParameterSpace:
    form = ka.analyze(e, block_sparse=True)
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
    form = ka.analyze(e, block_sparse=True)
    single = not isinstance(form, str) and form.dtype.itemsize == 4
    return {"V": 16 if single else 8, "U": 1, "denorms_are_zero": single}


def _prepare(e: Any, arrays: Any, params: dict[str, Any]) -> dict[str, Any]:
    from feinsum.reductions.ranges import launch_table

    a = kt.template_form(e, block_sparse=True).i_arrays[0]
    m = int(np.shape(arrays[a.name])[ka.long_axis(a)])
    table = launch_table(arrays["ranges_i"], arrays["slices_i"], m, params["V"] * params["U"])
    return {"launch": table, "nblocks": np.int32(table.shape[0])}


def _apply(t_unit: lp.TranslationUnit, params: dict[str, Any], e: Any, device: Any
           ) -> lp.TranslationUnit:
    """Blocks of U*V rows of each cluster in OpenCL vectors, reduced over the cluster's
    ranges: block-sparse kernel reductions on CPUs."""
    return kt.vec_kernel(e, params["V"], params["U"], block_sparse=True)


RECIPE = Recipe("block_sparse", applies=_applies, space=_space, default=_default,
                apply=_apply, prepare=_prepare)

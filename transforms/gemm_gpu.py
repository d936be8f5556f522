"""gemm_gpu: two-operand contractions on GPUs as tiled GEMMs (docs/recipe-library.rst).

The contraction is ``out[rest, Y, X] = sum_K A[Y, K] B[K, X]`` over fused index groups
(:func:`feinsum.toolbox.gemm_view.roles`: ``ijkl,mi->mjkl`` is a ``64 x 262144 x 64`` GEMM,
``ijk,jkl->il`` reduces over ``jk``). A ``ly x lx`` work-group owns a ``ly*py x lx*px``
block, each work-item a ``py x px`` register tile in runs of ``vw`` (vector local loads);
``K`` advances ``kt`` at a time through local tiles that read zeros outside the operands,
so the unrolled FMA body has no bounds guard for any lengths; ``double_buffer`` keeps two
local tiles (one barrier per ``K`` tile); ``split`` slices ``K`` over ``g.2`` and sums the
slices in a second kernel (split-K). Scalar operands (no index) multiply each sum as
it is stored; operands that scale ``A`` or ``B`` (the face Jacobians of DG's face mass)
multiply its entries as they are copied, summed there over a reduction index of that
side only (the divergence's ``sum_x J[x, r, e] u[x, e, j]``); an operand that combines
the sums (the gradient's ``J``) gets a register tile for each ``r`` and is applied as
they are stored. The rows of a batched
einsum (four fields times one operator) run in sequence in each work-group, one launch.
GPUs only: on CPUs ``contraction`` applies.
"""

from __future__ import annotations

from typing import Any

from feinsum.recipes import Boolean, Choice, Constraint, ParameterSpace, PowersOfTwo, Recipe
from feinsum.toolbox import core as tb
from feinsum.toolbox import gemm as tg
from feinsum.toolbox import gemm_view as gv
from feinsum.toolbox.gemm_default import default_tiling
from feinsum.toolbox.parameters import at_most


def _applies(e: Any, device: Any) -> str | None:
    if device.is_cpu:
        return "a GPU schedule (on CPUs: contraction)"
    r = gv.roles(e)
    return r if isinstance(r, str) else None


def _tiling(p: dict[str, Any]) -> gv.Tiling:
    return gv.Tiling(**{k: p[k] for k in ("lx", "ly", "px", "py", "kt", "vw", "split",
                                          "double_buffer")})


def _space(e: Any, device: Any) -> ParameterSpace:
    r = gv.roles(e)
    if isinstance(r, str):  # applies() declined it: an empty space says why
        raise ValueError(r)
    params = {
        "lx": PowersOfTwo(1, 64), "ly": PowersOfTwo(1, 64),
        "px": Choice(gv.REGISTER_TILES), "py": Choice(gv.REGISTER_TILES),
        "kt": Choice(gv.K_TILES), "vw": Choice(gv.VECTOR_WIDTHS),
        "split": Choice(gv.SPLITS), "double_buffer": Boolean(),
        **tb.build_option_parameters(e),
    }
    size, k = tb.dtype_size(e), gv.group_length(e, r.k)
    cons = [
        *tb.work_group_constraints(device, "lx", "ly"),
        Constraint("vector_runs", lambda p: p["vw"] <= min(p["px"], p["py"]),
                   "vw <= px, py (a register tile is made of runs of vw entries)"),
        at_most("registers", lambda p: tg.value_registers(e, _tiling(p), r),
                tg.register_budget(device),
                "accumulators, fragments and copied entries <= the device's registers "
                f"per work-item less {tg.RESERVED_REGISTERS}"),
        at_most("local_memory", lambda p: size * tg.local_entries(e, r, _tiling(p)),
                device.local_mem_size, "local tiles (both buffers) <= local_mem_size"),
        at_most("code_size", lambda p: p["px"] * p["py"] * p["kt"], tg.MAX_UNROLLED,
                f"px*py*kt unrolled FMAs <= {tg.MAX_UNROLLED}"),
        Constraint("split_needs_g2", lambda p: p["split"] == 1 or not r.rest,
                   "split > 1 only without batch output indices (they take g.2)"),
        Constraint("split_one_row", lambda p: p["split"] == 1 or e.nrows == 1,
                   "split > 1 only for one row (the rows of a batch run in sequence)"),
        Constraint("split_uncombined", lambda p: p["split"] == 1 or not r.carried,
                   "split > 1 only where no operand combines the sums as they are stored "
                   "(the gradient's J)"),
        Constraint("split_at_most_tiles", lambda p: p["split"] == 1 or not isinstance(
                   k, int) or p["split"] * p["kt"] <= k,
                   "split*kt <= the fixed reduction length (no slice without a K tile)"),
    ]
    return ParameterSpace(params, cons)


def _default(e: Any, device: Any, lengths: dict[str, int]) -> dict[str, Any]:
    r = gv.roles(e)
    if isinstance(r, str):
        raise ValueError(r)
    t = default_tiling(e, r, device, lengths)
    return {"lx": t.lx, "ly": t.ly, "px": t.px, "py": t.py, "kt": t.kt, "vw": t.vw,
            "split": t.split, "double_buffer": t.double_buffer, **tb.BUILD_OPTION_DEFAULTS}


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """The GEMM kernel of the contraction (feinsum.toolbox.gemm.gemm_kernel)."""
    r = gv.roles(e)
    if isinstance(r, str):  # apply() checks applies() first: a bug if reached
        raise ValueError(r)
    return tg.gemm_kernel(t_unit, e, r, _tiling(p))


RECIPE = Recipe(
    "gemm_gpu", applies=_applies, space=_space, default=_default, apply=_apply,
    description="Two-operand contractions on GPUs as GEMMs over fused index groups: "
    "guard-free register tiles in vector runs, local tiles (double-buffered), split-K.")

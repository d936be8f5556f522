"""contraction: two-operand tensor contractions (``ik,kj->ij``, ``ijkl,mi->mjkl``,
``ijk,jkl->il``..., and with scalar factors: ``ik,kj,->ij``) by two-level tiling, in one
of two schemes.

``tiled`` (portable, GPUs): the output's contiguous index ``x`` (from operand ``B``) and
the last free index ``y`` of operand ``A`` form ``lx x ly`` work-items per group, each
with a ``px x py`` register tile (``ilp``); the longest reduction ``k`` advances ``kt`` at
a time (``unroll_k``), its ``A``/``B`` tiles optionally staged in local memory
(``stage_a``/``stage_b``); ``order`` nests other reductions outside or inside it.
``vector`` (CPUs): each work-item owns ``ty`` entries of ``y`` times ``tx`` OpenCL vectors
of ``vec`` entries of ``x`` (:func:`feinsum.toolbox.tiles.vector_tile_kernel`), ``lx``
work-items per group. Other output indices: ``g.2`` and loops. Lengths stay runtime.
"""

from __future__ import annotations

from typing import Any

import loopy as lp

from feinsum import recipes as rc
from feinsum.toolbox import core as tb
from feinsum.toolbox import tiles as tt


def _roles(e: Any) -> dict[str, Any] | str:
    """The indices and operands the tiling uses, or why the recipe does not apply."""
    if isinstance(ops := tb.two_operands(e), str):
        return ops
    (t0, t1), scales = ops
    if not e.reduction_indices:
        return "no reduction index (elementwise: use generic/elementwise)"
    if not e.out_indices:
        return "a full reduction to a scalar"
    x = e.out_indices[-1]
    b, a = (t0, t1) if x in e.in_indices[t0] else (t1, t0)
    if x in e.in_indices[a]:
        return f"{x} indexes both operands (a batch index): not a contraction tile"
    if not (ys := [i for i in e.out_indices if i not in e.in_indices[b]]):
        return "operand A has no free output index"
    k = max(e.reduction_indices, key=lambda i: (not tb.is_fixed(e, i),
                                                e.lengths[i] if tb.is_fixed(e, i) else 0))
    rest = [i for i in e.out_indices if i not in (x, ys[-1])]
    return {"x": x, "y": ys[-1], "k": k, "a": a, "b": b, "rest": rest, "scales": scales,
            "red": [i for i in e.reduction_indices if i != k]}


def _tile_bytes(e: Any, p: dict[str, Any]) -> int:
    n = p["kt"] * (p["lx"] * p["px"] * p["stage_b"] + p["ly"] * p["py"] * p["stage_a"])
    return n * tb.dtype_size(e) * e.nrows


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    maxwg, sizes = device.max_work_group_size, device.max_work_item_sizes
    params = {
        "lx": rc.PowersOfTwo(1, min(64, maxwg)), "ly": rc.PowersOfTwo(1, min(64, maxwg)),
        "px": rc.Choice([1, 2, 4, 8]), "py": rc.Choice([1, 2, 4, 8]),
        "kt": rc.Choice([1, 2, 4, 8, 16, 32]), "unroll_k": rc.Boolean(),
        "stage_a": rc.Boolean(), "stage_b": rc.Boolean(), "slabs": rc.Boolean(),
        "order": rc.Choice(["k_inner", "k_outer"]),
        "fast_math": rc.Boolean(), "scheme": rc.Choice(["tiled", "vector"]),
        "vec": rc.Choice([1, 4, 8, 16]), "tx": rc.IntRange(1, 4), "ty": rc.IntRange(1, 16),
    }
    # accumulators per work-item: a vector register each on CPUs, half of them on GPUs
    size = tb.dtype_size(e)
    regs = device.vector_registers(size) // (1 if device.is_cpu else 2)
    group_tile, lanes = device.group_accumulators, device.native_lanes(size)
    cons = [
        rc.at_most("work_group_size", lambda p: p["lx"] * p["ly"], maxwg,
                "lx*ly <= max_work_group_size"),
        rc.Constraint("work_item_sizes", lambda p: p["lx"] <= sizes[0] and p["ly"] <= sizes[1],
                      "lx, ly <= max_work_item_sizes"),
        rc.at_most("registers", lambda p: p["px"] * p["py"], regs,
                "register tile px*py <= the device's vector registers (GPUs: half)"),
        rc.at_most("group_tile", lambda p: p["lx"] * p["ly"] * p["px"] * p["py"], group_tile,
                "lx*ly*px*py <= the device's group_accumulators"),
        rc.at_most("vector_tile", lambda p: p["tx"] * p["ty"] * p["vec"],
                   device.vector_registers(size) * lanes,
                   "tx*ty*vec accumulator lanes <= the device's vector registers"),
        rc.at_most("code_size", lambda p: p["px"] * p["py"] * (p["kt"] if p["unroll_k"] else 1),
                256, "px*py*kt (unrolled) <= 256 statements"),
        rc.at_most("local_memory", lambda p: _tile_bytes(e, p), device.local_mem_size,
                "staged tiles <= local_mem_size"),
        rc.Constraint("slabs_without_staging", lambda p: not (p["slabs"] and (
            p["stage_a"] or p["stage_b"])), "slabs only without local staging (PoCL hangs "
            "on barriers in slab-split loops)"),
        rc.Constraint("staging_needs_tile", lambda p: not (p["stage_a"] or p["stage_b"])
                   or p["kt"] > 1, "local staging needs kt > 1"),
        rc.Constraint("staging_on_cpus", lambda p: not (device.is_cpu and p["scheme"] == "tiled"
                      and (p["stage_a"] or p["stage_b"])), "no local staging on CPUs (PoCL 3.1 "
                      "writes past the output in partial groups with barriers in the k loop)"),
    ]
    return rc.ParameterSpace(params, cons)


def _default(e: Any, device: Any) -> dict[str, Any]:
    lanes = device.native_lanes(tb.dtype_size(e))
    vector = {"scheme": "vector", "vec": min(16, lanes), "tx": 1, "ty": 8}
    if device.is_cpu:
        return {"lx": 1, "ly": 1, "px": 1, "py": 8, "kt": 8, "unroll_k": True, "stage_a": False,
                "stage_b": False, "order": "k_inner", "slabs": True, "fast_math": False, **vector}
    side = 16  # a 16 x 16 work-group, or as many rows as fit
    ly = min(side, device.max_work_group_size // side, device.max_work_item_sizes[1])
    return {"lx": side, "ly": ly, "px": 1, "py": 4, "kt": 16, "unroll_k": True,
            "stage_a": True, "stage_b": True, "order": "k_inner", "slabs": False,
            "fast_math": False, **vector, "scheme": "tiled"}


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """Groups x work-items x register tiles, k tiles staged locally; or CPU vector tiles."""
    if isinstance(r := _roles(e), str):  # apply() checks applies() first: a bug if reached
        raise ValueError(r)
    if p["scheme"] == "vector":
        return tt.vector_tile_kernel(t_unit, e, x=r["x"], y=r["y"], b=r["b"], vec=p["vec"],
                                     tx=p["tx"], ty=p["ty"], work_items=p["lx"], a=r["a"],
                                     scales=r["scales"])
    x, y, k = r["x"], r["y"], r["k"]
    t = tb.silence(tb.assume_nonempty(t_unit, e), "v1_scheduler_fallback")
    t = tb.distribute(t, x, work_items=p["lx"], axis=0, per_item=p["px"], per_item_tag="ilp",
                      slabs=p["slabs"] and not tb.is_fixed(e, x))
    t = tb.distribute(t, y, work_items=p["ly"], axis=1 if p["lx"] > 1 else 0, group_axis=1,
                      per_item=p["py"], per_item_tag="ilp", slabs=p["slabs"] and not
                      tb.is_fixed(e, y))
    t = tb.tag(t, {r["rest"][0]: "g.2"}) if r["rest"] else t
    if p["kt"] > 1:  # unguarded tiles but the last one when slabs
        t = lp.split_iname(t, k, p["kt"], outer_iname=f"{k}_t", inner_iname=f"{k}_u",
                           inner_tag="unr" if p["unroll_k"] else None,
                           slabs=(0, 1) if p["slabs"] and not tb.is_fixed(e, k) else (0, 0))
    ktile, kin = (f"{k}_t", f"{k}_u") if p["kt"] > 1 else (k, None)
    t = tb.unroll(t, short := tb.short_inames(t, r["red"], 8))
    order = [i for i in r["red"] if i not in short]
    order = [*order, ktile] if p["order"] == "k_inner" else [ktile, *order]
    t = tb.prioritize(t, [*r["rest"][1:], *order, *([kin] if kin else [])])
    outer = {f"{x}_g", f"{y}_g", *r["rest"], *order}
    for c, flag, idx in ((r["a"], "stage_a", y), (r["b"], "stage_b", x)):
        if not p[flag] or kin is None:
            continue
        sweep = [n for n in (f"{idx}_l", f"{idx}_p") if n in tb.inames_of(t)]
        sweep += [kin] + [i for i in short if i in e.in_indices[c]]
        for rule in tb.operand_rules(t, c):
            t = tb.stage(t, rule, sweep, outer_inames=outer & set(tb.inames_of(t)))
    return t


RECIPE = rc.Recipe(
    "contraction", applies=lambda e, device: (lambda r: r if isinstance(r, str) else None)(
        _roles(e)), space=_space, default=_default, apply=_apply,
    description="Two-operand contractions (GEMM family): tiled work-groups/items/registers "
    "with local-memory reduction tiles, or CPU vector register tiles.")

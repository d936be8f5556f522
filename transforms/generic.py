"""generic: every dense batched einsum and reduction (docs/recipe-library.rst).

``vec`` lanes along the last output index; outputs ``x``, ``y`` on ``l.0``, ``l.1`` (``lx``,
``ly``; ``px``, ``py`` per work-item, ILP), one more on ``g.2``; main reduction tiled (``rtile``)
or shared by ``rlocal`` work-items (toolbox_sharing, toolbox_cpu_rows); short loops unrolled;
operand ``c`` staged in local or private memory."""

from __future__ import annotations

from typing import Any

from feinsum.recipes import Boolean, Choice, Constraint, ParameterSpace, PowersOfTwo, Recipe
from feinsum.toolbox import core as tb
from feinsum.toolbox import cpu_rows as tc
from feinsum.toolbox import sharing as ts
from feinsum.toolbox import vec as tv
from feinsum.toolbox.parameters import at_most

PER_ITEM, TILES = (1, 2, 4, 8), (1, 2, 4, 8, 16)


def _layout(e: Any, p: dict[str, Any]) -> tuple[Any, ...]:
    """stage_plan's view: inames of each index, tile trip counts, local inames, outer loops."""
    x, y, r = p["x"], p["y"], tb.main_reduction(e)
    inames: dict[str, list[str]] = {}
    sizes = {i: e.lengths[i] for i in tb.short_indices(e, e.indices, 64)}
    for i, li, pi in ((x, "lx", "px"), (y, "ly", "py")):
        if i is not None:
            sizes.update({f"{i}_l": p[li], f"{i}_p": p[pi]})
            inames[i] = [f"{i}_g", *(n for n in (f"{i}_l", f"{i}_p") if sizes[n] > 1)]
    if r is not None:
        inames[r] = [f"{r}_t", f"{r}_u"] if p["rtile"] > 1 else [r]
        sizes[f"{r}_u"] = p["rtile"]
    sizes = {k: v for k, v in sizes.items() if v > 1 and k not in inames}
    local = [n for n in (f"{x}_l", f"{y}_l") if n in sizes]
    return inames, sizes, local, [inames[i][0] if i in inames else i for i in e.out_indices]


def _stage_plan(e: Any, p: dict[str, Any], c: int) -> tuple[list[str], list[str]] | str:
    if tb.has_formula(e, c) or e.reduction in ("argmin", "argmax"):  # loopy 2025.2 fails
        return "it holds a formula, or the reduction is an argmin/argmax"
    if p["rlocal"] > 1 and tb.main_reduction(e) in e.in_indices[c]:
        return "work-items share its reduction (non-uniform loops around barriers)"
    if tv.gathered(e, c, p["vec"]):
        return "vec > 1 gathers it lane by lane into vector registers instead"
    return tb.stage_plan(e.in_indices[c], *_layout(e, p), p[f"stage{c}"])


def _footprint(e: Any, p: dict[str, Any], where: str) -> int:
    plans = [_stage_plan(e, p, c) for c in range(e.noperands) if p[f"stage{c}"] == where]
    return sum(tb.footprint(pl[0], _layout(e, p)[1]) for pl in plans if isinstance(pl, tuple)
               ) * e.nrows * tb.dtype_size(e)


def _space(e: Any, device: Any) -> ParameterSpace:
    out, r, n = list(e.out_indices), tb.main_reduction(e), e.noperands
    share = r is not None and e.reduction not in ("argmin", "argmax")  # loopy can't nest those
    vparams, vcons = tv.vector_parameters(e, device, lambda p: p["px"] * p["py"] * p["rtile"],
                                          shared="rlocal")
    params = {
        "x": Choice(out or [None]), "y": Choice([*out[:-1], None] if out else [None]),
        "lx": PowersOfTwo(1, 1024), "px": Choice(PER_ITEM),
        "ly": PowersOfTwo(1, 64), "py": Choice(PER_ITEM),
        "rtile": Choice(TILES if r else [1]), "rlocal": PowersOfTwo(1, 256 if share else 1),
        "unroll_short": Boolean(), "slabs": Boolean(), **tb.build_option_parameters(e),
        **{f"stage{c}": Choice(["none", "local", "private"]) for c in range(n)}, **vparams,
    }
    scratch = 2 * tb.dtype_size(e)
    cons = [*tb.work_group_constraints(device, "lx", "ly", "rlocal"), *vcons,
        Constraint("shared_reduction_ilp", lambda p: p["rlocal"] == 1 or p["px"] * p["py"] == 1,
                   "px = py = 1 when work-items share the reduction (one local tree each)"),
        Constraint("axes", lambda p: (p["x"] is None or p["x"] != p["y"])
                   and (p["x"] is not None or p["lx"] * p["px"] == 1)
                   and (p["y"] is not None or p["ly"] * p["py"] == 1),
                   "y != x; lx = px = 1 without x, ly = py = 1 without y"),
        at_most("unrolled", lambda p: p["px"] * p["py"] * p["rtile"], 64,
                "px*py*rtile <= 64 (code size, registers)"),
        Constraint("tile_or_share", lambda p: p["rtile"] == 1 or p["rlocal"] == 1,
                   "tile the reduction or share it, not both"),
        Constraint("pocl_two_trip_barrier_loop", lambda p: not (
                   device.is_cpu and r and tb.is_fixed(e, r) and -(-e.lengths[r] // p["rtile"])
                   == 2 and any(p[f"stage{c}"] == "local" for c in range(n))),
                   "on PoCL, no local staging in a reduction loop of exactly 2 tiles "
                   "(miscompiled: wrong results, heap corruption)"),
        Constraint("slabs", lambda p: not p["slabs"] or (p["lx"] * p["px"] > 1 and all(
                   p[f"stage{c}"] == "none" for c in range(n))),
                   "slabs need a split x and no staging (loopy 2025.2 fetches out of bounds)"),
        at_most("local_memory", lambda p: _footprint(e, p, "local")
                + p["lx"] * p["ly"] * p["rlocal"] * scratch * (p["rlocal"] > 1),
                device.local_mem_size, "staged operands + reduction scratch <= local_mem_size"),
        at_most("private_memory", lambda p: _footprint(e, p, "private"), device.register_bytes
                   // 2, "register tiles <= half the device's register_bytes per work-item"),
        *(Constraint(f"stage{c}", lambda p, c=c: p[f"stage{c}"] == "none"
                     or isinstance(_stage_plan(e, p, c), tuple),
                     f"operand {c} can be staged", lambda p, c=c: str(_stage_plan(e, p, c)))
          for c in range(n))]
    return ParameterSpace(params, cons)


def _default(e: Any, device: Any, lengths: dict[str, int]) -> dict[str, Any]:
    out, r, wi = e.out_indices, tb.main_reduction(e), device.default_work_items
    x = out[-1] if out else None
    y = ([i for i in out[:-1] if not tb.is_fixed(e, i)] or out[-2:-1] or [None])[-1]
    most = min(tb.MAX_WORK_GROUP, device.max_work_group_size, device.max_work_item_sizes[0])
    lx = 1 if x is None else tb.pow2_at_least(e.lengths[x], wi) if tb.is_fixed(e, x) else wi
    ly = 1 if y is None or device.is_cpu else min(4, most // lx)
    share = r is not None and lx * ly <= 4 and e.reduction in ts.SHAREABLE and not device.is_cpu
    if not share and (lanes := ts.shared_lanes(e, device, x, r, lengths)):
        (lx, wi), ly, share = lanes, 1, True  # the matrix-vector shapes on GPUs
    wi = min(wi, most // (lx * ly))
    vec = 1 if share else tv.default_lanes(e, device)  # with 16 x 4 blocks: measured best
    rows = None if share else tc.cpu_rows(e, device, x, r, lengths)  # CPUs: toolbox_cpu_rows
    return {"x": x, "y": y, "lx": 16 if vec > 1 else lx, "px": 4 if vec > 1 else 1, "ly": ly,
            "py": 1, "rtile": 4 if r and not share else 1, "rlocal": wi if share else 1,
            "unroll_short": True, "slabs": x is not None and not tb.is_fixed(e, x) and lx > 1,
            **tb.BUILD_OPTION_DEFAULTS, **{f"stage{c}": "none" for c in range(e.noperands)},
            "vec": vec, **(rows or {})}


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """Distribute output loops, tile or share the reduction, stage operands, unroll."""
    x, y, r, features = p["x"], p["y"], tb.main_reduction(e), tb.feature_inames(t_unit, e)
    z = [i for i in e.out_indices if i not in (x, y)]
    t = tb.silence(tb.assume_nonempty(t_unit, e), "v1_scheduler_fallback", "write_race*")
    t = tv.vectorize_output(t, e, p["vec"])
    g = l = 0  # next free group / local axis (loopy wants them used from 0 up)
    for i, li, pi in ((x, "lx", "px"), (y, "ly", "py")):
        if i is not None:
            t = tb.distribute(t, i, work_items=p[li], axis=l, group_axis=g, per_item=p[pi],
                              per_item_tag="ilp",
                              slabs=p["slabs"] and i == x and not tb.is_fixed(e, x))
            g, l = g + 1, l + (p[li] > 1)
    t = tb.tag(t, {z[0]: f"g.{g}"} if z else {})
    if r is not None:  # shared by rlocal work-items, then tiled
        t = tb.tile_reduction(tb.parallel_reduction(t, r, p["rlocal"], axis=l), r, p["rtile"])
    if p["unroll_short"]:
        loops = [*z[1:], *(i for i in e.reduction_indices if i != r), *features]
        t = tb.unroll(t, tb.short_inames(t, loops, 16))
    if r is not None and p["rtile"] > 1:
        t = tb.prioritize(t, [f"{r}_t", *(i for i in e.reduction_indices if i != r)])
    for c in range(e.noperands):
        if p[f"stage{c}"] != "none":
            sweep, outer = _stage_plan(e, p, c)  # type: ignore[str-unpack]
            t = tb.stage_operand(t, c, sweep, address_space=p[f"stage{c}"], outer_inames=outer)
    return tv.finish_lanes(t)


RECIPE = Recipe("generic", applies=tb.dense_only, space=_space, default=_default, apply=_apply,
                description="Every dense einsum: outputs on work-groups/items, vector lanes, "
                "reduction tiled or shared, operands staged, short loops unrolled.")

"""elementwise: einsums without a reduction (``ij,ij->ij``, ``ij,j->ij``, ...), streamed.

The output's contiguous index ``x`` is spread over ``lx`` work-items and the work-groups
of ``g.0``, each work-item writing ``px`` entries ``lx`` apart (neighbouring work-items
touch neighbouring addresses: coalesced on GPUs, vectorised across work-items by PoCL).
``slabs`` gives every work-group but the last unguarded code (PoCL vectorises those).
The next output index goes to ``g.1`` with ``rows`` entries per work-group, the one
before to ``g.2``; any other stays a loop (unrolled if short).
"""

from __future__ import annotations

from typing import Any

from feinsum.recipes import Boolean, Choice, Constraint, ParameterSpace, PowersOfTwo, Recipe
from feinsum.toolbox import core as tb


def _applies(e: Any, device: Any) -> str | None:
    if e.block_sparse is not None:
        return tb.dense_only(e)
    if e.reduction_indices:
        return f"it reduces over {', '.join(e.reduction_indices)}"
    if not e.out_indices:
        return "the output is a scalar"
    return None


def _space(e: Any, device: Any) -> ParameterSpace:
    x = e.out_indices[-1]
    return ParameterSpace(
        lx=PowersOfTwo(1, min(1024, device.max_work_group_size, device.max_work_item_sizes[0])),
        px=Choice([1, 2, 4, 8, 16]),
        rows=Choice([1, 2, 4, 8] if len(e.out_indices) > 1 else [1]),
        slabs=Boolean() if not tb.is_fixed(e, x) else Choice([False]),
        denorms_are_zero=Boolean(),
        constraints=[
            Constraint("slabs", lambda p: not p["slabs"] or p["lx"] * p["px"] > 1,
                       "slabs need a split x"),
        ],
    )


def _default(e: Any, device: Any) -> dict[str, Any]:
    x = e.out_indices[-1]
    wide = 4 * device.default_work_items  # four default groups' worth of streams
    lx = wide if not tb.is_fixed(e, x) else min(wide, 1 << (e.lengths[x] - 1).bit_length())
    return {"lx": min(lx, device.max_work_group_size, device.max_work_item_sizes[0]), "px": 1,
            "rows": 1, "slabs": not tb.is_fixed(e, x),
            "denorms_are_zero": False}


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """Stream the output: contiguous index over work-items, the others over work-groups."""
    x, *outer = reversed(e.out_indices)
    features = tb.feature_inames(t_unit, e)
    t = tb.silence(tb.assume_nonempty(t_unit, e), "v1_scheduler_fallback")
    t = tb.distribute(t, x, work_items=p["lx"], axis=0, per_item=p["px"], slabs=p["slabs"])
    if outer:
        t = tb.distribute(t, outer[0], work_items=1, axis=0, group_axis=1,
                          per_item=p["rows"], per_item_tag="unr")
    if len(outer) > 1:
        t = tb.tag(t, {outer[1]: "g.2"})
    return tb.unroll(t, tb.short_inames(t, [*outer[2:], *features], 16))


RECIPE = Recipe(
    "elementwise", applies=_applies, space=_space, default=_default, apply=_apply,
    description="Einsums without reduction: the contiguous output index streamed over "
    "work-items, the others over work-groups.",
)

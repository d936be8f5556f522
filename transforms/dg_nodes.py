"""dg_nodes: element-batched small operators on GPUs, the output's node index on the lanes.

For the einsums of ``dg_operator`` (one long element index ``e`` in the output, short fixed
lengths otherwise: ``ij,ej->ei``, ``xre,rij,xej->ei``, ``xre,rij,ej->xei``,
``ifj,fe,fej->ei`` and their batched forms) in plain C-order layouts, on GPUs: each
stage's lane index (the output's node ``i``; divergence's first stage: ``j``) runs along
``l.0`` over ``node_lanes`` work-items (each owns every ``node_lanes``-th entry), ``rows``
element rows along ``l.1``, ``elements`` elements per work-item (a register tile along
``e``), so that every global access and store is coalesced. Operators are staged in local
memory once per work-group by all its work-items (flat, coalesced; ``operator="registers"``:
then each work-item's entries kept in registers); element data read by every node is
staged per block the same way and read as broadcasts; ``rows_per_pass`` fields of a batch
share every loop; ``groups``: work-groups looping over the element blocks (0: one block per
work-group); ``split``: a loop over ``r`` around both stages, so that local memory holds
one slice of the divergence's first-stage result, or of the gradient's operator; ``pairs``:
a stage whose inputs all lie in local memory reads two points of its reduction index at a
time, one vector load a pair (:mod:`feinsum.toolbox.node_pairs`; not in the default's
search); ``flat_whole``: a flat first stage's rounds take whole elements' entries (the
default; without it every work-item, each round dividing its flat index). See
:mod:`feinsum.toolbox.nodes` and :mod:`feinsum.toolbox.node_plan`.
"""

from __future__ import annotations

from typing import Any

from feinsum import recipes as rc
from feinsum.errors import RecipeError
from feinsum.toolbox import core as tb
from feinsum.toolbox import dense as td
from feinsum.toolbox import node_layouts as tl
from feinsum.toolbox import node_plan as tp
from feinsum.toolbox import nodes as tn

#: Layouts of least estimated cost (:func:`feinsum.toolbox.node_layouts.ranked_layouts`)
#: the default takes the performance model's fastest of, where the element count is known
#: and the model describes the device (the estimate alone: the first).
SHORTLIST = 12
#: Work-groups per compute unit the ``groups`` parameter offers (0: one block per group).
GROUPS_PER_UNIT = range(tp.MAX_GROUPS_PER_UNIT + 1)


def _misfit(e: Any, p: dict[str, Any], device: Any) -> str | None:
    return tl.misfit(e, td.element_stages(e, p["last"]), tp.layout_of(p), device)


def _applies(e: Any, device: Any) -> str | None:
    if device.is_cpu:
        return "a GPU layout (on CPUs: dg_operator, dg_transposed)"
    why = tp.node_reason(e)
    if why is not None:
        return why
    if not tl.node_plans(e):
        return tp.node_reason(e, td.element_stages(e, None))
    if not tl.any_layout_fits(e, device):
        least = tp.NodeLayout(max(tl.lane_options(e)), 1, 1)
        return ("every layout exceeds a limit of the device; the smallest: "
                f"{tl.misfit(e, td.element_stages(e, tl.node_plans(e)[0]), least, device)}")
    return None


def _space(e: Any, device: Any) -> rc.ParameterSpace:
    units = device.compute_units
    uses_registers = any(tp.access(e, td.element_stages(e, c), k, True) == "registers"
                         for c in tl.node_plans(e) for k in range(e.noperands))
    slices = any(tp.sliced(e, td.element_stages(e, c), tp.NodeLayout(1, 1, 1, split=True,
                                                                     sliced=True), k)
                 for c in tl.node_plans(e) for k in range(e.noperands))
    return rc.ParameterSpace(
        {"last": rc.Choice(tl.node_plans(e)), "node_lanes": rc.Choice(tl.lane_options(e)),
         "rows": rc.PowersOfTwo(1, 64), "elements": rc.IntRange(1, 8),
         "rows_per_pass": rc.IntRange(1, e.nrows),
         "operator": rc.Choice(["local", *(["registers"] if uses_registers else []),
                                *(["slice"] if slices else [])]),
         "groups": rc.Choice([k * units for k in GROUPS_PER_UNIT]), "split": rc.Boolean(),
         "flat": rc.Boolean(), "pairs": rc.Boolean(), "flat_whole": rc.Boolean()},
        [*tb.work_group_constraints(device, "node_lanes", "rows"),
         rc.Constraint("device_limits", lambda p: _misfit(e, p, device) is None,
                       "local memory, registers per work-item and per work-group, and code "
                       "size within the device's limits (local_mem_size, "
                       "registers_per_work_item, registers_per_compute_unit)",
                       lambda p: str(_misfit(e, p, device))),
         rc.Constraint("operator_in_registers", lambda p: p["operator"] == "local" or any(
             tp.access(e, td.element_stages(e, p["last"]), k, True) == "registers"
             for k in range(e.noperands)), "operator='registers' needs an operator that "
             "carries its stage's lane index (choose another 'last')"),
         rc.Constraint("operator_slices", lambda p: p["operator"] != "slice" or any(
             tp.sliced(e, td.element_stages(e, p["last"]), tp.layout_of(p), k)
             for k in range(e.noperands)), "operator='slice' needs split and an operator "
             "whose first index is the split index (divergence's D[r,i,j], last=2)"),
         rc.Constraint("split_plan", lambda p: not p["split"] or tp.split_index(
             e, td.element_stages(e, p["last"])) is not None, "split needs a plan whose "
             "first stage has an output index the second reduces (divergence and gradient "
             "with last=2)"),
         rc.Constraint("flat_plan", lambda p: not p["flat"] or tp.flat_possible(
             e, td.element_stages(e, p["last"])), "flat needs a plan whose first stage's "
             f"result goes through local memory, with at most {tp.MAX_FLAT_TERMS} "
             "reduction points (divergence with last=2, face mass with last=0)"),
         rc.Constraint("pairs_plan", lambda p: not p["pairs"] or _pairs(e, p), "pairs needs "
             "a stage whose inputs all lie in local memory (operators, staged element "
             "operands, a flat first stage's result) and end with the same reduction index "
             "(operator='local' or 'slice'; divergence and face mass: flat)")])


def _pairs(e: Any, p: dict[str, Any]) -> bool:
    stages = td.element_stages(e, p["last"])
    return any(tp.pair_index(e, stages, tp.layout_of(p), s) for s in range(len(stages)))


def _default(e: Any, device: Any, lengths: dict[str, int]) -> dict[str, Any]:
    elements = lengths.get(str(e.lengths[tp.element(e)]))
    ranked = [tp.params_of(*c) for c in tl.ranked_layouts(e, device, elements,
                                                     SHORTLIST if elements else 1)]
    if not ranked:
        raise RecipeError(f"dg_nodes does not fit {e} on {device.name} (applies() says why)")
    if len(ranked) == 1:
        return ranked[0]
    from feinsum.prediction import fastest

    return ranked[fastest(e, [(RECIPE, p) for p in ranked], device, lengths) or 0]


def _apply(t_unit: Any, p: dict[str, Any], e: Any, device: Any) -> Any:
    """The node layout: lanes along the stages' lane indices, element rows on ``l.1``."""
    return tn.node_kernel(t_unit, e, td.element_stages(e, p["last"]), tp.layout_of(p))


def _upgrade(params: dict[str, Any]) -> dict[str, Any]:
    """A configuration of before ``pairs`` or ``flat_whole`` as the code it generated
    (one-point reads; flat rounds of every work-item)."""
    return {"pairs": False, "flat_whole": False, **params}


RECIPE = rc.Recipe(
    "dg_nodes", applies=_applies, space=_space, default=_default, apply=_apply,
    upgrade=_upgrade,
    description="Element-batched small operators (DG) on GPUs: the output's nodes on the "
    "lanes, element rows and a register tile along the elements, coalesced staging by "
    "every work-item, operators shared by the work-group.",
)

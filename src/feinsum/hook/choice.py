"""Which recipe the hook applies when the database knows nothing: a fixed preference order.

:data:`PREFERENCE`: the most specialised recipes first; :func:`preference` adjusts it to an
einsum and a device (:data:`OPERATOR_RECIPES`); on a GPU the performance model describes,
at known lengths, the defaults of :data:`MODEL_ORDERED` go in the order of its
predictions. A recipe feinsum does not ship (from ``FEINSUM_RECIPE_PATH``) comes after
the shipped specialised ones and before ``generic``; recipes that need host-side
arguments (``Recipe.prepare``: block-sparse launch tables) are never chosen by the hook,
since the program's callers would not pass those arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feinsum.errors import RecipeError

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.recipes import Recipe
    from feinsum.spec.model import BatchedEinsum

#: Preference order of the shipped recipes for the ``"default"`` rung (first applicable wins).
PREFERENCE: tuple[str, ...] = (
    "kernel_vec_cpu",  # kernel reductions on CPUs
    "tiled_1d",        # kernel reductions on GPUs
    "tiled_2d_gpu",    # kernel reductions of few rows on GPUs (tiled_1d: many rows)
    "dg_nodes",        # element-batched small operators on GPUs (nodes on the lanes)
    "dg_transposed",   # element-batched small operators, plain layouts
    "dg_operator",     # element-batched small operators, element-blocked layouts
    "split_reduction", # long reductions into few outputs on GPUs (dot products, norms)
    "gemm_gpu",        # two-operand contractions on GPUs (CPUs: contraction)
    "elementwise",     # no reduction
    "generic",         # every dense einsum
)

#: The recipes of element-batched einsums that keep the operator (the element-independent
#: operands) in local memory, in slices (``dg_nodes``), or read it from global memory
#: where it exceeds the device's local memory (a degree-6 DG operator in float64: 84 x 84
#: doubles, 56 KiB, against NVIDIA's 48 KiB). On a GPU, such a contraction goes to
#: ``gemm_gpu`` first: on the H200 model, ``ij,ej->ei`` at 84 nodes takes 0.147 ms with
#: its default and 0.295 ms with ``dg_operator``'s (which the H200 measured at twice its
#: prediction where the operator stayed in global memory); the divergence and the gradient
#: at 56 to 125 nodes, whose ``D[r]`` slices ``dg_nodes`` stages, 1.2 to 14x faster than
#: ``dg_nodes``' default on the H200, A100 and MI250X models (float32 and float64, one
#: field and four).
OPERATOR_RECIPES: tuple[str, ...] = ("dg_nodes", "dg_transposed", "dg_operator")


#: Recipes whose defaults the hook orders by the performance model among themselves where
#: both apply on a GPU the model describes and the lengths are known (the others keep
#: :func:`preference`'s order): DG operators whose operator fits the local memory, where
#: the ``h200`` model predicts ``gemm_gpu`` 1.1-1.35x faster than ``dg_nodes`` for some
#: (float64 ``ij,ej->ei`` at 56 nodes, float32 at 56 and 84) and ``dg_nodes`` faster for
#: the rest (E = 5e4).
MODEL_ORDERED: tuple[str, ...] = ("dg_nodes", "gemm_gpu")


@dataclass(frozen=True)
class DefaultChoice:
    """A recipe and its heuristic default configuration for a canonical spec."""

    recipe: Recipe
    params: dict[str, Any]


def preference(canonical: BatchedEinsum, device: DeviceInfo) -> tuple[str, ...]:
    """:data:`PREFERENCE` for *canonical* on *device*: on a GPU, where the einsum's operator
    does not fit the local memory, ``gemm_gpu`` before :data:`OPERATOR_RECIPES`."""
    if device.is_cpu or not _operator_exceeds_local_memory(canonical, device):
        return PREFERENCE
    rest = [n for n in PREFERENCE if n != "gemm_gpu"]
    first = min(rest.index(n) for n in OPERATOR_RECIPES)
    return (*rest[:first], "gemm_gpu", *rest[first:])


def _operator_exceeds_local_memory(e: BatchedEinsum, device: DeviceInfo) -> bool:
    from feinsum.toolbox import dense

    return dense.element_reason(e) is None and not dense.operator_fits(e, device)


def ordered_recipes(all_recipes: Sequence[Recipe], prefer: Sequence[str] | None = None,
                    *, default: Sequence[str] = PREFERENCE) -> list[Recipe]:
    """*all_recipes* in the hook's preference order (*prefer*: names first, in that order;
    else *default*, :data:`PREFERENCE` or what :func:`preference` makes of it)."""
    order = list(prefer) if prefer is not None else list(default)
    rank = {name: i for i, name in enumerate(order)}
    generic_rank = rank.get("generic", len(order))

    def key(r: Recipe) -> tuple[float, str]:
        if r.name in rank:
            return (rank[r.name], r.name)
        # unlisted recipes: before generic with the default order, after the list otherwise
        return ((generic_rank - 0.5) if prefer is None else len(order), r.name)

    return sorted(all_recipes, key=key)


def default_choices(canonical: BatchedEinsum, device: DeviceInfo, recipes: Sequence[Recipe],
                    prefer: Sequence[str] | None = None,
                    lengths: Mapping[str, int] | None = None,
                    ) -> tuple[list[DefaultChoice], str]:
    """The applicable recipes (preference order) with their defaults at *lengths* (values
    of *canonical*'s length symbols, where known), and, when there is none, a text saying
    why each was refused."""
    out: list[DefaultChoice] = []
    reasons: list[str] = []
    for r in ordered_recipes(recipes, prefer, default=preference(canonical, device)):
        if r.has_prepare:
            reasons.append(f"{r.name}: needs host-side arguments")
            continue
        try:
            why = r.applies(canonical, device)
            if why is None:
                out.append(DefaultChoice(r, dict(r.default(canonical, device, lengths))))
                continue
        except RecipeError as exc:
            why = str(exc)
        reasons.append(f"{r.name}: {why}")
    if prefer is None and lengths and not device.is_cpu:
        out = _model_ordered(out, canonical, device, lengths)
    return out, "; ".join(reasons)


def _model_ordered(choices: list[DefaultChoice], canonical: BatchedEinsum,
                   device: DeviceInfo, lengths: Mapping[str, int]) -> list[DefaultChoice]:
    """*choices* as they are, unless the performance model predicts another of
    :data:`MODEL_ORDERED`'s defaults faster than the first of them: then that one and
    the others of them (in their order) where the first was."""
    slots = [k for k, ch in enumerate(choices) if ch.recipe.name in MODEL_ORDERED]
    if len(slots) < 2:
        return choices
    from feinsum.prediction import fastest

    pick = fastest(canonical, [(choices[k].recipe, choices[k].params) for k in slots],
                   device, lengths)
    if not pick:
        return choices
    group = [choices[slots[pick]], *(choices[k] for k in slots if k != slots[pick])]
    rest = [ch for k, ch in enumerate(choices) if k not in slots]
    return rest[:slots[0]] + group + rest[slots[0]:]

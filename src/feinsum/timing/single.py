"""``feinsum.measure``: one configuration built, validated and timed, in the process's
shared worker pool (:mod:`feinsum.timing.isolation`) or, on request, here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from feinsum.errors import InvalidConfigurationError
from feinsum.timing.measurement import (
    Candidate,
    DeviceState,
    Measurement,
    MeasureOptions,
    Target,
    finish,
    measure_in_process,
)

if TYPE_CHECKING:
    from feinsum.recipes import Recipe
    from feinsum.spec.model import BatchedEinsum
    from feinsum.timing.roofline import Roofline


def measure(
    einsum: BatchedEinsum,
    recipe: Recipe | str | None = None,
    params: Mapping[str, Any] | None = None,
    *,
    device: Any = None,
    lengths: Mapping[str, int] | None = None,
    recipe_path: Any = None,
    roofline: Roofline | None = None,
    isolate: bool = True,
    **options: Any,
) -> Measurement:
    """Measure one configuration of *recipe* (a :class:`~feinsum.recipes.Recipe`, a recipe
    name looked up on *recipe_path*, or ``None`` for the untransformed kernel) for *einsum*.

    :arg params: the configuration (default: the recipe's heuristic default).
    :arg lengths: values of *einsum*'s length symbols (needed if it has any).
    :arg roofline: for the roofline fraction (:func:`feinsum.measure_roofline`).
    :arg isolate: build and run in a worker process with timeouts (default); ``False`` runs
        here, where a crashing driver takes the caller down.
    :arg options: fields of :class:`MeasureOptions` (``min_samples``, ``min_time``,
        ``validate_full``, ``build_timeout``, ...).

    A failing candidate is not an exception: the result's ``status`` is its category.
    """
    from feinsum.devices.opencl import device_info, get_device

    opts = MeasureOptions().with_overrides(**options)
    info = device_info(get_device(device))
    if isinstance(recipe, str):
        from feinsum.recipes import get_recipe

        recipe = get_recipe(recipe, recipe_path)
    target = Target.make(einsum, lengths)
    if recipe is not None:
        params = (recipe.default(target.spec, info, target.lengths) if params is None
                  else params)
        try:
            params = recipe.check(params, target.spec, info)
        except InvalidConfigurationError as exc:
            c = Candidate.make(target, recipe, dict(params), opts)
            return finish(c, "invalid", str(exc))
    c = Candidate.make(target, recipe, params, opts)
    if not isolate:
        return measure_in_process(DeviceState.open(info), c, roofline)
    from feinsum.timing.isolation import shared_pool

    return shared_pool(info).measure(c, roofline)

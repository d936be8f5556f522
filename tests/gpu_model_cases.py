"""GPU configurations run on the CPU: every recipe x reference workload x device model.

A case is a recipe's configuration computed for a GPU model (:mod:`feinsum.devices.models`),
its code generated for that model, built and run on the test's CPU device (PoCL) and
compared with :func:`feinsum.evaluate`. What cannot be run there says why, precisely:

* the recipe does not apply on the model (its reason: a CPU scheme, no fp64...): not a
  case at all (:func:`all_cases` leaves it out; :func:`not_applicable` lists it with the
  recipe's reason);
* the model's limits exceed the CPU device's (work-group size, local memory): skipped,
  naming both numbers; no model exceeds PoCL's 4096 work-items and 1 MiB today;
* PoCL's CPU device is itself wrong on the code: xfail with the reason, only for a case
  that fails and is one of the two patterns the CPU constraints keep off CPUs
  (:func:`pocl_problem`). None has failed so far (654 sweep cases, 0 wrong results), and a
  minimal kernel of the second pattern computed correctly, so none is marked today.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import feinsum
from feinsum.devices.models import MODELS
from feinsum.devices.opencl import DeviceInfo
from feinsum.spec.canonical import canonicalize
from feinsum.tuning.workloads import FEW_ROWS, workloads

#: Lengths every symbol gets: multiples of no tile, and shorter than most tiles (runs in
#: well under a second).
LENGTHS = ({"*": 73}, {"*": 5})
#: Reference-sized workloads added to the small ones: the two-index transformation with
#: its 64 x 64 reduction, whose default splits the reduction on GPUs (split-K).
FULL_SIZED = ("two_index",)
#: The rows of workloads.md's few-rows workload on GPUs (the small one has M = 16).
FEW_ROWS_GPU = FEW_ROWS["gpu"]
#: A third, larger one for einsums of one length symbol (the element-batched DG family:
#: several blocks and work-groups, the last partial).
ONE_SYMBOL_LENGTHS = (*LENGTHS, {"*": 1001})


@functools.cache
def recipes() -> dict[str, Any]:
    return {r.name: r for r in feinsum.recipes()}


@functools.cache
def specs() -> dict[str, Any]:
    small = workloads(small=True)
    full = {f"{name}_full": canonicalize(w.spec) for name, w in workloads().items()
            if name in FULL_SIZED}
    # workloads.md's GPU-sized few-rows case: several blocks of rows, the last partial
    gpu_rows = {"fewrows_gpu": canonicalize(small["gaussian"].spec.with_lengths(
        {"M": FEW_ROWS_GPU}))}
    return {**{name: canonicalize(w.spec) for name, w in small.items()}, **full, **gpu_rows}


@dataclass(frozen=True)
class Case:
    recipe: str
    workload: str
    model: str

    @property
    def id(self) -> str:
        return f"{self.recipe}-{self.workload}-{self.model}"


def applies(case: Case) -> str | None:
    """None if the case's recipe applies to its workload on its model, else why not."""
    return recipes()[case.recipe].applies(specs()[case.workload], MODELS[case.model].info)


def all_cases() -> list[Case]:
    """Every recipe x workload x model where the recipe applies."""
    return [c for c in _every_pair() if applies(c) is None]


def not_applicable() -> dict[Case, str]:
    """The recipe x workload x model pairs that are not cases, with the recipe's reason."""
    return {c: why for c in _every_pair() if (why := applies(c)) is not None}


def _every_pair() -> list[Case]:
    return [Case(r, w, m) for r in sorted(recipes()) for w in specs() for m in MODELS]


def lengths_for(e: Any) -> tuple[dict[str, int], ...]:
    lengths = ONE_SYMBOL_LENGTHS if len(e.length_symbols) == 1 else LENGTHS
    return tuple({s: n["*"] for s in e.length_symbols} for n in lengths)


def cpu_fit(model: DeviceInfo, cpu: DeviceInfo) -> str | None:
    """Why the model's configurations may not run on *cpu* (None: anything valid for the
    model fits the CPU's work-group size and local memory)."""
    if model.max_work_group_size > cpu.max_work_group_size:
        return (f"the model allows work-groups of {model.max_work_group_size}, the CPU device "
                f"runs at most {cpu.max_work_group_size}")
    if model.local_mem_size > cpu.local_mem_size:
        return (f"the model has {model.local_mem_size} bytes of local memory, the CPU "
                f"device {cpu.local_mem_size}")
    return None


def pocl_problem(recipe: str, e: Any, params: dict[str, Any]) -> str | None:
    """Why PoCL's CPU device computes this GPU configuration wrongly, where known (the
    constraints that keep these configurations off CPUs: ``staging_on_cpus`` of
    contraction, ``pocl_two_trip_barrier_loop`` of generic)."""
    if recipe == "contraction" and params.get("scheme") == "tiled" and (
            params.get("stage_a") or params.get("stage_b")):
        return ("PoCL writes past the output in partial work-groups with barriers in the k "
                "loop (contraction's staging_on_cpus constraint)")
    if recipe == "generic":
        from feinsum.toolbox import core as tb

        r = tb.main_reduction(e)
        staged = any(params.get(f"stage{c}") == "local" for c in range(e.noperands))
        if staged and r and tb.is_fixed(e, r) and -(-e.lengths[r] // params["rtile"]) == 2:
            return ("PoCL miscompiles local staging in a reduction loop of exactly 2 tiles "
                    "(generic's pocl_two_trip_barrier_loop constraint)")
    return None


def pocl_build_options(recipe: str, params: dict[str, Any]) -> tuple[str, ...]:
    """Build options PoCL's CPU device needs to run a configuration as the GPU would:
    its optimizer miscompiles dg_nodes' looping grid (``groups`` > 0: a loop around
    barriers, private arrays live across them); some rows of a batch came out wrong
    while the same code is right with ``-cl-opt-disable`` (and with one block per group),
    so those are checked unoptimized."""
    if recipe == "dg_nodes" and params.get("groups"):
        return ("-cl-opt-disable",)
    return ()


def with_build_options(t_unit: Any, options: tuple[str, ...]) -> Any:
    import loopy as lp

    if not options:
        return t_unit
    knl = t_unit.default_entrypoint
    return lp.set_options(t_unit, build_options=[*(knl.options.build_options or []),
                                                 *options])


_RESULTS: dict[tuple[str, str, str], str | None] = {}


def run(case: Case, params: dict[str, Any], queue: Any) -> tuple[str | None, bool]:
    """Apply the recipe for the case's model with *params*, run the code on *queue*'s CPU
    against evaluate: (what went wrong or None, whether it had run already). Recipes read
    the device only through the configuration (no ``apply`` looks at it), so a
    configuration several models share is generated, built and run once."""
    import json

    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes.testing import check_configuration
    from feinsum.toolbox.parameters import canonical_json

    e, recipe = specs()[case.workload], recipes()[case.recipe]
    key = (case.recipe, case.workload, canonical_json(params))
    if key in _RESULTS:
        return _RESULTS[key], True
    model = MODELS[case.model].info
    try:
        t = recipe.apply(generate_loopy(e), json.loads(key[2]), e, model)
    except Exception as exc:
        _RESULTS[key] = f"{type(exc).__name__}: {exc}"
        return _RESULTS[key], False
    t = with_build_options(t, pocl_build_options(case.recipe, params))
    _RESULTS[key] = check_configuration(recipe, e, json.loads(key[2]), lengths_for(e), queue,
                                        device=model, t_unit=t)
    return _RESULTS[key], False

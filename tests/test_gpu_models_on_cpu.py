"""Every recipe's default configuration for every GPU model, on every reference workload
it claims, generated for the model and run on the CPU device against evaluate
(tests/gpu_model_cases.py says what is skipped or marked and why). The sweep of sampled
configurations is ``slow``."""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os

import numpy as np
import pytest
from gpu_model_cases import (
    Case,
    all_cases,
    cpu_fit,
    not_applicable,
    pocl_problem,
    recipes,
    run,
    specs,
)

from feinsum.devices.models import MODELS
from feinsum.devices.opencl import device_info

#: Sampled configurations per recipe, workload and model in the slow sweep: at least 30
#: per recipe and model over the workloads it claims (FEINSUM_SWEEP overrides).
SWEEP = int(os.environ.get("FEINSUM_SWEEP", "0"))


def _error(case: Case, params: dict, cl_queue) -> tuple[str, str] | None:  # type: ignore[no-untyped-def]
    """("skip" | "xfail" | "fail", why) for the case's run on the CPU device, None if it
    computed evaluate's result."""
    fit = cpu_fit(MODELS[case.model].info, device_info(cl_queue.device))
    if fit:
        return "skip", f"{case.id} does not fit the CPU device: {fit}"
    err, _ = run(case, params, cl_queue)
    if err is None:
        return None
    known = pocl_problem(case.recipe, specs()[case.workload], params)
    if known:
        return "xfail", f"{case.id}: {known}; here: {err[:300]}"
    return "fail", f"{case.id} {json.dumps(params, sort_keys=True)}: {err}"


def _check(case: Case, params: dict, cl_queue) -> None:  # type: ignore[no-untyped-def]
    outcome = _error(case, params, cl_queue)
    if outcome is not None:
        {"skip": pytest.skip, "xfail": pytest.xfail, "fail": pytest.fail}[outcome[0]](
            outcome[1])


#: The models whose defaults run in CI: the measured GPU (H200), the lent kinds (H100,
#: H200), one of each other vendor's architectures. The siblings left out (A100, GH200,
#: H800: NVIDIA's, with the H100's or fewer compute units) have their defaults validated in
#: tests/test_device_models.py and run in the slow sweep (k = 0).
CI_MODELS = ("h100", "h200", "mi250x", "mi300x", "max1550", "m2max")


@functools.cache
def _ci_pairs() -> dict[str, list[Case]]:
    """The CI models' cases by recipe and workload (computed once: a second or so)."""
    pairs: dict[str, list[Case]] = collections.defaultdict(list)
    for c in all_cases():
        if c.model in CI_MODELS:
            pairs[f"{c.recipe}-{c.workload}"].append(c)
    return pairs


@pytest.mark.parametrize("pair", sorted(_ci_pairs()))
def test_default_for_gpu_model_runs_on_cpu(pair: str, cl_queue) -> None:  # type: ignore[no-untyped-def]
    """Each CI model's default configuration for the recipe and workload is valid, and its
    code computes evaluate's result on the CPU device. One test per recipe and workload,
    so that the models whose defaults are equal (identical code: ``apply`` reads the device
    only through the configuration) share one build and run, in one worker."""
    outcomes = []
    for case in _ci_pairs()[pair]:
        r, e, m = recipes()[case.recipe], specs()[case.workload], MODELS[case.model].info
        params = r.default(e, m)
        r.space(e, m).validate(params)
        if (outcome := _error(case, params, cl_queue)) is not None:
            outcomes.append(outcome)
    failed = [why for kind, why in outcomes if kind == "fail"]
    assert not failed, "\n".join(failed)
    for kind in ("xfail", "skip"):
        if whys := [why for k, why in outcomes if k == kind]:
            {"skip": pytest.skip, "xfail": pytest.xfail}[kind]("; ".join(whys))


def test_every_model_has_cases_and_left_out_pairs_say_why() -> None:
    """Pairs that are not cases are so for a reason the recipe gives; every model has
    cases (the CPU recipes, kernel_vec_cpu and block_sparse, apply on none)."""
    cases, left_out = all_cases(), not_applicable()
    assert cases and all(why.strip() for why in left_out.values())
    assert {c.model for c in cases} == set(MODELS)
    assert not set(cases) & set(left_out)


def _sweep_plan() -> list[tuple[Case, int]]:
    """(case, k) for the slow sweep: k = 0 the default on every workload, then each
    recipe's 30 (or $FEINSUM_SWEEP) samples per model spread over the workloads it claims
    on that model (k >= 1)."""
    per: dict[tuple[str, str], list[Case]] = collections.defaultdict(list)
    for c in all_cases():
        per[c.recipe, c.model].append(c)
    plan = []
    for cases in per.values():
        plan += [(c, 0) for c in cases]
        plan += [(cases[k % len(cases)], 1 + k // len(cases)) for k in range(SWEEP or 30)]
    return plan


@pytest.mark.slow
@pytest.mark.parametrize("case, k", _sweep_plan(), ids=lambda x: getattr(x, "id", str(x)))
def test_sampled_for_gpu_model_runs_on_cpu(case: Case, k: int, cl_queue) -> None:  # type: ignore[no-untyped-def]
    """The default (k = 0) or sample k of the model's space (seeded by case and k), on
    the CPU device."""
    r, e, m = recipes()[case.recipe], specs()[case.workload], MODELS[case.model].info
    if k == 0:
        params = r.default(e, m)
    else:
        seed = int.from_bytes(hashlib.sha256(case.id.encode()).digest()[:8], "little") + k
        (params,) = r.space(e, m).sample(np.random.default_rng(seed), n=1)
    _check(case, params, cl_queue)

"""Every recipe's default configuration for every GPU model, on every reference workload
it claims, generated for the model and run on the CPU device against evaluate
(tests/gpu_model_cases.py says what is skipped or marked and why). The sweep of sampled
configurations is ``slow``."""

from __future__ import annotations

import collections
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


def _check(case: Case, params: dict, cl_queue) -> None:  # type: ignore[no-untyped-def]
    fit = cpu_fit(MODELS[case.model].info, device_info(cl_queue.device))
    if fit:
        pytest.skip(f"does not fit the CPU device: {fit}")
    err, _ = run(case, params, cl_queue)
    known = pocl_problem(case.recipe, specs()[case.workload], params)
    if err is not None and known:
        pytest.xfail(f"{known}; here: {err[:300]}")
    assert err is None, f"{case.id} {json.dumps(params, sort_keys=True)}: {err}"


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.id)
def test_default_for_gpu_model_runs_on_cpu(case: Case, cl_queue) -> None:  # type: ignore[no-untyped-def]
    """The model's default configuration is valid, and its code computes evaluate's result
    on the CPU device (identical code generated for several models runs once)."""
    r, e, m = recipes()[case.recipe], specs()[case.workload], MODELS[case.model].info
    params = r.default(e, m)
    r.space(e, m).validate(params)
    _check(case, params, cl_queue)


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

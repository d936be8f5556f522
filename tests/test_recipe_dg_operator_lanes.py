"""The dg_operator recipe's lane mode (element-blocked data, ``lanes="index"``): random
configurations of the blocked einsums match feinsum.evaluate on PoCL (float32 and float64,
block counts that are multiples of no tile), whole-vector code, and the lane mode rejected
with the reason where it is invalid."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import feinsum as fs
from feinsum.errors import InvalidConfigurationError
from feinsum.spec.canonical import canonicalize
from feinsum.toolbox.parameters import Constraint

TRANSFORMS = Path(__file__).resolve().parents[1] / "transforms"


@functools.cache
def recipe():  # type: ignore[no-untyped-def]
    from feinsum.recipes import load_recipe_file

    return load_recipe_file(TRANSFORMS / "dg_operator.py")


def blocked_specs(dt: str, B: int) -> list[fs.BatchedEinsum]:
    """Small blocked members of the family (element e = b*B + l), ``NB`` blocks."""
    a = fs.array
    return [
        fs.einsum("ij,bjl->bil", a("D", (9, 6), dt), a("u", ("NB", 6, B), dt)),
        fs.einsum("xrbl,rij,xbjl->bil", a("J", (2, 2, "NB", B), dt), a("D", (2, 7, 5), dt),
                  a("u", (2, "NB", 5, B), dt)),
        fs.einsum("xrbl,rij,bjl->xbil", a("J", (3, 2, "NB", B), dt), a("D", (2, 7, 5), dt),
                  a("u", ("NB", 5, B), dt)),
        fs.batched_einsum("ifj,fbl,fbjl->bil", [
            [a("L", (7, 3, 5), dt), a("J", (3, "NB", B), dt), a(f"v{k}", (3, "NB", 5, B), dt)]
            for k in range(2)]),
        # a geometric factor per block, not per element: broadcast across the lanes
        fs.einsum("ifj,fb,fbjl->bil", a("L", (7, 3, 5), dt), a("J", (3, "NB"), dt),
                  a("v", (3, "NB", 5, B), dt)),
    ]


@pytest.mark.parametrize(("dt", "B"), [("float32", 16), ("float64", 8), ("float64", 4)])
def test_random_configurations_match_evaluate(dt, B, cl_queue):  # type: ignore[no-untyped-def]
    """Random valid configurations (both lane choices) and the default."""
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), blocked_specs(dt, B), cl_queue, n=5,
                                        seed=21 + B)
    assert len(cases) == 5
    assert all(c.params["lanes"] == "index" for c in cases[:1])  # the default
    assert_all_ok(cases)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_lane_mode_configurations_match_evaluate(dt, cl_queue, cl_device):  # type: ignore[no-untyped-def]
    """Random valid lane-mode configurations on every blocked einsum, odd block counts."""
    from feinsum.recipes.testing import check_configuration, sample_lengths

    rng = np.random.default_rng(5 if dt == "float32" else 6)
    bad = []
    for s in blocked_specs(dt, 8):
        e = canonicalize(s)
        space = recipe().space(e, cl_device).constrain(
            Constraint("test_lanes", lambda p: p["lanes"] == "index"))
        for params in space.sample(rng, n=2):
            err = check_configuration(recipe(), e, params, sample_lengths(e, rng), cl_queue)
            if err:
                bad.append(f"{s} {params}: {err}")
    assert not bad, "\n".join(bad)


def test_default_and_vector_code(cl_device):  # type: ignore[no-untyped-def]
    """Blocked data gets lane mode by default, whole-vector arguments, no clamped gathers;
    plain data keeps elements as lanes."""
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy

    r = recipe()
    e = canonicalize(blocked_specs("float64", 8)[1])
    cfg = r.default(e, cl_device)
    assert (cfg["lanes"], cfg["vec"]) == ("index", 8)
    code = lp.generate_code_v2(r.apply(generate_loopy(e), cfg, e, cl_device)).device_code()
    assert "__global double8 *__restrict__ out0" in code
    assert code.count("double8 const *__restrict__") == 2  # J and u, not D
    assert "min(" not in code
    plain = canonicalize(fs.einsum("ij,ej->ei", fs.array("D", (9, 6)),
                                   fs.array("u", ("E", 6))))
    assert r.default(plain, cl_device)["lanes"] == "elements"


@pytest.mark.parametrize(("spec", "reason"), [
    (fs.einsum("ij,ej->ei", fs.array("D", (9, 6)), fs.array("u", ("E", 6))),
     "length 9, not a short length"),
    (fs.einsum("ij,bjl->bil", fs.array("D", (9, 6)), fs.array("u", ("NB", 6, 3))),
     "length 3"),
    (fs.einsum("ij,blj->bil", fs.array("D", (9, 6)), fs.array("u", ("NB", 8, 6))),
     "does not have the lane index"),
    (fs.einsum("ij,bjl->bil", fs.array("D", (9, 6)), fs.array("u", ("NB", 6, 8), order="F")),
     "last, contiguous axis"),
    (fs.einsum("ijl,bjl->bil", fs.array("D", (9, 6, 8)), fs.array("u", ("NB", 6, 8))),
     "but not the element index"),
])
def test_invalid_lane_mode_is_rejected(spec, reason, cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    e = canonicalize(spec)
    assert r.applies(e, cl_device) is None
    cfg = {**r.default(e, cl_device), "lanes": "index"}
    with pytest.raises(InvalidConfigurationError, match="lane_index") as info:
        r.check(cfg, e, cl_device)
    assert reason in str(info.value)
    assert "element-blocked" in str(info.value)


def test_lane_mode_needs_vec_equal_to_the_block(cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    e = canonicalize(blocked_specs("float64", 8)[0])
    with pytest.raises(InvalidConfigurationError, match=r"lane_vec.*vec = 8"):
        r.check({**r.default(e, cl_device), "vec": 4}, e, cl_device)
    r.check({**r.default(e, cl_device), "vec": 4, "lanes": "elements"}, e, cl_device)


def test_work_group_private_memory_is_bounded_on_cpus(cl_device):  # type: ignore[no-untyped-def]
    """256 work-items of 56 KiB private memory each crashed PoCL: rejected before building."""
    r = recipe()
    a = fs.array
    e = canonicalize(fs.einsum("xrbl,rij,xbjl->bil", a("J", (3, 3, "NB", 8)),
                               a("D", (3, 35, 35)), a("u", (3, "NB", 35, 8))))
    cfg = {**r.default(e, cl_device), "lanes": "elements", "last": 2, "vec": 4, "acc1": 16,
           "acc2": 1, "work_items": 256, "unroll": 16}
    from feinsum.devices.opencl import device_info

    if not device_info(cl_device).is_cpu:
        pytest.skip("needs a CPU device: the limit checked is PoCL's")
    with pytest.raises(InvalidConfigurationError, match="group_private"):
        r.check(cfg, e, cl_device)
    r.check({**cfg, "work_items": 16}, e, cl_device)

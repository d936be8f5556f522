"""The dg_operator recipe: random valid configurations match feinsum.evaluate on PoCL
(float32 and float64, element counts that are multiples of no tile, one build per
configuration serving two lengths), applicability, and constraint violations."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

import feinsum as fs
from feinsum.errors import InvalidConfigurationError
from feinsum.spec.canonical import canonicalize

TRANSFORMS = Path(__file__).resolve().parents[1] / "transforms"


@functools.cache
def recipe():  # type: ignore[no-untyped-def]
    from feinsum.recipes import load_recipe_file

    return load_recipe_file(TRANSFORMS / "dg_operator.py")


def dg_specs(dt: str) -> list[fs.BatchedEinsum]:
    """Small members of the family, the element count a runtime symbol."""
    a = fs.array
    return [
        fs.einsum("xre,rij,xej->ei", a("J", (2, 2, "E"), dt), a("D", (2, 7, 5), dt),
                  a("u", (2, "E", 5), dt)),
        fs.einsum("xre,rij,ej->xei", a("J", (3, 2, "E"), dt), a("D", (2, 7, 5), dt),
                  a("u", ("E", 5), dt)),
        fs.batched_einsum("ifj,fe,fej->ei", [[a("L", (7, 3, 5), dt), a("J", (3, "E"), dt),
                                              a(f"v{k}", (3, "E", 5), dt)] for k in range(3)]),
        fs.batched_einsum("ij,ej->ei", [[a("D", (9, 6), dt), a(f"u{k}", ("E", 6), dt)]
                                        for k in range(2)]),
    ]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_random_configurations_match_evaluate(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), dg_specs(dt), cl_queue, n=10,
                                        seed=11 if dt == "float32" else 12)
    assert len(cases) == 10
    assert_all_ok(cases)


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_exhaustive_sweep(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), dg_specs(dt), cl_queue, n=80, seed=3)
    assert_all_ok(cases)


def test_applies_to_the_family_only(cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    for e in dg_specs("float64"):
        assert r.applies(canonicalize(e), cl_device) is None
    gemm = fs.einsum("ik,kj->ij", fs.array("A", ("M", "K")), fs.array("B", ("K", "N")))
    assert "long" in r.applies(canonicalize(gemm), cl_device)
    reduced = fs.einsum("ej,ej->j", fs.array("u", ("E", 5)), fs.array("w", ("E", 5)))
    assert "reduced" in r.applies(canonicalize(reduced), cl_device)
    mx = fs.einsum("ij,ej->ei", fs.array("D", (5, 5)), fs.array("u", ("E", 5)),
                   reduction="max")
    assert r.applies(canonicalize(mx), cl_device) is not None


def test_default_picks_the_cheapest_plan(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.toolbox import dense as td

    e = canonicalize(dg_specs("float64")[0])
    cfg = recipe().default(e, cl_device)
    flops = {c: td.stage_flops(e, td.element_stages(e, c)) for c in (None, 0, 1, 2)}
    assert flops[cfg["last"]] == min(flops.values())
    assert td.stage_flops(e, td.element_stages(e, cfg["last"])) < flops[None]


def test_gpu_default_stages_the_operator_only_where_it_fits() -> None:
    """On every GPU model the default is a valid configuration: at 56 nodes the gradient's
    operator (3 x 56 x 56 doubles, 73 KiB) exceeds a GPU's 48 KiB of local memory, and the
    default reads it from global memory where the device's local memory is smaller (it
    staged it, and was refused as invalid, so the hook fell back to ``generic``); at 35
    nodes it still stages it."""
    from feinsum.devices.models import MODELS

    def gradient(n: int) -> fs.BatchedEinsum:
        return canonicalize(fs.einsum("xre,rij,ej->xei", fs.array("J", (3, 3, "E"), "float64"),
                                      fs.array("D", (3, n, n), "float64"),
                                      fs.array("u", ("E", n), "float64")))

    big, small = gradient(56), gradient(35)
    checked: list[bool] = []
    for model in MODELS.values():
        dev = model.info
        if dev.is_cpu or recipe().applies(big, dev) is not None:
            continue
        cfg = recipe().default(big, dev)
        assert recipe().space(big, dev).is_valid(cfg), model.key
        assert cfg["local_operator"] == (dev.local_mem_size >= 3 * 56 * 56 * 8)
        assert recipe().default(small, dev)["local_operator"]
        checked.append(cfg["local_operator"])
    assert False in checked


def test_a_smaller_gpu_work_group_takes_more_private_memory(cl_queue):  # type: ignore[no-untyped-def]
    """Four fields of a degree-6 divergence (84 nodes, float64): gathering their ``u``
    takes 8200 private bytes per work-item, just over the H200's 8192 for its default
    64-item group, and no configuration applied (the hook fell back to ``generic``:
    9.2 ms on the h200 model). A 32-item group's items share the same registers and L1:
    the default takes one, at least twice as fast as generic on the model, valid, and right
    on the CPU device. Where the private arrays fit the default group, the default keeps
    it."""
    from feinsum.devices.models import MODELS
    from feinsum.prediction import predict_configuration
    from feinsum.recipes import get_recipe
    from feinsum.recipes.testing import check_configuration
    from feinsum.toolbox import dense as td

    def divergence_x4(n: int) -> fs.BatchedEinsum:
        J, D = fs.array("J", (3, 3, "E"), "float64"), fs.array("D", (3, n, n), "float64")
        us = [fs.array(f"u{k}", (3, "E", n), "float64") for k in range(4)]
        return fs.batched_einsum("xre,rij,xej->ei", [[J, D, u] for u in us])

    dev = MODELS["h200"].info
    spec = divergence_x4(84)
    e, lengths = canonicalize(spec), fs.canonical_lengths(spec.with_lengths({"E": 100_000}))
    assert recipe().applies(e, dev) is None
    cfg = recipe().default(e, dev, lengths)
    assert cfg["work_items"] == 32 and recipe().space(e, dev).is_valid(cfg)
    assert td.private_limit(dev, 64) < 8200 <= td.private_limit(dev, 32)
    generic = get_recipe("generic")
    assert (2 * predict_configuration(recipe(), e, cfg, "h200", lengths).seconds
            < predict_configuration(generic, e, generic.default(e, dev, lengths), "h200",
                                    lengths).seconds)
    assert check_configuration(recipe(), e, cfg, ({"n0": 37},), cl_queue, device=dev) is None
    assert recipe().default(canonicalize(divergence_x4(35)), dev)["work_items"] == 64


def test_constraint_violations_are_rejected(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.lowering.kernel import generate_loopy

    r = recipe()
    e = canonicalize(dg_specs("float64")[0])
    base = r.default(e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="work_items"):
        r.check({**base, "work_items": 1 << 20}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="registers"):
        # the widest vector the device's space offers, 16 accumulators: twice the registers
        widest = max(r.space(e, cl_device).params["vec"].options)
        r.check({**base, "acc1": 16, "acc2": 16, "vec": widest, "rows_per_pass": 1}, e,
                cl_device)
    one_stage = {**base, "last": None, "acc2": 4}
    with pytest.raises(InvalidConfigurationError, match="single_stage_acc"):
        r.apply(generate_loopy(e), one_stage, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="unknown parameter"):
        r.check({**base, "tile": 3}, e, cl_device)

"""The dg_transposed recipe: random valid configurations match feinsum.evaluate on PoCL
(float32 and float64; output rows of whole vectors, whole vectors and a partial one, and a
partial one only; element counts that are multiples of no tile), applicability,
constraint violations and the code it generates."""

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

    return load_recipe_file(TRANSFORMS / "dg_transposed.py")


def specs(dt: str) -> list[fs.BatchedEinsum]:
    """Small members of the family, the element count a runtime symbol; the output rows
    have 19, 9, 16 and 6 entries."""
    a = fs.array
    return [
        fs.einsum("xre,rij,xej->ei", a("J", (2, 2, "E"), dt), a("D", (2, 19, 5), dt),
                  a("u", (2, "E", 5), dt)),
        fs.einsum("xre,rij,ej->xei", a("J", (3, 2, "E"), dt), a("D", (2, 9, 5), dt),
                  a("u", ("E", 5), dt)),
        fs.batched_einsum("ifj,fe,fej->ei", [[a("L", (16, 3, 5), dt), a("J", (3, "E"), dt),
                                              a(f"v{k}", (3, "E", 5), dt)] for k in range(3)]),
        fs.batched_einsum("ij,ej->ei", [[a("D", (6, 9), dt), a(f"u{k}", ("E", 9), dt)]
                                        for k in range(2)]),
    ]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_random_configurations_match_evaluate(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), specs(dt), cl_queue, n=12,
                                        seed=21 if dt == "float32" else 22)
    assert len(cases) == 12
    assert_all_ok(cases)


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_exhaustive_sweep(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), specs(dt), cl_queue, n=80, seed=5)
    assert_all_ok(cases)


def test_applies_to_plain_layouts_only(cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    for e in specs("float64"):
        assert r.applies(canonicalize(e), cl_device) is None
    blocked = fs.einsum("ij,bjl->bil", fs.array("D", (35, 35)), fs.array("u", ("NB", 35, 8)))
    assert "both the element index" in r.applies(canonicalize(blocked), cl_device)
    gemm = fs.einsum("ik,kj->ij", fs.array("A", ("M", "K")), fs.array("B", ("K", "N")))
    assert "long" in r.applies(canonicalize(gemm), cl_device)
    transposed_out = fs.einsum("ij,ej->ie", fs.array("D", (5, 5)), fs.array("u", ("E", 5)))
    assert "element index" in r.applies(canonicalize(transposed_out), cl_device)


def test_plans_with_two_factors_along_the_lanes_are_not_offered(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.toolbox import dense as td
    from feinsum.toolbox import transposed as tt

    e = canonicalize(specs("float64")[0])
    offered = recipe().space(e, cl_device).params["last"].values()
    for last in (None, 0, 1, 2):
        why = tt.transposed_reason(e, td.element_stages(e, last))
        assert (last in offered) == (why is None)
        if why:
            assert "exactly one" in why


def test_default_is_valid_and_writes_whole_vectors(cl_device):  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy

    r = recipe()
    for s in specs("float64"):
        e = canonicalize(s)
        cfg = r.default(e, cl_device)
        assert r.space(e, cl_device).is_valid(cfg)
    e = canonicalize(specs("float64")[0])  # 19 entries a row
    cfg = {**r.default(e, cl_device), "vec": 8}
    code = lp.generate_code_v2(r.apply(generate_loopy(e), cfg, e, cl_device)).device_code()
    assert code.count("vstore8(") == 2 * cfg["elements"]  # two whole vectors of 8, then 3
    assert "__local double8" in code


def test_constraint_violations_are_rejected(cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    e = canonicalize(specs("float64")[0])
    base = r.default(e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="work_items"):
        r.check({**base, "work_items": 1 << 20}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="registers"):
        r.check({**base, "vec": 1, "elements": 4}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="unknown parameter"):
        r.check({**base, "acc1": 3}, e, cl_device)
    big = fs.einsum("ij,ej->ei", fs.array("D", (128, 128)), fs.array("u", ("E", 128)))
    eb = canonicalize(big)
    import dataclasses

    from feinsum.recipes.recipe import as_device_info

    # 128-entry rows fit the registers of a CPU with 8 doubles a vector (AVX-512) ...
    wide = dataclasses.replace(as_device_info(cl_device), native_vector_width_double=8,
                               native_vector_width_float=16)
    assert r.applies(eb, wide) is None
    small_local = dataclasses.replace(wide, local_mem_size=32 << 10)
    with pytest.raises(InvalidConfigurationError, match="local_memory"):
        r.check({**r.default(eb, wide)}, eb, small_local)
    # ... not those of one with 4 (AVX2), nor a device that cannot build vector code
    for lanes in (4, 1):
        narrow = dataclasses.replace(wide, native_vector_width_double=lanes)
        assert "vector accumulators" in (r.applies(eb, narrow) or "")

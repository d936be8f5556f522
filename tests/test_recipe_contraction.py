"""The contraction recipe: random valid configurations match feinsum.evaluate on PoCL
(float32 and float64, lengths that are multiples of no tile, runtime lengths so one build
serves two sizes), applicability, and constraint violations."""

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

    return load_recipe_file(TRANSFORMS / "contraction.py")


def contraction_specs(dt: str) -> list[fs.BatchedEinsum]:
    a = fs.array
    return [
        fs.einsum("ik,kj->ij", a("A", ("M", "K"), dt), a("B", ("K", "N"), dt)),
        fs.einsum("ijkl,mi->mjkl", a("T", (9, 5, 3, "L"), dt), a("W", ("Q", 9), dt)),
        fs.einsum("ijk,jkl->il", a("A", ("I", 6, 5), dt), a("B", (6, 5, "L"), dt)),
        # scalar factors between and after the operands (pytato's 2 * (A @ B), alpha)
        fs.einsum("ik,,kj,->ij", a("A", ("M", "K"), dt), a("s", (), dt),
                  a("B", ("K", "N"), dt), fs.formula("two", (), "2.0", [])),
    ]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_random_configurations_match_evaluate(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), contraction_specs(dt), cl_queue, n=10,
                                        seed=21 if dt == "float32" else 22)
    assert len(cases) == 10
    assert_all_ok(cases)


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_exhaustive_sweep(dt, cl_queue):  # type: ignore[no-untyped-def]
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    cases = check_random_configurations(recipe(), contraction_specs(dt), cl_queue, n=60, seed=5)
    assert_all_ok(cases)


def test_applies_to_two_operand_contractions(cl_device):  # type: ignore[no-untyped-def]
    r = recipe()
    for e in contraction_specs("float32"):
        assert r.applies(canonicalize(e), cl_device) is None
    a = fs.array
    three = fs.einsum("ij,jk,kl->il", a("A", (5, 6)), a("B", (6, 7)), a("C", (7, 8)))
    assert "two operands" in r.applies(canonicalize(three), cl_device)
    ew = fs.einsum("ij,ij->ij", a("A", (5, 6)), a("B", (5, 6)))
    assert "no reduction" in r.applies(canonicalize(ew), cl_device)
    shared = fs.einsum("ik,jk->k", a("A", (3, 5)), a("B", (6, 5)))
    assert "both operands" in r.applies(canonicalize(shared), cl_device)
    batched = fs.einsum("bij,bjk->bik", a("A", (3, 5, 6)), a("B", (3, 6, 7)))
    assert r.applies(canonicalize(batched), cl_device) is None


def test_constraint_violations_are_rejected(cl_device):  # type: ignore[no-untyped-def]
    from feinsum.lowering.kernel import generate_loopy

    r = recipe()
    e = canonicalize(contraction_specs("float32")[0])
    base = r.default(e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="staging_needs_tile"):
        r.apply(generate_loopy(e), {**base, "kt": 1, "stage_a": True}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="kt"):
        r.check({**base, "kt": 3}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="missing parameter"):
        r.check({k: v for k, v in base.items() if k != "lx"}, e, cl_device)
    if cl_device.type & 2:  # a CPU: PoCL's partial work-groups with barriers
        tiled = {**base, "scheme": "tiled", "kt": 8, "stage_b": True, "slabs": False}
        with pytest.raises(InvalidConfigurationError, match="staging_on_cpus"):
            r.check(tiled, e, cl_device)


@pytest.mark.parametrize("order", ["C", "F"])
def test_vector_scheme_loads_whole_vectors_where_contiguous(order, cl_queue):  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes.recipe import as_device_info
    from feinsum.recipes.testing import check_configuration

    a = fs.array
    e = canonicalize(fs.einsum("ik,kj->ij", a("A", ("M", "K"), "float32"),
                               a("B", ("K", "N"), "float32", order=order)))
    r, dev = recipe(), as_device_info(cl_queue.device)
    cfg = {**r.default(e, dev), "scheme": "vector", "vec": 8, "tx": 2, "ty": 3}
    code = lp.generate_code_v2(r.apply(generate_loopy(e), cfg, e, dev)).device_code()
    assert ("vload8(" in code) == (order == "C")  # a column of F-order B is not contiguous
    lengths = [{"n0": 37, "n1": 45, "n2": 21}, {"n0": 7, "n1": 3, "n2": 17}]
    assert check_configuration(r, e, cfg, lengths, cl_queue) is None

"""The generic and elementwise recipes: random valid configurations match feinsum.evaluate.

Each configuration is built once for the canonical spec (long axes symbolic) and run at two
random lengths that are multiples of no tile (see feinsum.recipes.testing).
"""

from __future__ import annotations

import numpy as np
import pytest

import feinsum
from feinsum.errors import InvalidConfigurationError
from feinsum.recipes import get_recipe
from feinsum.recipes.testing import (
    assert_all_ok,
    check_configuration,
    check_random_configurations,
)

f32, f64 = np.float32, np.float64


def _a(name, shape, dtype=f32):  # type: ignore[no-untyped-def]
    return feinsum.array(name, shape, dtype)


def generic_specs() -> list[feinsum.BatchedEinsum]:
    x, y = _a("x", ("N", 3)), _a("y", ("M", 3))
    gauss = feinsum.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2))", [x, y])
    return [
        feinsum.einsum("ik,kj->ij", _a("A", ("N", 13)), _a("B", (13, "M"))),
        feinsum.batched_einsum("ij,ej->ei", [[_a("D", (35, 35), f64), _a("u0", ("E", 35), f64)],
                                             [_a("D", (35, 35), f64), _a("u1", ("E", 35), f64)]]),
        feinsum.einsum("xre,rij,ej->xei", _a("J", (3, 3, "E"), f64), _a("R", (3, 10, 10), f64),
                       _a("v", ("E", 10), f64)),
        feinsum.einsum("ij,j->i", _a("A", ("N", "M")), _a("b", ("M",)), reduction="min"),
        feinsum.einsum("ij,j->i", gauss, _a("b", ("M",))),
        feinsum.einsum("j,j->", _a("x", ("N",), f64), _a("y", ("N",), f64)),
        feinsum.einsum("ij,j->i", _a("A", ("N", 40)), _a("b", (40,)), reduction="argmin"),
        feinsum.einsum("ij,j->i", _a("A", ("N", "M"), f64), _a("b", ("M",), f64),
                       reduction="logsumexp"),
    ]


def vector_specs() -> list[feinsum.BatchedEinsum]:
    """The sum einsums of :func:`generic_specs` (vec > 1 applies to them) and an
    elementwise one."""
    return [*generic_specs()[:3], generic_specs()[4],
            feinsum.einsum("ij,j->ij", _a("A", ("N", 19), f64), _a("b", (19,), f64))]


def elementwise_specs() -> list[feinsum.BatchedEinsum]:
    return [
        feinsum.einsum("ij,j->ij", _a("A", ("N", "M")), _a("b", ("M",))),
        feinsum.einsum("ijk,k,i->ijk", _a("A", ("N", 5, "M"), f64), _a("b", ("M",), f64),
                       _a("c", ("N",), f64)),
        feinsum.batched_einsum("ij,ij->ij", [[_a("A", ("N", 24)), _a("B", ("N", 24))],
                                             [_a("A", ("N", 24)), _a("C", ("N", 24))]]),
    ]


def test_generic_random_configurations(cl_queue) -> None:  # type: ignore[no-untyped-def]
    cases = check_random_configurations(get_recipe("generic"), generic_specs(), cl_queue,
                                        n=20, seed=4)
    assert len(cases) == 20
    assert_all_ok(cases)


def test_generic_vector_configurations(cl_queue) -> None:  # type: ignore[no-untyped-def]
    """20 random valid configurations with vec > 1, round-robin over the sum specs."""
    from feinsum.recipes.recipe import as_device_info
    from feinsum.recipes.testing import Case, sample_lengths
    from feinsum.spec.canonical import canonicalize

    r, rng = get_recipe("generic"), np.random.default_rng(7)
    device = as_device_info(cl_queue.device)
    cases = []
    for e in (canonicalize(s) for s in vector_specs()):
        space = r.space(e, device)
        picks = [p for p in space.sample(rng, n=60) if p["vec"] > 1][:4]
        assert len(picks) == 4, e
        for p in picks:
            lengths = sample_lengths(e, rng, 2)
            cases.append(Case(e, p, lengths, check_configuration(r, e, p, lengths, cl_queue)))
    assert len({c.params["vec"] for c in cases}) >= 3
    assert_all_ok(cases)


def test_a_scalar_formula_factor_on_two_hardware_axes(cl_queue) -> None:  # type: ignore[no-untyped-def]
    """``2.0 * (A @ B)`` (a formula operand of no index, broadcast outside the vector
    index's loop): the default and vector configurations with the second output index on
    a group axis run (the broadcast used one group axis of two: loopy refused it)."""
    from feinsum.recipes.recipe import as_device_info
    from feinsum.spec.canonical import canonicalize

    a = feinsum.array
    e = canonicalize(feinsum.einsum("ik,kj,->ij", a("A", ("M", "K"), np.float32),
                                    a("B", ("K", "N"), np.float32),
                                    feinsum.formula("two", (), "2.0", [])))
    r, device = get_recipe("generic"), as_device_info(cl_queue.device)
    lengths = [dict.fromkeys(e.length_symbols, n) for n in (5, 300)]
    default = r.default(e, device)
    assert default["vec"] > 1
    for p in (default, {**default, "ly": 2}, {**default, "vec": 4, "px": 2}):
        assert check_configuration(r, e, p, lengths, cl_queue) is None, p


def test_generic_staging(cl_queue) -> None:  # type: ignore[no-untyped-def]
    """Random sampling rarely stages; check local and private staging explicitly."""
    from feinsum.spec.canonical import canonicalize

    r = get_recipe("generic")
    gemm, dg = (canonicalize(s) for s in generic_specs()[:2])
    plain = {"lx": 16, "px": 2, "ly": 4, "py": 2, "slabs": False, "vec": 1}
    broadcast = next(c for c in range(2) if gemm.out_indices[-1] not in gemm.in_indices[c])
    for e, extra, cols in ((gemm, plain, (0, 1)), (dg, {"slabs": False, "vec": 1}, (0, 1)),
                           (gemm, {**plain, "vec": 4}, (broadcast, broadcast))):
        base = {**r.default(e, cl_queue.device), **extra}
        for c, where in zip(cols, ("local", "private"), strict=True):
            params = {**base, f"stage{c}": where}
            assert r.space(e, cl_queue.device).is_valid(params), params
            lengths = [dict(zip(e.length_symbols, n, strict=False)) for n in ((37, 45), (7, 1))]
            err = check_configuration(r, e, params, lengths, cl_queue)
            assert err is None, (e, params, err)


def test_toolbox_stage_array(cl_queue) -> None:  # type: ignore[no-untyped-def]
    """add_prefetch of a global array into local memory, as a recipe would compose it."""
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.recipes.testing import run_kernel
    from feinsum.spec.canonical import canonicalize
    from feinsum.toolbox import core as tb

    e = canonicalize(generic_specs()[0])
    x, (r,) = e.out_indices[-1], e.reduction_indices
    t = tb.assume_nonempty(generate_loopy(e), e)
    t = tb.distribute(t, x, work_items=16, axis=0)
    t = tb.distribute(t, e.out_indices[0], work_items=1, axis=1, per_item=2, per_item_tag="ilp")
    t = tb.tile_reduction(t, r, 4, unroll=False)
    array = next(f.name for _, c, f in e.factors() if x in e.in_indices[c])
    t = tb.stage_array(t, array, [f"{x}_l", f"{r}_u"],
                       fetch_outer_inames=[f"{x}_g", f"{e.out_indices[0]}_g", f"{r}_t"])
    got, ref = run_kernel(t, e, dict.fromkeys(e.length_symbols, 37), cl_queue)
    assert np.allclose(got["out0"], ref["out0"], rtol=1e-4)


def test_elementwise_random_configurations(cl_queue) -> None:  # type: ignore[no-untyped-def]
    cases = check_random_configurations(get_recipe("elementwise"), elementwise_specs(),
                                        cl_queue, n=20, seed=5)
    assert len(cases) == 20
    assert_all_ok(cases)


def test_applies(cl_device) -> None:  # type: ignore[no-untyped-def]
    from feinsum.spec.canonical import canonicalize

    ew, gen = get_recipe("elementwise"), get_recipe("generic")
    red = canonicalize(generic_specs()[0])
    assert "reduces over" in ew.applies(red, cl_device)
    assert gen.applies(red, cl_device) is None
    scalar = canonicalize(feinsum.einsum("i,i->i", _a("x", (3,)), _a("y", (3,))))
    assert ew.applies(scalar, cl_device) is None


def test_constraint_violations_are_named(cl_device) -> None:  # type: ignore[no-untyped-def]
    from feinsum.spec.canonical import canonicalize

    r = get_recipe("generic")
    e = canonicalize(generic_specs()[0])
    p = r.default(e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="work_group_size"):
        r.check({**p, "lx": 1024, "ly": 64}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="tile_or_share"):
        r.check({**p, "rtile": 4, "rlocal": 4, "px": 1, "py": 1}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match=r"'rtile': 3 is not one of"):
        r.check({**p, "rtile": 3}, e, cl_device)
    with pytest.raises(InvalidConfigurationError, match="slabs"):
        r.check({**p, "slabs": True, "stage0": "local"}, e, cl_device)
    gauss = canonicalize(generic_specs()[4])
    formula_col = next(c for c in range(gauss.noperands) if any(
        isinstance(f, feinsum.Formula) for f in gauss.arguments[0][c]))
    with pytest.raises(InvalidConfigurationError, match=r"stage\d.*holds a formula"):
        r.check({**r.default(gauss, cl_device), f"stage{formula_col}": "local",
                 "slabs": False}, gauss, cl_device)
    argmin = canonicalize(generic_specs()[6])
    with pytest.raises(InvalidConfigurationError, match="'rlocal'"):
        r.check({**r.default(argmin, cl_device), "rlocal": 4, "rtile": 1}, argmin, cl_device)


def test_vector_constraints_are_named(cl_device) -> None:  # type: ignore[no-untyped-def]
    from feinsum.spec.canonical import canonicalize

    r = get_recipe("generic")
    for spec, why in ((generic_specs()[3], "min reductions use scalar helper"),
                      (generic_specs()[5], "scalar"), (generic_specs()[6], "argmin"),
                      (generic_specs()[7], "logsumexp")):
        e = canonicalize(spec)
        with pytest.raises(InvalidConfigurationError, match=rf"'vec'.*{why}"):
            r.check({**r.default(e, cl_device), "vec": 4}, e, cl_device)
    e = canonicalize(feinsum.einsum("ij,jk->ik", _a("A", ("N", 5)), _a("B", (5, 3))))
    p = {**r.default(e, cl_device), "vec": 8}
    with pytest.raises(InvalidConfigurationError, match=r"vec_length.*vec <= 4"):
        r.check(p, e, cl_device)
    gemm = canonicalize(generic_specs()[0])
    p = {**r.default(gemm, cl_device), "vec": 4, "slabs": False}
    r.check(p, gemm, cl_device)
    with pytest.raises(InvalidConfigurationError, match="vec_shared_reduction"):
        r.check({**p, "rlocal": 4, "rtile": 1}, gemm, cl_device)
    with pytest.raises(InvalidConfigurationError, match="vector_code_size"):
        r.check({**p, "vec": 16, "px": 8, "rtile": 4}, gemm, cl_device)
    gathered = next(c for c in range(2) if gemm.out_indices[-1] in gemm.in_indices[c])
    with pytest.raises(InvalidConfigurationError, match="gathers it lane by lane"):
        r.check({**p, f"stage{gathered}": "private"}, gemm, cl_device)
    with pytest.raises(InvalidConfigurationError, match=r"'vec': 32 is not in powers of two 1..16"):
        r.check({**p, "vec": 32}, gemm, cl_device)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("name", ["generic", "elementwise"])
def test_sweep(name, cl_queue) -> None:  # type: ignore[no-untyped-def]
    specs = generic_specs() if name == "generic" else elementwise_specs()
    assert_all_ok(check_random_configurations(get_recipe(name), specs, cl_queue,
                                               n=25 * len(specs), seed=11))

"""feinsum under a real array compiler: arraycontext + pytato programs, end to end.

The programs of ``tests/arraycontext_cases.py`` run through arraycontext's own contexts
and through feinsum's (:mod:`feinsum.arraycontext`), with the arraycontext/pytato pair
installed in the venv (``scripts/bootstrap test`` installs it from the wheels built from
their repositories). Where they are absent these tests skip, saying so; CI sets
``FEINSUM_REQUIRE_ARRAYCONTEXT=1``, which turns the skip into a failure.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
import pytest

REQUIRE = "FEINSUM_REQUIRE_ARRAYCONTEXT"


def require_arraycontext() -> None:
    """Skip (or, in CI, fail) where arraycontext and pytato are not installed."""
    try:
        import arraycontext  # noqa: F401
        import pytato  # noqa: F401
    except ImportError as exc:
        why = (f"arraycontext/pytato are not installed ({exc}); `scripts/bootstrap test` "
               "installs them from the wheels in ../shared/wheels or $FEINSUM_WHEELS")
        if os.environ.get(REQUIRE):
            pytest.fail(f"{REQUIRE} is set but {why}")
        pytest.skip(why)


def run_one_group(actx: Any, fn: Any, *host: np.ndarray, recipe: str = "generic"
                  ) -> tuple[np.ndarray, Any]:
    """*fn* of the arrays *host*, compiled by *actx* (feinsum's lazy context): its result
    and the report's one group, which *recipe*'s default must have made."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(fn)(*(actx.from_numpy(h) for h in host)))
    report = actx.feinsum_last_report
    assert [(g.recipe, g.action) for g in report.groups] == [(recipe, "default")], str(report)
    return got, report.groups[0]


@pytest.fixture(scope="module", autouse=True)
def _arraycontext() -> None:
    require_arraycontext()


@pytest.fixture(scope="module")
def cases() -> Any:
    import arraycontext_cases

    return arraycontext_cases


def check_lazy(facts: dict[str, Any], expected_groups: int, tol: float,
               too_small: int = 0) -> None:
    """*expected_groups* transformed, and *too_small* more groups left to the default
    schedule for too little work (see ``feinsum/hook/payoff.py``)."""
    report = facts["report"]
    assert facts["transformed"] == expected_groups == facts["groups"] - too_small, report
    assert sorted(facts["actions"]) == sorted(
        [a for a in facts["actions"] if a in ("default", "replayed")]
        + ["skipped"] * too_small), report
    # the program is feinsum's whole: einsums transformed, every other statement scheduled
    assert facts["kernels"] == ["transformed" if expected_groups else "scheduled"], report
    assert facts["vs_plain"] <= tol, report  # the untransformed program's results
    assert facts["vs_numpy"] <= tol, report
    assert facts["reuse_same"]  # the compiled program called again
    assert facts["recompile_cached"]  # compiled again: the hook's cache answers


@pytest.mark.parametrize("name", ["dg_step", "dg_mass_step", "several", "matmul",
                                  "sum_of_products", "tagged", "unit_axis", "no_einsum"])
def test_lazy_programs(cases: Any, name: str) -> None:
    """Every einsum path of pytato (actx.einsum, @, sum of a product, tagged outputs and
    axes, (E, 1) geometric factors, several einsums with elementwise work between them)
    is matched and transformed, and computes what the untransformed program does."""
    facts = cases.run_lazy(name)
    check_lazy(facts, cases.PROGRAMS[name][2], 1e-12)


def check_whole(facts: dict[str, Any]) -> None:
    """What the hook made of a DG step launches no more device kernels and writes no more
    global temporaries than what pytato made (the einsums read ``div - lift`` in their
    loads, apply the elementwise rest in their stores, share one launch)."""
    report = facts["report"]
    (before, after), (t_before, t_after) = facts["launches"], facts["temporaries"]
    assert after <= before and t_after <= t_before, report
    assert "device kernels" in report and "fused:" in report, report


@pytest.mark.parametrize("name", ["dg_step", "dg_mass_step"])
def test_whole_dg_step(cases: Any, name: str) -> None:
    """The DG steps at 300 elements (long enough for the element-batched recipes)."""
    facts = cases.run_lazy(name, elements=300)
    check_lazy(facts, cases.PROGRAMS[name][2], 1e-12)
    check_whole(facts)


def test_lazy_float32(cases: Any) -> None:
    facts = cases.run_lazy("dg_step", np.float32)
    check_lazy(facts, 2, 2e-5)


def test_eager_context_two_sizes(cases: Any) -> None:
    """The eager context runs an einsum transformed for each size it is called with."""
    facts = cases.run_eager((100, 150))
    assert facts["programs"] == 2
    for run in facts["runs"]:
        assert run["transformed"] == 1, run["report"]
        assert run["vs_numpy"] <= 1e-12


def test_contexts_pool_memory(cl_queue: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """feinsum's contexts allocate from a pool on every device unless told otherwise; a
    context the mixin joins that allocates without one gets one warning a process, naming
    the fix."""
    import warnings

    import pyopencl.tools as clt
    from arraycontext import PytatoPyOpenCLArrayContext

    import feinsum.hook.mixin as mixin
    from feinsum import FeinsumTransformMixin
    from feinsum.arraycontext import (
        FeinsumPyOpenCLArrayContext,
        FeinsumPytatoPyOpenCLArrayContext,
    )
    from feinsum.errors import PerformanceWarning

    monkeypatch.setattr(mixin, "_WARNED_POOL", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        for ctx in (FeinsumPytatoPyOpenCLArrayContext(cl_queue),
                    FeinsumPytatoPyOpenCLArrayContext(cl_queue, use_memory_pool=True),
                    FeinsumPyOpenCLArrayContext(cl_queue)):
            assert isinstance(ctx.allocator, clt.MemoryPool)
        assert isinstance(FeinsumPytatoPyOpenCLArrayContext(cl_queue).clone().allocator,
                          clt.MemoryPool)

    class Unpooled(FeinsumTransformMixin, PytatoPyOpenCLArrayContext):
        pass

    with pytest.warns(PerformanceWarning, match="MemoryPool") as caught:
        Unpooled(cl_queue)
        Unpooled(cl_queue)
        FeinsumPytatoPyOpenCLArrayContext(cl_queue, use_memory_pool=False)
    assert len([w for w in caught if w.category is PerformanceWarning]) == 1
    assert not mixin.unpooled(clt.MemoryPool(clt.ImmediateAllocator(cl_queue)))
    assert mixin.unpooled(None) and mixin.unpooled(clt.ImmediateAllocator(cl_queue))


def test_device_without_vector_code(cases: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A device whose probe found it cannot build vector code gets scalar code only, with
    the same results (PyPI's PoCL 3.0 aborts on double8 fma on Zen 4)."""
    import feinsum.devices.opencl
    from feinsum.hook import clear_cache

    why = "the driver killed the probe process building double8 kernels (simulated)"
    monkeypatch.setattr(feinsum.devices.opencl, "vector_problem", lambda dev: why)
    clear_cache()
    try:
        facts = cases.run_lazy("dg_step")
    finally:
        clear_cache()
    check_lazy(facts, 2, 1e-12)
    assert "cannot build vector code" in facts["report"]


def test_scalar_only_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """feinsum.compile on a device without vector code: scalar configurations only, and a
    clear error when the caller forces a vector one."""
    import feinsum
    import feinsum.devices.opencl
    from feinsum.errors import RecipeFailure

    why = "vector fma aborts the process (simulated)"
    monkeypatch.setattr(feinsum.devices.opencl, "vector_problem", lambda dev: why)
    D = feinsum.array("D", (35, 35))
    u = feinsum.array("u", ("E", 35))
    spec = feinsum.einsum("ij,ej->ei", D, u)
    rng = np.random.default_rng(0)
    arrays = {"D": rng.random((35, 35)), "u": rng.random((300, 35))}
    f = feinsum.compile(spec, db=False)
    np.testing.assert_allclose(f(**arrays), np.einsum("ij,ej->ei", arrays["D"], arrays["u"]),
                               rtol=1e-12)
    assert f.last_choice is not None and f.last_choice.recipe is not None
    forced = feinsum.compile(spec, db=False, recipe="contraction",
                             params={"scheme": "vector", "vec": 4})
    with pytest.raises(RecipeFailure, match="cannot build"):
        forced(**arrays)


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("name", ["complex128", "complex64"])
def test_complex_einsums(cases: Any, name: str, lazy: bool) -> None:
    """Complex operands through both contexts: transformed without vector types (OpenCL
    has none for complex numbers), right against numpy."""
    facts = cases.run_einsum(name, lazy)
    assert facts["transformed"] == 1, facts["report"]
    assert facts["vs_numpy"] <= (1e-12 if name == "complex128" else 2e-5), facts["report"]


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "eager"])
@pytest.mark.parametrize("name", ["chain", "batched chain"])
def test_long_operand_chains(cases: Any, name: str, lazy: bool) -> None:
    """Five 16x16 operands: the chain is too little work to transform, the batched one's
    default would unroll 16,384 statements: both are left as they are (the report says
    why), right against numpy, and finish."""
    facts = cases.run_einsum(name, lazy)
    assert facts["transformed"] == 0 and facts["groups"] == 1, facts["report"]
    why = "too little work" if name == "chain" else "code is too large"
    assert why in facts["notes"][0], facts["report"]
    assert facts["vs_numpy"] <= 1e-12, facts["report"]


def test_frozen_programs_get_the_default_schedule_only(cases: Any) -> None:
    """actx.freeze of an expression that was not compiled runs once: no einsum matched or
    transformed, every statement scheduled, the right result."""
    facts = cases.run_freeze()
    assert facts["mode"] == "schedule" and facts["groups"] == 0, facts["report"]
    assert facts["kernels"] == ["scheduled"], facts["report"]
    assert facts["vs_numpy"] <= 1e-12


def test_checks_beside_an_einsum_share_a_group_on_a_gpu() -> None:
    """``actx.np.any``/``all`` of an einsum's result (reductions feinsum does not hold),
    transformed for the H100 model and run on the CPU device: the einsum gets its recipe,
    the two checks one work-group of 64 work-items (they ran on one), and the result is
    numpy's."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS
    from feinsum.devices.opencl import get_device, get_queue

    actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False,
                                             feinsum_device=MODELS["h100"].info)
    rng = np.random.default_rng(8)
    D, u = rng.random((35, 35)), rng.random((3001, 35))
    top = float(np.max(u @ D.T)) - 0.01

    def checked(D: Any, u: Any) -> Any:
        new = actx.einsum("ij,ej->ei", D, u)
        big = actx.np.any(actx.np.greater(new, top))
        positive = actx.np.all(actx.np.greater(new, 0.0))
        return new + actx.np.where(big, 1.0, 0.0) + actx.np.where(positive, 10.0, 0.0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(checked)(actx.from_numpy(D), actx.from_numpy(u)))
    report = actx.feinsum_last_report
    assert [g.action for g in report.groups] == ["default"], str(report)
    assert "1 groups of 64; global temporaries written: _pt_out__red0" in str(report), str(
        report)
    np.testing.assert_allclose(got, u @ D.T + 11.0, rtol=1e-12)


def test_dg_programs_for_a_gpu_model(cl_queue: Any) -> None:
    """The DG step and the 20-einsum right-hand side of ``benchmarks/dg_programs.py`` as
    pytato writes them, transformed for the H200 model and run on the CPU device: every
    DG einsum gets dg_nodes (the pressure gradient, scaled by a constant, the generic
    default), and the results are numpy's."""
    import importlib.util
    from pathlib import Path

    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dg_programs.py"
    spec = importlib.util.spec_from_file_location("dg_programs", path)
    assert spec is not None and spec.loader is not None
    dp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dp)
    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    for name in ("DG step", "RHS (20 einsums)"):
        fn, names = dp.PROGRAMS[name]
        a = dp.inputs(names, 301)

        def program(*xs: Any, fn: Any = fn, names: Any = names) -> Any:
            return fn(actx, **dict(zip(names, xs, strict=True)))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = actx.to_numpy(actx.compile(program)(*(actx.from_numpy(a[n])
                                                        for n in names)))
        report = actx.feinsum_last_report
        recipes = [g.recipe for g in report.groups]
        assert all(g.action == "default" for g in report.groups), str(report)
        assert recipes.count("dg_nodes") >= len(recipes) - 1, str(report)
        want = dp.numpy_version(name)(**a)
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13 * np.abs(want).max())


def test_high_order_gradients_for_a_gpu_model(cl_queue: Any) -> None:
    """Gradients of degree 5 and 6 on tetrahedra (56 and 84 nodes) as pytato writes them,
    scaled (``2 * einsum``: the scale in the stores), for the H200 model, on the CPU
    device: ``D`` (73 and 165 KiB) exceeds local memory and the hook takes gemm_gpu's
    default, a register tile for each ``r`` combined by ``J`` as it is stored, one buffer
    (before: dg_nodes looping over ``r`` with one ``D[r]`` in local memory, predicted
    1.4x slower; dg_operator reading ``D`` from global memory, 3.2x slower; earlier
    still the generic fallback). At 3000 elements: at 56 nodes and 1000 elements or fewer
    the performance model predicts dg_nodes faster, and the hook takes it
    (:data:`feinsum.hook.choice.MODEL_ORDERED`). Both match numpy."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(11)
    for n, recipe, key, value in ((56, "gemm_gpu", "double_buffer", False),
                                  (84, "gemm_gpu", "double_buffer", False)):
        J, D = rng.standard_normal((3, 3, 3000)), rng.standard_normal((3, n, n))
        u = rng.standard_normal((3000, n))

        def program(J: Any, D: Any, u: Any) -> Any:
            return 2.0 * actx.einsum("xre,rij,ej->xei", J, D, u) + 1.0

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = actx.to_numpy(actx.compile(program)(*map(actx.from_numpy, (J, D, u))))
        (group,) = actx.feinsum_last_report.groups
        assert (group.recipe, group.action) == (recipe, "default")
        assert group.params[key] is value
        want = 2.0 * np.einsum("xre,rij,ej->xei", J, D, u) + 1.0
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())


def test_a_high_order_local_operator_for_a_gpu_model_is_a_gemm(cl_queue: Any) -> None:
    """A degree-6 local operator (84 nodes, ``D`` 56 KiB in float64) as pytato writes it,
    for the H200 model on the CPU device: ``D`` exceeds the local memory and dg_nodes does
    not fit, so the hook takes gemm_gpu's default (dg_operator's read ``D`` from global
    memory: predicted 2x slower); at 35 nodes dg_nodes as before. Both match numpy."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(12)
    for n, recipe in ((84, "gemm_gpu"), (35, "dg_nodes")):
        D, u = rng.standard_normal((n, n)), rng.standard_normal((301, n))

        def program(D: Any, u: Any) -> Any:
            return 0.5 * actx.einsum("ij,ej->ei", D, u)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = actx.to_numpy(actx.compile(program)(actx.from_numpy(D), actx.from_numpy(u)))
        (group,) = actx.feinsum_last_report.groups
        assert (group.recipe, group.action) == (recipe, "default"), str(group)
        want = 0.5 * u @ D.T
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())


def test_a_high_order_face_mass_for_a_gpu_model_is_a_gemm(cl_queue: Any) -> None:
    """The degree-6 face mass as pytato writes it (``L`` 84 x 4 x 28 doubles, 75 KiB: over
    the local memory), for the H200 model on the CPU device: its face Jacobians are
    folded into ``u``'s loads and the core ``ifj,fej->ei`` gets gemm_gpu's default (it got
    dg_operator's, which reads ``L`` from global memory: predicted 1.9x slower); it
    matches numpy."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(14)
    L, J = rng.standard_normal((84, 4, 28)), rng.standard_normal((4, 203))
    u = rng.standard_normal((4, 203, 28))

    def program(L: Any, J: Any, u: Any) -> Any:
        return actx.einsum("ifj,fe,fej->ei", L, J, u)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(program)(*map(actx.from_numpy, (L, J, u))))
    (group,) = actx.feinsum_last_report.groups
    assert (group.recipe, group.action) == ("gemm_gpu", "default"), str(group)
    assert any("in the loads" in f for f in group.fused), str(group)
    want = np.einsum("ifj,fe,fej->ei", L, J, u)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("subscripts", ["xre,rij,xej->ei", "xre,rij,ej->xei"])
def test_a_high_order_divergence_or_gradient_for_a_gpu_model_is_a_gemm(
        subscripts: str, cl_queue: Any) -> None:
    """The degree-6 divergence and gradient as pytato writes them (``D`` 3 x 84 x 84
    doubles, 165 KiB: over the local memory), for the H200 model on the CPU device:
    gemm_gpu's default, which sums ``J[x, r, e] u[x, e, j]`` over ``x`` as it copies ``u``
    (divergence) or keeps a register tile for each ``r`` and stores
    ``sum_r J[x, r, e] T[r]`` for each ``x`` (gradient); both got dg_operator's, which
    reads ``D`` from global memory: predicted 2.1x and 3.2x slower. It matches numpy."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(15)
    J, D = rng.standard_normal((3, 3, 203)), rng.standard_normal((3, 84, 84))
    u = rng.standard_normal((3, 203, 84) if subscripts.startswith("xre,rij,xej") else
                            (203, 84))

    def program(J: Any, D: Any, u: Any) -> Any:
        return actx.einsum(subscripts, J, D, u)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(program)(*map(actx.from_numpy, (J, D, u))))
    (group,) = actx.feinsum_last_report.groups
    assert (group.recipe, group.action) == ("gemm_gpu", "default"), str(group)
    want = np.einsum(subscripts, J, D, u)
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12 * np.abs(want).max())


def test_a_constant_factor_keeps_float64(cl_queue: Any) -> None:
    """``0.4 * actx.einsum(...)`` in float64 is one einsum under pytato with the constant
    as an operand: the hook's kernel multiplies by 0.4, not by float32's
    0.4000000059604645 (a relative error of 1.5e-8 in every entry, and the numpy reference
    of the tuner's validation made the same one)."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False)
    rng = np.random.default_rng(10)
    D, u = rng.random((35, 35)) + 0.5, rng.random((3001, 35)) + 0.5

    def scaled(D: Any, u: Any) -> Any:
        return 0.4 * actx.einsum("ij,ej->ei", D, u)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(scaled)(actx.from_numpy(D), actx.from_numpy(u)))
    assert [g.action for g in actx.feinsum_last_report.groups] == ["default"]
    exact = 0.4 * (u.astype(np.longdouble) @ D.T.astype(np.longdouble))
    np.testing.assert_allclose(got, exact.astype(np.float64), rtol=1e-14)


def test_scaled_dg_einsums_keep_the_dg_recipes(cl_queue: Any) -> None:
    """pytato's DG einsums with a constant (a pressure gradient of ``0.4*(...)``, twice a
    divergence): one einsum each with the constant as an operand, which no DG recipe
    knows. Each gets the recipe of its plain einsum, the constant in its stores (the
    generic schedule took 158 of the RHS benchmark's 197 ms at E = 2e4), and numpy's
    values."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False)
    rng = np.random.default_rng(11)
    E = 500
    J, D = rng.random((3, 3, E)), rng.random((3, 35, 35))
    q, v = rng.random((2, E, 35)) + 0.5, rng.random((3, E, 35))

    def program(J: Any, D: Any, q: Any, v: Any, scaled: bool) -> Any:
        p = 0.4 * (q[1] - 0.5 * q[0] * q[0]) if scaled else q[1] - 0.5 * q[0] * q[0]
        grad = actx.einsum("xre,rij,ej->xei", J, D, p)
        div = actx.einsum("xre,rij,xej->ei", J, D, 2 * v if scaled else v)
        return grad[0] * div

    recipes = {}
    for scaled in (False, True):
        arrays = [actx.from_numpy(x) for x in (J, D, q, v)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = actx.to_numpy(actx.compile(
                lambda *a, s=scaled: program(*a, scaled=s))(*arrays))
        report = actx.feinsum_last_report
        recipes[scaled] = sorted(g.recipe or "" for g in report.groups)
        f = 0.8 if scaled else 1.0
        want = f * np.einsum("xre,rij,ej->xei", J, D, q[1] - 0.5 * q[0] ** 2)[0] * np.einsum(
            "xre,rij,xej->ei", J, D, v)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert "generic" not in recipes[True] and recipes[True] == recipes[False], recipes
    assert any("value in the stores" in x for g in report.groups for x in g.fused), str(
        report)


def test_a_0d_device_array_times_an_einsum(cl_queue: Any) -> None:
    """``dt * actx.einsum(...)`` with ``dt`` a 0-d device array: pytato passes it as a 0-d
    array argument, which the einsum's stores read; the divergence keeps its DG recipe (it
    was not matched at all, and the program got an extra launch)."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False)
    rng = np.random.default_rng(12)
    J, D, v = rng.random((3, 3, 500)), rng.random((3, 35, 35)), rng.random((3, 500, 35))

    def program(J: Any, D: Any, v: Any, dt: Any) -> Any:
        return dt * actx.einsum("xre,rij,xej->ei", J, D, v)

    arrays = [actx.from_numpy(x) for x in (J, D, v, np.array(0.1))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(program)(*arrays))
    report = actx.feinsum_last_report
    (group,) = report.groups
    assert group.recipe not in (None, "generic"), str(report)
    assert any("value in the stores" in f for f in group.fused), str(report)
    assert report.launches is not None and len(report.launches.launches) == 1, str(report)
    np.testing.assert_allclose(got, 0.1 * np.einsum("xre,rij,xej->ei", J, D, v),
                               rtol=1e-12)


@pytest.mark.parametrize("scaled", [False, True], ids=["product", "twice the product"])
@pytest.mark.parametrize(("model", "recipe"), [("h200", "gemm_gpu"), (None, "contraction")])
def test_matrix_products(scaled: bool, model: str | None, recipe: str) -> None:
    """``actx.einsum("ik,kj->ij")`` and twice it (one einsum under pytato, with the
    constant 2 as a scalar operand) of long fixed lengths, transformed for the H200 model
    or the CPU device and run on the CPU device: gemm_gpu, or contraction (the scaled
    ones got generic, 15x slower than contraction on this CPU; the CPU's vector loads
    named a length the kernel no longer declared, and did not build), and the results
    are numpy's."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS
    from feinsum.devices.opencl import get_device, get_queue

    actx = FeinsumPytatoPyOpenCLArrayContext(
        get_queue(get_device()), feinsum_db=False,
        **({"feinsum_device": MODELS[model].info} if model else {}))
    rng = np.random.default_rng(9)
    A, B = rng.random((300, 280)), rng.random((280, 260))
    factor = 2.0 if scaled else 1.0

    def product(a: Any, b: Any) -> Any:
        ab = actx.einsum("ik,kj->ij", a, b)
        return 2 * ab if scaled else ab

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(product)(actx.from_numpy(A), actx.from_numpy(B)))
    report = actx.feinsum_last_report
    assert [(g.action, g.recipe) for g in report.groups] == [("default", recipe)], str(
        report)
    np.testing.assert_allclose(got, factor * (A @ B), rtol=1e-12)


@pytest.mark.parametrize("name", ["A @ x", "A.T @ y", "row sums", "largest of each row"])
def test_matrix_vector_products_for_a_gpu_model(name: str) -> None:
    """Matrix-vector products and row reductions as pytato writes them, of lengths the hook
    knows, transformed for the H200 model and run on the CPU device: generic's default
    shares each reduction among the work-items of a group (feinsum.toolbox.sharing: lanes
    on the rows would read the matrix with a row's stride, or the outputs are too few),
    and the results are numpy's."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS
    from feinsum.devices.opencl import get_device, get_queue

    actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(6)
    programs = {
        "A @ x": (lambda a, v: a @ v, (1201, 997), lambda a, v: a @ v),
        "A.T @ y": (lambda a, v: actx.einsum("ji,j->i", a, v), (997, 1201),
                    lambda a, v: a.T @ v),
        "row sums": (lambda a, v: actx.np.sum(a * v, axis=1), (1201, 997),
                     lambda a, v: np.sum(a * v, axis=1)),
        "largest of each row": (lambda a, v: actx.np.max(a * v, axis=1), (1201, 997),
                                lambda a, v: np.max(a * v, axis=1)),
    }
    fn, shape, ref = programs[name]
    a, v = rng.random(shape), rng.random(shape[0] if name == "A.T @ y" else shape[1])
    got, group = run_one_group(actx, fn, a, v)
    assert group.params is not None and group.params["rlocal"] > 1, group
    np.testing.assert_allclose(got, ref(a, v), rtol=1e-12)


@pytest.mark.parametrize("name", ["einsum", "sum of products", "few long rows",
                                  "largest difference", "smallest entry", "sum of squares",
                                  "vdot", "norm of a flattened field"])
def test_long_reductions_for_a_gpu_model(name: str) -> None:
    """Inner products, a few long rows times a vector, the largest and smallest entries of
    a field, a sum of squares, ``vdot`` and the norm of a flattened field as pytato writes
    them (``actx.einsum``, ``actx.np.sum``, ``actx.np.max``, ``actx.np.min``,
    ``actx.np.vdot``, ``actx.np.linalg.norm``: the last two read the arrays through a flat
    index), transformed for the H100 model and run on the CPU device: split_reduction deals
    their terms over the device, and the results are numpy's."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS
    from feinsum.devices.opencl import get_device, get_queue

    actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False,
                                             feinsum_device=MODELS["h100"].info)
    rng = np.random.default_rng(5)
    programs = {
        "einsum": (lambda a, b: actx.einsum("ej,ej->", a, b), (3001, 35), (3001, 35),
                   lambda a, b: np.vdot(a, b)),
        "sum of products": (lambda a, b: actx.np.sum(a * b), (3001, 35), (3001, 35),
                            lambda a, b: np.vdot(a, b)),
        "few long rows": (lambda a, b: actx.einsum("ij,j->i", a, b), (6, 20011), (20011,),
                          lambda a, b: a @ b),
        "largest difference": (lambda a, b: actx.np.max(abs(a - b)), (3001, 35), (3001, 35),
                               lambda a, b: np.max(abs(a - b))),
        "smallest entry": (lambda a, b: actx.np.min(a * b), (3001, 35), (3001, 35),
                           lambda a, b: np.min(a * b)),
        "sum of squares": (lambda a, b: actx.np.sum(abs(a)**2), (3001, 35), (3001, 35),
                           lambda a, b: np.sum(abs(a)**2)),
        # pytato flattens these: one index over both axes, u[(f % 105035) // 35, f % 35]
        "vdot": (lambda a, b: actx.np.vdot(a, b), (3001, 35), (3001, 35),
                 lambda a, b: np.vdot(a, b)),
        "norm of a flattened field": (lambda a, b: actx.np.linalg.norm(a.reshape(-1), 2),
                                      (3001, 35), (3001, 35),
                                      lambda a, b: np.linalg.norm(a)),
    }
    fn, sa, sb, ref = programs[name]
    a, b = rng.random(sa), rng.random(sb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(fn)(actx.from_numpy(a), actx.from_numpy(b)))
    report = actx.feinsum_last_report
    assert [(g.recipe, g.action) for g in report.groups] == [
        ("split_reduction", "default")], str(report)
    np.testing.assert_allclose(got, ref(a, b), rtol=1e-12)


def test_pytato_kernel_keeps_the_einsums_its_device_can_build(cl_queue: Any,
                                                              tmp_path: Any) -> None:
    """pytato's one kernel of two einsums, one of whose code PoCL refuses: the hook's
    check builds it, finds that einsum, gives it back alone, and the program computes what
    numpy does."""
    import pytato as pt
    from test_hook import UNBUILDABLE

    from feinsum.hook import transform_program

    (tmp_path / "unbuildable.py").write_text(
        UNBUILDABLE.replace("REFUSED_RANKS = None", "REFUSED_RANKS = (3,)"))
    n = 2001
    D, G, u = (pt.make_placeholder(name, shape, np.float64) for name, shape in (
        ("D", (35, 35)), ("G", (3, 35, 35)), ("u", (n, 35))))
    outputs = pt.make_dict_of_named_arrays({"mass": pt.einsum("ij,ej->ei", D, u),
                                            "grad": pt.einsum("xij,ej->xei", G, u)})
    t_unit = pt.generate_loopy(outputs).program
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, rep = transform_program(t_unit, device=cl_queue.device, db=False,
                                     prefer=["unbuildable"], recipe_path=tmp_path)
    (kernel,) = rep.kernel_reports
    assert kernel.action == "transformed", kernel
    by_output = {g.outputs[0]: g for g in rep.groups}
    assert "never_declared" in by_output["grad"].note and not by_output["grad"].transformed
    assert by_output["mass"].transformed, by_output["mass"]
    rng = np.random.default_rng(3)
    host = {"D": rng.random((35, 35)), "G": rng.random((3, 35, 35)), "u": rng.random((n, 35))}
    _, got = new.executor(cl_queue.context)(cl_queue, **host)
    np.testing.assert_allclose(got["mass"], host["u"] @ host["D"].T, rtol=1e-12)
    np.testing.assert_allclose(got["grad"],
                               np.einsum("xij,ej->xei", host["G"], host["u"]), rtol=1e-12)


def test_a_fused_operand_read_past_an_axis_is_read_in_c_order(cl_queue: Any) -> None:
    """The face mass of one conserved variable as pytato writes it, ``v = qflux[1]`` a
    slice of a (5, 4, E, 15) array fused into the einsum's loads (laid out ``[f, e, j]``
    in memory, the core's operand ``[e, f, j]``), for the H200 model on the CPU device.
    dg_nodes' default there (the model's pick: ``last=0``, 4 rows, the operator in
    registers) copies each block of ``v`` into local memory as 4 x 60 consecutive
    entries, reading past the end of ``j``: the fused read computes the entry of that
    C-order offset (:mod:`feinsum.matching.read_range`), not ``qflux[1, f, e, j + k]``
    (30 % wrong before). It matches numpy."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.models import MODELS

    actx = FeinsumPytatoPyOpenCLArrayContext(cl_queue, feinsum_db=False,
                                             feinsum_device=MODELS["h200"].info)
    rng = np.random.default_rng(13)
    L, Jf = rng.standard_normal((35, 4, 15)), rng.standard_normal((4, 301))
    qflux = rng.standard_normal((5, 4, 301, 15))

    def program(L: Any, Jf: Any, qflux: Any) -> Any:
        return actx.einsum("ifj,fe,fej->ei", L, Jf, qflux[1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = actx.to_numpy(actx.compile(program)(*map(actx.from_numpy, (L, Jf, qflux))))
    (group,) = actx.feinsum_last_report.groups
    assert group.recipe == "dg_nodes" and any("in the loads" in f for f in group.fused), str(
        actx.feinsum_last_report)
    want = np.einsum("ifj,fe,fej->ei", L, Jf, qflux[1])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())

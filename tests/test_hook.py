"""The compiler hook: transform_program, its cache, the mixin, the cross-process tuning lock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import loopy as lp
import numpy as np
import pytest

E = 300


# {{{ programs built the way an array compiler builds them


def lift_kernel() -> Any:
    import loopy as lp

    return lp.make_kernel(
        "{[iel, idof, iface, jdof]: 0 <= iel < nelements and 0 <= idof < 20"
        " and 0 <= iface < 4 and 0 <= jdof < 10}",
        """
        lift_rho[iel, idof] = sum((iface, jdof), lift_mat[idof, iface, jdof]
                        * face_jac[iface, iel] * flux_rho[iface, iel, jdof])  {id=lift_rho}
        lift_e[iel, idof] = sum((iface, jdof), face_jac[iface, iel]
                        * flux_e[iface, iel, jdof] * lift_mat[idof, iface, jdof])  {id=lift_e}
        """,
        [lp.GlobalArg("lift_mat,face_jac,flux_rho,flux_e,lift_rho,lift_e", np.float64,
                      shape=lp.auto), lp.ValueArg("nelements", np.int32)],
        name="lift", lang_version=(2018, 2))


def mass_kernel() -> Any:
    import loopy as lp

    return lp.make_kernel(
        "{[e, i, j]: 0 <= e < nelements and 0 <= i, j < 20}",
        "mass[e, i] = sum(j, massm[i, j] * u[e, j])  {id=mass}",
        [lp.GlobalArg("massm,u,mass", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)],
        name="mass", lang_version=(2018, 2))


def scale_kernel() -> Any:
    import loopy as lp

    return lp.make_kernel(
        "{[e, i]: 0 <= e < nelements and 0 <= i < 20}",
        "scaled[e, i] = 2.0 * u[e, i] + 1.0  {id=scale}",
        [lp.GlobalArg("u,scaled", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)],
        name="scale", lang_version=(2018, 2))


def separate_program() -> Any:
    """Three kernels: a two-row lift einsum, a mass-matrix einsum, an elementwise one."""
    import loopy as lp

    return lp.merge([lift_kernel(), mass_kernel(), scale_kernel()])


def mixed_program() -> Any:
    """One kernel holding two einsum groups and an elementwise statement, and the lift."""
    import loopy as lp

    volume = lp.make_kernel(
        "{[e, i, j, x, e2, i2, j2, e3, i3]: 0 <= e, e2, e3 < nelements"
        " and 0 <= i, j, i2, j2, i3 < 20 and 0 <= x < 3}",
        """
        grad[x, e, i] = sum(j, diff[x, i, j] * u[e, j])  {id=grad}
        mass[e2, i2] = sum(j2, massm[i2, j2] * u[e2, j2])  {id=mass}
        scaled[e3, i3] = 2.0 * u[e3, i3] + 1.0  {id=scale}
        """,
        [lp.GlobalArg("diff,u,massm,grad,mass,scaled", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)],
        name="volume", lang_version=(2018, 2))
    return lp.merge([volume, lift_kernel()])


def inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"diff": rng.random((3, 20, 20)), "u": rng.random((E, 20)),
            "massm": rng.random((20, 20)), "lift_mat": rng.random((20, 4, 10)),
            "face_jac": rng.random((4, E)), "flux_rho": rng.random((4, E, 10)),
            "flux_e": rng.random((4, E, 10))}


def run_program(t_unit: Any, queue: Any, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Run every kernel of *t_unit*; all outputs by name."""
    import loopy as lp

    from feinsum.hook.program import kernel_names

    out: dict[str, Any] = {}
    for name in kernel_names(t_unit):
        args = {a.name for a in t_unit[name].args}
        t = lp.set_options(t_unit.with_entrypoints(frozenset([name])), return_dict=True)
        _, res = t.executor(queue.context, entrypoint=name)(
            queue, **{k: v for k, v in arrays.items() if k in args}, nelements=E)
        out.update({k: v.get() if hasattr(v, "get") else v for k, v in res.items()})
    return out


def assert_same_results(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-12, atol=1e-12, err_msg=k)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with the hook's caches empty: this process's, and a persistent
    one of its own."""
    from feinsum.hook import clear_cache

    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path / "programs"))
    clear_cache()


# }}}


# {{{ transformation keeps results, leaves the rest alone


def test_separate_kernels(cl_device: Any, cl_queue: Any, rng: np.random.Generator) -> None:
    from feinsum.hook import transform_program

    t = separate_program()
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["generic"])
    assert rep.kernels == ("lift", "mass", "scale")
    assert [(g.kernel, g.insn_ids, g.action, g.recipe, g.rung) for g in rep.groups] == [
        ("lift", ("lift_rho", "lift_e"), "default", "generic", "default"),
        ("mass", ("mass",), "default", "generic", "default")]
    assert rep.transformed == 2 and not rep.cached
    assert new["scale"] == t["scale"]  # the elementwise kernel is untouched
    assert new["mass"] != t["mass"]
    assert [a.name for a in new["lift"].args] == [a.name for a in t["lift"].args]
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))
    json.dumps(rep.as_dict())
    assert "lift:lift_rho+lift_e" in str(rep)


def test_mixed_kernel_keeps_results(cl_device: Any, cl_queue: Any,
                                    rng: np.random.Generator) -> None:
    from feinsum.hook import transform_program

    t = mixed_program()
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["generic"])
    assert [g.insn_ids for g in rep.groups] == [("grad",), ("mass",), ("lift_rho", "lift_e")]
    assert rep.groups[2].action == "default"
    # the elementwise statement keeps what it computes, and gets a parallel schedule
    knl = new["volume"]
    scale = knl.id_to_insn["scale"]
    assert scale.assignee.aggregate == t["volume"].id_to_insn["scale"].assignee.aggregate
    assert any("g." in str(tag) for i in scale.within_inames for tag in knl.inames[i].tags)
    kr = rep.kernel_reports[0]
    assert kr.action == "transformed" and kr.scheduled == 1
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))


def test_mixed_kernel_groups_are_transformed(cl_device: Any) -> None:
    from feinsum.hook import transform_program

    _, rep = transform_program(mixed_program(), device=cl_device, db=False, prefer=["generic"])
    assert [g.action for g in rep.groups] == ["default"] * 3


def test_on_miss_skip_and_error(cl_device: Any) -> None:
    from feinsum.errors import MissingRecordError
    from feinsum.hook import transform_program

    t = separate_program()
    new, rep = transform_program(t, device=cl_device, db=False, on_miss="skip")
    assert new == t and [g.action for g in rep.groups] == ["skipped", "skipped"]
    with pytest.raises(MissingRecordError, match="no record for"):
        transform_program(t, device=cl_device, db=False, on_miss="error")


def test_bad_arguments(cl_device: Any) -> None:
    from feinsum.errors import FeinsumError
    from feinsum.hook import transform_program

    t = mass_kernel()
    with pytest.raises(FeinsumError, match="on_miss"):
        transform_program(t, device=cl_device, db=False, on_miss="sometimes")
    with pytest.raises(FeinsumError, match="budget"):
        transform_program(t, device=cl_device, db=False, budget=0)
    with pytest.raises(FeinsumError, match="TranslationUnit"):
        transform_program("not a program", device=cl_device, db=False)  # type: ignore[arg-type]


def test_preference_order() -> None:
    from feinsum.hook import PREFERENCE, ordered_recipes
    from feinsum.recipes import recipes

    names = [r.name for r in ordered_recipes(recipes())]
    listed = [n for n in names if n in PREFERENCE]
    assert listed == [n for n in PREFERENCE if n in names]
    assert names[-1] == "generic"
    assert [r.name for r in ordered_recipes(recipes(), ["elementwise", "generic"])][:2] == [
        "elementwise", "generic"]


def test_preference_puts_gemm_gpu_first_where_the_operator_exceeds_local_memory() -> None:
    """On a GPU, an element-batched contraction whose operator does not fit the local
    memory (84 x 84 doubles: 56 KiB > 48 KiB) goes to gemm_gpu before the DG recipes that
    would read it from global memory or in slices (dg_nodes); at 35 nodes, in float32
    (28 KiB) and on a CPU the order stays PREFERENCE."""
    from dataclasses import replace

    from feinsum import array, canonicalize, einsum
    from feinsum.devices.models import MODELS
    from feinsum.hook import PREFERENCE, preference
    from feinsum.hook.choice import OPERATOR_RECIPES

    def local(n: int, dtype: str) -> Any:
        return canonicalize(einsum("ij,ej->ei", array("D", (n, n), dtype),
                                   array("u", ("E", n), dtype)))

    gpu = MODELS["h200"].info
    order = preference(local(84, "float64"), gpu)
    assert sorted(order) == sorted(PREFERENCE)
    assert all(order.index("gemm_gpu") < order.index(n) for n in OPERATOR_RECIPES)
    assert preference(local(35, "float64"), gpu) == PREFERENCE
    assert preference(local(84, "float32"), gpu) == PREFERENCE
    assert preference(local(84, "float64"), replace(gpu, device_type="CPU")) == PREFERENCE
    gemm = canonicalize(einsum("ik,kj->ij", array("A", ("I", "K")), array("B", ("K", "J"))))
    assert preference(gemm, gpu) == PREFERENCE


# }}}


# {{{ what the hook will not do, and what it reports


def test_report_fields(cl_device: Any) -> None:
    """Per program: the time of each phase, where the answer came from, the size before
    and after."""
    from feinsum.hook import transform_program
    from feinsum.hook.report import PHASES

    _, rep = transform_program(mixed_program(), device=cl_device, db=False,
                               prefer=["generic"])
    assert tuple(rep.timings) == PHASES and all(v >= 0 for v in rep.timings.values())
    assert rep.timings["matching"] > 0 and rep.timings["checks"] > 0
    assert rep.timings["transformation"] > 0 and rep.timings["scheduling"] > 0
    assert sum(rep.timings.values()) <= rep.seconds + 1e-3
    assert rep.cache is None and rep.mode == "transform"
    assert rep.before["statements"] == 5 and rep.after["statements"] > 5
    assert rep.after["barriers"] >= 1
    d = rep.as_dict()
    assert {"timings", "cache", "mode", "before", "after"} <= set(d)
    json.dumps(d)
    assert "checks" in str(rep) and "size: statements" in str(rep)
    _, again = transform_program(mixed_program(), device=cl_device, db=False,
                                 prefer=["generic"])
    assert again.cache == "memory" and again.timings["checks"] == 0.0
    assert "from the memory cache" in str(again)


def test_too_little_work_is_left_to_the_default_schedule(cl_device: Any) -> None:
    """A 3x3 einsum on a few hundred elements is not worth a kernel and barriers."""
    from feinsum.hook import transform_program

    t = lp.make_kernel(
        "{[e, i, j, e2, k]: 0 <= e, e2 < 300 and 0 <= i, j < 3 and 0 <= k < 20}",
        """
        metric[e, i] = sum(j, jac[e, i, j] * x[e, j])  {id=metric}
        scaled[e2, k] = 2.0 * u[e2, k]  {id=scale}
        """,
        [lp.GlobalArg("jac,x,metric,u,scaled", np.float64, shape=lp.auto)],
        name="metric", lang_version=(2018, 2))
    new, rep = transform_program(t, device=cl_device, db=False, schedule_all=True)
    (g,) = rep.groups
    assert g.action == "skipped" and "too little work" in g.note
    assert rep.kernel_reports[0].action == "scheduled"  # the default schedule, no kernel of
    # its own: one unit for each loop nest, and the two share one launch (matching.merge)
    assert rep.after["barriers"] == 0 and len(rep.launches.launches) == 1
    rng = np.random.default_rng(0)
    arrays = {"jac": rng.random((300, 3, 3)), "x": rng.random((300, 3)),
              "u": rng.random((300, 20))}
    from feinsum.devices.opencl import get_queue

    queue = get_queue(cl_device)
    _, got = new.executor(queue.context)(queue, **arrays)
    np.testing.assert_allclose(got[0].get() if hasattr(got[0], "get") else got[0],
                               np.einsum("eij,ej->ei", arrays["jac"], arrays["x"]),
                               rtol=1e-12)


@pytest.mark.parametrize(("n", "action"), [(50_000, "default"), (60, "skipped")])
def test_few_flops_in_long_sums_get_a_kernel_on_a_gpu(n: int, action: str,
                                                      cl_queue: Any) -> None:
    """On a GPU the default schedule sums an output entry's terms on one work-item, in
    sequence: the minimum of 50,000 values (50,000 flops) gets a kernel of its own there
    (split_reduction), that of 60 values does not; on a CPU both are too little work."""
    from feinsum.devices.models import MODELS
    from feinsum.hook import transform_program

    t = lp.make_kernel(f"{{[i]: 0 <= i < {n}}}", "out = min(i, x[i])",
                       [lp.GlobalArg("x", np.float64, shape=(n,)),
                        lp.GlobalArg("out", np.float64, shape=())],
                       name="smallest", lang_version=(2018, 2))
    new, rep = transform_program(t, device=MODELS["h100"].info, db=False)
    (g,) = rep.groups
    assert g.action == action, str(rep)
    if action == "skipped":
        assert "too little work" in g.note
    else:
        assert g.recipe == "split_reduction"
        x = np.random.default_rng(4).random(n)
        _, (got,) = new.executor(cl_queue.context)(cl_queue, x=x)
        assert np.asarray(got.get() if hasattr(got, "get") else got) == x.min()
    _, on_cpu = transform_program(t, device=cl_queue.device, db=False)
    assert [g.action for g in on_cpu.groups] == ["skipped"]


@pytest.mark.parametrize("scale", ["", "2*"])
def test_a_fixed_size_matrix_product_builds_and_runs(scale: str, cl_queue: Any) -> None:
    """The contraction default's vector loads name their bound in C code, which loopy's
    fix_parameters does not rewrite: in a compiler's kernel of fixed long lengths (256
    and more: symbols in the canonical spec) the device compiler met an undeclared
    ``n2`` at the first call. Scaled too (a scalar factor, which contraction now takes)."""
    from feinsum.hook import transform_program

    t = lp.make_kernel("{[i,j,k]: 0<=i<300 and 0<=j<260 and 0<=k<280}",
                       f"out[i,j] = {scale}sum(k, A[i,k]*B[k,j])",
                       [lp.GlobalArg("A", np.float32, shape=(300, 280)),
                        lp.GlobalArg("B", np.float32, shape=(280, 260)),
                        lp.GlobalArg("out", np.float32, shape=(300, 260))],
                       lang_version=(2018, 2))
    new, rep = transform_program(t, device=cl_queue.device, db=False)
    assert [(g.action, g.recipe) for g in rep.groups] == [("default", "contraction")], str(rep)
    rng = np.random.default_rng(5)
    A, B = rng.random((300, 280), dtype=np.float32), rng.random((280, 260), dtype=np.float32)
    _, (out,) = new.executor(cl_queue.context)(cl_queue, A=A, B=B)
    np.testing.assert_allclose(out, (2 if scale else 1) * A @ B, rtol=1e-5)


@pytest.mark.parametrize(("n", "tile"), [(1024, 8), (300, 4)])
def test_a_default_sees_the_lengths_of_the_kernel(n: int, tile: int) -> None:
    """The hook's default is computed at the lengths the compiler's kernel has: an H200
    gets gemm_gpu's 8 x 8 register tiles for a 1024^3 product (one wave of 128 work-groups)
    and 4 x 4 tiles for a 300^3 one."""
    from feinsum.devices.models import MODELS
    from feinsum.hook import transform_program

    t = lp.make_einsum("ik,kj->ij", ["A", "B"])
    t = lp.add_dtypes(t, {"A": np.float32, "B": np.float32})
    t = lp.fix_parameters(t, Ni=n, Nj=n, Nk=n)
    _, rep = transform_program(t, device=MODELS["h200"].info, db=False)
    (g,) = rep.groups
    assert (g.action, g.recipe) == ("default", "gemm_gpu"), str(rep)
    assert (g.params["px"], g.params["py"]) == (tile, tile)


def test_code_budget_refusal(cl_device: Any) -> None:
    """A default that would unroll 16,384 statements is not applied, and the report says
    why; the hook finishes quickly and the kernel runs."""
    from feinsum.hook import transform_program

    t = lp.make_einsum("xab,xbc,xcd,xde,xef->xaf", ["A", "B", "C", "D", "F"])
    t = lp.add_dtypes(t, dict.fromkeys("ABCDF", np.float64))
    t = lp.fix_parameters(t, **{f"N{c}": 16 for c in "abcdef"}, Nx=10)
    t0 = time.perf_counter()
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["generic"])
    assert time.perf_counter() - t0 < 120
    (g,) = rep.groups
    assert g.action == "failed" and "code is too large: 16,384 statements" in g.note
    assert new == t


def test_program_code_budget(cl_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the program's code budget, the einsums with the least work go back to the
    default schedule first."""
    import feinsum.hook.payoff as payoff
    from feinsum.hook import transform_program

    monkeypatch.setattr(payoff, "CODE_PER_EINSUM", 0)
    monkeypatch.setattr(payoff, "CODE_FACTOR", 1)
    monkeypatch.setattr(payoff, "ONE_LARGE_EINSUM", 0)
    _, rep = transform_program(mixed_program(), device=cl_device, db=False,
                               prefer=["generic"], lengths={"nelements": E})
    assert "code budget" in rep.note
    given_back = [g.insn_ids for g in rep.groups if "code budget" in g.note]
    assert ("mass",) in given_back  # the least work: 800 E flops (grad 2400 E, lift 3200 E)
    assert all(g.action == "skipped" for g in rep.groups if g.insn_ids in given_back)


def test_time_budget(cl_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.hook.payoff as payoff
    from feinsum.hook import transform_program

    monkeypatch.setattr(payoff, "SECONDS_BASE", 0.0)
    monkeypatch.setattr(payoff, "SECONDS_PER_STATEMENT", 0.0)
    _, rep = transform_program(separate_program(), device=cl_device, db=False)
    assert all(g.action == "skipped" and "time budget" in g.note for g in rep.groups)


def test_run_once_gets_the_default_schedule_only(cl_device: Any, cl_queue: Any,
                                                 rng: np.random.Generator) -> None:
    from feinsum.hook import transform_program

    t = mixed_program()
    new, rep = transform_program(t, device=cl_device, db=False, run_once=True)
    assert rep.mode == "schedule" and rep.groups == ()
    assert [k.action for k in rep.kernel_reports] == ["scheduled", "scheduled"]
    assert rep.timings["matching"] == 0.0
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))


def test_the_hook_never_raises(cl_device: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails inside the hook, the caller gets the program as it was, a warning,
    and a report that says why."""
    import feinsum.matching.match
    from feinsum.hook import transform_program
    from feinsum.hook.report import HookWarning

    def broken(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("a bug in the matcher")

    monkeypatch.setattr(feinsum.matching.match, "survey_einsums", broken)
    t = separate_program()
    with pytest.warns(HookWarning, match="a bug in the matcher"):
        new, rep = transform_program(t, device=cl_device, db=False)
    assert new is t and "the program is left as it was" in rep.note
    assert not rep.changed


UNBUILDABLE = textwrap.dedent('''
    """A recipe whose code loopy generates and the OpenCL C compiler refuses."""
    import loopy as lp

    from feinsum.recipes import ParameterSpace, PowersOfTwo, Recipe


    #: the numbers of output indices of the einsums whose code is refused (None: all)
    REFUSED_RANKS = None


    def apply(t_unit, p, e, device):
        knl = lp.split_iname(t_unit.default_entrypoint, e.out_indices[0], p["wg"],
                             outer_tag="g.0", inner_tag="l.0")
        if REFUSED_RANKS is not None and len(e.out_indices) not in REFUSED_RANKS:
            return t_unit.with_kernel(knl)
        last = knl.instructions[-1]
        stray = lp.CInstruction((), "(void) never_declared;", id="stray",
                                within_inames=last.within_inames,
                                depends_on=frozenset({last.id}))
        return t_unit.with_kernel(knl.copy(instructions=[*knl.instructions, stray]))


    RECIPE = Recipe("unbuildable", applies=lambda e, device: None,
                    space=lambda e, device: ParameterSpace(wg=PowersOfTwo(2, 4)),
                    default=lambda e, device: {"wg": 4}, apply=apply)
''')


def test_code_the_device_cannot_build_is_not_used(cl_device: Any, cl_queue: Any,
                                                  rng: np.random.Generator,
                                                  tmp_path: Path) -> None:
    """The check builds the transformed code on the device: code its OpenCL compiler
    refuses is replaced by the default schedule before the program's first call, and the
    report quotes the compiler."""
    from feinsum.hook import transform_program

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "unbuildable.py").write_text(UNBUILDABLE)
    t = mass_kernel()
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["unbuildable"],
                                 recipe_path=tmp_path / "recipes")
    (kernel,) = rep.kernel_reports
    assert kernel.action == "scheduled", kernel
    assert "OpenCL compiler refused" in kernel.note and "never_declared" in kernel.note
    assert "stray" not in {i.id for i in new.default_entrypoint.instructions}
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))


def test_only_the_group_the_device_cannot_build_is_given_back(
        cl_device: Any, cl_queue: Any, rng: np.random.Generator, tmp_path: Path) -> None:
    """In a kernel of two groups, the one whose code the compiler refuses is found and
    given back alone; the other keeps its transformed code."""
    from feinsum.hook import transform_program

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "unbuildable.py").write_text(
        UNBUILDABLE.replace("REFUSED_RANKS = None", "REFUSED_RANKS = (3,)"))
    t = mixed_program()
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["unbuildable"],
                                 recipe_path=tmp_path / "recipes")
    volume = {g.insn_ids: g for g in rep.groups if g.kernel == "volume"}
    assert len(volume) == 2, rep.groups
    grad = next(g for ids, g in volume.items() if "grad" in ids)
    assert not grad.transformed and "never_declared" in grad.note, grad
    assert "until this group was given back" in grad.note
    assert all(g.transformed for g in volume.values() if g is not grad), volume
    assert {k.name: k.action for k in rep.kernel_reports}["volume"] == "transformed"
    assert "stray" not in {i.id for i in new["volume"].instructions}
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))


def test_default_schedule_is_decided_once_per_shape(cl_device: Any) -> None:
    """Units of the same shape (loop lengths, independence, contiguity) share one decision,
    and all are applied in one pass."""
    from feinsum.devices.opencl import device_info
    from feinsum.hook.schedule import DefaultSchedule
    from feinsum.matching.assemble import assemble

    t = lp.make_kernel(
        "{[a, b, c, d, e, f]: 0 <= a, c, e < 300 and 0 <= b, d, f < 20}",
        """
        x[a, b] = 2.0 * u[a, b]  {id=x}
        y[c, d] = 3.0 * x[c, d]  {id=y, dep=x}
        z[e, f] = x[e, f] + y[e, f]  {id=z, dep=y}
        """,
        [lp.GlobalArg("u,x,y,z", np.float64, shape=lp.auto)], lang_version=(2018, 2))
    schedule = DefaultSchedule(device_info(cl_device))
    done = assemble(t.default_entrypoint, [], schedule=schedule)
    assert done.scheduled == 3 and schedule.decided == 1
    knl = done.kernel
    assert all(any(str(tag) == "g.0" for i in insn.within_inames for tag in knl.inames[i].tags)
               for insn in knl.instructions if insn.id in ("x", "y", "z"))


@pytest.mark.parametrize(("op", "body", "ref"), [
    ("any", "x[r, k] > 0.9995", lambda x: np.any(x > 0.9995)),
    ("all", "x[r, k] > 0.0005", lambda x: np.all(x > 0.0005)),
    ("sum", "x[3000 - r, k] * x[r, k]", lambda x: np.sum(x[::-1] * x)),
    ("product", "1.0 + x[r, k] * 1e-4", lambda x: np.prod(1.0 + x * 1e-4)),
])
def test_reductions_that_are_not_einsums_are_shared_by_a_group_on_a_gpu(
        op: str, body: str, ref: Any, cl_queue: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A reduction into one value that is no einsum (``any``, ``all``, ``product``, a sum
    reading an array backwards) ran on one work-item: on a GPU the default schedule shares its
    longest loop among the work-items of a group, a tree combining them; the result is
    the same. A CPU keeps the loop."""
    from feinsum.devices.models import MODELS
    from feinsum.hook import clear_cache, transform_program

    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path / "programs"))
    clear_cache()
    dtype = np.int8 if op in ("any", "all") else np.float64
    t = lp.make_kernel("{[r, k]: 0 <= r < 3001 and 0 <= k < 35}",
                       f"out = reduce({op}, [r, k], {body})",
                       [lp.GlobalArg("x", np.float64, shape=(3001, 35)),
                        lp.GlobalArg("out", dtype, shape=())],
                       name="check", lang_version=(2018, 2))
    new, rep = transform_program(t, device=MODELS["h100"].info, db=False, schedule_all=True)
    assert rep.kernel_reports[0].scheduled == 1, str(rep)
    assert "1 groups of 64" in str(rep), str(rep)
    x = np.random.default_rng(6).random((3001, 35))
    _, (got,) = new.executor(cl_queue.context)(cl_queue, x=x)
    _, (before,) = t.executor(cl_queue.context)(cl_queue, x=x)
    value = np.asarray(got.get() if hasattr(got, "get") else got)
    assert np.isclose(value, np.asarray(before.get() if hasattr(before, "get") else before),
                      rtol=1e-12)
    assert np.isclose(value, ref(x), rtol=1e-12)
    _, on_cpu = transform_program(t, device=cl_queue.device, db=False, schedule_all=True)
    assert "1 groups of 64" not in str(on_cpu)


# }}}


# {{{ the database: replay, rungs, cache


def _record(db: Any, device: Any, e: Any, recipe: str, params: dict[str, Any],
            seconds: float) -> None:
    from feinsum.database import NewMeasurement
    from feinsum.recipes import get_recipe
    from feinsum.timing.measurement import UNTRANSFORMED, untransformed_version

    version = (untransformed_version() if recipe == UNTRANSFORMED
               else get_recipe(recipe).version)
    db.add_measurement(NewMeasurement(einsum=e, device=device, recipe_name=recipe,
                                      recipe_version=version, params=params,
                                      samples=[seconds] * 3, flops=1e6))


def test_replays_the_record(cl_device: Any, tmp_path: Path) -> None:
    import loopy as lp

    import feinsum
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info
    from feinsum.hook import transform_program
    from feinsum.recipes import get_recipe

    info = device_info(cl_device)
    t = lift_kernel()
    (m,) = feinsum.find_einsums(t)
    generic = get_recipe("generic")
    params = dict(generic.default(m.canonical, info))
    params["lx"] = 16 if params["lx"] != 16 else 8
    params = dict(generic.check(params, m.canonical, info))
    db = open_database(tmp_path / "db.sqlite", include_shipped=False)
    _record(db, info, m.einsum.with_lengths({"nelements": E}), "generic", params, 1e-4)

    new, rep = transform_program(t, device=cl_device, db=db, lengths={"nelements": E})
    (g,) = rep.groups
    assert (g.action, g.rung, g.recipe, dict(g.params or {})) == (
        "replayed", "exact", "generic", params)
    # the record's rate, derived from the einsum (the flops of the cheapest contraction
    # order), not from the flops stored with it
    useful = feinsum.contraction_flops(m.einsum.with_lengths({"nelements": E}))
    assert g.expected_gflops == pytest.approx(useful / 1e-4 / 1e9)
    direct = feinsum.apply_transform(t, m, generic, params, device=info)
    assert (lp.generate_code_v2(new).device_code()
            == lp.generate_code_v2(direct).device_code())

    _, rep = transform_program(t, device=cl_device, db=db, lengths={"nelements": 4 * E})
    assert rep.groups[0].rung == "nearest-lengths" and rep.groups[0].action == "replayed"
    assert rep.groups[0].record_lengths == {"n0": E}

    # the untransformed kernel measured faster: the statements stay as they are
    _record(db, info, m.einsum.with_lengths({"nelements": E}), "untransformed", {}, 1e-5)
    new, rep = transform_program(t, device=cl_device, db=db, lengths={"nelements": E})
    assert rep.groups[0].action == "untransformed" and new == t
    db.close()


def test_repeated_call_is_cheap_and_new_records_are_seen(cl_device: Any,
                                                          tmp_path: Path) -> None:
    import feinsum
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info
    from feinsum.hook import transform_program
    from feinsum.recipes import get_recipe

    db = open_database(tmp_path / "db.sqlite", include_shipped=False)
    t0 = time.perf_counter()
    first, rep1 = transform_program(separate_program(), device=cl_device, db=db,
                                    prefer=["generic"])
    t_first = time.perf_counter() - t0
    times = []
    for _ in range(3):  # a structurally equal program, rebuilt as array compilers do
        rebuilt = separate_program()
        t0 = time.perf_counter()
        again, rep2 = transform_program(rebuilt, device=cl_device, db=db, prefer=["generic"])
        times.append(time.perf_counter() - t0)
        assert again is first and rep2.cached and rep2.groups == rep1.groups
    assert min(times) < 0.05 * t_first, (times, t_first)

    # a new record changes the database's revision: the next call sees it
    info = device_info(cl_device)
    (m,) = feinsum.find_einsums(mass_kernel())
    generic = get_recipe("generic")
    _record(db, info, m.einsum, "generic", dict(generic.default(m.canonical, info)), 1e-4)
    _, rep3 = transform_program(separate_program(), device=cl_device, db=db,
                                prefer=["generic"])
    assert not rep3.cached
    assert [g.rung for g in rep3.groups] == ["default", "exact"]
    db.close()


# }}}


# {{{ the mixin


def test_mixin_without_arraycontext(cl_device: Any, cl_queue: Any) -> None:
    from feinsum.hook import FeinsumTransformMixin

    class Plain(FeinsumTransformMixin):
        feinsum_db = False

    ctx = Plain(feinsum_device=cl_device)
    new = ctx.transform_loopy_program(separate_program())
    assert ctx.feinsum_last_report is not None and ctx.feinsum_last_report.transformed == 2
    assert new["mass"] != mass_kernel()

    class Parent:
        def __init__(self, queue: Any) -> None:
            self.queue = queue
            self.calls = 0

        def transform_loopy_program(self, t_unit: Any) -> Any:
            self.calls += 1
            return t_unit

    class Ctx(FeinsumTransformMixin, Parent):
        pass

    ctx2 = Ctx(cl_queue, feinsum_db=False, feinsum_on_miss="skip")
    assert ctx2._feinsum_target_device() == cl_queue.device
    t = separate_program()
    assert ctx2.transform_loopy_program(t) is t and ctx2.calls == 1  # nothing done: parent's
    ctx2.feinsum_on_miss = "default"
    assert ctx2.transform_loopy_program(t) != t and ctx2.calls == 1
    # the mixin works without arraycontext: using it imports none (in a fresh process:
    # other tests of this one import arraycontext)
    code = ("import sys, feinsum; from feinsum import FeinsumTransformMixin; "
            "import feinsum.hook.program; print('arraycontext' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip() == "False", out.stderr


# }}}


# {{{ many processes: one tunes


def test_lock_is_exclusive(tmp_path: Path) -> None:
    from feinsum.database import open_database
    from feinsum.hook import TuningLock, lock_directory

    with open_database(tmp_path / "x.sqlite", include_shipped=False) as db:
        assert lock_directory(db) == Path(f"{tmp_path / 'x.sqlite'}.locks")
    a = TuningLock(tmp_path, "fek1-a", "dev")
    b = TuningLock(tmp_path, "fek1-a", "dev")
    other = TuningLock(tmp_path, "fek1-b", "dev")
    assert a.acquire() and not b.acquire() and other.acquire()
    assert not b.acquire(wait=True, timeout=0.2)
    a.release()
    assert b.acquire()
    b.release()
    other.release()


WORKER = textwrap.dedent('''
    import json, os, sys, time
    from pathlib import Path
    import numpy as np, loopy as lp
    import feinsum, feinsum.tuning
    from feinsum.database import NewMeasurement
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.hook import transform_program
    from feinsum.recipes import get_recipe

    work = Path(sys.argv[1])

    def fake_autotune(e, *, device, db, budget, **kw):
        with open(work / "tuned.log", "a") as f:
            f.write(f"{os.getpid()}\\n")
        while not (work / "release").exists():
            time.sleep(0.05)
        info = device_info(device)
        generic = get_recipe("generic")
        db.add_measurement(NewMeasurement(
            einsum=e, device=info, recipe_name="generic", recipe_version=generic.version,
            params=generic.default(feinsum.canonicalize(e), info), samples=[1e-4] * 3))

    feinsum.tuning.autotune = fake_autotune
    knl = lp.make_kernel(
        "{[e, i, j]: 0 <= e < nelements and 0 <= i, j < 20}",
        "mass[e, i] = sum(j, massm[i, j] * u[e, j])",
        [lp.GlobalArg("massm,u,mass", np.float64, shape=lp.auto),
         lp.ValueArg("nelements", np.int32)], name="mass", lang_version=(2018, 2))
    get_device()
    (work / f"ready-{os.getpid()}").touch()
    _, rep = transform_program(knl, db=str(work / "db.sqlite"), on_miss="tune",
                               on_busy=sys.argv[2], budget=2, lengths={"nelements": 300},
                               prefer=["generic"])
    (g,) = rep.groups
    print(json.dumps({"action": g.action, "rung": g.rung, "note": g.note}))
''')


@pytest.mark.parametrize("on_busy", ["default", "wait"])
def test_one_process_tunes(tmp_path: Path, on_busy: str) -> None:
    from feinsum.database import open_database

    open_database(tmp_path / "db.sqlite", include_shipped=False).close()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    n = 3
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), on_busy],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < n or not (tmp_path / "tuned.log").exists():
        assert time.monotonic() < deadline, [p.poll() for p in procs]
        time.sleep(0.1)
    time.sleep(1.0)  # every process is in transform_program; one holds the lock
    if on_busy == "default":  # the others do not wait for the tuner
        others = [p for p in procs if p.pid != int((tmp_path / "tuned.log").read_text())]
        for p in others:
            p.wait(timeout=120)
    (tmp_path / "release").touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    tuners = (tmp_path / "tuned.log").read_text().split()
    assert len(tuners) == 1, tuners  # never N processes tuning the same einsum
    actions = sorted(r["action"] for r in results)
    if on_busy == "default":
        assert actions == ["default", "default", "tuned"]
        assert all("another process" in r["note"] for r in results if r["action"] == "default")
    else:
        assert all(r["rung"] == "exact" for r in results)
        assert actions == ["replayed", "replayed", "tuned"]
        assert all("waited" in r["note"] or "another process" in r["note"]
                   for r in results if r["action"] == "replayed")


def test_on_miss_tune_records_the_kernel_and_statement(tmp_path: Path, cl_device: Any,
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """What the hook tunes is recorded as the kernel and statement it saw, and its lengths in
    the kernel's names: `feinsum list`/`report` label it so."""
    import feinsum.tuning
    from feinsum.cli.dbread import einsum_origin_of
    from feinsum.database import NewMeasurement, open_database
    from feinsum.database.origins import einsum_label, lengths_label
    from feinsum.devices.opencl import device_info
    from feinsum.hook import transform_program
    from feinsum.recipes import get_recipe

    db = open_database(tmp_path / "db.sqlite", include_shipped=False)
    info = device_info(cl_device)
    seen: dict[str, Any] = {}

    def fake_autotune(e: Any, **kw: Any) -> None:  # records one configuration, as it would
        seen.update(kw)
        generic = get_recipe("generic")
        kw["db"].add_measurement(NewMeasurement(
            einsum=e, device=info, recipe_name="generic", recipe_version=generic.version,
            params=generic.default(feinsum.canonicalize(e), info), samples=[1e-4] * 3,
            origin=kw["origin"]))

    monkeypatch.setattr(feinsum.tuning, "autotune", fake_autotune)
    _, rep = transform_program(mass_kernel(), device=cl_device, db=db, on_miss="tune",
                               lengths={"nelements": 5000}, prefer=["generic"])
    (g,) = rep.groups
    assert g.action == "tuned" and seen["origin"]["statements"] == ["mass"]
    origin = einsum_origin_of(db, g.canonical_key)
    assert origin is not None and origin["kernel"] == "mass"
    assert einsum_label(origin, "?") == "mass:mass ij,ej->ei"
    (rec,) = db.query(g.canonical_key)
    assert lengths_label(origin, rec.lengths) == "nelements=5000"
    db.close()


@pytest.mark.slow
def test_on_miss_tune_for_real(cl_device: Any, tmp_path: Path, cl_queue: Any,
                               rng: np.random.Generator) -> None:
    from feinsum.hook import transform_program

    t = mass_kernel()
    new, rep = transform_program(t, device=cl_device, db=tmp_path / "db.sqlite",
                                 on_miss="tune", budget=2, lengths={"nelements": E})
    (g,) = rep.groups
    assert g.rung == "exact" and g.action in ("tuned", "untransformed")
    arrays = inputs(rng)
    assert_same_results(run_program(t, cl_queue, arrays), run_program(new, cl_queue, arrays))


# }}}

# vim: foldmethod=marker


def test_arrays_with_offsets_in_vector_stores(cl_device: Any, cl_queue: Any) -> None:
    """A recipe that writes with vstoreN (C statements addressing memory themselves) on a
    kernel whose arrays are declared offset=lp.auto and passed as views at an offset: the
    C statements add the offset too."""
    import pyopencl.array as cla

    from feinsum.devices.opencl import has_vector_code
    from feinsum.hook import transform_program

    E = 300
    t = lp.make_kernel(
        "{[e, i, j]: 0<=e<nel and 0<=i<35 and 0<=j<35}",
        "out[e, i] = sum(j, D[i, j]*u[e, j])",
        [lp.GlobalArg("D,u,out", np.float64, shape=lp.auto, offset=lp.auto),
         lp.ValueArg("nel", np.int32)], lang_version=(2018, 2))
    t = lp.set_options(t, return_dict=True)
    new, rep = transform_program(t, device=cl_device, db=False, prefer=["dg_transposed"])
    assert rep.groups[0].recipe == "dg_transposed"
    rng = np.random.default_rng(3)
    D, u = rng.random((35, 35)), rng.random((E, 35))
    pad = 7  # every array a view 7 entries into a bigger buffer

    def view(a: np.ndarray) -> Any:
        big = cla.to_device(cl_queue, np.concatenate([np.full(pad, np.nan), a.ravel()]))
        return big[pad:].reshape(a.shape)

    out = view(np.full((E, 35), np.nan))
    _, res = new.executor(cl_queue.context)(cl_queue, D=view(D), u=view(u), out=out)
    np.testing.assert_allclose(res["out"].get(), u @ D.T, rtol=1e-12)
    if has_vector_code(new.default_entrypoint):
        assert "_offset" in str(new.default_entrypoint)  # the C statements' offsets


@pytest.mark.parametrize("n", [2, 3, 7, 8])
def test_the_culprit_is_found_by_halves(n: int) -> None:
    """Whichever of n groups fails, it alone is given back, in ceil(log2 n) + 1 attempts
    at most; two culprits in different halves leave the kernel to the caller's revert,
    unless an attempt that gave back both ran."""
    import math

    from feinsum.hook.culprit import without_culprit
    from feinsum.hook.report import GroupReport

    groups = [GroupReport(kernel="k", insn_ids=(f"g{i}",), outputs=(), einsum="",
                          canonical_key="", action="default", rung="default")
              for i in range(n)]
    for bad in [{c} for c in range(n)] + [{0, n - 1}]:
        tries: list[set[int]] = []

        def attempt(give_back: dict[tuple[str, ...], str],
                    tries: list[set[int]] = tries) -> Any:
            tries.append({int(ids[0][1:]) for ids in give_back})
            return (set(tries[-1]), [], None)

        found = without_culprit(groups, "refused", attempt,
                                lambda tried, bad=bad: bad <= tried[0])
        if len(bad) == 1:
            assert found is not None and found[0] == bad
            assert len(tries) <= math.ceil(math.log2(n)) + 1
        else:
            assert found is None or bad <= found[0]


def test_an_array_context_lends_its_opencl_context(cl_device: Any) -> None:
    """While an array context lives, feinsum builds (the hook's check, the tuner) in its
    OpenCL context instead of making one of its own on the device."""
    import gc

    import pyopencl as cl

    from feinsum.devices.opencl import get_context
    from feinsum.hook.mixin import FeinsumTransformMixin

    class Holder:
        def __init__(self, queue: Any) -> None:
            self.queue = queue

    class Context(FeinsumTransformMixin, Holder):
        pass

    own = get_context(cl_device)
    mine = cl.Context([cl_device])
    actx = Context(cl.CommandQueue(mine))
    assert get_context(cl_device) == mine and get_context(cl_device) != own
    del actx
    gc.collect()
    assert get_context(cl_device) == own

"""The split_reduction recipe (feinsum.toolbox.split): long reductions into few outputs on
GPUs. Configurations for GPU models run on the CPU device against feinsum.evaluate (random
ones and the defaults, lengths that are multiples of no tile), where it applies and why
not, the two device kernels, the hook's choice in a program, and the model's view of the
default against generic's."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import loopy as lp
import numpy as np
import pytest

import feinsum as fs
from feinsum.devices.models import MODELS
from feinsum.spec.canonical import canonicalize

GPU_MODELS = ("h200", "mi300x", "max1550")


@functools.cache
def recipe() -> Any:
    return next(r for r in fs.recipes() if r.name == "split_reduction")


def specs() -> dict[str, fs.BatchedEinsum]:
    a = fs.array
    u = a("u", ("E", 7), "float64")
    return {
        "dot": fs.einsum("j,j->", a("x", ("N",), "float64"), a("y", ("N",), "float64")),
        "inner": fs.einsum("ej,ej->", a("u", ("E", 35), "float64"), a("v", ("E", 35),
                                                                    "float64")),
        "rows": fs.einsum("ij,j->i", a("A", (5, "N"), "float32"), a("x", ("N",), "float32")),
        "columns": fs.einsum("ji,j->i", a("A", ("N", 3), "float64"), a("x", ("N",),
                                                                     "float64")),
        "two_outputs": fs.einsum("aej,ej->a", a("A", (2, "E", 7), "float64"),
                                 a("u", ("E", 7), "float64")),
        "fixed": fs.einsum("j,j->", a("x", (20000,), "float32"), a("y", (20000,), "float32")),
        "batched": fs.batched_einsum("j,j->", [[a("x", ("N",), "float64"),
                                                a("y", ("N",), "float64")],
                                               [a("x", ("N",), "float64"),
                                                a("z", ("N",), "float64")]]),
        "complex": fs.einsum("j,j->", a("x", ("N",), "complex128"),
                             a("y", ("N",), "complex128")),
        # the largest entry of a negative field: a zero for a term past the end would win
        "max_of_formula": fs.einsum("ej->", fs.formula("neg", "ej", "-u[e, j]", [u]),
                                    reduction="max"),
        # the inputs are positive: a zero for a term past the end would win
        "min": fs.einsum("j,j->", a("p", ("N",), "int32"), a("q", ("N",), "int32"),
                         reduction="min"),
        "squares": fs.einsum("ej->", fs.formula("sq", "ej", "abs(w[e, j])**2", [
            a("w", ("E", 7), "float32")])),
        # a formula with a reduction of its own (the squared norm of a vector field)
        "vector_squares": fs.einsum("ej->", fs.formula("v2", "ej", "sum(d, w[e, j, d]**2)", [
            a("w", ("E", 7, 3), "float64")])),
    }


@pytest.mark.parametrize("model", GPU_MODELS)
def test_random_configurations_and_defaults_are_correct(model: str, cl_queue: Any) -> None:
    from feinsum.recipes.testing import assert_all_ok, check_random_configurations

    info = MODELS[model].info
    every = list(specs().values())
    assert all(recipe().applies(canonicalize(e), info) is None for e in every)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = check_random_configurations(recipe(), every, cl_queue, n=2 * len(every),
                                            seed=7, device=info)
    assert len(cases) == 2 * len(every)
    assert_all_ok(cases)


@pytest.mark.parametrize("name", ["inner", "min", "max_of_formula"])
def test_a_long_reduction_past_every_tile(name: str, cl_queue: Any) -> None:
    """Terms past the last full sweep (G*K) add nothing (sums) or repeat the last term
    (min, max); a length below one sweep too."""
    from feinsum.recipes.testing import check_configuration

    e = canonicalize(specs()[name])
    params = {"K": 64, "G": 8, "unroll_outputs": False}
    lengths = ({"n0": 1}, {"n0": 300}, {"n0": 4099})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert check_configuration(recipe(), e, params, lengths, cl_queue,
                                   device=MODELS["h200"].info) is None


@pytest.mark.parametrize(("spec", "why"), [
    (fs.einsum("ij,j->i", fs.array("A", ("M", "N")), fs.array("x", ("N",))), "long"),
    (fs.einsum("ij,j->i", fs.array("A", (100, "N")), fs.array("x", ("N",))), "output entries"),
    (fs.einsum("ij,ij->", fs.array("A", (8, 35)), fs.array("B", (8, 35))), "fewer than"),
    (fs.einsum("ij,ij->", fs.array("A", ("M", "N")), fs.array("B", ("M", "N"))), "several"),
    (fs.einsum("ij->i", fs.array("A", ("M", 3))), "long"),
    (fs.einsum("ij->ij", fs.array("A", ("M", 3))), "no reduction"),
    (fs.einsum("i,j->", fs.array("x", ("N",)), fs.array("y", (64,))), "no operand holds"),
])
def test_where_it_does_not_apply(spec: fs.BatchedEinsum, why: str) -> None:
    reason = recipe().applies(canonicalize(spec), MODELS["h200"].info)
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize("reduction", ["argmax", "logsumexp"])
def test_not_for_other_reductions(reduction: str) -> None:
    other = canonicalize(fs.einsum("j->", fs.array("x", ("N",)), reduction=reduction))
    assert "sum, max, min only" in str(recipe().applies(other, MODELS["h200"].info))


CPU_SUMS = ("dot", "inner", "fixed", "batched", "squares")


@pytest.mark.parametrize(("name", "why"), [
    ("rows", "output indices"), ("columns", "output indices"), ("two_outputs", "output"),
    ("complex", "float32 or float64"), ("min", "sums only"), ("max_of_formula", "sums only"),
    ("vector_squares", "a reduction inside the term")])
def test_on_cpus_long_sums_of_plain_arrays_into_one_value(name: str, why: str,
                                                          cl_device: Any) -> None:
    from feinsum.devices.opencl import device_info

    info = device_info(cl_device)
    for ok in CPU_SUMS:
        assert recipe().applies(canonicalize(specs()[ok]), info) is None, ok
    reason = recipe().applies(canonicalize(specs()[name]), info)
    assert reason is not None and why in reason, reason
    fortran = fs.einsum("ij,ij->", fs.array("A", ("E", 35), order="F"),
                        fs.array("B", ("E", 35), order="F"))
    assert "not stored in C order" in str(recipe().applies(canonicalize(fortran), info))
    transposed = fs.einsum("ej->", fs.formula("t", "ej", "2*w[j, e]", [
        fs.array("w", (7, "E"), "float64")]))
    assert "not an array read at the reduction indices" in str(
        recipe().applies(canonicalize(transposed), info))


def test_cpu_defaults_and_random_configurations_are_correct(cl_queue: Any) -> None:
    """The CPU kernel (chunks of whole vectors per work-group, a second kernel for the
    partials and the last terms): defaults at lengths below one vector, at one, and past
    every chunk, a formula operand (``abs(w)**2``, computed on the vectors) among them;
    random configurations of its space."""
    from feinsum.devices.opencl import device_info
    from feinsum.recipes.testing import (
        assert_all_ok,
        check_configuration,
        check_random_configurations,
    )

    info = device_info(cl_queue.device)
    every = [canonicalize(specs()[n]) for n in CPU_SUMS]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e in every:
            p = recipe().default(e, info)
            assert set(p) == {"G", "blocks", "vec"}, p
            runs = [{str(s): n for s in e.length_symbols} for n in (1, 7, 8, 4099, 100_003)]
            assert check_configuration(recipe(), e, p, runs, cl_queue) is None, e
        assert_all_ok(check_random_configurations(recipe(), every, cl_queue, n=12, seed=3))


def test_cpu_kernel_reads_whole_vectors() -> None:
    """Two device kernels; every operand read with ``vloadN`` in the first."""
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.lowering.kernel import generate_loopy

    info = device_info(get_device())
    if not info.is_cpu:
        pytest.skip("the tests' OpenCL device is not a CPU")
    e = canonicalize(specs()["dot"])
    code = lp.generate_code_v2(recipe().apply(
        generate_loopy(e), {"G": 4, "blocks": 2, "vec": 8}, e, info)).device_code()
    assert code.count("__kernel") == 2
    assert code.count("vload8(") == 4  # 2 operands x 2 blocks


def test_kernel_reductions_of_few_rows_stay_with_the_2d_scheme() -> None:
    """split_reduction applies to the few-rows workload too (64 outputs, a formula
    operand), but the hook prefers tiled_2d_gpu, whose work-items fold each term into a
    block of rows."""
    from feinsum.hook import ordered_recipes
    from feinsum.tuning.workloads import workloads

    info = MODELS["h200"].info
    few_rows = canonicalize(workloads(gpu=True)["fewrows"].spec)
    assert recipe().applies(few_rows, info) is None
    first = next(r for r in ordered_recipes(fs.recipes()) if not r.has_prepare
                 and r.applies(few_rows, info) is None)
    assert first.name == "tiled_2d_gpu"


def test_two_kernels_and_the_defaults() -> None:
    """The terms over G groups of K work-items, then one kernel summing the partials; the
    defaults deal them to at least four work-groups per compute unit."""
    from feinsum.lowering.kernel import generate_loopy

    e = canonicalize(specs()["dot"])
    for model in GPU_MODELS:
        info = MODELS[model].info
        p = recipe().default(e, info)
        assert p["G"] >= 4 * info.compute_units and p["K"] <= info.max_work_group_size
        recipe().space(e, info).validate(p)
    info = MODELS["h200"].info
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = lp.generate_code_v2(recipe().apply(
            generate_loopy(e), {"K": 128, "G": 2048, "unroll_outputs": True}, e,
            info)).device_code()
    assert code.count("__kernel") == 2
    assert "reqd_work_group_size(128, 1, 1)" in code  # the second: min(G, K) work-items


@pytest.mark.parametrize(("name", "length"), [("dot", 10_000_000),
                                              ("max_of_formula", 1_000_000)])
def test_the_model_predicts_the_default_near_the_roofline(name: str, length: int) -> None:
    """A dot product of 1e7 doubles, the largest entry of a field of 1e6 elements, on
    the H200 model: generic's default shares the reduction among one work-group (a
    fraction of a percent of the roofline), split_reduction's deals it to the whole
    device."""
    from feinsum.prediction import predict_configuration

    e = canonicalize(specs()[name])
    info = MODELS["h200"].info
    lengths = {"n0": length}
    generic = next(r for r in fs.recipes() if r.name == "generic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = predict_configuration(recipe(), e, recipe().default(e, info), "h200", lengths)
        theirs = predict_configuration(generic, e, generic.default(e, info), "h200", lengths)
    assert ours.fraction >= 0.5, ours
    assert theirs.seconds > 20 * ours.seconds, (ours, theirs)


def test_the_hook_picks_it_for_dot_products_on_gpus(cl_queue: Any, tmp_path: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A program as an array compiler writes it (a dot product, the inner product of two
    fields, their largest difference) transformed for a GPU model and run on the CPU
    device: the three reductions take split_reduction, the results are numpy's."""
    from feinsum.hook import clear_cache, transform_program

    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path / "programs"))
    clear_cache()
    t_unit = lp.make_kernel(
        "{[i, e, j]: 0 <= i < n and 0 <= e < nel and 0 <= j < 35}",
        """
        dot = sum(i, x[i] * y[i])  {id=dot}
        inner = sum((e, j), u[e, j] * v[e, j])  {id=inner}
        largest = max((e, j), abs(u[e, j] - v[e, j]))  {id=largest}
        """,
        [lp.GlobalArg("x,y", np.float64, shape=("n",)),
         lp.GlobalArg("u,v", np.float64, shape=("nel", 35)),
         lp.GlobalArg("dot,inner,largest", np.float64, shape=()),
         lp.ValueArg("n,nel", np.int32)],
        name="norms", lang_version=(2018, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, report = transform_program(t_unit, device=MODELS["h100"].info, db=False)
    assert sorted(g.recipe for g in report.groups) == ["split_reduction"] * 3, report
    rng = np.random.default_rng(3)
    n, nel = 5003, 301
    arrays = {"x": rng.random(n), "y": rng.random(n), "u": rng.random((nel, 35)),
              "v": rng.random((nel, 35))}
    _, got = lp.set_options(new, return_dict=True).executor(cl_queue.context)(
        cl_queue, **arrays)
    host = {k: v.get() if hasattr(v, "get") else v for k, v in got.items()}
    np.testing.assert_allclose(host["dot"], arrays["x"] @ arrays["y"], rtol=1e-12)
    np.testing.assert_allclose(host["inner"], np.sum(arrays["u"] * arrays["v"]), rtol=1e-12)
    assert host["largest"] == np.max(np.abs(arrays["u"] - arrays["v"]))


@pytest.mark.parametrize("reduction", ["max", "min"])
def test_max_and_min_propagate_nan_as_the_specification_does(reduction: str,
                                                             cl_queue: Any) -> None:
    """feinsum's max and min propagate NaN (numpy's semantics; OpenCL's fmax/fmin
    would drop it): a NaN among the terms of one work-item, of one work-group, is the
    result; without it the result is numpy's."""
    e = canonicalize(fs.einsum("j->", fs.array("x", ("N",), "float64"), reduction=reduction))
    from feinsum.lowering.kernel import generate_loopy

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t_unit = recipe().apply(generate_loopy(e), {"K": 64, "G": 16, "unroll_outputs": False},
                                e, MODELS["h200"].info)
        run = t_unit.executor(cl_queue.context)
        x = np.random.default_rng(2).random(5000)
        _, (clean,) = run(cl_queue, **{e.arrays[0].name: x})
        x[3777] = np.nan
        _, (got,) = run(cl_queue, **{e.arrays[0].name: x})
    assert np.asarray(clean) == getattr(np, reduction)(np.delete(x, 3777))
    assert np.isnan(np.asarray(got))

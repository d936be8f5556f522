"""feinsum.compile: results equal feinsum.evaluate, caches, pyopencl arrays, errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feinsum
from feinsum.direct import executor as direct
from feinsum.direct.inputs import RANGE_NAMES
from feinsum.lowering.reference import evaluate
from feinsum.reductions.builder import kernel_reduction

fcompile = direct.compile

F32 = np.float32


def gauss(dtype: Any = F32, block_sparse: bool = False) -> Any:
    return kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                            j_vars={"y": 3, "b": 1}, params={"g": 1}, dtype=dtype,
                            block_sparse=block_sparse)


def clouds(rng: np.random.Generator, m: int, n: int, dtype: Any = F32) -> dict[str, Any]:
    return {"x": rng.random((m, 3)).astype(dtype), "y": rng.random((n, 3)).astype(dtype),
            "b": rng.standard_normal(n).astype(dtype), "g": dtype(2.0)}


def close(got: Any, want: Any, rtol: float = 2e-5) -> None:
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


def test_gaussian_convolution_and_cache(cl_device: Any, rng: np.random.Generator) -> None:
    assert feinsum.compile is direct.compile
    e = gauss()
    f = fcompile(e, device=cl_device, db=False)
    before = direct.cache_info()
    for m, n in ((37, 53), (1, 1), (16, 300)):
        a = clouds(rng, m, n)
        got = f(**a)
        assert isinstance(got, np.ndarray) and got.shape == (m,)
        close(got, evaluate(e, a)["out0"])
    after = direct.cache_info()
    # one build serves every size; later calls hit the cache
    assert after["builds"] - before["builds"] <= 1
    assert after["hits"] - before["hits"] >= 2
    assert f.last_choice is not None and f.last_choice.rung == "default"
    assert f.last_choice.recipe == "kernel_vec_cpu"
    # positional arrays in the order of spec.arrays, a Python float for the parameter
    a = clouds(rng, 5, 7)
    close(f(*(a[v.name] if v.name != "g" else 2.0 for v in e.arrays)),
          evaluate(e, a)["out0"])
    # an isomorphic spec (other names) reuses the executor
    e2 = kernel_reduction("exp(-sqdist(p, q) * s) * w", i_vars={"p": 3},
                          j_vars={"q": 3, "w": 1}, params={"s": 1})
    builds = direct.cache_info()["builds"]
    got = fcompile(e2, device=cl_device, db=False)(p=a["x"], q=a["y"], w=a["b"], s=2.0)
    close(got, evaluate(e, a)["out0"])
    assert direct.cache_info()["builds"] == builds


def test_logsumexp_and_columns(cl_device: Any, rng: np.random.Generator) -> None:
    e = kernel_reduction("f - sqdist(x, y) * g", i_vars={"x": 3}, j_vars={"y": 3, "f": 1},
                         params={"g": 1}, reduction="logsumexp", dtype=np.float64)
    a = {"x": rng.random((29, 3)), "y": rng.random((41, 3)), "f": rng.random(41), "g": 3.0}
    close(fcompile(e, device=cl_device, db=False)(**a),
          evaluate(e, a)["out0"], 1e-12)
    e4 = kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                          j_vars={"y": 3, "b": 4}, params={"g": 1})
    a4 = dict(clouds(rng, 19, 23), b=rng.random((23, 4), dtype=F32))
    got = fcompile(e4, device=cl_device, db=False)(**a4)
    assert got.shape == (19, 4)
    close(got, evaluate(e4, a4)["out0"])


def test_min_argmin_returns_value_and_index(cl_device: Any, rng: np.random.Generator) -> None:
    e = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                         reduction="min_argmin")
    a = {"x": rng.integers(0, 3, (33, 3)).astype(F32),
         "y": rng.integers(0, 3, (47, 3)).astype(F32)}  # exact ties: smallest index wins
    value, index = fcompile(e, device=cl_device, db=False)(**a)
    want = evaluate(e, a)
    close(value, want["out0"])
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index, want["out0_index"])


def test_several_rows_give_a_tuple(cl_device: Any, rng: np.random.Generator) -> None:
    D = feinsum.array("D", (5, 5), np.float64)
    u = feinsum.array("u", ("E", 5), np.float64)
    v = feinsum.array("v", ("E", 5), np.float64)
    e = feinsum.batched_einsum("ij,ej->ei", [[D, u], [D, v]])
    a = {"D": rng.random((5, 5)), "u": rng.random((300, 5)), "v": rng.random((300, 5))}
    got = fcompile(e, device=cl_device, db=False)(**a)
    want = evaluate(e, a)
    assert isinstance(got, tuple) and len(got) == 2
    close(got[0], want["out0"], 1e-12)
    close(got[1], want["out1"], 1e-12)


@pytest.mark.parametrize("nelements", [7, 300])
def test_dg_local_operator(cl_device: Any, rng: np.random.Generator, nelements: int) -> None:
    e = feinsum.einsum("ij,ej->ei", feinsum.array("D", (35, 35), np.float64),
                       feinsum.array("u", (nelements, 35), np.float64))
    a = {"D": rng.random((35, 35)), "u": rng.random((nelements, 35))}
    f = fcompile(e, device=cl_device, db=False)
    close(f(**a), a["u"] @ a["D"].T, 1e-12)
    assert f.last_choice is not None and f.last_choice.recipe is not None
    with pytest.raises(feinsum.EvaluationError, match="axis 0 must have length"):
        f(D=a["D"], u=a["u"][:-1])


def test_pyopencl_arrays_in_and_out(cl_device: Any, cl_queue: Any,
                                    rng: np.random.Generator) -> None:
    import pyopencl.array as cla

    e = gauss()
    a = clouds(rng, 21, 34)
    dev = {k: cla.to_device(cl_queue, v) if np.ndim(v) else v for k, v in a.items()}
    got = fcompile(e, device=cl_device, db=False)(**dev)
    assert isinstance(got, cla.Array)
    close(got.get(), evaluate(e, a)["out0"])
    nn = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3}, reduction="argmin")
    value, index = fcompile(nn, device=cl_device, db=False)(x=dev["x"], y=dev["y"])
    assert isinstance(value, cla.Array) and isinstance(index, cla.Array)
    np.testing.assert_array_equal(index.get(), evaluate(nn, a)["out0_index"])
    # a non-contiguous device array is refused
    with pytest.raises(feinsum.EvaluationError, match="contiguous"):
        fcompile(nn, device=cl_device, db=False)(
            x=cla.to_device(cl_queue, np.asfortranarray(a["x"])), y=dev["y"])


def _clustered(rng: np.random.Generator, n: int, cutoff: float, dtype: Any = np.int64
               ) -> tuple[dict[str, Any], Any]:
    from feinsum.reductions import ranges as R

    x = rng.random((n, 3)).astype(F32)
    y = (rng.random((n + 7, 3)) * 1.2).astype(F32)
    b = rng.standard_normal(n + 7).astype(F32)
    x, lx = R.sort_clusters(x, R.grid_cluster(x, 0.25))
    (y, b), ly = R.sort_clusters((y, b), R.grid_cluster(y, 0.25))
    rx, cx, _ = R.cluster_ranges_centroids(x, lx)
    ry, cy, _ = R.cluster_ranges_centroids(y, ly)
    ci, cj = R.pairs_within(cx, cy, cutoff)
    return {"x": x, "y": y, "b": b, "g": F32(4.0)}, R.from_pairs(rx, ry, ci, cj, dtype=dtype)


def test_block_sparse_ranges(cl_device: Any, rng: np.random.Generator) -> None:
    e = gauss(block_sparse=True)
    f = fcompile(e, device=cl_device, db=False)
    a, rg = _clustered(rng, 300, 0.4)
    want = evaluate(e, {**a, **dict(zip(RANGE_NAMES, rg[:3], strict=True))})
    before = direct.cache_info()
    close(f(**a, ranges=rg), want["out0"])
    assert f.last_choice is not None and f.last_choice.recipe == "block_sparse"
    close(f(**a, ranges=tuple(np.copy(r) for r in rg)), want["out0"])  # same content
    close(f(**a, ranges=rg[:3]), want["out0"])
    assert direct.cache_info()["prepares"] - before["prepares"] == 1
    # int32 ranges, another clustering: prepared again, same executor
    a2, rg2 = _clustered(rng, 250, 0.6, np.int32)
    want2 = evaluate(e, {**a2, **dict(zip(RANGE_NAMES, rg2[:3], strict=True))})
    builds = direct.cache_info()["builds"]
    close(f(**a2, ranges=rg2), want2["out0"])
    assert direct.cache_info()["builds"] == builds
    # all pairs kept: the dense result
    full, rgf = _clustered(rng, 200, 100.0)
    dense = evaluate(replace(e, block_sparse=None), full)["out0"]
    close(f(**full, ranges=rgf), dense)


def test_block_sparse_argmin(cl_device: Any, rng: np.random.Generator) -> None:
    e = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                         reduction="min_argmin", block_sparse=True)
    a, rg = _clustered(rng, 200, 0.4)
    a = {"x": a["x"], "y": a["y"]}
    value, index = fcompile(e, device=cl_device, db=False)(**a, ranges=rg)
    want = evaluate(e, {**a, **dict(zip(RANGE_NAMES, rg[:3], strict=True))})
    close(value, want["out0"])
    np.testing.assert_array_equal(index, want["out0_index"])


def test_errors(cl_device: Any, rng: np.random.Generator) -> None:
    e = gauss()
    f = fcompile(e, device=cl_device, db=False)
    a = clouds(rng, 4, 5)
    E = feinsum.EvaluationError
    with pytest.raises(E, match="missing array 'b'"):
        f(x=a["x"], y=a["y"], g=1.0)
    with pytest.raises(E, match="unknown array 'z'"):
        f(**a, z=a["x"])
    with pytest.raises(E, match="both by position and by name"):
        f(a["x"], x=a["x"], y=a["y"], b=a["b"], g=1.0)
    with pytest.raises(E, match="rank 2"):
        f(**{**a, "x": a["x"][:, 0]})
    with pytest.raises(E, match="axis 1 must have length 3"):
        f(**{**a, "x": a["x"][:, :2]})
    with pytest.raises(E, match="length 'N' is 5 in"):
        f(**{**a, "b": a["b"][:4]})
    with pytest.raises(E, match=r"astype\(np.float32\)"):
        f(**{**a, "x": a["x"].astype(np.float64)})
    with pytest.raises(E, match="scalar"):
        f(**{**a, "g": a["b"]})
    with pytest.raises(E, match="only for block-sparse"):
        f(**a, ranges=(np.zeros((1, 2), np.int32),) * 3)
    bs = fcompile(gauss(block_sparse=True), device=cl_device, db=False)
    with pytest.raises(E, match="needs ranges="):
        bs(**a)
    with pytest.raises(E, match="6-tuple"):
        bs(**a, ranges=np.zeros((1, 2)))
    good = (np.array([[0, 4]]), np.array([1]), np.array([[0, 5]]))
    with pytest.raises(E, match="int32 or int64"):
        bs(**a, ranges=(good[0].astype(float), *good[1:]))
    with pytest.raises(E, match="redranges_j must hold"):
        bs(**a, ranges=(good[0], good[1], np.array([[0, 6]])))
    with pytest.raises(feinsum.RecipeError, match="params= needs recipe="):
        fcompile(e, device=cl_device, db=False, params={"V": 4})
    with pytest.raises(feinsum.RecipeError, match="no recipe named"):
        fcompile(e, device=cl_device, db=False, recipe="no_such_recipe")
    with pytest.raises(feinsum.RecipeError, match="does not apply"):
        fcompile(e, device=cl_device, db=False, recipe="block_sparse")
    with pytest.raises(feinsum.InvalidConfigurationError):
        fcompile(e, device=cl_device, db=False, recipe="tiled_2d", params={"V": 5})
    with pytest.raises(feinsum.FeinsumError, match="BatchedEinsum"):
        fcompile("ij,j->i", db=False)  # type: ignore[arg-type]


def test_given_recipe_and_zero_length(cl_device: Any, rng: np.random.Generator) -> None:
    e = gauss()
    f = fcompile(e, device=cl_device, db=False, recipe="tiled_2d",
                        params={"nsplit": 4, "V": 4})
    a = clouds(rng, 9, 40)
    close(f(**a), evaluate(e, a)["out0"])
    assert f.last_choice is not None and f.last_choice.rung == "given"
    assert dict(f.last_choice.params)["nsplit"] == 4
    ref = fcompile(e, device=cl_device, db=False, recipe="untransformed")
    close(ref(**a), evaluate(e, a)["out0"])
    assert ref.last_choice is not None and ref.last_choice.recipe is None
    empty = clouds(rng, 3, 0)
    np.testing.assert_array_equal(f(**empty), np.zeros(3, F32))
    nn = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3}, reduction="argmin")
    value, index = fcompile(nn, device=cl_device, db=False)(x=empty["x"], y=empty["y"])
    assert np.all(np.isposinf(value)) and np.all(index == -1) and index.shape == (3,)


def test_replays_the_database_record(cl_device: Any, tmp_path: Path,
                                     rng: np.random.Generator) -> None:
    from feinsum.database import NewMeasurement, open_database
    from feinsum.devices.opencl import device_info
    from feinsum.recipes import get_recipe

    e = gauss()
    info = device_info(cl_device)
    r = get_recipe("kernel_vec_cpu")
    params = {"V": 8, "U": 3, "denorms_are_zero": True}
    db = open_database(tmp_path / "db.sqlite", include_shipped=False)
    db.add_measurement(NewMeasurement(
        einsum=e.with_lengths({"M": 1000, "N": 1000}), device=info,
        recipe_name=r.name, recipe_version=r.version, params=params,
        samples=[1e-4] * 3, flops=1e6))
    f = fcompile(e, device=cl_device, db=db)
    assert f.choice({"M": 1000, "N": 1000}).rung == "exact"
    assert dict(f.choice({"M": 1000, "N": 1000}).params) == params
    a = clouds(rng, 13, 17)
    close(f(**a), evaluate(e, a)["out0"])
    assert f.last_choice is not None and f.last_choice.rung == "nearest-lengths"
    assert dict(f.last_choice.params) == params
    # a record of an old recipe version is ignored
    db2 = open_database(tmp_path / "db2.sqlite", include_shipped=False)
    db2.add_measurement(NewMeasurement(
        einsum=e.with_lengths({"M": 1000, "N": 1000}), device=info,
        recipe_name=r.name, recipe_version="0" * 16, params=params,
        samples=[1e-4] * 3, flops=1e6))
    assert fcompile(e, device=cl_device, db=db2).choice(
        {"M": 1000, "N": 1000}).rung == "default"
    db.close()
    db2.close()


def test_a_failing_default_falls_back(cl_device: Any, rng: np.random.Generator) -> None:
    from feinsum.recipes import ParameterSpace, Recipe, get_recipe

    def boom(t_unit: Any, params: Any, e: Any, device: Any) -> Any:
        raise RuntimeError("boom")

    broken = Recipe("broken", applies=lambda e, d: None, space=lambda e, d: ParameterSpace(),
                    default=lambda e, d: {}, apply=boom)
    e = feinsum.einsum("ij,ej->ei", feinsum.array("D", (6, 6), np.float64),
                       feinsum.array("u", (5, 6), np.float64))
    f = fcompile(e, device=cl_device, db=False)
    f._recipes = {"broken": broken, "generic": get_recipe("generic")}
    a = {"D": rng.random((6, 6)), "u": rng.random((5, 6))}
    close(f(**a), a["u"] @ a["D"].T, 1e-12)
    assert f.last_choice is not None and f.last_choice.recipe == "generic"
    assert "broken (default) failed" in f.last_choice.note and "boom" in f.last_choice.note
    # a recipe the caller forces fails loudly
    with pytest.raises(feinsum.RecipeFailure, match="boom"):
        fcompile(e, device=cl_device, db=False, recipe=broken)(**a)

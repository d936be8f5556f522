"""Block-sparse kernel reductions: numpy evaluation and the reference kernel."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import feinsum
from feinsum.reductions import ranges as R
from feinsum.reductions.block_sparse import evaluate_block_sparse
from feinsum.reductions.builder import kernel_reduction

KINDS = ["sum", "min", "max", "argmin", "argmax", "logsumexp"]


def spec(kind: str, dtype, block_sparse: bool = True):  # type: ignore[no-untyped-def]
    if kind == "sum":
        return kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 2},
                                j_vars={"y": 2, "b": 2}, params={"g": 1}, dtype=dtype,
                                block_sparse=block_sparse)
    return kernel_reduction("-sqdist(x, y) * g", i_vars={"x": 2}, j_vars={"y": 2},
                            params={"g": 1}, reduction=kind, dtype=dtype,
                            block_sparse=block_sparse)


def clouds(m: int, n: int, rng, dtype=np.float64, cutoff: float | None = 0.5):  # type: ignore[no-untyped-def]
    x = rng.random((m, 2)).astype(dtype)
    y = rng.random((n, 2)).astype(dtype)
    x, lx = R.sort_clusters(x, R.grid_cluster(x, 0.25))
    y, ly = R.sort_clusters(y, R.grid_cluster(y, 0.25))
    rx, cx, _ = R.cluster_ranges_centroids(x, lx)
    ry, cy, _ = R.cluster_ranges_centroids(y, ly)
    if cutoff is None:
        keep = np.ones((rx.shape[0], ry.shape[0]), bool)
    else:
        keep = ((cx[:, None] - cy[None]) ** 2).sum(-1) < cutoff**2
        keep[0] = False  # a cluster with no range at all: neutral values
    ranges = R.from_matrix(rx, ry, keep)
    return x, y, ranges, keep[lx][:, ly]


def arrays_for(e, x, y, ranges, rng):  # type: ignore[no-untyped-def]
    a = {"x": x, "y": y, "g": x.dtype.type(2.0), "ranges_i": ranges[0],
         "slices_i": ranges[1], "redranges_j": ranges[2]}
    if any(v.name == "b" for v in e.arrays):
        a["b"] = rng.standard_normal((y.shape[0], 2)).astype(x.dtype)
    return a


def brute(kind: str, a, mask):  # type: ignore[no-untyped-def]
    """The reduction over exactly the kept pairs, on a dense matrix."""
    val = -((a["x"][:, None] - a["y"][None]) ** 2).sum(-1) * a["g"]
    if kind == "sum":
        return {"out0": (np.where(mask, np.exp(val), 0)[:, :, None] * a["b"][None]).sum(1)}
    if kind in ("min", "argmin"):
        v = np.where(mask, val, np.inf)
        out = {"out0": v.min(1)}
        if kind == "argmin":
            out["out0_index"] = np.where(mask.any(1), v.argmin(1), -1)
        return out
    if kind in ("max", "argmax"):
        v = np.where(mask, val, -np.inf)
        out = {"out0": v.max(1)}
        if kind == "argmax":
            out["out0_index"] = np.where(mask.any(1), v.argmax(1), -1)
        return out
    with np.errstate(divide="ignore"):
        return {"out0": np.log(np.where(mask, np.exp(val), 0).sum(1))}


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_cutoff_equals_kept_pairs(kind, rng):  # type: ignore[no-untyped-def]
    x, y, ranges, mask = clouds(61, 47, rng)
    e = spec(kind, np.float64)
    a = arrays_for(e, x, y, ranges, rng)
    got = evaluate_block_sparse(e, a)
    assert not mask.all() and mask.any() and not mask.any(1).all()
    for k, want in brute(kind, a, mask).items():
        np.testing.assert_allclose(got[k], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_all_true_mask_equals_dense(kind, rng):  # type: ignore[no-untyped-def]
    x, y, ranges, _ = clouds(40, 33, rng, cutoff=None)
    e = spec(kind, np.float64)
    a = arrays_for(e, x, y, ranges, rng)
    dense = feinsum.evaluate(spec(kind, np.float64, block_sparse=False),
                             {k: v for k, v in a.items() if k[0] not in "rs"})
    got = feinsum.evaluate(e, a)
    for k, want in dense.items():
        np.testing.assert_allclose(got[k], want, rtol=1e-12)


def test_int32_and_int64_ranges(rng):  # type: ignore[no-untyped-def]
    x, y, ranges, _ = clouds(30, 30, rng)
    e = spec("sum", np.float64)
    a = arrays_for(e, x, y, ranges, rng)
    a32 = {k: (v.astype(np.int32) if k in ("ranges_i", "slices_i", "redranges_j") else v)
           for k, v in a.items()}
    np.testing.assert_array_equal(evaluate_block_sparse(e, a)["out0"],
                                  evaluate_block_sparse(e, a32)["out0"])
    with pytest.raises(feinsum.EvaluationError):
        evaluate_block_sparse(e, {**a, "redranges_j": a["redranges_j"] + 1000})


@functools.cache
def reference_executor(kind: str, dtype: str, ctx):  # type: ignore[no-untyped-def]
    import loopy as lp

    e = spec(kind, np.dtype(dtype))
    return lp.set_options(feinsum.generate_loopy(e), return_dict=True).executor(ctx), e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_reference_kernel(kind, dtype, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    ex, e = reference_executor(kind, np.dtype(dtype).name, cl_context)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for m, n, cutoff in ((57, 43, 0.5), (1, 1, None), (1, 30, 0.5), (25, 1, 0.5)):
        x, y, ranges, _ = clouds(m, n, rng, dtype, cutoff)
        a = arrays_for(e, x, y, ranges, rng)
        a.update({k: a[k].astype(np.int32) for k in ("ranges_i", "slices_i", "redranges_j")})
        _, got = ex(cl_queue, **a)
        want = evaluate_block_sparse(e, a)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=tol, atol=tol, err_msg=f"{k} {m}x{n}")


@functools.cache
def recipe_executor(kind: str, dtype: str, V: int, U: int, ctx):  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.devices.opencl import device_info
    from feinsum.recipes import load_recipe_file

    r = load_recipe_file(Path(__file__).resolve().parents[1] / "transforms" / "block_sparse.py")
    e = spec(kind, np.dtype(dtype))
    dev = device_info(ctx.devices[0])
    if r.applies(e, dev) is not None:
        pytest.skip(f"block_sparse does not apply on this device ({dev.name}): "
                    f"{r.applies(e, dev)}")
    assert r.applies(spec(kind, np.dtype(dtype), block_sparse=False), dev) is not None
    params = {"V": V, "U": U, "denorms_are_zero": False}
    t = r.apply(feinsum.generate_loopy(e), params, e, dev)
    return lp.set_options(t, return_dict=True).executor(ctx), e, r, params


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_block_sparse_recipe(kind, dtype, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    ex, e, r, params = recipe_executor(kind, np.dtype(dtype).name, 8, 2, cl_context)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for m, n, cutoff in ((57, 43, 0.5), (1, 1, None), (1, 30, 0.5), (25, 1, 0.5),
                         (40, 35, None)):
        x, y, ranges, _ = clouds(m, n, rng, dtype, cutoff)
        if kind in ("argmin", "argmax"):  # exact ties across ranges
            x, y = np.round(x * 2) / 2, np.round(y * 2) / 2
        a = arrays_for(e, x, y, ranges, rng)
        a.update({k: a[k].astype(np.int32) for k in ("ranges_i", "slices_i", "redranges_j")})
        extra = r.prepare(e, a, params)
        _, got = ex(cl_queue, **a, **extra)
        want = evaluate_block_sparse(e, a)
        for k, w in want.items():
            np.testing.assert_allclose(got[k], w, rtol=tol, atol=tol, err_msg=f"{k} {m}x{n}")


def test_launch_table_covers_every_row_once():  # type: ignore[no-untyped-def]
    from feinsum.reductions.ranges import launch_table

    ranges_i = np.array([[3, 10], [10, 11], [15, 40], [40, 40]])
    t = launch_table(ranges_i, np.array([1, 1, 3, 3]), 45, 8)
    covered = np.concatenate([np.arange(lo, hi) for _, lo, hi in t])
    np.testing.assert_array_equal(covered, np.arange(45))
    assert np.all(t[:, 2] - t[:, 1] <= 8)
    for k, lo, hi in t:
        if k >= 0:
            assert ranges_i[k, 0] <= lo < hi <= ranges_i[k, 1]
        else:
            assert not any(a <= lo < b for a, b in ranges_i)

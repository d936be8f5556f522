"""Every reduction kind of every kernel-reduction recipe matches feinsum.evaluate (PoCL,
float32 and float64, odd sizes, M = 1, N = 1; lengths are runtime parameters, so one
build serves every size)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feinsum
from feinsum.reductions.builder import kernel_reduction

TRANSFORMS = Path(__file__).resolve().parents[1] / "transforms"
SIZES = [(1, 1), (1, 37), (37, 1), (53, 71), (16, 16), (129, 45)]
KINDS = ["sum", "sum_cols", "min", "max", "argmin", "argmax", "logsumexp"]


@functools.cache
def recipe(name):  # type: ignore[no-untyped-def]
    from feinsum.recipes import load_recipe_file

    return load_recipe_file(TRANSFORMS / f"{name}.py")


def make_spec(kind: str, dtype):  # type: ignore[no-untyped-def]
    if kind == "sum":
        return kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                j_vars={"y": 3, "b": 1}, params={"g": 1}, dtype=dtype)
    if kind == "sum_cols":
        return kernel_reduction("exp(-sqdist(x, y) * g) * b", i_vars={"x": 3},
                                j_vars={"y": 3, "b": 3}, params={"g": 1}, dtype=dtype)
    if kind == "logsumexp":
        return kernel_reduction("f - sqdist(x, y) * g", i_vars={"x": 3},
                                j_vars={"y": 3, "f": 1}, params={"g": 1},
                                reduction="logsumexp", dtype=dtype)
    return kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                            reduction=kind, dtype=dtype)


def make_arrays(e, m: int, n: int, rng):  # type: ignore[no-untyped-def]
    """Integer-valued points so that min/argmin see exact ties."""
    dims = {"x": (m, 3), "y": (n, 3), "b": (n,) if e.out_indices == ("i",) else (n, 3),
            "f": (n,), "g": ()}
    out = {}
    for a in e.arrays:
        shape = dims[a.name]
        if a.name in ("x", "y"):
            v = rng.integers(0, 3, size=shape).astype(a.dtype)
        elif a.name == "g":
            v = a.dtype.type(0.3)
        else:
            v = rng.standard_normal(shape).astype(a.dtype)
        out[a.name] = v
    return out


@functools.cache
def executor(name: str, params: tuple, kind: str, dtype: str, ctx):  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.devices.opencl import device_info

    e = make_spec(kind, np.dtype(dtype))
    r = recipe(name)
    dev = device_info(ctx.devices[0])
    assert r.applies(e, dev) is None, r.applies(e, dev)
    t = r.apply(feinsum.generate_loopy(e), dict(params), e, dev)
    return lp.set_options(t, return_dict=True).executor(ctx), e


def check(name: str, params: dict, kind: str, dtype, ctx, queue, rng):  # type: ignore[no-untyped-def]
    if np.dtype(dtype) == np.float64 and str(params.get("math")).startswith("native"):
        pytest.skip("native exp/log are float32 only (the native_float32 constraint)")
    ex, e = executor(name, tuple(sorted(params.items())), kind, np.dtype(dtype).name, ctx)
    rtol = 2e-5 if np.dtype(dtype) == np.float32 else 1e-12
    for m, n in SIZES:
        arrays = make_arrays(e, m, n, rng)
        _, got = ex(queue, **arrays)
        ref = feinsum.evaluate(e, arrays)
        for key, want in ref.items():
            have = got[key].get() if hasattr(got[key], "get") else got[key]
            assert have.shape == want.shape, (key, m, n)
            if key.endswith("_index"):
                np.testing.assert_array_equal(have, want, err_msg=f"{key} M={m} N={n}")
            else:
                np.testing.assert_allclose(have, want, rtol=rtol, atol=rtol,
                                           err_msg=f"{key} M={m} N={n}")


#: tiled_1d's classic configuration (every GPU option off)
T1D = {"K": 16, "rows": 1, "unroll": 1, "peel": False, "pack": False, "math": "accurate",
       "denorms_are_zero": False}
CONFIGS = {
    "kernel_vec_cpu": [{"V": 8, "U": 2, "denorms_are_zero": False},
                       {"V": 16, "U": 1, "denorms_are_zero": True}],
    "tiled_1d": [
        {**T1D, "unroll": 16},
        # the GPU options: the last tile peeled, j-points packed, several rows a work-item,
        # partial unrolling, every exp/log flavour (natives are float32 only)
        {**T1D, "rows": 2, "unroll": 4, "peel": True, "pack": True, "math": "exp2"},
        {**T1D, "K": 32, "rows": 4, "unroll": 32, "peel": True, "math": "native_exp2"},
        {**T1D, "rows": 8, "unroll": 2, "pack": True, "math": "native"},
        {**T1D, "peel": True},
        # work-items sharing rows (split), their partials combined: peeled and packed, or
        # the last tile bounded with scalar j-points
        {**T1D, "rows": 2, "split": 2, "unroll": 4, "peel": True, "pack": True,
         "math": "exp2"},
        {**T1D, "split": 4, "unroll": 16},
    ],
    "tiled_2d": [{"V": 8, "U": 2, "nsplit": 4, "tile": 1, "denorms_are_zero": False},
                 {"V": 4, "U": 1, "nsplit": 2, "tile": 16, "denorms_are_zero": False}],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name,params", [(n, p) for n, ps in CONFIGS.items() for p in ps],
                         ids=lambda v: v if isinstance(v, str) else "-".join(
                             f"{k}{x if isinstance(x, str) else int(x)}" for k, x in v.items()))
def test_recipe_matches_evaluate(name, params, kind, dtype, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    check(name, params, kind, dtype, cl_context, cl_queue, rng)


@pytest.mark.parametrize("name,params", [
    ("kernel_vec_cpu", {"V": 8, "U": 1, "denorms_are_zero": False}),
    ("tiled_1d", T1D),
    ("tiled_1d", {**T1D, "rows": 2, "peel": True, "pack": True, "math": "exp2"}),
    ("tiled_2d", {"V": 4, "U": 1, "nsplit": 2, "tile": 8, "denorms_are_zero": False}),
])
@pytest.mark.parametrize("kind", ["sum_cols", "argmin"])
def test_recipes_on_canonical_spec(name, params, kind, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    """Recipes receive the canonical spec (indices i0.., arrays a0.., lengths n0..)."""
    import loopy as lp

    from feinsum.devices.opencl import device_info

    e = make_spec(kind, np.dtype(np.float32))
    ec = feinsum.canonicalize(e)
    iso = feinsum.isomorphism(e, ec)
    dev = device_info(cl_context.devices[0])
    t = recipe(name).apply(feinsum.generate_loopy(ec), params, ec, dev)
    ex = lp.set_options(t, return_dict=True).executor(cl_context)
    arrays = make_arrays(e, 29, 41, rng)
    _, got = ex(cl_queue, **{iso.arrays[k]: v for k, v in arrays.items()})
    for key, want in feinsum.evaluate(e, arrays).items():
        np.testing.assert_allclose(got[key], want, rtol=2e-5, atol=2e-5)


#: GPU configurations whose special values are checked (every exp/log flavour, both peeled
#: and padded last tiles, packed and scalar j-points).
SPECIAL_CONFIGS = [
    ("tiled_1d", T1D),
    ("tiled_1d", {**T1D, "rows": 2, "unroll": 4, "peel": True, "pack": True, "math": "exp2"}),
    ("tiled_1d", {**T1D, "K": 32, "rows": 4, "unroll": 32, "peel": True,
                  "math": "native_exp2"}),
    ("tiled_1d", {**T1D, "rows": 2, "split": 4, "unroll": 8, "peel": True, "pack": True,
                  "math": "native_exp2"}),
    ("tiled_2d", {"V": 4, "U": 1, "nsplit": 2, "tile": 16, "math": "native_exp2",
                  "denorms_are_zero": False}),
]


@pytest.mark.parametrize("name,params", SPECIAL_CONFIGS, ids=lambda v: v if isinstance(
    v, str) else "-".join(f"{k}{x}" for k, x in v.items()))
@pytest.mark.parametrize("kind", ["sum", "min", "argmin", "logsumexp"])
def test_special_values_propagate(name, params, kind, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    """NaN and infinities come out as feinsum.evaluate says: a NaN i-point makes its row
    NaN, a NaN j-point every row (argmin: its index, the first NaN's), f = +inf gives
    +inf, f = -inf everywhere gives -inf (log-sum-exp's (max, sum) pair sees inf - inf)."""
    ex, e = executor(name, tuple(sorted(params.items())), kind, "float32", cl_context)
    for m, n in [(53, 71), (37, 300)]:
        check_special_values(ex, e, kind, m, n, 3, 20, cl_queue, rng)


def check_special_values(ex, e, kind: str, m: int, n: int, x_row: int, y_row: int,  # type: ignore[no-untyped-def]
                         queue, rng) -> None:
    """*ex* computes what evaluate does with NaN in i-point *x_row*, NaN in j-points
    *y_row* and ``n - 1``, and for log-sum-exp f = -inf everywhere and f = +inf once."""
    cases = []
    a = make_arrays(e, m, n, rng)
    a["x"][x_row, 0] = np.nan
    cases.append(a)
    a = make_arrays(e, m, n, rng)
    a["y"][y_row, 1] = a["y"][n - 1, 0] = np.nan
    cases.append(a)
    if kind == "logsumexp":
        a = make_arrays(e, m, n, rng)
        a["f"][:] = -np.inf
        cases.append(a)
        a = make_arrays(e, m, n, rng)
        a["f"][min(7, n - 1)] = np.inf
        cases.append(a)
    for arrays in cases:
        _, got = ex(queue, **arrays)
        for key, want in feinsum.evaluate(e, arrays).items():
            have = got[key].get() if hasattr(got[key], "get") else got[key]
            if key.endswith("_index"):
                np.testing.assert_array_equal(have, want, err_msg=f"{key} M={m} N={n}")
            else:
                np.testing.assert_allclose(have, want, rtol=2e-5, atol=2e-5,
                                           err_msg=f"{key} M={m} N={n}")


#: tiled_2d_gpu (GPUs only: generated for the H200 model, run on the CPU device): several
#: sweeps of the grid and idle work-groups (small G and K), every exp/log flavour, blocks
#: of R rows (at most M: one block for M <= R; several, the last partial, past it).
FEW_ROWS_CONFIGS = [
    {"K": 32, "G": 4, "R": 5, "math": "accurate", "denorms_are_zero": False},
    {"K": 32, "G": 2, "R": 8, "math": "native_exp2", "denorms_are_zero": False},
]


@functools.cache
def few_rows_executor(params: tuple, kind: str, m: int, ctx):  # type: ignore[no-untyped-def]
    import loopy as lp

    from feinsum.devices.models import MODELS

    e = make_spec(kind, np.dtype(np.float32)).with_lengths({"M": m})
    r, dev = recipe("tiled_2d_gpu"), MODELS["h200"].info
    assert r.applies(e, dev) is None, r.applies(e, dev)
    t = r.apply(feinsum.generate_loopy(e), dict(params), e, dev)
    return lp.set_options(t, return_dict=True).executor(ctx), e


def _few_rows_cases() -> list[Any]:
    """Every kind with the first configuration; the kinds with an ``exp`` (the only ones
    the exp/log flavour changes) with the others too (each case costs PoCL 10-40 s of
    compiling with a cold cache)."""
    def ident(v: dict[str, Any]) -> str:
        return "-".join(f"{k}{x if isinstance(x, str) else int(x)}" for k, x in v.items())

    return [pytest.param(params, kind, id=f"{kind}-{ident(params)}")
            for n, params in enumerate(FEW_ROWS_CONFIGS)
            for kind in ("sum", "min", "max", "argmin", "argmax", "logsumexp")
            if n == 0 or kind in ("sum", "logsumexp")]


@pytest.mark.parametrize(("params", "kind"), _few_rows_cases())
def test_few_rows_on_gpu_models(params, kind, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    """tiled_2d_gpu matches feinsum.evaluate for few rows (M = 3, 16, 100: one block of
    rows, or several with the last one partial or all full), N from 1 to past several
    sweeps of the grid, with NaN in an i-point, in two j-points, f = -inf everywhere and
    f = +inf once (log-sum-exp)."""
    for m in (3, 16, 100):
        config = {**params, "R": min(params["R"], m)}
        ex, e = few_rows_executor(tuple(sorted(config.items())), kind, m, cl_context)
        for n in (1, 37, 300):
            arrays = make_arrays(e, m, n, rng)
            _, got = ex(cl_queue, **arrays)
            for key, want in feinsum.evaluate(e, arrays).items():
                have = got[key].get() if hasattr(got[key], "get") else got[key]
                np.testing.assert_allclose(have, want, rtol=2e-5, atol=2e-5,
                                           err_msg=f"{key} M={m} N={n}")
            check_special_values(ex, e, kind, m, n, m - 1, n // 2, cl_queue, rng)


def test_few_rows_block_limits() -> None:
    """A block of rows past M, past K or past the registers is refused naming the limit."""
    from feinsum.devices.models import MODELS
    from feinsum.errors import SpecificationError
    from feinsum.reductions.few_rows import few_rows_kernel

    e = make_spec("sum", np.dtype(np.float32)).with_lengths({"M": 64})
    r, dev = recipe("tiled_2d_gpu"), MODELS["h200"].info
    assert r.applies(e, dev) is None
    assert r.default(e, dev)["R"] == 8  # 8 blocks of 8 rows (22 rows' values would fit)
    with pytest.raises(SpecificationError, match="R <= min"):
        few_rows_kernel(e, 32, 4, R=33)
    with pytest.raises(feinsum.InvalidConfigurationError, match="'R': 25 is not in integers"):
        r.space(e, dev).validate({**r.default(e, dev), "R": 25})
    line = kernel_reduction("exp(-sqdist(x, y)) * b", i_vars={"x": 1},
                            j_vars={"y": 1, "b": 1}, dtype=np.float32).with_lengths({"M": 64})
    assert r.default(line, dev)["R"] == 8  # 48 rows' values fit: still blocks of 8
    with pytest.raises(feinsum.InvalidConfigurationError, match="R <= K"):
        r.space(line, dev).validate({**r.default(line, dev), "K": 32, "R": 40})


#: tiled_1d with a NaN term carried as -1 (min/argmin of squared distances): the classic
#: kernel, and the GPU default's shape (several rows, unrolled, peeled, packed)
CLAMPED = {"classic": {**T1D, "clamp_nan": True},
           "gpu": {**T1D, "K": 32, "rows": 4, "unroll": 16, "peel": True, "pack": True,
                   "math": "native_exp2", "clamp_nan": True}}
#: argmin only: the index found once per chunk, in a chunk with a new minimum (the last
#: tile bounded in the chunk loop, or peeled; chunks of 1, 4 and 16 terms)
CLAMPED.update({
    "lazy_bounded": {**CLAMPED["classic"], "unroll": 4, "lazy_index": True},
    "lazy_single": {**CLAMPED["classic"], "rows": 2, "peel": True, "lazy_index": True},
    "lazy_gpu": {**CLAMPED["gpu"], "lazy_index": True},
    "lazy_whole_tile": {**CLAMPED["classic"], "rows": 8, "unroll": 16, "peel": True,
                        "math": "exp2", "lazy_index": True},
    # work-items sharing rows: partial minima combined, ties by index across them
    "split": {**CLAMPED["gpu"], "rows": 2, "split": 4},
    "lazy_split": {**CLAMPED["gpu"], "split": 2, "lazy_index": True}})


@pytest.mark.parametrize("config", sorted(CLAMPED))
@pytest.mark.parametrize("kind", ["min", "argmin"])
def test_nan_carried_as_minus_one(config, kind, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    """Ties (integer points), NaN i- and j-points (the first NaN's index wins), all
    distances infinite, float32 and float64: as feinsum.evaluate with the NaN tests."""
    params = CLAMPED[config]
    if params.get("lazy_index") and kind != "argmin":
        pytest.skip("lazy_index is an argmin's")
    check("tiled_1d", params, kind, np.float32, cl_context, cl_queue, rng)
    if config in ("classic", "lazy_bounded"):
        check("tiled_1d", params, kind, np.float64, cl_context, cl_queue, rng)
    ex, e = executor("tiled_1d", tuple(sorted(params.items())), kind, "float32", cl_context)
    for m, n in [(53, 71), (37, 300)]:
        check_special_values(ex, e, kind, m, n, 3, 20, cl_queue, rng)
    arrays = make_arrays(e, 40, 90, rng)
    arrays["y"][:] = np.inf
    arrays["y"][50, 2] = np.nan
    _, got = ex(cl_queue, **arrays)
    for key, want in feinsum.evaluate(e, arrays).items():
        np.testing.assert_array_equal(got[key], want, err_msg=key)


@pytest.mark.parametrize("config", ["lazy_bounded", "lazy_gpu", "lazy_split"])
def test_lazy_index_when_every_chunk_holds_a_new_minimum(config, cl_context, cl_queue, rng):  # type: ignore[no-untyped-def]
    """j-points ever closer to every i-point (the search runs in every chunk), ties
    within and across chunks, NaN j-points after the minimum and inside a chunk."""
    ex, e = executor("tiled_1d", tuple(sorted(CLAMPED[config].items())), "argmin",
                     "float32", cl_context)
    for m, n in [(37, 300), (70, 64)]:
        arrays = make_arrays(e, m, n, rng)
        arrays["x"][:] = rng.integers(0, 4, size=arrays["x"].shape)
        arrays["y"][:] = (np.arange(n, 0, -1)[:, None] // 3 + 10).astype(np.float32)
        for nan in ([], [n - 1], [n // 2, n // 2 + 1, n - 2]):
            y = arrays["y"].copy()
            y[nan, 1] = np.nan
            _, got = ex(cl_queue, **{**arrays, "y": y})
            for key, want in feinsum.evaluate(e, {**arrays, "y": y}).items():
                np.testing.assert_array_equal(got[key], want, err_msg=f"{key} {nan}")


def test_clamp_nan_only_where_terms_are_never_negative(cl_context) -> None:  # type: ignore[no-untyped-def]
    from feinsum.devices.models import MODELS
    from feinsum.devices.opencl import device_info
    from feinsum.errors import FeinsumError
    from feinsum.reductions.analysis import nonnegative

    r, gpu = recipe("tiled_1d"), MODELS["h200"].info
    cpu = device_info(cl_context.devices[0])
    nearest, gauss = make_spec("argmin", np.float32), make_spec("sum", np.float32)
    assert r.default(nearest, gpu)["clamp_nan"] and not r.default(nearest, cpu)["clamp_nan"]
    assert not r.default(gauss, gpu)["clamp_nan"]
    signed = kernel_reduction("-sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                              reduction="argmin", dtype=np.float32)
    assert not r.default(signed, gpu)["clamp_nan"]
    with pytest.raises(FeinsumError, match="clamp_nan"):
        r.apply(feinsum.generate_loopy(gauss), {**r.default(gauss, gpu), "clamp_nan": True},
                gauss, gpu)
    # a configuration recorded before the options generates the code it ran (NaN tests,
    # the index taken at every term)
    old = {k: v for k, v in r.default(nearest, gpu).items()
           if k not in ("clamp_nan", "lazy_index")}
    assert r.check(old, nearest, gpu)["clamp_nan"] is False
    assert r.check(old, nearest, gpu)["lazy_index"] is False
    older = {k: v for k, v in r.default(nearest, gpu).items() if k != "lazy_index"}
    assert r.check(older, nearest, gpu) == {**older, "lazy_index": False}
    # lazy_index: an argmin's, on GPUs by default, with clamp_nan only
    assert r.default(nearest, gpu)["lazy_index"] and not r.default(nearest, cpu)["lazy_index"]
    closest = make_spec("min", np.float32)
    assert r.default(closest, gpu)["clamp_nan"] and not r.default(closest, gpu)["lazy_index"]
    with pytest.raises(feinsum.InvalidConfigurationError, match="lazy_index needs clamp_nan"):
        r.space(nearest, gpu).validate({**r.default(nearest, gpu), "clamp_nan": False})
    from feinsum.reductions.row_tiles import Tiling, tiled_kernel

    with pytest.raises(feinsum.InvalidConfigurationError, match="lazy_index needs an argmin"):
        tiled_kernel(closest, Tiling(K=32, clamp_nan=True, lazy_index=True))
    with pytest.raises(feinsum.InvalidConfigurationError,
                       match="'lazy_index': True is not one of false"):
        r.apply(feinsum.generate_loopy(closest), {**r.default(closest, gpu), "lazy_index": True},
                closest, gpu)
    x = __import__("pymbolic").primitives.Variable("x")
    assert nonnegative(x * x) and nonnegative(x**2 + 3) and not nonnegative(x * x - 1)
    assert not nonnegative(x) and not nonnegative(-1 * x * x)


def test_few_rows_default_keeps_the_device_busy() -> None:
    """tiled_2d_gpu's H200 default at the GPU size (M = 64, N = 1e6): blocks of 8 rows and
    about 32 warps per compute unit (G = 128: 1024 work-groups of 128); the model predicts
    it faster than the fewest blocks (3 of 22 rows, the default before) and than 4 rows."""
    from feinsum.devices.models import MODELS
    from feinsum.prediction import predict_configuration
    from feinsum.tuning.workloads import workloads

    w = workloads(gpu=True)["fewrows"]
    e = feinsum.canonicalize(w.spec)
    lengths = feinsum.canonical_lengths(w.spec.with_lengths(w.lengths))
    r, dev = recipe("tiled_2d_gpu"), MODELS["h200"].info
    default = r.default(e, dev, lengths)
    assert (default["K"], default["G"], default["R"]) == (128, 128, 8)
    seconds = {R: predict_configuration(r, e, r.check({**default, "R": R}, e, dev), "h200",
                                        lengths).seconds for R in (4, 8, 22)}
    assert seconds[8] < min(seconds[4], seconds[22]), seconds


@pytest.mark.parametrize("config", ["lazy_bounded", "lazy_single", "lazy_split"])
def test_lazy_index_looks_once_per_chunk(config) -> None:  # type: ignore[no-untyped-def]
    """Every lazy configuration, the plain kernel's shape included, generates the chunked
    search: the chunk's minimum first, its index only in a branch (``hit_``)."""
    import loopy as lp

    from feinsum.reductions.row_tiles import Tiling, tiled_kernel

    closest = make_spec("argmin", np.dtype(np.float32))
    p = CLAMPED[config]
    knl = tiled_kernel(closest, Tiling(**{k: p[k] for k in (
        "K", "rows", "unroll", "peel", "pack", "math", "clamp_nan", "lazy_index")},
        split=p.get("split", 1)))
    code = lp.generate_code_v2(knl).device_code()
    assert "hit_0" in code and "fmin" in code, config

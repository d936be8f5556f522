"""The Genred-style builder: specs, shapes, and values against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import feinsum
from feinsum.reductions.builder import kernel_reduction


def pts(rng, m, d, dtype=np.float64):  # type: ignore[no-untyped-def]
    return rng.random((m, d)).astype(dtype)


def test_gaussian_convolution(rng):  # type: ignore[no-untyped-def]
    e = kernel_reduction("exp(-sqdist(x, y) / (2*s**2)) * b", i_vars={"x": 3},
                         j_vars={"y": 3, "b": 1}, params={"s": 1}, dtype=np.float64)
    assert e.subscripts == "ij,j->i" and e.reduction == "sum"
    assert e.lengths["i"] == "M" and e.lengths["j"] == "N"
    x, y, b = pts(rng, 7, 3), pts(rng, 5, 3), rng.random(5)
    got = feinsum.evaluate(e, {"x": x, "y": y, "b": b, "s": 0.5})["out0"]
    want = (np.exp(-((x[:, None] - y[None]) ** 2).sum(-1) / 0.5) * b).sum(1)
    np.testing.assert_allclose(got, want)


def test_vector_b_is_its_own_operand(rng):  # type: ignore[no-untyped-def]
    e = kernel_reduction("exp(-sqdist(x, y)) * b", i_vars={"x": 2}, j_vars={"y": 2, "b": 4})
    assert e.subscripts == "ij,je->ie" and e.lengths["e"] == 4
    x, y, b = pts(rng, 6, 2, np.float32), pts(rng, 9, 2, np.float32), pts(rng, 9, 4, np.float32)
    got = feinsum.evaluate(e, {"x": x, "y": y, "b": b})["out0"]
    assert got.shape == (6, 4) and got.dtype == np.float32
    np.testing.assert_allclose(got, np.exp(-((x[:, None] - y[None]) ** 2).sum(-1)) @ b,
                               rtol=1e-5)


def test_vector_valued_formula(rng):  # type: ignore[no-untyped-def]
    e = kernel_reduction("(x - y) * exp(-sqnorm(x - y)) + p", i_vars={"x": 2},
                         j_vars={"y": 2}, params={"p": 2}, dtype=np.float64)
    assert e.out_indices == ("i", "e")
    x, y, p = pts(rng, 4, 2), pts(rng, 5, 2), np.array([0.5, -1.0])
    got = feinsum.evaluate(e, {"x": x, "y": y, "p": p})["out0"]
    d = x[:, None] - y[None]
    np.testing.assert_allclose(got, (d * np.exp(-(d**2).sum(-1))[..., None] + p).sum(1))


@pytest.mark.parametrize("reduction", ["min_argmin", "argmin", "max_argmax", "min", "max"])
def test_index_reductions_over_i(reduction, rng):  # type: ignore[no-untyped-def]
    e = kernel_reduction("sqdist(x, y) + dot(x, y) - norm(x) + sum(y) + x[1]",
                         i_vars={"x": 3}, j_vars={"y": 3}, reduction=reduction, axis="i")
    assert e.out_indices == ("j",)
    x, y = pts(rng, 8, 3), pts(rng, 6, 3)
    v = (((x[:, None] - y[None]) ** 2).sum(-1) + x @ y.T - np.linalg.norm(x, axis=1)[:, None]
         + y.sum(1)[None] + x[:, 1:2])
    got = feinsum.evaluate(e, {"x": x, "y": y})
    is_min = "min" in reduction
    np.testing.assert_allclose(got["out0"], (np.min if is_min else np.max)(v, axis=0))
    if "arg" in reduction:
        arg = np.argmin if is_min else np.argmax
        np.testing.assert_array_equal(got["out0_index"], arg(v, axis=0))


def test_logsumexp_and_block_sparse_flag():  # type: ignore[no-untyped-def]
    e = kernel_reduction("f - sqdist(x, y) / eps", i_vars={"x": 3}, j_vars={"y": 3, "f": 1},
                         params={"eps": 1}, reduction="logsumexp", block_sparse=True)
    assert e.reduction == "logsumexp" and e.block_sparse == feinsum.BlockSparse("i", "j")


@pytest.mark.parametrize("bad,kwargs", [
    ("sqdist(x, z)", {}),
    ("x + y", {"i_vars": {"x": 2}, "j_vars": {"y": 3}}),
    ("foo(x)", {}),
    ("x", {"reduction": "median"}),
    ("x", {"axis": "k"}),
    ("x[5]", {}),
    ("x[y]", {}),
])
def test_errors(bad, kwargs):  # type: ignore[no-untyped-def]
    args = {"i_vars": {"x": 3}, "j_vars": {"y": 3}, **kwargs}
    with pytest.raises(feinsum.SpecificationError):
        kernel_reduction(bad, **args)

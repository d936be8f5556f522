"""The numpy reference: semantics, blocking, memory bound, input validation."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import feinsum as fs
from feinsum.lowering.reference import evaluate


def gaussian(n: int | str = "N", m: int | str = "M", reduction: str = "sum") -> fs.BatchedEinsum:
    x = fs.array("x", (n, 3), np.float32)
    y = fs.array("y", (m, 3), np.float32)
    s = fs.array("s", (), np.float32)
    K = fs.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])
    return fs.einsum("ij,j->i", K, fs.array("b", (m,), np.float32), reduction=reduction)


def gaussian_arrays(rng: np.random.Generator, n: int, m: int) -> dict[str, np.ndarray]:
    return {"x": rng.random((n, 3), dtype=np.float32), "y": rng.random((m, 3), dtype=np.float32),
            "b": rng.random(m, dtype=np.float32), "s": np.float32(0.3)}


# {{{ semantics


def test_plain_sums_match_numpy(rng: np.random.Generator) -> None:
    D = fs.array("D", (3, 5, 5))
    J = fs.array("J", (3, 3, "E"))
    u = fs.array("u", (3, "E", 5))
    e = fs.batched_einsum("xre,rij,xej->ei", [[J, D, u], [J, D, (u, u)]])
    arrays = {"D": rng.random((3, 5, 5)), "J": rng.random((3, 3, 7)), "u": rng.random((3, 7, 5))}
    out = evaluate(e, arrays)
    assert list(out) == ["out0", "out1"]
    want = np.einsum("xre,rij,xej->ei", arrays["J"], arrays["D"], arrays["u"])
    np.testing.assert_allclose(out["out0"], want)
    want1 = np.einsum("xre,rij,xej->ei", arrays["J"], arrays["D"], arrays["u"] ** 2)
    np.testing.assert_allclose(out["out1"], want1)


@pytest.mark.parametrize("block_elements", [2**24, 50, 1])
def test_blocking_does_not_change_the_answer(rng: np.random.Generator,
                                             block_elements: int) -> None:
    """Blocks over output rows, and (when a row does not fit) over the reduction."""
    arrays = gaussian_arrays(rng, 9, 13)
    X, Y = arrays["x"].astype(np.float64), arrays["y"].astype(np.float64)
    P = np.exp(-((X[:, None] - Y[None]) ** 2).sum(-1) / (2 * 0.09)) * arrays["b"]
    truth = {
        "sum": P.sum(1), "min": P.min(1), "max": P.max(1), "argmin": P.min(1),
        "argmax": P.max(1), "logsumexp": np.log(np.exp(P).sum(1)),
    }
    for reduction, want in truth.items():
        out = evaluate(gaussian(reduction=reduction), arrays, block_elements=block_elements)
        np.testing.assert_allclose(out["out0"], want, rtol=2e-6, err_msg=reduction)
        if reduction.startswith("arg"):
            np.testing.assert_array_equal(out["out0_index"], getattr(np, reduction)(P, 1))
            assert out["out0_index"].dtype == np.int32


@pytest.mark.parametrize("block_elements", [2**24, 2])
def test_ties_nan_and_infinities(block_elements: int) -> None:
    """Ties go to the smallest index and NaN propagates, also across reduction blocks."""
    a = np.array([
        [2.0, 1.0, 1.0, 3.0, 1.0],
        [1.0, np.nan, 0.0, np.nan, 5.0],
        [-np.inf] * 5,
        [0.0, np.inf, 1.0, np.inf, 2.0],
        [7.0] * 5,
    ])
    for reduction in ("min", "max", "argmin", "argmax", "logsumexp"):
        e = fs.einsum("ij->i", fs.array("a", (5, 5)), reduction=reduction)
        out = evaluate(e, {"a": a}, block_elements=block_elements)
        if reduction.startswith("arg"):
            np.testing.assert_array_equal(out["out0_index"], getattr(np, reduction)(a, 1))
        elif reduction == "logsumexp":
            v = out["out0"]
            assert v[0] == pytest.approx(np.log(np.exp(a[0]).sum()))
            assert np.isnan(v[1]) and v[2] == -np.inf and v[3] == np.inf
            assert v[4] == pytest.approx(7 + np.log(5))
        else:
            np.testing.assert_array_equal(out["out0"], getattr(np, reduction)(a, 1))


def test_logsumexp_does_not_overflow() -> None:
    e = fs.einsum("ij->i", fs.array("a", (2, 3), np.float32), reduction="logsumexp")
    a = np.array([[1000, 1000, 1000], [-1000, -1000, -1000]], np.float32)
    out = evaluate(e, {"a": a})["out0"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [1000 + np.log(3), -1000 + np.log(3)], rtol=1e-6)


def test_formula_semantics_follow_numpy() -> None:
    """Integer arrays in a formula with a quotient are computed in float64, float
    constants take the formula's dtype, index arguments can be used as values."""
    p = fs.array("p", (4,), np.int32)
    q = fs.array("q", (3,), np.int32)
    f = fs.formula("f", "ij", "p[i] / q[j] + 0.5 * i", [p, q])
    e = fs.einsum("ij->i", f)
    P, Q = np.array([1, 2, 3, 4], np.int32), np.array([2, 3, 4], np.int32)
    out = evaluate(e, {"p": P, "q": Q})["out0"]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, (P[:, None] / Q[None] + 0.5 * np.arange(4)[:, None]).sum(1))


def test_memory_stays_bounded(rng: np.random.Generator) -> None:
    """A 2000 x 2000 Gaussian reduction (96 MB as one float32 broadcast with its 3
    features) runs in a few MB."""
    arrays = gaussian_arrays(rng, 2000, 2000)
    e = gaussian(reduction="logsumexp")
    tracemalloc.start()
    try:
        out = evaluate(e, arrays, block_elements=2**16)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    small = evaluate(gaussian(reduction="logsumexp"),
                     {**arrays, "x": arrays["x"][:5]})["out0"]
    np.testing.assert_allclose(out["out0"][:5], small, rtol=1e-6)


# }}}


# {{{ validation


def test_missing_array_is_named() -> None:
    with pytest.raises(fs.EvaluationError, match=r"missing array 'b'.*arrays\['b'\]"):
        evaluate(gaussian(), {"x": np.zeros((2, 3), np.float32),
                              "y": np.zeros((2, 3), np.float32), "s": 1.0})


def test_wrong_rank_and_shape() -> None:
    e = fs.einsum("ij,j->i", fs.array("A", (2, 3)), fs.array("v", (3,)))
    with pytest.raises(fs.EvaluationError, match="'v' has rank 2"):
        evaluate(e, {"A": np.zeros((2, 3)), "v": np.zeros((3, 1))})
    with pytest.raises(fs.EvaluationError, match=r"'A' has shape \(2, 4\).*axis 1 must have "
                                                  "length 3"):
        evaluate(e, {"A": np.zeros((2, 4)), "v": np.zeros(3)})


def test_inconsistent_symbol_values() -> None:
    arrays = {"x": np.zeros((4, 3), np.float32), "y": np.zeros((5, 3), np.float32),
              "b": np.zeros(6, np.float32), "s": np.float32(1)}
    with pytest.raises(fs.EvaluationError, match=r"length 'M' is 5 in array 'y'.*6 in array 'b'"):
        evaluate(gaussian(), arrays)


def test_dtype_kind_checked_precision_converted() -> None:
    e = fs.einsum("i->", fs.array("a", (3,), np.float32))
    with pytest.raises(fs.EvaluationError, match=r"'a' has dtype int64.*astype\(np.float32\)"):
        evaluate(e, {"a": np.arange(3)})
    with pytest.raises(fs.EvaluationError, match="complex128"):
        evaluate(e, {"a": np.ones(3, np.complex128)})
    out = evaluate(e, {"a": np.ones(3, np.float64)})["out0"]
    assert out.dtype == np.float32 and out == 3
    with pytest.raises(fs.EvaluationError, match="mapping"):
        evaluate(e, [np.ones(3)])  # type: ignore[arg-type]


def test_complex_orderings_rejected() -> None:
    e = fs.einsum("ij->i", fs.array("a", (2, 2), np.complex128), reduction="argmin")
    with pytest.raises(fs.DTypeError, match="argmin of complex"):
        evaluate(e, {"a": np.ones((2, 2), np.complex128)})


# }}}

# vim: foldmethod=marker


@pytest.mark.parametrize("reduction", ["sum", "min", "max", "argmin", "logsumexp"])
def test_empty_reduction_gives_the_neutral_value(reduction: str) -> None:
    x = fs.array("x", ("M", 3), np.float32)
    y = fs.array("y", ("N", 3), np.float32)
    k = fs.formula("K", "ij", "sum(d, (x[i,d] - y[j,d])**2)", [x, y])
    e = fs.einsum("ij->i", k, reduction=reduction)
    out = evaluate(e, {"x": np.ones((3, 3), np.float32), "y": np.ones((0, 3), np.float32)})
    expected = {"sum": 0.0, "min": np.inf, "argmin": np.inf, "max": -np.inf,
                "logsumexp": -np.inf}[reduction]
    np.testing.assert_array_equal(out["out0"], np.full(3, expected, np.float32))
    if reduction == "argmin":
        np.testing.assert_array_equal(out["out0_index"], np.full(3, -1, np.int32))

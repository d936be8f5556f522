"""The reference kernel (generate_loopy) agrees with the numpy reference (evaluate)."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pytest

import feinsum as fs
from feinsum.lowering.kernel import generate_loopy
from feinsum.lowering.reference import evaluate

REAL = (np.float32, np.float64, np.int32, np.int64)
ALL = (np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64)


def run(t_unit: Any, queue: Any, arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """Run a reference kernel on *arrays* (those it takes); outputs by name."""
    import loopy as lp

    ex = lp.set_options(t_unit, return_dict=True).executor(queue.context)
    names = {a.name for a in t_unit.default_entrypoint.args}
    _, out = ex(queue, **{k: v for k, v in arrays.items() if k in names})
    return {k: v.get() if hasattr(v, "get") else v for k, v in out.items()}


def random(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any,
           ties: bool = False) -> np.ndarray:
    """Random data; *ties*: small integers, so extrema repeat."""
    dt = np.dtype(dtype)
    if ties or dt.kind == "i":
        return rng.integers(-3, 4, size=shape).astype(dt)
    a = rng.standard_normal(shape)
    if dt.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt)


def tolerance(dtype: Any) -> float:
    """Relative (and absolute) tolerance: single precision, double precision, exact."""
    dt = np.dtype(dtype)
    if dt.kind in "fc":
        return 2e-5 if dt in (np.float32, np.complex64) else 1e-12
    return 0.0


def assert_agree(e: fs.BatchedEinsum, got: dict[str, np.ndarray],
                 want: dict[str, np.ndarray]) -> None:
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if name.endswith("_index"):
            np.testing.assert_array_equal(g, w, err_msg=name)
        else:
            rtol = tolerance(w.dtype)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=name)


# {{{ structure


def test_kernel_structure() -> None:
    x = fs.array("x", ("N", 3), np.float32)
    y = fs.array("y", ("M", 3), np.float32)
    s = fs.array("s", (), np.float32)
    b = fs.array("b", ("M",), np.float32)
    K = fs.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])
    t = generate_loopy(fs.einsum("ij,j->i", K, b))
    knl = t.default_entrypoint
    assert knl.name == "einsum"
    assert [a.name for a in knl.args] == ["x", "y", "s", "b", "out0", "M", "N"]
    assert knl.arg_dict["N"].dtype.numpy_dtype == np.int32
    assert type(knl.arg_dict["s"]).__name__ == "ValueArg"
    assert knl.arg_dict["out0"].is_output and not knl.arg_dict["x"].is_output
    assert set(knl.all_inames()) == {"i", "j", "d"}
    assert set(knl.substitutions) == {"K", "op0_r0", "op1_r0"}
    (insn,) = knl.instructions
    assert insn.id == "row0"
    assert str(insn.expression) == "reduce(sum, [j], op0_r0(i, j)*op1_r0(j))"
    assert not any(knl.iname_tags(i) for i in knl.all_inames())
    assert t.target.__class__.__name__ == "PyOpenCLTarget"


def test_argmin_structure_and_orders() -> None:
    a = fs.array("a", (4, 5), np.float64, order="F")
    e = fs.einsum("ij->i", a, reduction="argmin")
    knl = generate_loopy(e).default_entrypoint
    assert [x.name for x in knl.args] == ["a", "out0", "out0_index"]
    assert knl.arg_dict["out0_index"].dtype.numpy_dtype == np.int32
    assert [t.stride for t in knl.arg_dict["a"].dim_tags] == [1, 4]
    (insn,) = knl.instructions
    assert [str(x) for x in insn.assignees] == ["out0[i]", "out0_index[i]"]
    assert str(insn.expression) == "reduce(feinsum_argmin, [j], (op0_r0(i, j), j))"


def test_feature_index_clash_is_renamed() -> None:
    x = fs.array("x", ("n", 3), np.float64)
    z = fs.array("z", ("n", 5), np.float64)
    f = fs.formula("f", "i", "sum(d, x[i, d])", [x])
    g = fs.formula("g", "i", "sum(d, z[i, d])", [z])
    knl = generate_loopy(fs.einsum("i,i->i", f, g)).default_entrypoint
    assert {"f_d", "g_d"} <= set(knl.all_inames())


def test_reserved_names_and_complex_orderings() -> None:
    with pytest.raises(fs.SpecificationError, match="out0"):
        generate_loopy(fs.einsum("ij->i", fs.array("out0", (2, 2))))
    with pytest.raises(fs.DTypeError, match="complex"):
        generate_loopy(fs.einsum("ij->i", fs.array("a", (2, 2), np.complex64), reduction="max"))


def test_block_sparse_needs_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block-sparse lowering lives above feinsum.lowering and registers itself: where it
    is not registered, a block-sparse spec is a clear error naming the module to import."""
    import feinsum.lowering.kernel as kernel

    monkeypatch.setattr(kernel, "_BLOCK_SPARSE", [])
    e = fs.einsum("ij,j->i", fs.array("a", ("N", "M")), fs.array("b", ("M",)),
                  block_sparse=fs.BlockSparse("i", "j"))
    with pytest.raises(fs.FeinsumError, match=r"feinsum\.reductions"):
        generate_loopy(e)
    with pytest.raises(fs.FeinsumError, match=r"feinsum\.reductions"):
        evaluate(e, {})


# }}}


# {{{ kernel vs numpy


def test_sum_every_dtype(cl_queue: Any, rng: np.random.Generator) -> None:
    """One row per dtype: one build covers them all (and rows of different dtypes)."""
    rows = [[fs.array(f"a{k}", (3, 4), dt), fs.array(f"b{k}", (4, "N"), dt)]
            for k, dt in enumerate(ALL)]
    e = fs.batched_einsum("ik,kj->ij", rows)
    arrays = {}
    for k, dt in enumerate(ALL):
        arrays[f"a{k}"] = random(rng, (3, 4), dt)
        arrays[f"b{k}"] = random(rng, (4, 6), dt)
    want = evaluate(e, arrays)
    for k, dt in enumerate(ALL):
        np.testing.assert_allclose(want[f"out{k}"], arrays[f"a{k}"] @ arrays[f"b{k}"],
                                   rtol=1e-5)
        assert want[f"out{k}"].dtype == dt
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)


@pytest.mark.parametrize("reduction", ["min", "max", "argmin", "argmax", "logsumexp"])
def test_reductions_every_real_dtype(cl_queue: Any, rng: np.random.Generator,
                                     reduction: str) -> None:
    """Ties (small integers) must go to the smallest index; NaN must propagate."""
    rows = [[fs.array(f"a{k}", ("M", 9), dt), fs.array(f"w{k}", (9,), dt)]
            for k, dt in enumerate(REAL)]
    e = fs.batched_einsum("ij,j->i", rows, reduction=reduction)
    arrays = {}
    for k, dt in enumerate(REAL):
        arrays[f"a{k}"] = random(rng, (7, 9), dt, ties=True)
        arrays[f"w{k}"] = np.ones(9, dt)
        if np.dtype(dt).kind == "f":
            arrays[f"a{k}"][2, [3, 6]] = np.nan
            arrays[f"a{k}"][3, :] = -np.inf
            arrays[f"a{k}"][4, 5] = np.inf
    want = evaluate(e, arrays)
    for k, _ in enumerate(REAL):
        a = arrays[f"a{k}"]
        if reduction in ("argmin", "argmax"):
            np.testing.assert_array_equal(want[f"out{k}_index"], getattr(np, reduction)(a, 1))
        elif reduction in ("min", "max"):
            np.testing.assert_array_equal(want[f"out{k}"], getattr(np, reduction)(a, 1))
    if reduction == "logsumexp":
        assert want["out0"][3] == -np.inf and want["out0"][4] == np.inf
        assert np.isnan(want["out0"][2])
        assert want["out2"].dtype == np.float64
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)


def test_gaussian_kernel_formula(cl_queue: Any, rng: np.random.Generator) -> None:
    x = fs.array("x", ("N", 3), np.float32)
    y = fs.array("y", ("M", 3), np.float32)
    s = fs.array("s", (), np.float32)
    b = fs.array("b", ("M",), np.float32)
    K = fs.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])
    e = fs.einsum("ij,j->i", K, b)
    arrays = {"x": random(rng, (20, 3), np.float32), "y": random(rng, (30, 3), np.float32),
              "b": random(rng, (30,), np.float32), "s": np.float32(0.7)}
    X, Y = arrays["x"].astype(np.float64), arrays["y"].astype(np.float64)
    truth = np.exp(-((X[:, None] - Y[None]) ** 2).sum(-1) / (2 * 0.49)) @ arrays["b"]
    want = evaluate(e, arrays)
    assert want["out0"].dtype == np.float32
    np.testing.assert_allclose(want["out0"], truth, rtol=1e-5, atol=1e-6)
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)


def test_batched_rows_with_products(cl_queue: Any, rng: np.random.Generator) -> None:
    """``ij,ej->ei`` over two fields, one squared (u*u), and a formula row operand."""
    D = fs.array("D", (5, 5), np.float64)
    u = fs.array("u", ("E", 5), np.float64)
    v = fs.array("v", ("E", 5), np.float64)
    w = fs.array("w", ("E",), np.float64)
    sq = fs.formula("sq", "ej", "v[e, j] * w[e] + 1", [v, w])
    e = fs.batched_einsum("ij,ej->ei", [[D, (u, u)], [D, v], [D, (sq, u)]])
    arrays = {n: random(rng, s, np.float64)
              for n, s in (("D", (5, 5)), ("u", (8, 5)), ("v", (8, 5)), ("w", (8,)))}
    want = evaluate(e, arrays)
    U, V, W = arrays["u"], arrays["v"], arrays["w"]
    np.testing.assert_allclose(want["out0"], (U * U) @ arrays["D"].T)
    np.testing.assert_allclose(want["out2"], ((V * W[:, None] + 1) * U) @ arrays["D"].T)
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)


def test_symbolic_lengths_one_build_several_sizes(cl_queue: Any,
                                                  rng: np.random.Generator) -> None:
    import loopy as lp

    e = fs.einsum("ik,kj->ij", fs.array("A", ("N", "K"), np.float64),
                  fs.array("B", ("K", "N"), np.float64))
    ex = lp.set_options(generate_loopy(e), return_dict=True).executor(cl_queue.context)
    for n, k in ((1, 1), (3, 5), (17, 2)):
        arrays = {"A": random(rng, (n, k), np.float64), "B": random(rng, (k, n), np.float64)}
        _, out = ex(cl_queue, **arrays)
        assert_agree(e, out, evaluate(e, arrays))


def test_scalar_output_scalar_operand_and_mixed_dtypes(cl_queue: Any,
                                                       rng: np.random.Generator) -> None:
    """A full reduction to a 0-d output, a 0-d operand, int32 times float32 (numpy
    promotes to float64), and an elementwise row (no reduction index)."""
    a = fs.array("a", (6,), np.int32)
    b = fs.array("b", (6,), np.float32)
    c = fs.array("c", (), np.float32)
    e = fs.einsum("i,i,->", a, b, c)
    arrays = {"a": random(rng, (6,), np.int32), "b": random(rng, (6,), np.float32),
              "c": np.float32(1.5)}
    want = evaluate(e, arrays)
    assert want["out0"].shape == () and want["out0"].dtype == np.float64
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)

    e2 = fs.einsum("i,i->i", a, b, reduction="logsumexp")
    want2 = evaluate(e2, arrays)
    np.testing.assert_allclose(want2["out0"], arrays["a"] * arrays["b"].astype(np.float64),
                               rtol=1e-6)
    assert_agree(e2, run(generate_loopy(e2), cl_queue, arrays), want2)


def test_every_formula_function(cl_queue: Any) -> None:
    """Every function a formula may call (log1p and expm1 are unknown to loopy: the
    lowering registers them), comparisons and a conditional, in one kernel."""
    from feinsum.spec.formulas import FUNCTIONS

    x = fs.array("x", ("N",), np.float64)
    calls = [f"{fn}(x[i], 0.5)" if fn in ("fmin", "fmax") else f"{fn}(x[i])"
             for fn in sorted(FUNCTIONS - {"min", "max"})]
    f = fs.formula("f", "i", " + ".join(calls) + " + (x[i]**3 if x[i] > 0.5 else -x[i])", [x])
    e = fs.batched_einsum("i->i", [[f], [fs.formula("g", "i", "log1p(x[i])", [x])]])
    arrays = {"x": np.linspace(0.1, 0.9, 9)}
    want = evaluate(e, arrays)
    np.testing.assert_allclose(want["out1"], np.log1p(arrays["x"]))
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), want)


@pytest.mark.filterwarnings("ignore::loopy.diagnostic.WriteRaceConditionWarning")
def test_local_parallel_reductions_agree(cl_queue: Any, rng: np.random.Generator) -> None:
    """The feinsum reduction operations give the same answer split across work-items."""
    import loopy as lp

    for reduction in ("argmax", "logsumexp", "min"):
        e = fs.einsum("ij->i", fs.array("a", ("N", 16), np.float32), reduction=reduction)
        t = lp.tag_inames(generate_loopy(e), {"j": "l.0", "i": "g.0"})
        arrays = {"a": random(rng, (5, 16), np.float32, ties=True)}
        arrays["a"][1, [4, 9]] = np.nan
        assert_agree(e, run(t, cl_queue, arrays), evaluate(e, arrays))


# }}}

# vim: foldmethod=marker


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_constant_operand_computes_at_the_precision_of_its_einsum(
        dtype: Any, cl_queue: Any, rng: np.random.Generator) -> None:
    """A formula of no array (pytato's 0.4 in ``0.4 * actx.einsum(...)``) is a weak
    constant: 0.4 in a float64 einsum, not float32's 0.4000000059604645 (a relative error
    of 1.5e-8 in every entry), and a float32 einsum stays float32."""
    D, u = fs.array("D", (5, 5), dtype), fs.array("u", ("E", 5), dtype)
    e = fs.einsum("ij,ej,->ei", D, u, fs.formula("c", (), "0.4", []))
    code = lp.generate_code_v2(generate_loopy(e)).device_code()
    if dtype == np.float64:
        assert "0.4000000059604645" not in code and "0.4f" not in code
    arrays = {"D": (rng.random((5, 5)) + 0.5).astype(dtype),
              "u": (rng.random((7, 5)) + 0.5).astype(dtype)}  # no cancellation
    want = evaluate(e, arrays)["out0"]
    assert want.dtype == dtype
    exact = 0.4 * (arrays["u"].astype(np.longdouble) @ arrays["D"].T.astype(np.longdouble))
    rtol = 1e-14 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(want, exact.astype(np.float64), rtol=rtol)
    assert_agree(e, run(generate_loopy(e), cl_queue, arrays), {"out0": want})

"""Flop and byte counts: the documented conventions, and loopy's own count where they meet."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import feinsum as fs
from feinsum.lowering.kernel import generate_loopy
from feinsum.spec.costs import Cost, contraction_flops, cost


def loopy_ops(e: fs.BatchedEinsum, dtype: Any) -> dict[str, int]:
    """lp.get_op_map of the reference kernel, for one dtype: operation name -> count.

    loopy's count differs from feinsum's conventions, which is why cost() does not
    use it: get_op_map crashes on loopy's own argmin/argmax (its ArgExtOp reduction
    function; feinsum's operations are plain named callables, which it counts as one
    ``func:`` op per combine), it counts ``x**2`` as a ``pow`` rather than one
    multiply, and a complex multiply as one op rather than 6 flops. So it is compared
    with cost() only on real sums, minima and maxima of plain arrays.
    """
    import loopy as lp

    op_map = lp.get_op_map(generate_loopy(e), subgroup_size="guess",
                           count_within_subscripts=False)
    counts: dict[str, int] = {}
    for op, count in op_map.filter_by(dtype=[np.dtype(dtype)]).items():
        counts[str(op.name)] = counts.get(str(op.name), 0) + int(count.eval_with_dict({}))
    return counts


@pytest.mark.filterwarnings("ignore::loopy.diagnostic.LoopyWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("reduction", ["sum", "min", "max"])
def test_plain_einsums_match_loopy_op_count(reduction: str) -> None:
    e = fs.batched_einsum(
        "ik,kj,k->ij",
        [[fs.array("A", (4, 5), np.float32), fs.array("B", (5, 6), np.float32),
          fs.array("w", (5,), np.float32)],
         [fs.array("A", (4, 5), np.float32), fs.array("C", (5, 6), np.float32),
          (fs.array("w", (5,), np.float32), fs.array("w", (5,), np.float32))]],
        reduction=reduction,
    )
    ops = loopy_ops(e, np.float32)
    combine = {"sum": "add", "min": "func:feinsum_min", "max": "func:feinsum_max"}[reduction]
    assert set(ops) == {"mul", combine}
    assert cost(e).flops == {"float32": sum(ops.values())}
    terms = 4 * 5 * 6
    assert ops["mul"] == terms * (2 + 3) and ops[combine] == 2 * terms


def test_gemm_and_bytes() -> None:
    n = 64
    e = fs.einsum("ik,kj->ij", fs.array("A", ("N", "N")), fs.array("B", ("N", "N")))
    c = cost(e, {"N": n})
    assert c == Cost(flops={"float64": 2 * n**3}, special={}, bytes=3 * n * n * 8)
    assert c.total_flops == 2 * n**3
    assert c.intensity == pytest.approx(2 * n**3 / (24 * n * n))


def test_complex_conventions() -> None:
    A = fs.array("A", (3, 4), np.complex64)
    c = cost(fs.einsum("ik,kj->ij", A, fs.array("B", (4, 5), np.complex64)))
    assert c.flops == {"complex64": 3 * 4 * 5 * (6 + 2)}
    c = cost(fs.einsum("ik,kj->ij", A, fs.array("R", (4, 5), np.float32)))
    assert c.flops == {"complex64": 3 * 4 * 5 * (2 + 2)}


def test_gaussian_formula_hoists_invariants_and_counts_exp_once_per_pair() -> None:
    x = fs.array("x", ("N", 3), np.float32)
    y = fs.array("y", ("M", 3), np.float32)
    s = fs.array("s", (), np.float32)
    K = fs.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])
    b0, b1 = fs.array("b0", ("M",), np.float32), fs.array("b1", ("M",), np.float32)
    e = fs.batched_einsum("ij,j->i", [[K, b0], [K, b1]])
    n, m = 10, 7
    c = cost(e, {"N": n, "M": m})
    pairs = n * m
    # per (i, j, d): subtract, square, accumulate; per (i, j): divide; once: 2*s**2;
    # per row and pair: K*b and the accumulation. K is shared by the two rows.
    assert c.flops == {"float32": pairs * 3 * 3 + pairs + 2 + 2 * 2 * pairs}
    assert c.special == {"exp": pairs}
    assert c.bytes == 4 * (n * 3 + m * 3 + 1 + 2 * m + 2 * n)


def test_other_reductions() -> None:
    a = fs.array("a", (6, 5), np.float64)
    b = fs.array("b", (5,), np.float64)
    lse = cost(fs.einsum("ij,j->i", a, b, reduction="logsumexp"))
    assert lse.flops == {"float64": 30 * (1 + 2) + 6}
    assert lse.special == {"exp": 30, "log": 6}
    am = cost(fs.einsum("ij,j->i", a, b, reduction="argmin"))
    assert am.flops == {"float64": 30 * 2}
    assert am.bytes == 8 * (30 + 5 + 6) + 4 * 6
    elementwise = cost(fs.einsum("ij,ij->ij", a, a))
    assert elementwise.flops == {"float64": 30}


def test_powers_and_functions_in_formulas() -> None:
    x = fs.array("x", ("N",), np.float64)
    f = fs.formula("f", "i", "sqrt(abs(x[i]))**3 + x[i]**0.5 + x[i]**-2", [x])
    c = cost(fs.einsum("i->", f), {"N": 10})
    # abs 1, **3: 2, **-2: 1 multiply + 1 division, two adds; sum: 1 add per term
    assert c.flops == {"float64": 10 * (1 + 2 + 2 + 2 + 1)}
    assert c.special == {"sqrt": 10, "pow": 10}


def test_missing_length_is_named() -> None:
    e = fs.einsum("ij,j->i", fs.array("A", ("N", "M")), fs.array("v", ("M",)))
    with pytest.raises(fs.SpecificationError, match="'M'"):
        cost(e, {"N": 3})
    with pytest.raises(fs.SpecificationError, match="positive integer"):
        cost(e, {"N": 3, "M": 0})


def test_contraction_flops_of_the_dg_family() -> None:
    f8 = np.float64
    J, D = fs.array("J", (3, 3, "E"), f8), fs.array("D", (3, 35, 35), f8)
    u3, u = fs.array("u", (3, "E", 35), f8), fs.array("u", ("E", 35), f8)
    n = {"E": 10}
    div = fs.einsum("xre,rij,xej->ei", J, D, u3)
    # W[r,e,j] = sum_x J u: 2*3*3*35; then sum_{r,j} D W: 2*3*35*35 (per element)
    assert contraction_flops(div, n) == 10 * (2 * 315 + 2 * 3675)
    assert cost(div, n).total_flops == 10 * 3 * 3 * 35 * 35 * 3  # two multiplies + add
    grad = fs.einsum("xre,rij,ej->xei", J, D, u)
    assert contraction_flops(grad, n) == 10 * (2 * 3675 + 2 * 315)
    L, Jf = fs.array("L", (35, 4, 15), f8), fs.array("J", (4, "E"), f8)
    v = fs.array("v", (4, "E", 15), f8)
    # J v: one multiply per (f, e, j), nothing summed; then sum_{f,j} L (J v)
    assert contraction_flops(fs.einsum("ifj,fe,fej->ei", L, Jf, v), n) == 10 * (60 + 4200)


def test_the_autotuner_rates_the_cheapest_contraction_order() -> None:
    """The tune table's GFLOP/s (its target's flops) and the records' are the same count."""
    from feinsum.spec.costs import roofline_work
    from feinsum.timing.measurement import Target

    f8 = np.float64
    div = fs.einsum("xre,rij,xej->ei", fs.array("J", (3, 3, "E"), f8),
                    fs.array("D", (3, 35, 35), f8), fs.array("u", (3, "E", 35), f8))
    target = Target.make(div, {"E": 2048})
    work = roofline_work(div, {"E": 2048})
    assert target.flops == work.flops == contraction_flops(div, {"E": 2048})
    assert target.nbytes == work.bytes == cost(div, {"E": 2048}).bytes
    assert target.dtype == work.dtype == "float64"


def test_contraction_flops_never_exceed_the_naive_count() -> None:
    a, b = fs.array("a", (6, 5), np.float32), fs.array("b", (5, 4), np.float32)
    for e in (fs.einsum("ij,jk->ik", a, b), fs.einsum("ij,ij->ij", a, a),
              fs.einsum("ij->i", a), fs.einsum("ij,jk->", a, b),
              fs.batched_einsum("ij,jk->ik", [[a, b], [a, b]])):
        assert 0 < contraction_flops(e) <= cost(e).total_flops
    # ij,jk-> sums j and k: contract over j first (6*5*4 FMAs), then reduce i, k adds
    assert contraction_flops(fs.einsum("ij,jk->", a, b)) <= 2 * 6 * 5 * 4 + 6 * 4
    # rows are counted separately
    one = contraction_flops(fs.einsum("ij,jk->ik", a, b))
    assert contraction_flops(fs.batched_einsum("ij,jk->ik", [[a, b], [a, b]])) == 2 * one
    # reductions other than sum and complex values keep the naive count
    e = fs.einsum("ij,jk->ik", a, b, reduction="max")
    assert contraction_flops(e) == cost(e).total_flops

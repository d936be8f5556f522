"""Kernels that are not batched einsums feinsum can hold: each must be rejected with an
:class:`~feinsum.EinsumMatchError` that names the statement, its expression and the
reason. None of these needs a device."""

from __future__ import annotations

import warnings

import loopy as lp
import numpy as np
import pytest

import feinsum

F32 = np.float32
F64 = np.float64


def knl(domain, insns, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lp.make_kernel(domain, insns, args, lang_version=(2018, 2), **kw)


def arrays(names, dtype=F64, **kw):
    return lp.GlobalArg(names, dtype, shape=lp.auto, **kw)


# (id, kernel factory, match_einsum kwargs, fragments every message must contain)
CASES = [
    (
        "shifted",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[j+1]) {id=mv}",
                    [arrays("A,b,y"), ...]),
        {},
        ["'mv'", "b[j + 1]", "shifted index j + 1", "plain loop indices"],
    ),
    (
        "strided-output",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[2*i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [arrays("A,b"), lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "y[2*i]", "strided index 2*i", "output"],
    ),
    (
        "non-affine",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<n}", "y[i] = sum(j, A[i,j]*b[i*j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")),
                     lp.GlobalArg("b", F64, shape=("n",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "b[i*j]", "non-affine index i*j"],
    ),
    (
        "two-loop-index",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<n}", "y[i] = sum(j, A[i,j]*b[i+j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")),
                     lp.GlobalArg("b", F64, shape=("n",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "b[i + j]", "combines several loops"],
    ),
    (
        "lower-bound-not-zero",
        lambda: knl("{[i,j]: 0<=i<n and 1<=j<m}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m")), lp.GlobalArg("b", F64, shape=("m",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "loop 'j' starts at 1, not 0"],
    ),
    (
        "data-dependent-bounds",
        lambda: knl("[js, je, n] -> {[i,j]: 0<=i<n and js<=j<je}",
                    "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m")), lp.GlobalArg("b", F64, shape=("m",)),
                     lp.GlobalArg("y", F64, shape=("n",)), lp.ValueArg("js,je,n,m", np.int32)]),
        {},
        ["'mv'", "loop 'j' starts at js, not 0"],
    ),
    (
        "indirect",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[idx[j]]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m")), lp.GlobalArg("b", F64, shape=("m",)),
                     lp.GlobalArg("idx", np.int32, shape=("m",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "b[idx[j]]", "indirect indexing"],
    ),
    (
        "non-rectangular",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<=i}", "y[i] = sum(j, A[i,j]*b[j]) {id=tri}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")), lp.GlobalArg("b", F64, shape=("n",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'tri'", "loops 'i' and 'j' depend on each other", "non-rectangular", "j <= i"],
    ),
    (
        "modular-domain",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m and j mod 2 = 0}",
                    "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m")), lp.GlobalArg("b", F64, shape=("m",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "loop domain of 'j' is not an interval", "strided or modular"],
    ),
    (
        "length-expression",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<n-1}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")), lp.GlobalArg("b", F64, shape=("n",)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "loop 'j' runs over n - 1 values", "integer or a single length parameter"],
    ),
    (
        "two-einsums-in-one-sum",
        lambda: knl("{[i,j,k]: 0<=i<n and 0<=j<m and 0<=k<p}",
                    "y[i] = sum(j, A[i,j]*b[j]) + sum(k, C[i,k]*d[k]) {id=two}",
                    [arrays("A,b,C,d,y"), ...]),
        {},
        ["'two'", "sum of terms, 2 of them reductions", "several einsums, not one"],
    ),
    (
        "loop-not-indexing-output",
        lambda: knl("{[i,j,k]: 0<=i<n and 0<=j<m and 0<=k<p}",
                    "y[i] = sum(j, A[i,j]*b[j]*c[k]) {id=mv}", [arrays("A,b,c,y"), ...]),
        {},
        ["'mv'", "runs inside loop 'k'", "does not index the output 'y'"],
    ),
    (
        "broadcast-output",
        lambda: knl("{[i,j,k]: 0<=i<n and 0<=j<m and 0<=k<p}",
                    "y[i,k] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [arrays("A,b"), lp.GlobalArg("y", F64, shape=("n", "p")), ...]),
        {},
        ["'mv'", "output index 'k' indexes no operand", "broadcast"],
    ),
    (
        "reduction-index-unused",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, x[i]) {id=cnt}",
                    [lp.GlobalArg("x,y", F64, shape=("n",)), ...]),
        {},
        ["'cnt'", "reduction index 'j' indexes no operand"],
    ),
    (
        "diagonal",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<n}", "y[i] = sum(j, A[j,j]*b[i]) {id=tr}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")), arrays("b,y"), ...]),
        {},
        ["'tr'", "A[j, j]", "repeats index 'j'", "diagonal"],
    ),
    (
        "constant-index",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,0]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m")), arrays("b,y"), ...]),
        {},
        ["'mv'", "A[i, 0]", "constant index 0"],
    ),
    (
        "reads-own-output",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<n}", "y[i] = sum(j, A[i,j]*y[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "n")), lp.GlobalArg("y", F64, shape=("n",)),
                     ...]),
        {},
        ["'mv'", "reads its own output 'y'"],
    ),
    (
        "partial-read",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<10}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", 20)), lp.GlobalArg("b", F64, shape=(10,)),
                     lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {},
        ["'mv'", "axis 1 of 'A' has length 20", "runs over 10 values", "partial read"],
    ),
    (
        "strided-layout",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [lp.GlobalArg("A", F64, shape=("n", "m"), strides=(1, "2*n")),
                     arrays("b,y"), ...]),
        {},
        ["'mv'", "array 'A' has strides", "neither C nor F order"],
    ),
    (
        "product-reduction",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = product(j, A[i,j]) {id=pr}",
                    [arrays("A,y"), ...]),
        {},
        ["'pr'", "reduction 'product' is not one feinsum holds"],
    ),
    (
        "conditional",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}",
                    "if flag > 0\n  y[i] = sum(j, A[i,j]*b[j]) {id=mv}\nend",
                    [arrays("A,b,y"), lp.ValueArg("flag", np.int32), ...]),
        {},
        ["'mv'", "it is conditional (if flag > 0)"],
    ),
    (
        "argmin-index-expression",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "mn[i], idx[i] = argmin(j, A[i,j], 2*j) {id=am}",
                    [arrays("A,mn"), lp.GlobalArg("idx", np.int32, shape=lp.auto), ...]),
        {},
        ["'am'", "the index argument of argmin is 2*j", "not the reduction index 'j'"],
    ),
    (
        "argmin-int64-index",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "mn[i], idx[i] = argmin(j, A[i,j], j) {id=am}",
                    [arrays("A,mn"), lp.GlobalArg("idx", np.int64, shape=lp.auto), ...]),
        {},
        ["'am'", "index output 'idx' has dtype int64", "int32"],
    ),
    (
        "output-dtype",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                    [arrays("A,b", F32), arrays("y", F64), ...]),
        {},
        ["'mv'", "output 'y' has dtype float64 but its operands give float32"],
    ),
    (
        "accumulator-starts-at-one",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
            y[i] = 1  {id=init}
            y[i] = y[i] + A[i,j]*b[j]  {id=upd, dep=init}
            """, [arrays("A,b,y"), ...]),
        {},
        ["'init'", "'upd'", "starts at 1, not 0", "only sums from 0"],
    ),
    (
        "accumulator-initialised-once",
        # loopy puts `acc = 0` outside loop i: the sums accumulate across rows
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
            <> acc = 0  {id=init}
            acc = acc + A[i,j]*b[j]  {id=upd, dep=init}
            y[i] = acc  {id=fin, dep=upd}
            """, [arrays("A,b,y"), ...]),
        {},
        ["'init'", "'upd'", "'fin'", "initialised by 'init' outside loop 'i'",
         "not reset for each output element"],
    ),
    (
        "accumulator-unordered",
        # no dependencies: loopy may (and does) schedule `y[i] = acc` first
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
            for i
              <> acc = 0  {id=init}
              for j
                acc = acc + A[i,j]*b[j]  {id=upd}
              end
              y[i] = acc  {id=fin}
            end
            """, [arrays("A,b,y"), ...]),
        {},
        ["'upd' does not depend on the initialisation 'init'", "order is not determined"],
    ),
    (
        "accumulator-dtype",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
            for i
              <float32> acc = 0  {id=init}
              for j
                acc = acc + A[i,j]*b[j]  {id=upd, dep=init}
              end
              y[i] = acc  {id=fin, dep=upd}
            end
            """, [arrays("A,b,y"), ...]),
        {},
        ["'init'", "'upd'", "'fin'", "accumulator 'acc' has dtype float32",
         "operands give float64"],
    ),
    (
        "accumulator-written-twice",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
            y[i] = 0  {id=init}
            y[i] = y[i] + A[i,j]*b[j]  {id=upd, dep=init}
            y[i] = 2  {id=again, dep=upd}
            """, [arrays("A,b,y"), ...]),
        {"within": "id:upd"},
        ["'upd'", "'init'", "also written by 'again'"],
    ),
    (
        "private-temporary-input",
        lambda: knl("{[i,j,k]: 0<=i<n and 0<=j<4 and 0<=k<4}", """
            <> t[k] = 2*b[k]  {id=pre}
            y[i] = sum(j, A[i,j]*t[j])  {id=mv, dep=pre}
            """, [lp.GlobalArg("A", F64, shape=("n", 4)), lp.GlobalArg("b", F64, shape=(4,)),
                  lp.GlobalArg("y", F64, shape=("n",)), ...]),
        {"within": "id:mv"},
        ["'mv'", "reads 't', a temporary computed in the kernel", "not in global memory"],
    ),
    (
        "missing-dtypes",
        lambda: lp.make_einsum("ij,j->i", ["A", "x"]),
        {},
        ["the dtype of 'A', 'x' is unknown", "dtypes="],
    ),
    (
        "scalar-times-length",
        lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, m*A[i,j]*b[j]) {id=mv}",
                    [arrays("A,b,y"), lp.ValueArg("n,m", np.int32)]),
        {},
        ["'mv'", "multiplies by 'm', which is also a length"],
    ),
]


@pytest.mark.parametrize(("make", "kwargs", "fragments"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rejected_with_precise_message(make, kwargs, fragments):
    t_unit = make()
    with pytest.raises(feinsum.EinsumMatchError) as info:
        feinsum.match_einsum(t_unit, **kwargs)
    msg = str(info.value)
    for fragment in fragments:
        assert fragment in msg, f"{fragment!r} not in {msg!r}"


@pytest.mark.parametrize(("make", "kwargs", "fragments"),
                         [c[1:] for c in CASES if c[0] != "missing-dtypes"],
                         ids=[c[0] for c in CASES if c[0] != "missing-dtypes"])
def test_find_einsums_skips_rejected(make, kwargs, fragments):
    """find_einsums never reports a statement match_einsum rejects."""
    t_unit = make()
    rejected = {"mv", "two", "tri", "cnt", "tr", "pr", "am", "init", "upd", "fin", "again"}
    for m in feinsum.find_einsums(t_unit):
        assert not (set(m.all_insn_ids) & rejected), m


def test_several_einsums_need_within():
    t_unit = knl("{[i,j]: 0<=i<n and 0<=j<m}", """
        y[i] = sum(j, A[i,j]*b[j])  {id=first}
        z[j] = sum(i, C[i,j]*d[i])  {id=second}
        """, [arrays("A,b,y,C,d,z"), ...])
    with pytest.raises(feinsum.EinsumMatchError, match=r"form 2 einsums.*within="):
        feinsum.match_einsum(t_unit)
    assert feinsum.match_einsum(t_unit, within="id:second").insn_ids == (("second",),)


def test_within_matching_nothing():
    t_unit = knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                 [arrays("A,b,y"), ...])
    with pytest.raises(feinsum.EinsumMatchError, match="no statement matches 'id:nope'"):
        feinsum.match_einsum(t_unit, within="id:nope")


def test_unknown_kernel_name():
    t_unit = knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*b[j]) {id=mv}",
                 [arrays("A,b,y"), ...], name="mykernel")
    with pytest.raises(feinsum.EinsumMatchError, match="no kernel named 'other'"):
        feinsum.match_einsum(t_unit, kernel_name="other")

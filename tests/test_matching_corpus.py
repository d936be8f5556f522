"""A corpus of kernels written the way different people write them, each of which must
match.

For every kernel:

* :func:`feinsum.match_einsum` finds the einsum, and its canonical key is the key of
  the specification we expect (built with feinsum's own builders);
* kernels of one group are the same computation written differently (names, statement
  order, substitution rules vs arrays, sums vs accumulation statements...): they get
  equal keys, and kernels of different groups different keys;
* :func:`feinsum.evaluate` on the *canonical* specification, with the kernel's inputs
  passed through the match's name map, gives what the kernel itself computes on PoCL —
  the guard against a kernel matched to the wrong key or a wrong name map.

Sizes are symbolic wherever the computation allows, with small values.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import loopy as lp
import numpy as np
import pytest
from loopy_kernels import F32, F64, g, knl

import feinsum
import feinsum.lowering.loopy_ops


def arr(name, shape, dtype=F64, order="C"):
    return feinsum.array(name, shape, dtype, order)


@dataclass
class Case:
    name: str
    group: str
    make: Callable[[], Any]
    sizes: dict[str, int]
    expected: Callable[[], feinsum.BatchedEinsum] | None = None
    match_kwargs: dict[str, Any] = field(default_factory=dict)
    scalars: dict[str, Any] = field(default_factory=dict)


# {{{ expected specifications


def e_matvec(dtype=F64, m="m", order="C"):
    return feinsum.einsum("ij,j->i", arr("A", ("n", m), dtype, order), arr("x", (m,), dtype))


def e_gemm():
    return feinsum.einsum("ik,kj->ij", arr("A", ("n", "K"), F32), arr("B", ("K", "m"), F32))


def e_dg_local():
    return feinsum.einsum("ij,ej->ei", arr("D", (6, 6)), arr("u", ("E", 6)))


def e_divergence():
    return feinsum.einsum("xre,rij,xej->ei", arr("J", (3, 3, "E")), arr("D", (3, 5, 5)),
                          arr("u", (3, "E", 5)))


def e_gradient():
    return feinsum.einsum("xre,rij,ej->xei", arr("J", (3, 3, "E")), arr("D", (3, 5, 5)),
                          arr("u", ("E", 5)))


def e_face_mass3():
    L, J = arr("L", (5, 4, 3)), arr("J", (4, "E"))
    vs = [arr(f"v{r}", (4, "E", 3)) for r in range(3)]
    return feinsum.batched_einsum("ifj,fe,fej->ei", [[L, J, v] for v in vs])


def e_contract2():
    return feinsum.einsum("ijk,jkl->il", arr("A", ("n", 4, 3), F32), arr("B", (4, 3, "m"), F32))


def e_ttm():
    return feinsum.einsum("ijkl,mi->mjkl", arr("X", (3, 4, 2, "n"), F32), arr("M", (5, 3), F32))


def e_outer():
    return feinsum.einsum("i,j->ij", arr("x", ("n",)), arr("y", ("m",)))


def e_dot():
    return feinsum.einsum("i,i->", arr("x", ("n",)), arr("y", ("n",)))


def e_scaled():
    return feinsum.einsum(arr("alpha", ()), [], arr("A", ("n", "m")), ["i", "j"],
                          arr("x", ("m",)), ["j"], ["i"])


def constant(value):
    return feinsum.formula("c", (), repr(float(value)), [])


def e_const(value):
    return feinsum.einsum(constant(value), [], arr("A", ("n", "m")), ["i", "j"],
                          arr("x", ("m",)), ["j"], ["i"])


def e_square():
    x = arr("x", ("m",))
    return feinsum.einsum(arr("A", ("n", "m")), ["i", "j"], x, ["j"], x, ["j"], ["i"])


def e_formula_sum():
    b, c = arr("b", ("m",)), arr("c", ("m",))
    f = feinsum.formula("f", "j", "b[j] + c[j]", [b, c])
    return feinsum.einsum(arr("A", ("n", "m")), ["i", "j"], f, ["j"], ["i"])


def e_max():
    return feinsum.einsum("ij,j->i", arr("A", ("n", "m")), arr("x", ("m",)), reduction="max")


def sqdist(name="dist"):
    x, y = arr("x", ("n", 3), F32), arr("y", ("m", 3), F32)
    return feinsum.formula(name, "ij", "sum(d, (x[i,d] - y[j,d])**2)", [x, y])


def e_minsq():
    return feinsum.einsum(sqdist(), ["i", "j"], ["i"], reduction="min")


def e_argmin():
    return feinsum.einsum(sqdist(), ["i", "j"], ["i"], reduction="argmin")


def e_argmax():
    return feinsum.einsum("ij,j->i", arr("A", ("n", "m"), F32), arr("x", ("m",), F32),
                          reduction="argmax")


def e_lse():
    x, y = arr("x", ("n", 3), F32), arr("y", ("m", 3), F32)
    f, eps = arr("f", ("m",), F32), arr("eps", (), F32)
    s = feinsum.formula("s", "ij", "f[j] - sum(d, (x[i,d] - y[j,d])**2)/eps", [f, x, y, eps])
    return feinsum.einsum(s, ["i", "j"], ["i"], reduction="logsumexp")


def gauss():
    x, y, s = arr("x", ("n", 3), F32), arr("y", ("m", 3), F32), arr("s", (), F32)
    return feinsum.formula("K", "ij", "exp(-sum(d, (x[i,d] - y[j,d])**2) / (2*s**2))", [x, y, s])


def e_gauss():
    return feinsum.einsum(gauss(), ["i", "j"], arr("b", ("m",), F32), ["j"], ["i"])


def e_gauss4():
    return feinsum.einsum(gauss(), ["i", "j"], arr("b", ("m", 4), F32), ["j", "c"], ["i", "c"])


def e_batched_mv():
    A = arr("A", ("n", "m"))
    return feinsum.batched_einsum("ij,j->i", [[A, arr("x0", ("m",))], [A, arr("x1", ("m",))]])


def e_feinsum_max():
    return feinsum.einsum("ij->i", arr("A", ("n", "m"), F32), reduction="max")


# }}}


MV_ARGS = [g("A,x,y"), ...]
FM = "{[e,i,f,j]: 0<=e<E and 0<=i<5 and 0<=f<4 and 0<=j<3}"
GAUSS_RULE = "K(a, b) := exp(-sum(d, (x[a,d] - y[b,d])**2) / (2*s**2))"

CASES = [
    # {{{ matrix-vector product, written eight ways
    Case("mv_make_einsum", "matvec", lambda: lp.make_einsum("ij,j->i", ["A", "x"]),
         {"Ni": 5, "Nj": 7}, e_matvec, {"dtypes": {"A": F64, "x": F64}}),
    Case("mv_plain", "matvec",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j])", MV_ARGS),
         {"n": 5, "m": 7}, e_matvec),
    Case("mv_long_names", "matvec",
         lambda: knl("{[row,col]: 0<=row<nrows and 0<=col<ncols}",
                     "out_vec[row] = sum(col, x_in[col]*matrix[row, col])",
                     [g("matrix,x_in,out_vec"), ...], name="apply_matrix"),
         {"nrows": 4, "ncols": 6}, e_matvec),
    Case("mv_subst_rules", "matvec",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             Mat(a, b) := A[a, b]
             vec(c) := x[c]
             y[i] = sum(j, Mat(i, j)*vec(j))
             """, MV_ARGS), {"n": 5, "m": 3}, e_matvec),
    Case("mv_accumulator", "matvec",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             for i
               <> acc = 0  {id=init}
               for j
                 acc = acc + A[i, j]*x[j]  {id=update, dep=init}
               end
               y[i] = acc  {id=store, dep=update}
             end
             """, MV_ARGS), {"n": 6, "m": 5}, e_matvec),
    Case("mv_accumulate_in_output", "matvec",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             y[i] = 0  {id=zero}
             y[i] = y[i] + x[j]*A[i, j]  {id=acc, dep=zero}
             """, [g("A,x"), g("y", is_input=False), ...]), {"n": 6, "m": 5}, e_matvec),
    Case("mv_reduction_in_accumulation", "matvec",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             y[i] = 0.0  {id=zero}
             y[i] = sum(j, A[i, j]*x[j]) + y[i]  {id=acc, dep=zero}
             """, [g("A,x"), g("y", is_input=False), ...]), {"n": 3, "m": 5}, e_matvec),
    Case("mv_fixed_short", "matvec_short",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<8}", "y[i] = sum(j, A[i,j]*x[j])", MV_ARGS),
         {"n": 5}, lambda: e_matvec(m=8)),
    Case("mv_fixed_short_renamed", "matvec_short",
         lambda: knl("{[p,q]: 0<=p<N and 0<=q<8}", "w[p] = sum(q, v[q]*M[p,q])",
                     [g("M,v,w"), ...]),
         {"N": 4}, lambda: e_matvec(m=8)),
    Case("mv_fortran_order", "matvec_F",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j])",
                     [g("A", shape=("n", "m"), order="F"), g("x,y"), ...]),
         {"n": 5, "m": 4}, lambda: e_matvec(order="F")),
    Case("mv_complex", "matvec_c128",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j])",
                     [g("A,x,y", np.complex128), ...]),
         {"n": 5, "m": 4}, lambda: e_matvec(np.complex128)),
    Case("mv_int32", "matvec_i32",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j])",
                     [g("A,x,y", np.int32), ...]),
         {"n": 5, "m": 4}, lambda: e_matvec(np.int32)),
    # }}}
    # {{{ dense contractions
    Case("gemm_make_einsum", "gemm", lambda: lp.make_einsum("ik,kj->ij", ["A", "B"]),
         {"Ni": 5, "Nk": 6, "Nj": 7}, e_gemm, {"dtypes": {"A": F32, "B": F32}}),
    Case("gemm_hand", "gemm",
         lambda: knl("{[m,n,k]: 0<=m<M and 0<=n<N and 0<=k<K}",
                     "C[m, n] = sum(k, B[k, n]*A[m, k])", [g("A,B,C", F32), ...]),
         {"M": 3, "N": 4, "K": 5}, e_gemm),
    Case("contract2_joint", "contract2",
         lambda: knl("{[i,j,k,l]: 0<=i<n and 0<=j<4 and 0<=k<3 and 0<=l<m}",
                     "C[i, l] = sum((j, k), A[i, j, k]*B[j, k, l])", [g("A,B,C", F32), ...]),
         {"n": 5, "m": 6}, e_contract2),
    Case("contract2_nested", "contract2",
         lambda: knl("{[a,b,c,d]: 0<=a<P and 0<=b<4 and 0<=c<3 and 0<=d<Q}",
                     "R[a, d] = sum(b, sum(c, Y[b, c, d]*X[a, b, c]))", [g("X,Y,R", F32), ...]),
         {"P": 2, "Q": 5}, e_contract2),
    Case("ttm", "ttm",
         lambda: knl("{[i,j,k,l,m]: 0<=i<3 and 0<=j<4 and 0<=k<2 and 0<=l<n and 0<=m<5}",
                     "Y[m, j, k, l] = sum(i, X[i, j, k, l]*M[m, i])", [g("X,M,Y", F32), ...]),
         {"n": 6}, e_ttm),
    Case("outer_product", "outer",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "P[i, j] = x[i]*y[j]", [g("x,y,P"), ...]),
         {"n": 3, "m": 4}, e_outer),
    Case("dot_scalar_output", "dot",
         lambda: knl("{[i]: 0<=i<n}", "s = sum(i, x[i]*y[i])",
                     [g("x,y"), g("s", shape=()), ...]), {"n": 9}, e_dot),
    Case("dot_make_einsum", "dot", lambda: lp.make_einsum("i,i->", ["x", "y"]), {"Ni": 7},
         e_dot, {"dtypes": {"x": F64, "y": F64}}),
    # }}}
    # {{{ the DG operator family
    Case("dg_local_symbolic", "dg_local",
         lambda: knl("{[e,i,j]: 0<=e<E and 0<=i<6 and 0<=j<6}",
                     "res[e, i] = sum(j, D[i, j]*u[e, j])", [g("D,u,res"), ...]),
         {"E": 7}, e_dg_local),
    Case("dg_local_fixed_long", "dg_local",
         lambda: knl("{[el,p,q]: 0<=el<300 and 0<=p<6 and 0<=q<6}",
                     "out[el, p] = sum(q, field[el, q]*diff_mat[p, q])",
                     [g("diff_mat,field,out"), ...]),
         {}, e_dg_local),
    Case("divergence", "divergence",
         lambda: knl("{[x,r,e,i,j]: 0<=x<3 and 0<=r<3 and 0<=e<E and 0<=i<5 and 0<=j<5}",
                     "div[e, i] = sum((x, r, j), J[x, r, e]*D[r, i, j]*u[x, e, j])",
                     [g("J,D,u,div"), ...]), {"E": 4}, e_divergence),
    Case("divergence_nested_renamed", "divergence",
         lambda: knl("{[dim,rr,el,nd,md]: 0<=dim<3 and 0<=rr<3 and 0<=el<nel and 0<=nd<5 "
                     "and 0<=md<5}",
                     "out[el, nd] = sum(md, sum(rr, sum(dim, "
                     "vec[dim, el, md]*jac[dim, rr, el]*dref[rr, nd, md])))",
                     [g("jac,dref,vec,out"), ...]), {"nel": 3}, e_divergence),
    Case("gradient", "gradient",
         lambda: knl("{[x,r,e,i,j]: 0<=x<3 and 0<=r<3 and 0<=e<E and 0<=i<5 and 0<=j<5}",
                     "grad[x, e, i] = sum((r, j), J[x, r, e]*D[r, i, j]*u[e, j])",
                     [g("J,D,u,grad"), ...]), {"E": 4}, e_gradient),
    Case("face_mass_3_fields", "face_mass3",
         lambda: knl(FM, "\n".join(
             f"res{r}[e, i] = sum((f, j), L[i, f, j]*J[f, e]*v{r}[f, e, j])" for r in range(3)),
             [g("L,J,v0,v1,v2,res0,res1,res2"), ...]), {"E": 5}, e_face_mass3),
    Case("face_mass_3_fields_shuffled", "face_mass3",
         lambda: knl("{[k,a,b,c]: 0<=k<nel and 0<=a<5 and 0<=b<4 and 0<=c<3}", """
             lift_w[k, a] = sum((c, b), w[b, k, c]*jac[b, k]*lift[a, b, c])
             lift_u[k, a] = sum((b, c), lift[a, b, c]*jac[b, k]*uu[b, k, c])
             lift_p[k, a] = sum((c, b), jac[b, k]*pp[b, k, c]*lift[a, b, c])
             """, [g("lift,jac,uu,pp,w,lift_u,lift_p,lift_w"), ...]),
         {"nel": 6}, e_face_mass3),
    Case("batched_mv", "batched_mv",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             y0[i] = sum(j, A[i,j]*x0[j])
             y1[i] = sum(j, A[i,j]*x1[j])
             """, [g("A,x0,x1,y0,y1"), ...]), {"n": 4, "m": 5}, e_batched_mv),
    Case("batched_mv_accumulators", "batched_mv",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             r1[i] = 0  {id=z1}
             r0[i] = 0  {id=z0}
             r1[i] = r1[i] + b[j]*M[i, j]  {id=a1, dep=z1}
             r0[i] = r0[i] + M[i, j]*a[j]  {id=a0, dep=z0}
             """, [g("M,a,b"), g("r0,r1", is_input=False), ...]), {"n": 4, "m": 5},
         e_batched_mv),
    # }}}
    # {{{ scalars, constants, powers, formula operands
    Case("scaled_outside", "scaled",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = alpha*sum(j, A[i,j]*x[j])",
                     [g("A,x,y"), lp.ValueArg("alpha", F64), ...]),
         {"n": 4, "m": 3}, e_scaled, scalars={"alpha": 1.5}),
    Case("scaled_inside", "scaled",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, x[j]*alpha*A[i,j])",
                     [g("A,x,y"), lp.ValueArg("alpha", F64), ...]),
         {"n": 4, "m": 3}, e_scaled, scalars={"alpha": -0.5}),
    Case("const_outside", "const2",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = 2.0*sum(j, A[i,j]*x[j])", MV_ARGS),
         {"n": 4, "m": 3}, lambda: e_const(2.0)),
    Case("const_int_inside", "const2",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, 2*A[i,j]*x[j])", MV_ARGS),
         {"n": 4, "m": 3}, lambda: e_const(2.0)),
    Case("negated", "negated",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = -sum(j, A[i,j]*x[j])", MV_ARGS),
         {"n": 4, "m": 3}, lambda: e_const(-1.0)),
    Case("square_power", "square",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j]**2)", MV_ARGS),
         {"n": 4, "m": 3}, e_square),
    Case("square_product", "square",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, x[j]*A[i,j]*x[j])", MV_ARGS),
         {"n": 4, "m": 3}, e_square),
    Case("formula_sum_inline", "formula_sum",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*(b[j] + c[j]))",
                     [g("A,b,c,y"), ...]), {"n": 4, "m": 3}, e_formula_sum),
    Case("formula_sum_rule", "formula_sum",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", """
             bc(k) := c[k] + b[k]
             y[i] = sum(j, bc(j)*A[i,j])
             """, [g("A,b,c,y"), ...]), {"n": 4, "m": 3}, e_formula_sum),
    # }}}
    # {{{ kernel reductions
    Case("max", "max",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "mx[i] = max(j, A[i,j]*x[j])",
                     [g("A,x,mx"), ...]), {"n": 4, "m": 6}, e_max),
    Case("feinsum_max_op", "feinsum_max",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}", "mx[i] = feinsum_max(j, A[i,j])",
                     [g("A,mx", F32), ...]), {"n": 4, "m": 6}, e_feinsum_max),
    Case("min_sqdist_inline", "min_sqdist",
         lambda: knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}",
                     "mn[i] = min(j, sum(d, (x[i,d] - y[j,d])**2))", [g("x,y,mn", F32), ...]),
         {"n": 5, "m": 7}, e_minsq),
    Case("min_sqdist_rule", "min_sqdist",
         lambda: knl("{[p,q,k]: 0<=p<np and 0<=q<nq and 0<=k<3}", """
             dist(a, b) := sum(k, (pts[a,k] - ctr[b,k])**2)
             closest[p] = min(q, dist(p, q))
             """, [g("pts,ctr,closest", F32), ...]), {"np": 6, "nq": 4}, e_minsq),
    Case("argmin_nearest", "argmin",
         lambda: knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}", """
             dist(a, b) := sum(d, (x[a,d] - y[b,d])**2)
             mn[i], idx[i] = argmin(j, dist(i, j), j)
             """, [g("x,y,mn", F32), g("idx", np.int32), ...]), {"n": 5, "m": 8}, e_argmin),
    Case("argmax", "argmax",
         lambda: knl("{[i,j]: 0<=i<n and 0<=j<m}",
                     "best[i], where[i] = argmax(j, A[i,j]*x[j], j)",
                     [g("A,x,best", F32), g("where", np.int32), ...]), {"n": 5, "m": 6},
         e_argmax),
    Case("logsumexp_softmin", "logsumexp",
         lambda: knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}",
                     "out[i] = logsumexp(j, f[j] - sum(d, (x[i,d] - y[j,d])**2)/eps)",
                     [g("x,y,f,out", F32), lp.ValueArg("eps", F32), ...]),
         {"n": 5, "m": 6}, e_lse, scalars={"eps": np.float32(0.7)}),
    Case("gauss_rule", "gauss",
         lambda: knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}", f"""
             {GAUSS_RULE}
             out[i] = sum(j, K(i, j)*b[j])
             """, [g("x,y,b,out", F32), lp.ValueArg("s", F32), ...]),
         {"n": 5, "m": 6}, e_gauss, scalars={"s": np.float32(0.8)}),
    Case("gauss_inline_renamed", "gauss",
         lambda: knl("{[t,u,c]: 0<=t<M and 0<=u<N and 0<=c<3}",
                     "res[t] = sum(u, beta[u]*exp(-sum(c, (xs[t,c] - ys[u,c])**2) / "
                     "(2*sigma**2)))",
                     [g("xs,ys,beta,res", F32), lp.ValueArg("sigma", F32), ...]),
         {"M": 4, "N": 7}, e_gauss, scalars={"sigma": np.float32(1.1)}),
    Case("gauss_4_columns", "gauss4",
         lambda: knl("{[i,j,d,c]: 0<=i<n and 0<=j<m and 0<=d<3 and 0<=c<4}", f"""
             {GAUSS_RULE}
             out[i, c] = sum(j, K(i, j)*b[j, c])
             """, [g("x,y,b,out", F32), lp.ValueArg("s", F32), ...]),
         {"n": 5, "m": 6}, e_gauss4, scalars={"s": np.float32(0.9)}),
    # }}}
]


def test_corpus_size():
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


# {{{ running kernels


def _inputs(match: feinsum.Match, case: Case, rng: np.random.Generator) -> dict[str, Any]:
    e = match.einsum
    values: dict[str, Any] = {}
    sizes = dict(case.sizes)
    for a in e.arrays:
        if a.ndim == 0:
            continue
        shape = tuple(n if isinstance(n, int) else sizes[n] for n in a.shape)
        if a.dtype.kind == "c":
            v = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        elif a.dtype.kind == "i":
            v = rng.integers(-4, 5, shape)
        else:
            v = rng.standard_normal(shape)
        values[a.name] = np.asarray(v, a.dtype, order=a.order)
    for a in e.arrays:
        if a.ndim == 0:
            values[a.name] = a.dtype.type(case.scalars[a.name])
    return values


def _run_kernel(t_unit: Any, queue: Any, inputs: dict[str, Any], sizes: dict[str, int]
                ) -> dict[str, np.ndarray]:
    knl = t_unit.default_entrypoint
    args = {k: v for k, v in {**inputs, **sizes}.items() if k in knl.arg_dict}
    t_unit = lp.set_options(t_unit, return_dict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, out = t_unit.executor(queue.context)(queue, **args)
    return {k: (v.get() if hasattr(v, "get") else np.asarray(v)) for k, v in out.items()}


def _tolerance(dtype: np.dtype) -> float:
    return 1e-4 if dtype in (np.dtype(F32), np.dtype(np.complex64)) else 1e-10


# }}}


@pytest.fixture(scope="module")
def matches() -> dict[str, feinsum.Match]:
    result = {}
    for c in CASES:
        result[c.name] = feinsum.match_einsum(c.make(), **c.match_kwargs)
    return result


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_expected_key(case: Case, matches) -> None:
    m = matches[case.name]
    assert m.kernel_name == case.make().default_entrypoint.name
    if case.expected is not None:
        want = feinsum.canonical_key(case.expected())
        assert m.canonical_key == want, (
            f"{case.name}: {m.einsum} -> {feinsum.canonical_text(m.einsum)}\n"
            f"expected {feinsum.canonical_text(case.expected())}"
        )


def test_groups_share_keys_and_differ_between_groups(matches) -> None:
    keys: dict[str, set[str]] = {}
    for c in CASES:
        keys.setdefault(c.group, set()).add(matches[c.name].canonical_key)
    for group, ks in keys.items():
        assert len(ks) == 1, f"group {group} has {len(ks)} keys"
    flat = [next(iter(ks)) for ks in keys.values()]
    assert len(set(flat)) == len(flat), "two groups share a key"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_evaluate_through_name_map_equals_kernel(case: Case, matches, cl_queue, rng) -> None:
    m = matches[case.name]
    inputs = _inputs(m, case, rng)
    got = _run_kernel(case.make(), cl_queue, inputs, case.sizes)
    # the canonical specification, evaluated on the kernel's inputs renamed canonically
    want = feinsum.evaluate(m.canonical, m.canonical_arrays(inputs))
    for r, outs in enumerate(m.outputs):
        for name in outs:
            cname = m.output_map[name]
            g_, w_ = got[name], want[cname]
            assert g_.shape == w_.shape, (name, g_.shape, w_.shape)
            if name == outs[0]:
                tol = _tolerance(w_.dtype)
                np.testing.assert_allclose(g_, w_, rtol=tol, atol=tol * np.abs(w_).max(),
                                           err_msg=f"{case.name}: row {r} output {name}")
            else:
                np.testing.assert_array_equal(g_, w_, err_msg=f"{case.name}: index {name}")


def test_find_einsums_agrees_with_match_einsum(matches) -> None:
    for c in CASES:
        found = feinsum.find_einsums(c.make(), **({"dtypes": c.match_kwargs["dtypes"]}
                                                  if "dtypes" in c.match_kwargs else {}))
        assert [f.einsum for f in found] == [matches[c.name].einsum], c.name


# vim: foldmethod=marker

"""Replay, end to end: kernel -> match -> canonical spec -> a recipe with parameters ->
applied to the user's kernel -> the same numbers as the untransformed kernel (PoCL), the
user's names and calling convention kept, the rest of the program untouched, and the
same generated code (up to names) whatever the kernel called things."""

from __future__ import annotations

import re
import warnings
from typing import Any

import loopy as lp
import numpy as np
import pytest
from loopy_kernels import F32, F64, g, knl

import feinsum
import feinsum.lowering.loopy_ops


class SplitRecipe:
    """A tiny recipe in the recipe format (``apply(t_unit, params, e, device)``): split the
    first output index by ``b`` (work-groups x work-items if ``parallel``) and the first
    reduction index by ``r`` (unrolled)."""

    name = "split_test"

    def __init__(self) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []

    def apply(self, t_unit, params, e, device):
        self.calls.append((e, dict(params)))
        assert t_unit.default_entrypoint.name == "einsum"
        first = e.out_indices[0]
        if params.get("parallel"):
            t_unit = lp.split_iname(t_unit, first, params["b"], outer_tag="g.0",
                                    inner_tag="l.0")
        else:
            t_unit = lp.split_iname(t_unit, first, params["b"])
        if e.reduction_indices and params.get("r", 1) > 1:
            t_unit = lp.split_iname(t_unit, e.reduction_indices[0], params["r"],
                                    inner_tag="unr")
        return t_unit


def run(t_unit, queue, **args):
    t_unit = lp.set_options(t_unit, return_dict=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, out = t_unit.executor(queue.context)(queue, **args)
    return {k: (v.get() if hasattr(v, "get") else v) for k, v in out.items()}


def assert_same(a, b, tol=1e-12):
    assert set(a) == set(b)
    for k in a:
        if a[k].dtype.kind in "iu":
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            np.testing.assert_allclose(a[k], b[k], rtol=tol, atol=tol, err_msg=k)


FACE_MASS = """
    lift_w[k, a] = sum((c, b), w[b, k, c]*jac[b, k]*lift[a, b, c])
    lift_u[k, a] = sum((b, c), lift[a, b, c]*jac[b, k]*uu[b, k, c])
    lift_p[k, a] = sum((c, b), jac[b, k]*pp[b, k, c]*lift[a, b, c])
"""


def face_mass_kernel():
    return knl("{[k,a,b,c]: 0<=k<nel and 0<=a<5 and 0<=b<4 and 0<=c<3}", FACE_MASS,
               [g("lift,jac,uu,pp,w,lift_u,lift_p,lift_w"), ...], name="lift_kernel")


def face_mass_inputs(rng, nel=9):
    return {"lift": rng.standard_normal((5, 4, 3)), "jac": rng.standard_normal((4, nel)),
            **{n: rng.standard_normal((4, nel, 3)) for n in ("uu", "pp", "w")}}


@pytest.mark.parametrize("params", [{"b": 4}, {"b": 2, "parallel": True, "r": 2}])
def test_replay_batched_face_mass(params, cl_queue, rng):
    t_unit = face_mass_kernel()
    m = feinsum.match_einsum(t_unit)
    recipe = SplitRecipe()
    new = feinsum.apply_transform(t_unit, m, recipe, params)
    # the recipe saw the canonical spec, and only it
    (e, p), = recipe.calls
    assert e == m.canonical and p == params
    knl_new = new["lift_kernel"]
    assert [a.name for a in knl_new.args] == [a.name for a in t_unit["lift_kernel"].args]
    inputs = face_mass_inputs(rng)
    assert_same(run(new, cl_queue, **inputs), run(t_unit, cl_queue, **inputs))


def test_replay_matvec_names_and_derived_names(cl_queue, rng):
    t_unit = knl("{[row,col]: 0<=row<nrows and 0<=col<ncols}",
                 "y[row] = sum(col, x[col]*A[row, col])", [g("A,x,y"), ...], name="mv")
    m = feinsum.match_einsum(t_unit)
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 4, "parallel": True})
    k = new["mv"]
    # inames the recipe derived from the canonical output index follow the user's name
    assert {"row_inner", "row_outer", "col"} <= set(k.all_inames())
    assert [a.name for a in k.args] == [a.name for a in t_unit["mv"].args]
    A, x = rng.standard_normal((10, 7)), rng.standard_normal(7)
    assert_same(run(new, cl_queue, A=A, x=x), run(t_unit, cl_queue, A=A, x=x))


def test_replay_make_einsum_without_dtypes(cl_queue, rng):
    t_unit = lp.make_einsum("ij,jk->ik", ["A", "B"])
    m = feinsum.match_einsum(t_unit, dtypes={"A": F32, "B": F32})
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 2, "r": 2})
    A, B = rng.standard_normal((5, 6)).astype(F32), rng.standard_normal((6, 3)).astype(F32)
    out = run(new, cl_queue, A=A, B=B)
    np.testing.assert_allclose(out["out"], A @ B, rtol=1e-5)


def test_replay_fixed_long_length(cl_queue, rng):
    """A fixed long loop (>= LONG_THRESHOLD) is a symbol in the canonical spec; replay fixes
    it again, so the user's kernel keeps taking no length argument."""
    t_unit = knl("{[e,i,j]: 0<=e<300 and 0<=i<6 and 0<=j<6}",
                 "res[e, i] = sum(j, D[i, j]*u[e, j])", [g("D,u,res"), ...], name="local_op")
    m = feinsum.match_einsum(t_unit)
    assert m.einsum.lengths["e"] == 300
    assert m.canonical_lengths and set(m.canonical_lengths.values()) == {300}
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 16, "parallel": True})
    assert not [a for a in new["local_op"].args if isinstance(a, lp.ValueArg)]
    D, u = rng.standard_normal((6, 6)), rng.standard_normal((300, 6))
    assert_same(run(new, cl_queue, D=D, u=u), run(t_unit, cl_queue, D=D, u=u))


def test_replay_kernel_reductions(cl_queue, rng):
    t_unit = knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}", """
        dist(a, b) := sum(d, (x[a,d] - y[b,d])**2)
        mn[i], idx[i] = argmin(j, dist(i, j), j)
        """, [g("x,y,mn", F32), g("idx", np.int32), ...], name="nearest")
    m = feinsum.match_einsum(t_unit)
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 4, "parallel": True})
    x, y = rng.standard_normal((13, 3)).astype(F32), rng.standard_normal((17, 3)).astype(F32)
    got, want = run(new, cl_queue, x=x, y=y), run(t_unit, cl_queue, x=x, y=y)
    np.testing.assert_array_equal(got["idx"], want["idx"])
    np.testing.assert_allclose(got["mn"], want["mn"], rtol=1e-6)
    d = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    np.testing.assert_array_equal(got["idx"], d.argmin(1))


def test_replay_gaussian_logsumexp(cl_queue, rng):
    t_unit = knl("{[i,j,d]: 0<=i<n and 0<=j<m and 0<=d<3}",
                 "out[i] = logsumexp(j, f[j] - sum(d, (x[i,d] - y[j,d])**2)/eps)",
                 [g("x,y,f,out", F32), lp.ValueArg("eps", F32), ...], name="softmin")
    m = feinsum.match_einsum(t_unit)
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 4, "r": 2})
    args = {"x": rng.standard_normal((11, 3)).astype(F32),
            "y": rng.standard_normal((9, 3)).astype(F32),
            "f": rng.standard_normal(9).astype(F32), "eps": np.float32(0.5)}
    assert_same(run(new, cl_queue, **args), run(t_unit, cl_queue, **args), tol=1e-5)


def test_replay_accumulation_and_fortran_output(cl_queue, rng):
    t_unit = knl("{[i,j,k]: 0<=i<n and 0<=j<m and 0<=k<p}", """
        C[i, j] = 0  {id=zero}
        C[i, j] = C[i, j] + A[i, k]*B[k, j]  {id=acc, dep=zero}
        """, [g("A,B"), g("C", shape=("n", "m"), order="F", is_input=False), ...],
        name="gemm_acc")
    m = feinsum.match_einsum(t_unit)
    assert m.insn_ids == (("zero", "acc"),)
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 2, "parallel": True})
    assert new["gemm_acc"].arg_dict["C"].dim_tags == t_unit["gemm_acc"].arg_dict["C"].dim_tags
    A, B = rng.standard_normal((5, 4)), rng.standard_normal((4, 3))
    got = run(new, cl_queue, A=A, B=B)["C"]
    np.testing.assert_allclose(got, A @ B, rtol=1e-12)


@pytest.mark.parametrize("parallel", [False, True])
def test_replay_keeps_the_rest_of_the_kernel(parallel, cl_queue, rng):
    """Other statements stay, in order: one produces the einsum's input, one uses its
    output (global barriers separate them when the recipe parallelises)."""
    t_unit = knl("{[i,j,k]: 0<=i<n and 0<=j<n and 0<=k<n}", """
        xx[k] = 3*x[k]  {id=pre}
        y[i] = sum(j, A[i,j]*xx[j])  {id=ein, dep=pre}
        z[i] = 2*y[i] + x[i]  {id=post, dep=ein}
        """, [g("A,x"), g("y,z", is_input=False),
              lp.TemporaryVariable("xx", F64, shape=("n",), address_space=lp.AddressSpace.GLOBAL),
              ...], name="pipeline")
    (m,) = feinsum.find_einsums(t_unit)
    assert m.insn_ids == (("ein",),)
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 4, "parallel": parallel})
    k = new["pipeline"]
    assert {"pre", "post"} <= set(k.id_to_insn)
    assert "ein" not in k.id_to_insn
    assert [a.name for a in k.args] == [a.name for a in t_unit["pipeline"].args]
    A, x = rng.standard_normal((13, 13)), rng.standard_normal(13)
    assert_same(run(new, cl_queue, A=A, x=x), run(t_unit, cl_queue, A=A, x=x))


def test_replay_leaves_other_kernels_alone(rng):
    einsum = knl("{[i,j]: 0<=i<n and 0<=j<m}", "y[i] = sum(j, A[i,j]*x[j])",
                 [g("A,x,y"), ...], name="mv")
    other = knl("{[i]: 0<=i<n}", "z[i] = 2*w[i]", [g("w,z"), ...], name="scale")
    t_unit = lp.merge([einsum, other])
    m = feinsum.match_einsum(t_unit, kernel_name="mv")
    new = feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 4})
    assert new["scale"] == t_unit["scale"]
    assert new["mv"] != t_unit["mv"]


def test_replay_with_a_recipe_object(cl_queue, rng):
    """A feinsum.recipes.Recipe: parameters are validated, the device is a DeviceInfo."""
    from feinsum.recipes import IntRange, ParameterSpace, Recipe

    seen = {}

    def apply(t_unit, params, e, device):
        seen["device"] = device
        return lp.split_iname(t_unit, e.out_indices[0], params["b"])

    recipe = Recipe("split_b", applies=lambda e, d: None,
                    space=lambda e, d: ParameterSpace(b=IntRange(1, 8)),
                    default=lambda e, d: {"b": 2}, apply=apply)
    t_unit = face_mass_kernel()
    m = feinsum.match_einsum(t_unit)
    with pytest.raises(feinsum.InvalidConfigurationError):
        feinsum.apply_transform(t_unit, m, recipe, {"b": 99})
    new = feinsum.apply_transform(t_unit, m, recipe, {"b": 3})
    assert isinstance(seen["device"], feinsum.DeviceInfo)
    inputs = face_mass_inputs(rng)
    assert_same(run(new, cl_queue, **inputs), run(t_unit, cl_queue, **inputs))


def test_replay_shipped_generic_recipe(cl_device, cl_queue, rng):
    """The library's generic recipe, with its default configuration, on a user kernel."""
    recipe = feinsum.get_recipe("generic")
    t_unit = face_mass_kernel()
    m = feinsum.match_einsum(t_unit)
    assert recipe.applies(m.canonical, cl_device) is None  # generic applies everywhere
    params = recipe.default(m.canonical, cl_device)
    new = feinsum.apply_transform(t_unit, m, recipe, params, device=cl_device)
    inputs = face_mass_inputs(rng, nel=37)
    assert_same(run(new, cl_queue, **inputs), run(t_unit, cl_queue, **inputs))


MASS = "out[e, i] = sum(j, minv[i, j] * rhs[e, j])"
GEMM = "C[i, j] = sum(k, A[i, k] * B[k, j])"


@pytest.mark.parametrize(("recipe_name", "params"), [
    ("dg_transposed", {}), ("dg_transposed", {"vec": 4, "elements": 3}),
    ("dg_operator", {}), ("contraction", {"scheme": "vector", "vec": 8, "tx": 2, "ty": 3}),
])
def test_replay_shipped_vector_recipes(recipe_name, params, cl_device, cl_queue, rng):
    """Recipes that write OpenCL vector code (loopy CInstructions for vloadN/vstoreN
    among it) replay on a user's kernel: the spliced kernel passes loopy's checks (every
    access ordered) and computes what the user's kernel computes."""
    if recipe_name == "contraction":
        t_unit = knl("{[i,j,k]: 0<=i<ni and 0<=j<nj and 0<=k<nk}", GEMM, [g("A,B,C"), ...],
                     name="gemm")
        inputs = {"A": rng.standard_normal((13, 7)), "B": rng.standard_normal((7, 37))}
    else:
        t_unit = knl("{[e,i,j]: 0<=e<nel and 0<=i<19 and 0<=j<11}", MASS,
                     [g("minv,rhs,out"), ...], name="mass")
        inputs = {"minv": rng.standard_normal((19, 11)), "rhs": rng.standard_normal((45, 11))}
    m = feinsum.match_einsum(t_unit)
    recipe = feinsum.get_recipe(recipe_name)
    assert recipe.applies(m.canonical, cl_device) is None
    cfg = {**recipe.default(m.canonical, cl_device), **params}
    new = feinsum.apply_transform(t_unit, m, recipe, cfg, device=cl_device)
    assert_same(run(new, cl_queue, **inputs), run(t_unit, cl_queue, **inputs))


def test_recipe_failure_is_reported():
    class Broken:
        name = "broken"

        def apply(self, t_unit, params, e, device):
            raise ValueError("boom")

    t_unit = face_mass_kernel()
    m = feinsum.match_einsum(t_unit)
    with pytest.raises(feinsum.RecipeFailure, match=r"broken.*boom"):
        feinsum.apply_transform(t_unit, m, Broken(), {})


def test_stale_match_is_rejected():
    t_unit = face_mass_kernel()
    m = feinsum.match_einsum(t_unit)
    other = knl("{[k,a,b,c]: 0<=k<nel and 0<=a<5 and 0<=b<4 and 0<=c<3}",
                FACE_MASS.replace("jac[b, k]*uu", "uu"),
                [g("lift,jac,uu,pp,w,lift_u,lift_p,lift_w"), ...], name="lift_kernel")
    with pytest.raises(feinsum.EinsumMatchError):
        feinsum.apply_transform(other, m, SplitRecipe(), {"b": 2})


# {{{ same code modulo names


def _normalized_code(t_unit, to_canonical: dict[str, str]) -> str:
    """Device code with every identifier renamed token by token (``row_inner`` ->
    ``i0_inner``) and kernel parameters sorted (argument order is the user's)."""
    from feinsum.matching.normalize import derived_name

    code = lp.generate_code_v2(t_unit).device_code()
    code = re.sub(r"[A-Za-z_][A-Za-z0-9_]*", lambda mo: derived_name(mo.group(0), to_canonical),
                  code)

    def sort_params(mo):
        params = sorted(p.strip() for p in mo.group(2).split(","))
        return mo.group(1) + "(" + ", ".join(params) + ")" + mo.group(3)

    return re.sub(r"(\b\w+)\(([^()]*)\)(\s*\{)", sort_params, code)


@pytest.mark.parametrize("params", [{"b": 2, "parallel": True, "r": 2}, {"b": 4}])
def test_same_code_modulo_names(params):
    """Replaying one configuration on a user kernel and on the canonical kernel gives the
    same device code once names are mapped (the hook's requirement)."""
    user = face_mass_kernel()
    m = feinsum.match_einsum(user)
    canonical = feinsum.generate_loopy(m.canonical)
    mc = feinsum.match_einsum(canonical)
    assert mc.canonical_key == m.canonical_key
    assert mc.einsum == m.canonical  # the canonical kernel matches as itself
    new_user = feinsum.apply_transform(user, m, SplitRecipe(), params)
    new_canon = feinsum.apply_transform(canonical, mc, SplitRecipe(), params)
    to_canon = {**m.to_canonical, "lift_kernel": "einsum"}
    assert _normalized_code(new_user, to_canon) == _normalized_code(new_canon, {})


def test_same_code_for_two_spellings():
    """Two kernels that differ in names and statement order replay to the same code."""
    a = face_mass_kernel()
    b = knl("{[e,i,f,j]: 0<=e<E and 0<=i<5 and 0<=f<4 and 0<=j<3}", "\n".join(
        f"res{r}[e, i] = sum((f, j), L[i, f, j]*J[f, e]*v{r}[f, e, j])" for r in range(3)),
        [g("L,J,v0,v1,v2,res0,res1,res2"), ...], name="other_name")
    ma, mb = feinsum.match_einsum(a), feinsum.match_einsum(b)
    assert ma.canonical_key == mb.canonical_key
    params = {"b": 2, "parallel": True, "r": 2}
    ca = _normalized_code(feinsum.apply_transform(a, ma, SplitRecipe(), params),
                          {**ma.to_canonical, "lift_kernel": "einsum"})
    cb = _normalized_code(feinsum.apply_transform(b, mb, SplitRecipe(), params),
                          {**mb.to_canonical, "other_name": "einsum"})
    assert ca == cb


# }}}


def test_replay_two_einsums_of_one_kernel_in_turn(cl_queue, rng):
    """Matches found on the original kernel stay valid after replaying another one."""
    t_unit = knl("{[i,j,k,p]: 0<=i<n and 0<=j<m and 0<=k<n and 0<=p<m}", """
        y[i] = sum(j, A[i,j]*x[j])  {id=first}
        z[p] = sum(k, B[k,p]*w[k])  {id=second}
        """, [g("A,B,x,w"), g("y,z", is_input=False), ...], name="two")
    found = feinsum.find_einsums(t_unit)
    assert len(found) == 2
    new = t_unit
    for m, params in zip(found, ({"b": 4, "parallel": True}, {"b": 2, "r": 2}), strict=True):
        new = feinsum.apply_transform(new, m, SplitRecipe(), params)
    args = {"A": rng.standard_normal((9, 5)), "B": rng.standard_normal((9, 5)),
            "x": rng.standard_normal(5), "w": rng.standard_normal(9)}
    assert_same(run(new, cl_queue, **args), run(t_unit, cl_queue, **args))


def test_private_temporary_output_is_refused():
    t_unit = knl("{[i,j]: 0<=i<4 and 0<=j<4}", """
        <> t[i] = sum(j, A[i,j]*x[j])  {id=mv}
        y[i] = 2*t[i]  {id=post, dep=mv}
        """, [g("A", shape=(4, 4)), g("x", shape=(4,)), g("y", shape=(4,)), ...])
    m = feinsum.match_einsum(t_unit, within="id:mv")
    with pytest.raises(feinsum.EinsumMatchError, match="output 't' is a temporary outside global"):
        feinsum.apply_transform(t_unit, m, SplitRecipe(), {"b": 2})

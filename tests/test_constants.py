"""Constant factors of an einsum (``0.4 * einsum(...)``, ``einsum(..., 2*v)``): the hook
plans the einsum without them, with the plain einsum's recipes and records, and applies
them in its stores (:mod:`feinsum.matching.constants`); every result against numpy."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pytest

E = 300  # long enough for the element-batched recipes

SHAPES = {"J": (3, 3, E), "D": (3, 35, 35), "u": (E, 35), "v": (3, E, 35), "M": (35, 35),
          "g": (3, E, 35), "out": (E, 35)}
#: the right-hand sides of the einsums (``{c}``: the constant factor, as the user wrote
#: it), what numpy computes without the constant, the output's name
EINSUMS = {
    "gradient": ("g[x, e, i] = {c}sum((r, j), J[x, r, e]*D[r, i, j]*u[e, j])",
                 lambda a: np.einsum("xre,rij,ej->xei", a["J"], a["D"], a["u"]), "g"),
    "divergence": ("out[e, i] = {c}sum((x, r, j), J[x, r, e]*D[r, i, j]*v[x, e, j])",
                   lambda a: np.einsum("xre,rij,xej->ei", a["J"], a["D"], a["v"]), "out"),
    "local": ("out[e, i] = {c}sum(j, M[i, j]*u[e, j])",
              lambda a: np.einsum("ij,ej->ei", a["M"], a["u"]), "out"),
}
DOMAIN = f"{{[e, i, x, r, j]: 0 <= e < {E} and 0 <= i, j < 35 and 0 <= x, r < 3}}"
LOCAL_DOMAIN = f"{{[e, i, j]: 0 <= e < {E} and 0 <= i, j < 35}}"


def _kernel(insns: str, domain: str = DOMAIN, temps: tuple[str, ...] = ()) -> Any:
    import re

    names = [n for n in SHAPES if re.search(rf"\b{n}\[", insns) and n not in temps]
    args = [lp.GlobalArg(n, np.float64, shape=SHAPES[n]) for n in names]
    tvs = [lp.TemporaryVariable(t, np.float64, shape=(E, 35),
                                address_space=lp.AddressSpace.GLOBAL) for t in temps]
    return lp.make_kernel(domain, insns, [*args, *tvs], name="scaled",
                          lang_version=(2018, 2), seq_dependencies=True)


def _inputs(t_unit: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    knl = t_unit.default_entrypoint
    return {n: rng.random(SHAPES[n]) for n, a in knl.arg_dict.items()
            if a.is_input and isinstance(a, lp.ArrayArg)}


def _run(t_unit: Any, queue: Any, arrays: dict[str, np.ndarray], out: str) -> np.ndarray:
    import pyopencl.array as cla

    dev = {k: cla.to_device(queue, v) if isinstance(v, np.ndarray) else v
           for k, v in arrays.items()}
    _, res = lp.set_options(t_unit, return_dict=True).executor(queue.context)(queue, **dev)
    return res[out].get()


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    from feinsum.hook import clear_cache

    clear_cache()


@pytest.mark.parametrize("name", sorted(EINSUMS))
@pytest.mark.parametrize(("written", "value"), [("0.4*", 0.4), ("-", -1.0), ("2*3*", 6.0)])
def test_a_constant_factor_keeps_the_plain_einsums_recipe(name: str, written: str,
                                                          value: float, cl_device: Any,
                                                          cl_queue: Any) -> None:
    """With a constant factor the einsum gets the recipe the plain einsum gets (the DG
    recipes, not the generic schedule), the constant in its stores, and the same values."""
    from feinsum.hook import transform_program

    text, numpy_value, out = EINSUMS[name]
    domain = LOCAL_DOMAIN if name == "local" else DOMAIN
    plain = _kernel(text.format(c=""), domain)
    scaled = _kernel(text.format(c=written), domain)
    _, plain_report = transform_program(plain, device=cl_device, db=False)
    new, report = transform_program(scaled, device=cl_device, db=False)
    (want,), (group,) = plain_report.groups, report.groups
    assert want.recipe not in (None, "generic"), plain_report
    assert group.recipe == want.recipe, report
    assert any("value in the stores" in f for f in group.fused), report
    a = _inputs(scaled)
    np.testing.assert_allclose(_run(new, cl_queue, a, out), value * numpy_value(a),
                               rtol=1e-12, atol=1e-12)


def test_a_constant_composes_with_the_statement_fused_in_the_stores(
        cl_device: Any, cl_queue: Any) -> None:
    """The elementwise statement that reads the scaled einsum's output is fused into its
    stores with the constant: no global temporary is left."""
    from feinsum.hook import transform_program

    t_unit = _kernel(
        """
        t[e, i] = 0.5*sum(j, M[i, j]*u[e, j])
        out[e1, i1] = sin(u[e1, i1]) + 3*t[e1, i1]
        """, f"{{[e, i, j, e1, i1]: 0 <= e, e1 < {E} and 0 <= i, j, i1 < 35}}", ("t",))
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert group.recipe not in (None, "generic"), report
    assert any("sin" in f and "0.5" in f for f in group.fused), report
    assert report.launches is not None and not report.launches.temporaries, report
    a = _inputs(t_unit)
    want = np.sin(a["u"]) + 1.5 * np.einsum("ij,ej->ei", a["M"], a["u"])
    np.testing.assert_allclose(_run(new, cl_queue, a, "out"), want, rtol=1e-12, atol=1e-12)


def _match(insns: str, domain: str, args: list[Any]) -> Any:
    from feinsum.matching.match import survey_einsums

    knl = lp.make_kernel(domain, insns, args, name="k", lang_version=(2018, 2))
    (m,) = survey_einsums(knl).matches
    return m


def test_constants_stay_where_the_value_would_change() -> None:
    """A maximum (``max(2*x)`` is not ``2*max(x)`` for every constant) keeps its constant
    column; a float32 sum loses it and stays float32."""
    from feinsum.matching.constants import without_constants

    dom = "{[i, j]: 0 <= i, j < 64}"
    m = _match("out[i] = reduce(max, j, -2*A[i, j]*B[j])", dom, [
        lp.GlobalArg("A", np.float64, shape=(64, 64)), lp.GlobalArg("B", np.float64, (64,)),
        lp.GlobalArg("out", np.float64, shape=(64,))])
    assert any(not idx for idx in m.einsum.in_indices), m
    assert without_constants(m) is None
    m = _match("out[i] = 0.25*sum(j, A[i, j]*B[j])", dom, [
        lp.GlobalArg("A", np.float32, shape=(64, 64)), lp.GlobalArg("B", np.float32, (64,)),
        lp.GlobalArg("out", np.float32, shape=(64,))])
    scaled = without_constants(m)
    assert scaled is not None and scaled.factors == (0.25,)
    assert all(idx for idx in scaled.core.einsum.in_indices)
    assert scaled.core.einsum.value_dtype(0) == np.float32
    assert without_constants(scaled.core) is None


def test_a_recipe_that_cannot_take_the_constant_gets_the_einsum_as_matched(
        cl_device: Any, cl_queue: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Where the recipe's kernel cannot apply the constant in its stores, the einsum is
    planned with its constant column, as the matcher found it: the values are right."""
    import feinsum.matching.fuse as fuse
    from feinsum.hook import transform_program

    def refuse(tk: Any, ep: Any) -> Any:
        raise fuse._NotFused("this test's recipe writes its output in C code")

    monkeypatch.setattr(fuse, "_epilogue", refuse)
    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path))  # not the other tests' programs
    text, numpy_value, out = EINSUMS["gradient"]
    t_unit = _kernel(text.format(c="0.4*"))
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert group.transformed and not group.fused, report
    assert "const" in group.einsum, report  # the constant's column
    a = _inputs(t_unit)
    np.testing.assert_allclose(_run(new, cl_queue, a, out), 0.4 * numpy_value(a),
                               rtol=1e-12, atol=1e-12)


def test_a_scalar_parameter_goes_into_the_stores_too(cl_device: Any, cl_queue: Any) -> None:
    """``alpha*sum(...)`` with a ``ValueArg`` alpha (and a constant besides): the plain
    einsum's recipe, ``alpha`` read in the stores, the same values."""
    from feinsum.hook import transform_program

    text, numpy_value, out = EINSUMS["divergence"]
    plain = _kernel(text.format(c=""))
    scaled = _kernel(text.format(c="-2*alpha*"))
    knl = scaled.default_entrypoint
    scaled = scaled.with_kernel(knl.copy(args=[*knl.args, lp.ValueArg("alpha", np.float64)]))
    _, plain_report = transform_program(plain, device=cl_device, db=False)
    new, report = transform_program(scaled, device=cl_device, db=False)
    (want,), (group,) = plain_report.groups, report.groups
    assert group.recipe == want.recipe not in (None, "generic"), report
    assert any("alpha" in f and "value in the stores" in f for f in group.fused), report
    a = _inputs(scaled)
    got = _run(new, cl_queue,
               {**a, "alpha": np.float64(0.3)}, out)
    np.testing.assert_allclose(got, -0.6 * numpy_value(a), rtol=1e-12, atol=1e-12)


def _dt_kernel(reduction: str) -> Any:
    """``out = dt * sum(...)`` or ``max(dt * ...)`` with ``dt`` a 0-d array argument, as
    pytato passes a 0-d device array."""
    body = ("dt*sum(j, M[i, j]*u[e, j])" if reduction == "sum"
            else "reduce(max, j, dt*M[i, j]*u[e, j])")
    return lp.make_kernel(
        LOCAL_DOMAIN, f"out[e, i] = {body}",
        [lp.GlobalArg("M", np.float64, shape=(35, 35)),
         lp.GlobalArg("u", np.float64, shape=(E, 35)), lp.GlobalArg("dt", np.float64, shape=()),
         lp.GlobalArg("out", np.float64, shape=(E, 35))],
        name="scaled", lang_version=(2018, 2))


@pytest.mark.parametrize("reduction", ["sum", "max"])
def test_a_0d_array_argument_goes_into_the_stores_only(reduction: str, cl_device: Any,
                                                       cl_queue: Any) -> None:
    """A 0-d array argument (pytato's 0-d device array) times a sum: the plain einsum's
    recipe, the array read in the stores. In a maximum, which cannot take it out, the
    statement is left as it was, with the reason. The public matcher still says to pass
    a ValueArg."""
    import feinsum
    from feinsum.errors import EinsumMatchError
    from feinsum.hook import transform_program

    t_unit = _dt_kernel(reduction)
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    if reduction == "sum":
        assert group.recipe not in (None, "generic"), report
        assert any("dt * value in the stores" in f for f in group.fused), report
    else:
        assert not group.transformed and "0-d array argument 'dt'" in group.note, report
    rng = np.random.default_rng(5)
    a = {"M": rng.random((35, 35)), "u": rng.random((E, 35)), "dt": np.array(0.3)}
    prod = a["M"][None, :, :] * a["u"][:, None, :]
    want = 0.3 * (prod.sum(axis=2) if reduction == "sum" else prod.max(axis=2))
    np.testing.assert_allclose(_run(new, cl_queue, a, "out"), want, rtol=1e-12)
    with pytest.raises(EinsumMatchError, match="0-d array argument 'dt'"):
        feinsum.match_einsum(t_unit)


def test_rows_of_a_batched_einsum_keep_their_own_constants(cl_device: Any,
                                                           cl_queue: Any) -> None:
    """Two rows with different constants (one batched einsum): each row's stores apply
    its own."""
    from feinsum.hook import transform_program

    t_unit = lp.make_kernel(
        LOCAL_DOMAIN, """
        out[e, i] = 2*sum(j, M[i, j]*u[e, j])
        g2[e, i] = -3*sum(j, M[i, j]*v2[e, j])
        """, [lp.GlobalArg("M", np.float64, shape=(35, 35)),
              lp.GlobalArg("u, v2, out, g2", np.float64, shape=(E, 35))],
        name="scaled", lang_version=(2018, 2))
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert len(group.outputs) == 2 and group.recipe not in (None, "generic"), report
    assert {f.split(" in the stores")[0] for f in group.fused} == {
        "out = 2.0 * value", "g2 = (-3.0) * value"}, report
    rng = np.random.default_rng(8)
    a = {"M": rng.random((35, 35)), "u": rng.random((E, 35)), "v2": rng.random((E, 35))}
    np.testing.assert_allclose(_run(new, cl_queue, a, "out"), 2 * a["u"] @ a["M"].T,
                               rtol=1e-12)
    np.testing.assert_allclose(_run(new, cl_queue, a, "g2"), -3 * a["v2"] @ a["M"].T,
                               rtol=1e-12)

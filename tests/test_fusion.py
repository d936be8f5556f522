"""Whole programs through the hook: operand expressions and epilogues fused into the
einsums' kernels, units sharing launches, temporaries kept in local or private memory,
and the launch report; every result against numpy at 1e-12.

The kernels are written the way the two pytato generations write a DG step
(``tests/test_arraycontext*.py`` run pytato itself): the mid-2025 one inlines the
reductions into the elementwise statement, the 2026 one writes each into a temporary.
"""

from __future__ import annotations

import re
from typing import Any

import loopy as lp
import numpy as np
import pytest

E = 300  # long enough for the element-batched recipes (a long, fixed element length)


# {{{ programs


def _args(*names: str, **shapes: tuple[int, ...]) -> list[Any]:
    return [lp.GlobalArg(n, np.float64, shape=shapes[n]) for n in names]


SHAPES = {"J": (3, 3, E), "D": (3, 35, 35), "v": (3, E, 35), "L": (35, 4, 15),
          "Jf": (4, E), "flux": (4, E, 15), "M": (35, 35), "u": (E, 35), "jac": (E, 1),
          "out": (E, 35)}
DIV = "sum((x, r, j), J[x, r, {e}] * D[r, {i}, j] * v[x, {e}, j])"
LIFT = "sum((f, k), L[{i}, f, k] * Jf[f, {e}] * flux[f, {e}, k])"


def _kernel(domain: str, insns: str, names: list[str], temps: list[str] = ()) -> Any:
    args = _args(*names, **{n: SHAPES[n] for n in names})
    tvs = [lp.TemporaryVariable(t, np.float64, shape=(E, 35),
                                address_space=lp.AddressSpace.GLOBAL) for t in temps]
    return lp.make_kernel(domain, insns, [*args, *tvs], name="dg_step", lang_version=(2018, 2),
                          seq_dependencies=True)


def mid_step() -> Any:
    """The mid-2025 pytato's DG step with the inverse mass matrix: div and lift in
    temporaries, everything else in one statement."""
    return _kernel(
        f"{{[e, i, x, r, j, f, k, e1, i1, e2, i2, m]: 0 <= e, e1, e2 < {E} and "
        "0 <= i, i1, i2, j, m < 35 and 0 <= x, r < 3 and 0 <= f < 4 and 0 <= k < 15}",
        f"""
        div[e, i] = {DIV.format(e="e", i="i")}
        lift[e1, i1] = {LIFT.format(e="e1", i="i1")}
        out[e2, i2] = sin(div[e2, i2]) + 0.5*lift[e2, i2] \
            + 0.25*sum(m, M[i2, m]*(div[e2, m] - lift[e2, m]))
        """, ["J", "D", "v", "L", "Jf", "flux", "M", "out"], ["div", "lift"])


def head_step() -> Any:
    """The 2026 pytato's: the mass einsum into a temporary of its own."""
    return _kernel(
        f"{{[e, i, x, r, j, f, k, e1, i1, e2, i2, e3, i3, m]: 0 <= e, e1, e2, e3 < {E} and "
        "0 <= i, i1, i2, i3, j, m < 35 and 0 <= x, r < 3 and 0 <= f < 4 and 0 <= k < 15}",
        f"""
        div[e, i] = {DIV.format(e="e", i="i")}
        lift[e1, i1] = {LIFT.format(e="e1", i="i1")}
        mass[e2, i2] = sum(m, M[i2, m]*(div[e2, m] - lift[e2, m]))
        out[e3, i3] = sin(div[e3, i3]) + 0.5*lift[e3, i3] + 0.25*mass[e3, i3]
        """, ["J", "D", "v", "L", "Jf", "flux", "M", "out"], ["div", "lift", "mass"])


def inline_step() -> Any:
    """The mid-2025 pytato's ``sin(div) + 0.5*lift``: both reductions in one statement."""
    return _kernel(
        f"{{[e, i, x, r, j, f, k]: 0 <= e < {E} and 0 <= i, j < 35 and 0 <= x, r < 3 "
        "and 0 <= f < 4 and 0 <= k < 15}",
        f"out[e, i] = sin({DIV.format(e='e', i='i')}) + 0.5*{LIFT.format(e='e', i='i')}",
        ["J", "D", "v", "L", "Jf", "flux", "out"])


def squeezed_step() -> Any:
    """An einsum reading an ``(E, 1)`` factor, and an epilogue reading it and the einsum's
    own input."""
    return _kernel(
        f"{{[e, i, m, e1, i1]: 0 <= e, e1 < {E} and 0 <= i, m, i1 < 35}}",
        """
        t[e, i] = sum(m, M[i, m]*u[e, m]*jac[e, 0])
        out[e1, i1] = exp(-t[e1, i1]*t[e1, i1]) * jac[e1, 0] + u[e1, i1]
        """, ["M", "u", "jac", "out"], ["t"])


def mirrored_step() -> Any:
    """An elementwise statement reading an einsum's output at another element: it may not
    share a launch with the einsum."""
    return _kernel(
        f"{{[e, i, m, e1, i1]: 0 <= e, e1 < {E} and 0 <= i, m, i1 < 35}}",
        f"""
        t[e, i] = sum(m, M[i, m]*u[e, m])
        out[e1, i1] = t[e1, i1] + t[{E - 1} - e1, i1]
        """, ["M", "u", "out"], ["t"])


def inputs(names: Any, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.random(SHAPES[n]) for n in names if n != "out"}


def reference(a: dict[str, np.ndarray], kind: str) -> np.ndarray:
    if kind == "squeezed":
        t = np.einsum("im,em,e->ei", a["M"], a["u"], a["jac"][:, 0])
        return np.exp(-t * t) * a["jac"] + a["u"]
    if kind == "mirrored":
        t = np.einsum("im,em->ei", a["M"], a["u"])
        return t + t[::-1]
    div = np.einsum("xre,rij,xej->ei", a["J"], a["D"], a["v"])
    lift = np.einsum("ifk,fe,fek->ei", a["L"], a["Jf"], a["flux"])
    if kind == "inline":
        return np.sin(div) + 0.5 * lift
    return np.sin(div) + 0.5 * lift + 0.25 * np.einsum("im,em->ei", a["M"], div - lift)


def run(t_unit: Any, queue: Any, arrays: dict[str, np.ndarray]) -> np.ndarray:
    import pyopencl.array as cla
    import pyopencl.tools as clt

    dev = {k: cla.to_device(queue, v) for k, v in arrays.items()
           if k in t_unit.default_entrypoint.arg_dict}
    pool = clt.MemoryPool(clt.ImmediateAllocator(queue))
    t_unit = lp.set_options(t_unit, return_dict=True)
    _, res = t_unit.executor(queue.context)(queue, allocator=pool, **dev)
    return res["out"].get()


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    from feinsum.hook import clear_cache

    clear_cache()


# }}}


# {{{ both generations of the DG step


@pytest.mark.parametrize(("build", "kind"), [(mid_step, "mass"), (head_step, "mass"),
                                             (inline_step, "inline")])
def test_step_has_no_more_launches_or_temporaries(build: Any, kind: str, cl_device: Any,
                                                  cl_queue: Any) -> None:
    """The DG step of the GPU run, as both pytato generations write it: the mass einsum
    reads ``div - lift`` in its loads and applies the elementwise rest in its stores, the
    einsums share one launch and no global temporary is left: no more launches and
    temporaries than the untransformed program, the same results."""
    from feinsum.hook import transform_program

    t_unit = build()
    new, report = transform_program(t_unit, device=cl_device, db=False)
    assert report.transformed == (2 if kind == "inline" else 3), report
    fused = [f for g in report.groups for f in g.fused]
    assert any("in the stores" in f for f in fused), report
    if kind == "mass":
        assert any("in the loads" in f and "div" in f and "lift" in f for f in fused), report
    after, before = report.launches, report.untransformed_launches
    assert after is not None and before is not None
    assert len(after.launches) <= len(before.launches), report
    assert len(after.temporaries) <= len(before.temporaries), report
    assert "device kernels" in str(report)
    a = inputs(t_unit.default_entrypoint.arg_dict)
    want = reference(a, kind)
    np.testing.assert_allclose(run(new, cl_queue, a), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run(t_unit, cl_queue, a), want, rtol=1e-12, atol=1e-12)


def test_epilogue_reads_the_einsums_own_arrays(cl_device: Any, cl_queue: Any) -> None:
    """An epilogue that reads an ``(E, 1)`` factor the einsum reads without its unit axis,
    and one of the einsum's operands."""
    from feinsum.hook import transform_program

    t_unit = squeezed_step()
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert group.fused and "exp" in group.fused[0], report
    a = inputs(["M", "u", "jac"])
    np.testing.assert_allclose(run(new, cl_queue, a), reference(a, "squeezed"), rtol=1e-12,
                               atol=1e-12)


def test_one_work_item_groups_need_no_work_group_barriers(cl_device: Any,
                                                          cl_queue: Any) -> None:
    """Where a launch runs one work-item per group (PoCL on a CPU), the recipes' local
    temporaries (a staged operator) are private: loopy puts no work-group barrier in the
    code (PoCL's compile time grows steeply with them: minutes for a launch of several
    einsums)."""
    import pyopencl as cl
    from loopy.kernel.data import AddressSpace

    from feinsum.hook import transform_program

    if not cl_device.type & cl.device_type.CPU:
        pytest.skip("PoCL's CPU device runs one work-item per group")
    t_unit = mid_step()
    new, report = transform_program(t_unit, device=cl_device, db=False)
    assert report.launches is not None and len(report.launches.launches) == 1, report
    knl = new.default_entrypoint
    assert not [n for n, tv in knl.temporary_variables.items()
                if tv.address_space == AddressSpace.LOCAL], knl.temporary_variables
    code = lp.generate_code_v2(new).device_code()
    assert "reqd_work_group_size(1, 1, 1)" in code and "barrier(" not in code
    a = inputs(t_unit.default_entrypoint.arg_dict)
    np.testing.assert_allclose(run(new, cl_queue, a), reference(a, "mass"), rtol=1e-12,
                               atol=1e-12)


def test_launches_are_bounded_in_code(cl_device: Any, cl_queue: Any,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Units share a launch only while their statements, once unrolled, stay within
    ``LAUNCH_CODE_LIMIT`` together: at a limit below one einsum's, each einsum is a launch
    of its own, and the results are the same."""
    import feinsum.hook.schedule as schedule
    from feinsum.hook import transform_program
    from feinsum.hook.payoff import program_size

    monkeypatch.setattr(schedule, "LAUNCH_CODE_LIMIT", 1)
    t_unit = mid_step()
    new, report = transform_program(t_unit, device=cl_device, db=False, cache=False)
    assert report.transformed == 3, report
    assert report.launches is not None and len(report.launches.launches) >= 3, report
    assert program_size(new, ["dg_step"]).barriers >= 2
    a = inputs(t_unit.default_entrypoint.arg_dict)
    np.testing.assert_allclose(run(new, cl_queue, a), reference(a, "mass"), rtol=1e-12,
                               atol=1e-12)


def test_reads_of_other_work_groups_keep_their_launch(cl_device: Any, cl_queue: Any) -> None:
    """``out = t + t[mirrored]`` is no epilogue (another entry), and it reads what other
    work-groups of the einsum write: it runs in a launch of its own."""
    from feinsum.hook import transform_program

    t_unit = mirrored_step()
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert not group.fused and any("another entry" in n for n in group.not_fused), report
    assert report.launches is not None and len(report.launches.launches) == 2, report
    a = inputs(["M", "u"])
    np.testing.assert_allclose(run(new, cl_queue, a), reference(a, "mirrored"), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("model", ["h100"])
@pytest.mark.parametrize("prefer", [None, ["dg_operator"]])
def test_gpu_models(model: str, prefer: list[str] | None, cl_queue: Any) -> None:
    """Made for a GPU model and run on the CPU device: every einsum of the step gets its
    GPU default (``dg_nodes``: einsums of one layout, the same work-groups over the same
    elements, share a launch, each other layout has one of its own), or with
    ``dg_operator``, which gives every work-group the same elements, the step shares one
    launch; an elementwise statement that cannot is flattened over full groups of 64
    work-items; the results are numpy's."""
    from feinsum.devices.models import MODELS
    from feinsum.hook import transform_program

    info = MODELS[model].info
    for build, kind in ((mid_step, "mass"), (mirrored_step, "mirrored")):
        t_unit = build()
        new, report = transform_program(t_unit, device=info, db=False, prefer=prefer)
        assert all(g.action == "default" and g.recipe == (prefer or ["dg_nodes"])[0]
                   for g in report.groups), report
        layouts = {tuple(g.params[k] for k in ("node_lanes", "rows", "elements", "groups"))
                   for g in report.groups} if prefer is None else {"one"}
        assert report.launches is not None
        launches = 2 if kind == "mirrored" else len(layouts)
        assert len(report.launches.launches) == launches, report
        if kind == "mass" and prefer is None:
            assert len(layouts) > 1, report
        if kind == "mirrored":
            last = report.launches.launches[-1]
            assert last.work_items == (64,) and last.groups == (-(-E * 35 // 64),), report
        a = inputs(t_unit.default_entrypoint.arg_dict)
        np.testing.assert_allclose(run(new, cl_queue, a), reference(a, kind), rtol=1e-12,
                                   atol=1e-12)


# }}}


# {{{ every recipe fuses, or says why not


def _recipe_parts(cl_device: Any) -> list[tuple[str, Any, Any]]:
    """(recipe, plain part or why not, fused part or why not) for the mass einsum of the
    mid-2025 step, each applicable recipe at its default."""
    from feinsum.devices.opencl import device_info
    from feinsum.matching import prepare_kernel, survey_einsums
    from feinsum.matching.fuse import fuse_part
    from feinsum.matching.fusion import find_fusions
    from feinsum.matching.replay import transformed_einsum
    from feinsum.recipes import recipes

    t_unit = mid_step()
    knl = prepare_kernel(t_unit.default_entrypoint).kernel
    matches = survey_einsums(t_unit.with_kernel(knl)).matches
    fusions = find_fusions(knl, matches)
    (k,) = [k for k, m in enumerate(matches) if m.einsum.noperands == 2]
    m, fusion = matches[k], fusions[k]
    assert fusion.spec is not None and fusion.spec.operands and fusion.spec.epilogues
    info = device_info(cl_device)
    out = []
    for recipe in recipes():
        if recipe.applies(m.canonical, info) is not None:
            continue
        try:
            part = transformed_einsum(m, recipe, recipe.default(m.canonical, info), info)
        except Exception as exc:  # a default that does not build: not this test's concern
            out.append((recipe.name, str(exc), None))
            continue
        out.append((recipe.name, part, fuse_part(part, fusion)))
    return out


def test_every_recipe_fuses_or_says_why(cl_device: Any, cl_queue: Any) -> None:
    """Each recipe applicable to the mass einsum either takes its operand expression and
    epilogue (and the program computes what numpy does) or says why not; the DG recipes
    take them."""
    from feinsum.matching.assemble import assemble
    from feinsum.matching.prepare import prepare_kernel

    t_unit = mid_step()
    knl = prepare_kernel(t_unit.default_entrypoint).kernel
    a = inputs(t_unit.default_entrypoint.arg_dict)
    fused_by = set()
    for name, _, fused in _recipe_parts(cl_device):
        if fused is None:
            continue
        if isinstance(fused, str):  # the recipe says why not
            assert fused.strip(), name
            continue
        fused_by.add(name)
        new = t_unit.with_kernel(assemble(knl, [fused]).kernel)
        np.testing.assert_allclose(run(new, cl_queue, a), reference(a, "mass"), rtol=1e-12,
                                   atol=1e-12, err_msg=name)
    assert {"dg_transposed", "generic"} <= fused_by


def _product_with(t_expr: str, dtype: Any = np.float64, q_order: str = "C",
                  extra: tuple[Any, ...] = ()) -> Any:
    """``out = A @ t`` with ``t[k1, j1] = <t_expr>`` a temporary of its own."""
    return lp.make_kernel(
        "{[i, j, k, k1, j1]: 0 <= i < n and 0 <= j, j1 < m and 0 <= k, k1 < 64}",
        f"""
        t[k1, j1] = {t_expr}
        out[i, j] = sum(k, A[i, k]*t[k, j])
        """, [lp.GlobalArg("A", dtype, shape=("n", 64)),
              lp.GlobalArg("p", dtype, shape=(64, "m")),
              lp.GlobalArg("q", dtype, shape=(64, "m"), order=q_order),
              lp.GlobalArg("out", dtype, shape=("n", "m")),
              lp.TemporaryVariable("t", dtype, shape=(64, "m"),
                                   address_space=lp.AddressSpace.GLOBAL),
              lp.ValueArg("n, m", np.int32), *extra],
        name="gemm", seq_dependencies=True, lang_version=(2018, 2))


VECTOR_OPERANDS = {
    "difference": ("p[k1, j1] - q[k1, j1]", lambda p, q: p - q),
    "affine": ("2.0*p[k1, j1] + q[k1, j1]", lambda p, q: 2 * p + q),
    "quotient": ("p[k1, j1] / (1.0 + q[k1, j1])", lambda p, q: p / (1 + q)),
}


@pytest.mark.parametrize("name", sorted(VECTOR_OPERANDS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_vector_loads_compute_the_operand_expression(name: str, dtype: Any, cl_device: Any,
                                                     cl_queue: Any) -> None:
    """The contraction recipe's vector tiles read the second operand with ``vloadN``: an
    operand expression of arrays laid out as the operand, at its indices, is computed on
    the vectors loaded from each (and lane by lane in the last, partial vector of a row:
    253 columns), so it is fused; the results are numpy's."""
    from feinsum.hook import transform_program

    body, want = VECTOR_OPERANDS[name]
    new, report = transform_program(_product_with(body, dtype), device=cl_device, db=False,
                                    prefer=["contraction"])
    (group,) = report.groups
    assert group.recipe == "contraction" and any("in the loads" in f for f in group.fused), (
        report)
    code = lp.generate_code_v2(new).device_code()
    assert re.search(r"vload\d+\(0, p \+", code) and re.search(r"vload\d+\(0, q \+", code), (
        code)
    rng = np.random.default_rng(3)
    a = {"A": rng.random((300, 64)), "p": rng.random((64, 253)), "q": rng.random((64, 253))}
    a = {k: v.astype(dtype) for k, v in a.items()}
    # against the sums in float64, relative to the sums of the terms' magnitudes: a
    # difference's columns cancel to near zero, where no float32 order of the 64 terms
    # (numpy's, the kernel's) keeps a relative error of the result itself
    exact = {k: v.astype(np.float64) for k, v in a.items()}
    operand = want(exact["p"], exact["q"])
    scale = np.abs(exact["A"]) @ np.abs(operand)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    err = np.abs(run(new, cl_queue, a) - exact["A"] @ operand)
    assert (err <= rtol * scale).all(), float((err / scale).max())


@pytest.mark.parametrize(("why", "body", "order", "extra"), [
    ("an array read at other indices", "p[k1, j1] + s[k1]", "C",
     (lp.GlobalArg("s", np.float64, shape=(64,)),)),
    ("an array laid out otherwise", "p[k1, j1] - q[k1, j1]", "F", ()),
])
def test_vector_loads_keep_the_split_where_they_cannot_compute_it(
        why: str, body: str, order: str, extra: tuple[Any, ...], cl_device: Any,
        cl_queue: Any) -> None:
    """Where the operand expression reads an array at other indices, or laid out otherwise
    (a ``vloadN`` at the operand's offset would read other entries), the report says why,
    the operand keeps its statement and temporary, and the results are numpy's."""
    from feinsum.hook import transform_program

    new, report = transform_program(_product_with(body, q_order=order, extra=extra),
                                    device=cl_device, db=False, prefer=["contraction"])
    (group,) = report.groups
    assert group.recipe == "contraction" and not group.fused, (why, report)
    assert any("t = p" in n and "C code" in n for n in group.not_fused), (why, report)
    rng = np.random.default_rng(4)
    a = {"A": rng.random((300, 64)), "p": rng.random((64, 256)),
         "q": np.asarray(rng.random((64, 256)), order=order), "s": rng.random(64)}
    t = a["p"] + a["s"][:, None] if "s[" in body else a["p"] - a["q"]
    np.testing.assert_allclose(run(new, cl_queue, a), a["A"] @ t, rtol=1e-12)


# }}}


# {{{ the fused spec and its keys


def test_fused_keys() -> None:
    """A fused einsum is looked up by its core's key (the plain einsum's records); its own
    key tells the fused computations apart."""
    import pymbolic.primitives as prim

    import feinsum
    from feinsum.spec.fused import VALUE, Epilogue, FusedEinsum, OperandExpression

    core = feinsum.canonicalize(feinsum.einsum(
        "ij,ej->ei", feinsum.array("M", (35, 35)), feinsum.array("u", ("E", 35))))
    _, a1 = (a.name for a in core.arrays)
    i, j = core.in_indices[1]
    b0 = feinsum.array("b0", ("E", 35))
    minus = prim.Subscript(prim.Variable("b0"), (prim.Variable(i), prim.Variable(j)))
    op = OperandExpression(a1, (i, j), -minus)
    ep = Epilogue(0, core.out_indices, 2 * prim.Variable(VALUE), "out0")
    fused = FusedEinsum(core, (op,), (ep,), (b0,))
    assert fused.record_key == feinsum.canonical_key(core)
    assert fused.key.startswith("fef1-") and fused.key == FusedEinsum(
        core, (op,), (ep,), (b0,)).key
    assert fused.key != FusedEinsum(core, (op,), (), (b0,)).key
    with pytest.raises(feinsum.SpecificationError, match="not an array"):
        FusedEinsum(core, (OperandExpression("nope", (i, j), minus),))
    with pytest.raises(feinsum.SpecificationError, match="rank"):
        FusedEinsum(core, (OperandExpression(a1, (i,), minus),))


# }}}

# vim: foldmethod=marker


def test_reads_past_an_axis_are_found_and_read_in_c_order() -> None:
    """:mod:`feinsum.matching.read_range`: a read is in range over its loop domain (a
    ``min`` clamp and a floor division included) or not (past ``j``'s end), and a read past
    an axis means the entry at its C-order offset."""
    import islpy as isl
    from pymbolic import evaluate, var
    from pymbolic.primitives import Min

    from feinsum.matching.read_range import c_order_indices, equal, in_range

    d = isl.BasicSet("[n0] -> {[e, k]: 0 <= e < n0 and 0 <= k < 60}")
    e, k, n = var("e"), var("k"), var("n0")
    assert in_range(d, (e, k // 4), (n, 15))
    assert in_range(d, (Min((2 * e, n - 1)), k % 15), (n, 15))
    assert not in_range(d, (e, k), (n, 15))
    assert not in_range(d, (e, k - 1), (n, 60))
    assert not in_range(d, (e, var("elsewhere")), (n, 15))
    idx = c_order_indices((e, 0, k), (n, 4, 15))
    for ev, kv in ((0, 0), (3, 17), (5, 59)):
        at = [evaluate(x, {"e": ev, "k": kv, "n0": 9}) for x in idx]
        assert at == [ev, kv // 15, kv % 15]
    assert equal(var("n0") * 15, 15 * var("n0")) and not equal(var("n0") * 15, 60)

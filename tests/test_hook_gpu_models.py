"""The hook's GPU defaults, end to end: every reference workload's einsum, in a kernel given
to :func:`feinsum.hook.transform_program` for a GPU model (``lp.make_einsum``'s kernel
where loopy can write it, else feinsum's reference kernel), is transformed by its default
(not given back, not failed) and the transformed program, run on the CPU device, computes
what the untransformed one does (pytato's programs: ``tests/test_arraycontext.py``).

``tests/test_gpu_models_on_cpu.py`` runs the recipes' GPU configurations on the canonical
kernel; this runs them where users get them, placed into the compiler's kernel by the hook,
whose own checks (loopy's bounds and ordering checks, the code budget) they must pass too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from feinsum.devices.models import MODELS
from feinsum.tuning.workloads import workloads

#: The measured GPU's model and another vendor's (64-wide subgroups, other limits).
MODELS_RUN = ("h200", "mi300x")
#: Each length symbol's value: several work-groups and a partial last one for the DG
#: family, a few rows and tiles for the others ...
LENGTH = 301
#: ... and for the families with fewer flops an entry, enough that the einsum is not too
#: little work for a kernel of its own (:data:`feinsum.hook.payoff.MIN_EINSUM_FLOPS`).
LONGER = {"elementwise": 4001}


def _cases() -> list[Any]:
    out = []
    for w in workloads(small=True, gpu=True).values():
        if w.spec.block_sparse is not None:  # needs host-side ranges: never the hook's
            continue
        for model in MODELS_RUN:
            out.append(pytest.param(w, model, id=f"{w.name}-{model}"))
    return out


def _loopy_einsum(spec: Any) -> Any:
    """*spec* as ``lp.make_einsum`` writes it (loopy's kernel, not feinsum's reference
    kernel), where it can: one row of plain arrays summed; else None."""
    import loopy as lp

    from feinsum.spec.model import Array

    if spec.nrows != 1 or spec.reduction != "sum" or not all(
            isinstance(f, Array) for _, _, f in spec.factors()):
        return None
    arrays = [f for _, _, f in spec.factors()]
    t = lp.make_einsum(spec.subscripts, [a.name for a in arrays])
    t = lp.add_dtypes(t, {a.name: a.dtype for a in arrays})
    return lp.fix_parameters(t, **{f"N{i}": int(n) for i, n in spec.lengths.items()})


@pytest.mark.parametrize(("w", "model"), _cases())
def test_the_hook_places_each_gpu_default_and_it_computes_the_einsum(
        w: Any, model: str, cl_queue: Any) -> None:
    from feinsum.hook import transform_program
    from feinsum.lowering.kernel import generate_loopy

    spec = w.spec.with_lengths(dict.fromkeys(w.spec.length_symbols,
                                             LONGER.get(w.family, LENGTH)))
    t = _loopy_einsum(spec) or generate_loopy(spec)
    new, rep = transform_program(t, device=MODELS[model].info, db=False)
    assert rep.groups, str(rep)
    for g in rep.groups:
        assert g.action == "default" and g.recipe, str(rep)
    rng = np.random.default_rng(7)
    inputs = {}
    for a in spec.arrays:
        shape = tuple(int(n) for n in a.shape)
        inputs[a.name] = (rng.random(shape) + 0.5).astype(a.dtype)
    _, want = t.executor(cl_queue.context)(cl_queue, **inputs)
    _, got = new.executor(cl_queue.context)(cl_queue, **inputs)
    assert len(got) == len(want)
    for g_, w_ in zip(got, want, strict=True):
        g_, w_ = (np.asarray(x.get() if hasattr(x, "get") else x) for x in (g_, w_))
        tol = 1e-4 if w_.dtype.itemsize <= 4 else 1e-10
        np.testing.assert_allclose(g_, w_, rtol=tol, atol=tol * float(np.abs(w_).max()))


def test_high_order_dg_einsums_get_a_specialised_default() -> None:
    """The DG operators of degrees 5 to 7 on tetrahedra (56, 84, 120 nodes; float64; one
    field and four), for the H200 model: the hook's first choice is a specialised recipe,
    never ``generic`` (the degree-6 divergence of four fields fell back to it: dg_operator
    refused 8200 private bytes a work-item against 8192), and its default is valid."""
    from feinsum import array, batched_einsum, canonical_lengths, canonicalize, einsum
    from feinsum.hook.choice import default_choices
    from feinsum.recipes import recipes

    dev, every = MODELS["h200"].info, recipes()
    for p in (5, 6, 7):
        n, nf = (p + 1) * (p + 2) * (p + 3) // 6, (p + 1) * (p + 2) // 2
        D, D3 = array("D", (n, n)), array("D", (3, n, n))
        J, L, Jf = array("J", (3, 3, "E")), array("L", (n, 4, nf)), array("J", (4, "E"))
        u = [array(f"u{k}", ("E", n)) for k in range(4)]
        u3 = [array(f"u{k}", (3, "E", n)) for k in range(4)]
        v = [array(f"v{k}", (4, "E", nf)) for k in range(4)]
        forms = {"ij,ej->ei": [[D, w] for w in u], "xre,rij,xej->ei": [[J, D3, w] for w in u3],
                 "xre,rij,ej->xei": [[J, D3, w] for w in u],
                 "ifj,fe,fej->ei": [[L, Jf, w] for w in v]}
        for subs, rows in forms.items():
            for spec in (einsum(subs, *rows[0]), batched_einsum(subs, rows)):
                e = canonicalize(spec)
                lengths = canonical_lengths(spec.with_lengths({"E": 100_000}))
                choices, why = default_choices(e, dev, every, lengths=lengths)
                assert choices and choices[0].recipe.name != "generic", (p, subs, why)
                first = choices[0]
                assert first.recipe.space(e, dev).is_valid(first.params), (p, subs)


@pytest.mark.parametrize("form", ["local", "face_mass", "face_mass_one_field",
                                  "divergence", "divergence_one_field", "gradient",
                                  "gradient_one_field"])
def test_fields_of_a_high_order_operator_are_one_gemm(form: str, cl_queue: Any) -> None:
    """Four fields of a degree-6 operator (84 nodes; ``D`` 56 KiB, ``L`` 75 KiB in
    float64: over the local memory), one batched einsum of four rows as a compiler that
    fuses their loops writes it: for the H200 model the hook takes gemm_gpu's default (the
    rows in sequence in one kernel; the face mass's Jacobians scale ``u`` as it is copied,
    the divergence's ``sum_x J[x, r, e] u[x, e, j]`` is summed as ``u`` is copied, the
    gradient's ``J[x, r, e]`` combines a register tile for each ``r`` as it is stored).
    Before, a batch and a third operand were no GEMM and dg_operator read the operator
    from global memory, predicted at least 1.85x slower at E = 5e4. The transformed kernel
    computes what the reference kernel does. One field of the face mass: its Jacobians
    folded into ``u``'s loads (the core ``ifj,fej->ei`` and its records), gemm_gpu too;
    the divergence's and the gradient's ``J`` have an index ``u`` lacks and are never
    folded."""
    from feinsum import array, batched_einsum, canonical_lengths, canonicalize
    from feinsum.hook import transform_program
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.prediction import predict_configuration
    from feinsum.recipes import get_recipe

    if form == "local":
        subscripts, fixed = "ij,ej->ei", [array("D", (84, 84))]
        fields = [array(f"u{k}", ("E", 84)) for k in range(4)]
    elif form.startswith("divergence"):
        subscripts, fixed = "xre,rij,xej->ei", [array("J", (3, 3, "E")),
                                                array("D", (3, 84, 84))]
        fields = [array(f"u{k}", (3, "E", 84)) for k in range(1 if "one" in form else 4)]
    elif form.startswith("gradient"):
        subscripts, fixed = "xre,rij,ej->xei", [array("J", (3, 3, "E")),
                                                array("D", (3, 84, 84))]
        fields = [array(f"u{k}", ("E", 84)) for k in range(1 if "one" in form else 4)]
    else:
        subscripts, fixed = "ifj,fe,fej->ei", [array("L", (84, 4, 28)), array("J", (4, "E"))]
        fields = [array(f"u{k}", (4, "E", 28)) for k in range(4 if form == "face_mass" else 1)]
    spec = batched_einsum(subscripts, [[*fixed, u] for u in fields])
    dev = MODELS["h200"].info
    t = generate_loopy(spec.with_lengths({"E": 203}))
    new, rep = transform_program(t, device=dev, db=False)
    assert [(g.recipe, g.action) for g in rep.groups] == [("gemm_gpu", "default")], str(rep)
    folded = any("in the loads" in f for f in rep.groups[0].fused)
    assert folded == (form == "face_mass_one_field"), str(rep)
    rng = np.random.default_rng(8)
    inputs = {a.name: rng.random(tuple(203 if n == "E" else n for n in a.shape))
              for a in (*fixed, *fields)}
    _, want = t.executor(cl_queue.context)(cl_queue, **inputs)
    _, got = new.executor(cl_queue.context)(cl_queue, **inputs)
    for g_, w_ in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g_), np.asarray(w_), rtol=1e-12)
    e = canonicalize(spec)
    at = canonical_lengths(spec.with_lengths({"E": 50_000}))
    times = {n: predict_configuration(n, e, get_recipe(n).default(e, dev, at), "h200",
                                      at).seconds for n in ("gemm_gpu", "dg_operator")}
    assert 1.85 * times["gemm_gpu"] < times["dg_operator"], times


def test_the_performance_model_orders_dg_nodes_and_gemm_gpu() -> None:
    """Where a DG operator fits the local memory, ``dg_nodes`` and ``gemm_gpu`` both apply:
    at known lengths on the H200 model the hook's first default is the one the performance
    model predicts faster (``ij,ej->ei`` at E = 5e4: ``gemm_gpu`` at 56 nodes, then
    ``dg_nodes``; ``dg_nodes`` at 35, the order unchanged); without lengths, with an
    explicit order (``prefer``) or on a GPU no model describes,
    :func:`~feinsum.hook.choice.preference`'s order."""
    import dataclasses

    from feinsum import array, canonical_lengths, canonicalize, einsum
    from feinsum.hook.choice import default_choices
    from feinsum.prediction import predict_configuration
    from feinsum.recipes import recipes

    dev, every = MODELS["h200"].info, recipes()
    unknown = dataclasses.replace(dev, name="Some GPU", model=None, vendor="Someone",
                                  compute_capability=None, peak_flops_fp32=None)
    for n, faster in ((56, "gemm_gpu"), (35, "dg_nodes")):
        spec = einsum("ij,ej->ei", array("D", (n, n)), array("u", ("E", n)))
        e = canonicalize(spec)
        at = canonical_lengths(spec.with_lengths({"E": 50_000}))
        choices, _ = default_choices(e, dev, every, lengths=at)
        names = [c.recipe.name for c in choices]
        assert names[0] == faster, names
        if faster == "gemm_gpu":
            assert names[1] == "dg_nodes", names
        times = {c.recipe.name: predict_configuration(c.recipe, e, c.params, "h200", at).seconds
                 for c in choices if c.recipe.name in ("dg_nodes", "gemm_gpu")}
        assert times[faster] == min(times.values()), times
        for kwargs in ({"lengths": {}}, {"lengths": at, "prefer": ["dg_nodes", "gemm_gpu"]}):
            fixed, _ = default_choices(e, dev, every, **kwargs)  # type: ignore[arg-type]
            assert fixed[0].recipe.name == "dg_nodes"
        other, _ = default_choices(e, unknown, every, lengths=at)
        assert [c.recipe.name for c in other].index("dg_nodes") < [
            c.recipe.name for c in other].index("gemm_gpu")

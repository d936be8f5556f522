"""Factor columns folded into another operand's loads (:mod:`feinsum.matching.folding`):
``A @ (w[:, None]*B)`` and ``A @ (B*C)`` get the matrix-product recipes, not the generic
schedule; every result against numpy, on the CPU device for the CPU and the H200 model."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pytest

SHAPES = {"A": (300, 64), "w": (64,), "B": (64, 256), "C": (64, 256), "out": (300, 256)}
PRODUCTS = {
    "scaled rows": ("sum(k, A[i, k]*w[k]*B[k, j])",
                    lambda a: a["A"] @ (a["w"][:, None] * a["B"])),
    "hadamard": ("sum(k, A[i, k]*B[k, j]*C[k, j])", lambda a: a["A"] @ (a["B"] * a["C"])),
    "scaled columns": ("sum(k, A[i, k]*w[k]*B[k, j])*2",
                       lambda a: 2 * a["A"] @ (a["w"][:, None] * a["B"])),
}


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from feinsum.hook import clear_cache

    clear_cache()
    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path))


def _kernel(body: str) -> Any:
    names = [n for n in SHAPES if f"{n}[" in body] + ["out"]
    return lp.make_kernel(
        "{[i, j, k]: 0 <= i < 300 and 0 <= j < 256 and 0 <= k < 64}", f"out[i, j] = {body}",
        [lp.GlobalArg(n, np.float64, shape=SHAPES[n]) for n in names], name="product",
        lang_version=(2018, 2))


def _run(t_unit: Any, queue: Any, arrays: dict[str, np.ndarray]) -> np.ndarray:
    import pyopencl.array as cla

    knl = t_unit.default_entrypoint
    dev = {k: cla.to_device(queue, v) for k, v in arrays.items() if k in knl.arg_dict}
    _, res = lp.set_options(t_unit, return_dict=True).executor(queue.context)(queue, **dev)
    return res["out"].get()


@pytest.mark.parametrize("name", sorted(PRODUCTS))
@pytest.mark.parametrize("model", [None, "h200"])
def test_a_factor_of_an_operand_keeps_the_matrix_product_recipe(
        name: str, model: str | None, cl_device: Any, cl_queue: Any) -> None:
    """The three-operand product is the plain product with the factor in the loads of
    the operand it multiplies: ``gemm_gpu`` for the H200 model; on the CPU
    ``contraction`` (its vector tiles read the second operand with ``vloadN``: the
    Hadamard product ``B*C`` is computed on the vectors loaded from both)."""
    from feinsum.devices.models import MODELS
    from feinsum.hook import transform_program

    body, want = PRODUCTS[name]
    t_unit = _kernel(body)
    device = MODELS[model].info if model else cl_device
    new, report = transform_program(t_unit, device=device, db=False)
    (group,) = report.groups
    assert group.recipe == ("gemm_gpu" if model else "contraction"), report
    assert any("in the loads" in f for f in group.fused), report
    assert group.einsum.split("'")[1].split("->")[0].count(",") == 1, report
    rng = np.random.default_rng(6)
    a = {n: rng.random(s) for n, s in SHAPES.items() if n != "out"}
    np.testing.assert_allclose(_run(new, cl_queue, a), want(a), rtol=1e-12)


def test_fold_columns_leaves_what_it_cannot_fold() -> None:
    """Several rows, formulas and a column another does not contain are not folded."""
    from feinsum.matching.folding import fold_columns
    from feinsum.matching.match import survey_einsums

    def match(body: str, extra: str = "") -> Any:
        return survey_einsums(_kernel(body + extra)).matches[0]

    folded = fold_columns(match("sum(k, A[i, k]*B[k, j]*C[k, j])"))
    assert folded is not None and len(folded.core.einsum.in_indices) == 2
    assert [(b, s) for b, s, _ in folded.folds] in ([("C", "B")], [("B", "C")])
    assert fold_columns(match("sum(k, A[i, k]*B[k, j])")) is None
    assert fold_columns(match("sum(k, A[i, k]*exp(w[k])*B[k, j])")) is None

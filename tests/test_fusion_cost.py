"""Operand expressions fused into a recipe's loads only where that costs less than their
temporary (:mod:`feinsum.matching.fusion_cost`): a matrix product that reads ``exp(A)``
at every block of columns keeps the temporary; every result against numpy."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pymbolic.primitives as prim
import pytest


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from feinsum.hook import clear_cache

    clear_cache()
    monkeypatch.setenv("FEINSUM_CACHE", str(tmp_path))


def test_expression_cost_counts_arithmetic_not_indexing() -> None:
    from pymbolic import parse

    from feinsum.matching.fusion_cost import CALL, DIVISION, expression_cost

    assert expression_cost(parse("a[i, 0 + 1*k]")) == 0
    assert expression_cost(parse("a[i, k] - b[i, k]")) == 1
    assert expression_cost(parse("exp(a[i])/(1 + a[i])")) == CALL + DIVISION + 1
    assert expression_cost(prim.Variable("x")) == 0


def test_reads_per_entry_counts_the_loops_the_read_does_not_index() -> None:
    from feinsum.matching.fusion_cost import reads_per_entry

    knl = lp.make_kernel("{[i, j]: 0 <= i < 10 and 0 <= j < 64}",
                         "out[i] = sum(j, a[j]*b[i, j])",
                         [lp.GlobalArg("a", np.float64, shape=(64,)),
                          lp.GlobalArg("b", np.float64, shape=(10, 64)),
                          lp.GlobalArg("out", np.float64, shape=(10,))], name="k",
                         lang_version=(2018, 2))
    knl = knl.default_entrypoint
    assert reads_per_entry(knl, "a") == 10
    assert reads_per_entry(knl, "b") == 1
    assert reads_per_entry(lp.tag_inames(knl, {"i": "unr"}), "a") == 1
    assert reads_per_entry(lp.tag_inames(knl, {"i": "g.0"}), "a") == 10


def _gemm(expression: str) -> Any:
    return lp.make_kernel(
        "{[i, j, k, i1, k1]: 0 <= i, i1 < 300 and 0 <= j < 256 and 0 <= k, k1 < 64}",
        f"""
        t[i1, k1] = {expression}
        out[i, j] = sum(k, t[i, k]*B[k, j])
        """, [lp.GlobalArg("A", np.float64, shape=(300, 64)),
              lp.GlobalArg("B", np.float64, shape=(64, 256)),
              lp.GlobalArg("out", np.float64, shape=(300, 256)),
              lp.TemporaryVariable("t", np.float64, shape=(300, 64),
                                   address_space=lp.AddressSpace.GLOBAL)],
        name="gemm", seq_dependencies=True, lang_version=(2018, 2))


def _run(t_unit: Any, queue: Any, arrays: dict[str, np.ndarray]) -> np.ndarray:
    import pyopencl.array as cla

    dev = {k: cla.to_device(queue, v) for k, v in arrays.items()}
    _, res = lp.set_options(t_unit, return_dict=True).executor(queue.context)(queue, **dev)
    return res["out"].get()


@pytest.mark.parametrize(("expression", "fused"), [
    ("exp(A[i1, k1]) / (1 + A[i1, k1])", False), ("A[i1, k1] - 1", True)])
def test_an_operand_read_at_every_block_of_rows_keeps_its_temporary(
        expression: str, fused: bool, cl_device: Any, cl_queue: Any) -> None:
    """The matrix product reads each entry of its first operand once per block of
    columns: ``exp(A)/(1 + A)`` there would be computed that many times (18x slower than
    with the temporary on this project's CPU, at 2000 x 64 x 2000), so it keeps its
    statement and temporary, and the report says why; ``A - 1`` costs less than the
    temporary and is fused."""
    from feinsum.hook import transform_program

    t_unit = _gemm(expression)
    new, report = transform_program(t_unit, device=cl_device, db=False)
    (group,) = report.groups
    assert group.transformed, report
    if fused:
        assert any("in the loads" in f for f in group.fused), report
    else:
        assert not group.fused, report
        assert any("'t' not fused: the recipe's kernel reads each entry" in n
                   for n in group.not_fused), report
    rng = np.random.default_rng(4)
    a = {"A": rng.random((300, 64)), "B": rng.random((64, 256))}
    t = np.exp(a["A"]) / (1 + a["A"]) if not fused else a["A"] - 1
    np.testing.assert_allclose(_run(new, cl_queue, a), t @ a["B"], rtol=1e-12)

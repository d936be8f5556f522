"""feinsum.matching.unflatten: a loop over the flat index of a reshaped array (as pytato
writes ``actx.np.vdot`` and ``x.reshape(-1)``) becomes one loop per axis where every use
of the index is a digit of one split; anything else is left alone. The prepared kernel
computes what the original did, and the matcher reads the einsum."""

from __future__ import annotations

from typing import Any

import loopy as lp
import numpy as np
import pytest

from feinsum.matching import prepare_kernel, survey_einsums
from feinsum.matching.unflatten import unflatten_loops


def flat_kernel(body: str, n: int, shapes: dict[str, tuple[int, ...]],
                out: str = "out") -> lp.TranslationUnit:
    """A kernel as pytato writes a reduction over a flattened index ``f < n``."""
    return lp.make_kernel(
        f"{{ [f] : 0 <= f < {n} }}", f"{out} = {body}",
        [*(lp.GlobalArg(k, np.float64, shape=s) for k, s in shapes.items()),
         lp.GlobalArg(out, np.float64, shape=())],
        name="flat", lang_version=(2018, 2))


def run(t_unit: lp.TranslationUnit, queue: Any, arrays: dict[str, Any]) -> float:
    _, got = lp.set_options(t_unit, return_dict=True).executor(queue.context)(queue, **arrays)
    return float(got["out"].get() if hasattr(got["out"], "get") else got["out"])


VDOT = ("sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1]"
        " * v[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1])")
MAX3 = "max(f, abs(w[((0 + f*1) % 60) // 20, ((0 + f*1) % 20) // 5, ((0 + f*1) % 5) // 1]))"


@pytest.mark.parametrize(("body", "n", "shapes", "lengths"), [
    (VDOT, 105, {"u": (3, 35), "v": (3, 35)}, [3, 35]),
    (MAX3, 60, {"w": (3, 4, 5)}, [3, 4, 5]),
])
def test_flat_loops_become_one_loop_per_axis(body: str, n: int, shapes: dict[str, Any],
                                             lengths: list[int], cl_queue: Any) -> None:
    t_unit = flat_kernel(body, n, shapes)
    knl, changes = unflatten_loops(t_unit.default_entrypoint)
    assert len(changes) == 1 and "split into" in changes[0], changes
    assert "f" not in knl.all_inames() and len(knl.all_inames()) == len(lengths)
    assert "%" not in str(knl.instructions[0].expression)
    rng = np.random.default_rng(1)
    arrays = {k: rng.random(s) - 0.5 for k, s in shapes.items()}
    assert run(t_unit.with_kernel(knl), cl_queue, arrays) == run(t_unit, cl_queue, arrays)
    (m,) = survey_einsums(t_unit.with_kernel(prepare_kernel(
        t_unit.default_entrypoint).kernel)).matches
    assert [len(idx) for idx in m.einsum.in_indices] == [len(lengths)] * len(shapes)
    assert sorted(int(m.einsum.lengths[i]) for i in m.einsum.in_indices[0]) == sorted(lengths)


@pytest.mark.parametrize(("body", "n", "shapes", "why"), [
    ("sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1] * x[f])", 105,
     {"u": (3, 35), "x": (105,)}, "the flat index read whole beside its digits"),
    ("sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1]"
     " * v[((0 + f*1) % 105) // 21, ((0 + f*1) % 21) // 1])", 105,
     {"u": (3, 35), "v": (5, 21)}, "two splits that are not one"),
    ("sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1])", 5,
     {"u": (3, 35)}, "a slice: the loop is shorter than the array"),
    ("sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1] * f)", 105,
     {"u": (3, 35)}, "the index used as a value"),
    ("sum(f, x[f])", 105, {"x": (105,)}, "a plain index: nothing to split"),
])
def test_other_uses_of_the_index_are_left_alone(body: str, n: int, shapes: dict[str, Any],
                                                why: str) -> None:
    knl = flat_kernel(body, n, shapes).default_entrypoint
    new, changes = unflatten_loops(knl)
    assert changes == [] and new is knl, why


def test_a_tagged_loop_is_left_alone() -> None:
    t_unit = lp.tag_inames(flat_kernel(VDOT, 105, {"u": (3, 35), "v": (3, 35)}), {"f": "unr"})
    knl = t_unit.default_entrypoint
    assert unflatten_loops(knl) == (knl, [])


def test_a_rewrite_that_fails_leaves_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_kernel goes on without a rewrite that raises on a kernel, and says so."""
    import feinsum.matching.unflatten as unflatten

    def unflatten_loops(knl: Any) -> Any:
        raise RuntimeError("an expression it does not know")

    monkeypatch.setattr(unflatten, "unflatten_loops", unflatten_loops)
    t_unit = lp.make_kernel(
        ["{ [r] : 0 <= r < 1 }", "{ [f] : 0 <= f < 105 }"],
        "out = sum(f, u[((0 + f*1) % 105) // 35, ((0 + f*1) % 35) // 1] * w[r])",
        [lp.GlobalArg("u", np.float64, shape=(3, 35)), lp.GlobalArg("w", np.float64, shape=(1,)),
         lp.GlobalArg("out", np.float64, shape=())], lang_version=(2018, 2))
    prepared = prepare_kernel(t_unit.default_entrypoint)
    assert any(c.startswith("unflatten_loops not applied (RuntimeError: an expression")
               for c in prepared.changes), prepared.changes
    assert any("loops that run once" in c for c in prepared.changes), prepared.changes
    assert "r" not in prepared.kernel.all_inames()

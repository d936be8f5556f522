"""The kernel-reduction template modules (kernel_analysis, reduction_updates,
kernel_templates): recipe versions cover them, and the shared scaffolding behaves."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pymbolic.primitives as prim
import pytest

from feinsum.errors import SpecificationError
from feinsum.lowering.reduction_updates import Updater
from feinsum.recipes import Recipe
from feinsum.recipes.recipe import code_dependencies
from feinsum.reductions import analysis as ka
from feinsum.reductions import templates as kt
from feinsum.reductions.builder import kernel_reduction

TRANSFORMS = Path(__file__).resolve().parents[1] / "transforms"
KERNEL_RECIPES = ["tiled_1d", "tiled_2d", "tiled_2d_gpu", "kernel_vec_cpu", "block_sparse"]
SPLIT = ["feinsum.reductions.templates", "feinsum.reductions.analysis",
         "feinsum.lowering.reduction_updates"]


def version_of(path: Path) -> str:
    """A fresh recipe's version (versions are cached per Recipe object)."""
    def hook(*args):  # type: ignore[no-untyped-def]
        return None

    r = Recipe("probe", applies=hook, space=hook, default=hook, apply=hook)
    r.path = path
    return r.version


@pytest.mark.parametrize("name", KERNEL_RECIPES)
def test_kernel_recipes_depend_on_every_template_module(name: str) -> None:
    deps = code_dependencies(TRANSFORMS / f"{name}.py")
    assert set(SPLIT) <= set(deps)
    assert "feinsum.lowering.kernel" in deps  # reference_args lowers the spec
    assert not any(n.startswith(("feinsum.database", "feinsum.recipes")) for n in deps)


@pytest.mark.parametrize("module", SPLIT)
@pytest.mark.parametrize("name", KERNEL_RECIPES)
def test_editing_a_template_module_changes_the_version(name: str, module: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = TRANSFORMS / f"{name}.py"
    before = version_of(path)
    edited = code_dependencies(path)[module]
    read = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        data = read(self)
        return data + b"\n# edited\n" if self == edited else data

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    assert version_of(path) != before
    monkeypatch.undo()
    assert version_of(path) == before


def test_template_form_raises_a_feinsum_error() -> None:
    e = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3}, reduction="min")
    assert kt.template_form(e).i == "i"
    with pytest.raises(SpecificationError, match=r"does not fit the spec: .*block-sparse"):
        kt.template_form(e, block_sparse=True)
    with pytest.raises(SpecificationError, match="does not fit"):
        kt.vec_kernel(e, 4, 1, block_sparse=True)


def test_domain_prefix_keeps_symbols_once_in_order() -> None:
    assert kt.domain_prefix("M", "N") == "[M, N] -> "
    assert kt.domain_prefix("N", "N", "jb") == "[N, jb] -> "
    assert kt.domain_prefix(12, 300) == ""
    assert kt.domain_prefix(12, "N") == "[N] -> "


def test_assignments_chain_and_dependencies() -> None:
    a, b = prim.Variable("a"), prim.Variable("b")
    pairs = [(a, b), (b, a), (a, a)]
    plain = kt.assignments(pairs, "s", {"i"}, after=["x"])
    assert [s.id for s in plain] == ["s_0", "s_1", "s_2"]
    assert all(s.depends_on == frozenset({"x"}) for s in plain)
    assert all(s.within_inames == frozenset({"i"}) for s in plain)
    chained = kt.assignments(pairs, "u", {"i", "j"}, after=["x"], chain=True, first="v")
    assert [s.depends_on for s in chained] == [
        frozenset({"x", "v"}), frozenset({"x", "u_0"}), frozenset({"x", "u_1"})]


@pytest.mark.parametrize("kind", ["sum", "min", "argmin", "logsumexp"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_output_stores_and_aux_dtype(kind: str, dtype: type) -> None:
    e = kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3}, reduction=kind,
                         dtype=dtype)
    form = kt.template_form(e)
    upd = Updater(e.reduction, form.dtype)
    assert upd.needs_aux == (kind != "sum" and kind != "min")
    want_aux = {"argmin": np.int32 if dtype == np.float32 else np.int64}.get(kind, dtype)
    assert upd.aux_dtype == np.dtype(want_aux)
    term = ka.row_terms(form)[0]
    stores = kt.output_stores(form, upd, term, kt.var("r"), kt.sub("acc", 0), kt.sub("aux", 0))
    assert [str(lhs) for lhs, _ in stores] == (
        ["out0[r]", "out0_index[r]"] if kind == "argmin" else ["out0[r]"])
    assert str(stores[0][1]) == ("acc[0] + log(aux[0])" if kind == "logsumexp" else "acc[0]")

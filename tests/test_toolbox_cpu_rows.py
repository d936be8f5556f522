"""toolbox_cpu_rows: generic's CPU default for the matrix-vector shapes. Where it departs
from the default and why not, that its layouts compute evaluate's results on the CPU device
(odd lengths, float32, maxima, batched rows, Fortran order), and pytato's ``A @ x`` and
``A.T @ y`` under the hook on the CPU. Also that on a CPU the work-items of a group never
share a reduction, and pytato's dot products, sums, norms and maxima under the hook."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from test_arraycontext import require_arraycontext, run_one_group
from test_toolbox_sharing import _spec

import feinsum as fs
from feinsum.devices.models import MODELS
from feinsum.recipes.testing import check_configuration
from feinsum.spec.canonical import canonicalize
from feinsum.toolbox import cpu_rows as tc
from feinsum.toolbox.core import main_reduction


@functools.cache
def generic() -> Any:
    return fs.get_recipe("generic")


@functools.cache
def cpu() -> Any:
    from feinsum.devices.opencl import device_info, get_device

    info = device_info(get_device())
    if not info.is_cpu:
        pytest.skip("the tests' OpenCL device is not a CPU")
    return info


def _rows(e: fs.BatchedEinsum, device: Any = None, **lengths: int) -> Any:
    x = e.out_indices[-1] if e.out_indices else None
    return tc.cpu_rows(e, device or cpu(), x, main_reduction(e), lengths)


TWO_CHAINS = {"px": 2, "rtile": 1}


def test_rows_along_the_reduction_take_two_outputs_a_work_item() -> None:
    e = _spec("ij,j->i", ("N", "M"), ("M",))
    assert _rows(e) == _rows(e, n0=4000, n1=4000) == _rows(e, n0=10, n1=48) == TWO_CHAINS
    assert _rows(_spec("ij->i", ("N", "M"))) == TWO_CHAINS
    assert _rows(_spec("ij->i", ("N", "M"), reduction="max")) == TWO_CHAINS
    assert _rows(_spec("ij,ij->i", ("N", "M"), ("N", "M"))) == TWO_CHAINS
    assert generic().default(e, cpu(), {"n0": 4000, "n1": 4000}) | TWO_CHAINS == \
        generic().default(e, cpu(), {"n0": 4000, "n1": 4000})


def test_a_vector_along_the_reduction_is_staged_for_a_matrix_beyond_the_caches() -> None:
    e = _spec("ji,j->i", ("M", "N"), ("M",))
    vector = e.in_indices.index((main_reduction(e),))
    staged = _rows(e, n0=4000, n1=4000)
    assert staged == {"lx": 256, "px": 1, "rtile": 16, "vec": 1, "slabs": False,
                      f"stage{vector}": "local"}
    assert _rows(e, n0=1500, n1=1500)["lx"] == 256  # 18 MB
    assert _rows(e, n0=100, n1=10**5)["lx"] == 128  # fewer outputs than work-items
    # Fortran order stores A @ x as the consecutive-outputs product
    f = _spec("ij,j->i", ("N", "M"), ("M",), order="F")
    assert _rows(f, n0=4000, n1=4000) is not None
    p = generic().default(e, cpu(), {"n0": 4000, "n1": 4000})
    assert p | staged == p


@pytest.mark.parametrize(("why", "e", "lengths"), [
    ("rows of 35 values: PoCL vectorizes the work-items of the unrolled tiles",
     _spec("ij,j->i", ("N", "M"), ("M",)), {"n0": 10**6, "n1": 35}),
    ("a matrix the caches hold (8 MB)", _spec("ji,j->i", ("M", "N"), ("M",)),
     {"n0": 1000, "n1": 1000}),
    ("unknown lengths: a loop of two tiles is possible, the matrix may be small",
     _spec("ji,j->i", ("M", "N"), ("M",)), {}),
    ("a short reduction", _spec("ji,j->i", ("M", "N"), ("M",)), {"n0": 10**6, "n1": 50}),
    ("a DG operator: the element data is read along the reduction, but not by the lanes",
     _spec("ij,ej->ei", (35, 35), ("E", 35)), {"n0": 10**5}),
    ("an argmin", _spec("ij->i", ("N", "M"), reduction="argmin"), {}),
    ("no reduction", _spec("ij,j->ij", ("N", "M"), ("M",)), {}),
    ("a GEMM", _spec("ik,kj->ij", ("N", "N"), ("N", "N")), {"n0": 4000}),
])
def test_the_default_stands(why: str, e: fs.BatchedEinsum, lengths: dict[str, int]) -> None:
    assert _rows(e, **lengths) is None, why


def test_gpus_are_not_concerned() -> None:
    e = _spec("ji,j->i", ("M", "N"), ("M",))
    for name, model in MODELS.items():
        if not model.info.is_cpu:
            assert _rows(e, model.info, n0=4000, n1=4000) is None, name
            assert _rows(_spec("ij->i", ("N", "M")), model.info) is None, name


CASES = {
    "rows": (_spec("ij,j->i", ("N", "M"), ("M",)), [(7, 1001), (300, 300), (1, 64)]),
    "rows_f32": (_spec("ij,j->i", ("N", "M"), ("M",), dtype="float32"), [(67, 301)]),
    "row_max": (_spec("ij->i", ("N", "M"), reduction="max"), [(67, 301), (1, 1)]),
    "row_dots": (_spec("ij,ij->i", ("N", "M"), ("N", "M")), [(33, 257)]),
    "batched": (canonicalize(fs.batched_einsum("ij,j->i", [
        [fs.array("A", ("N", "M"), "float64"), fs.array("x", ("M",), "float64")],
        [fs.array("B", ("N", "M"), "float64"), fs.array("y", ("M",), "float64")]])),
        [(65, 130)]),
    "columns": (_spec("ji,j->i", ("M", "N"), ("M",)), [(301, 77), (64, 300), (1000, 1)]),
    "columns_f32": (_spec("ji,j->i", ("M", "N"), ("M",), dtype="float32"), [(129, 513)]),
    "fortran": (_spec("ij,j->i", ("N", "M"), ("M",), order="F"), [(300, 65)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_layouts_compute_evaluates_result(name: str, cl_queue: Any) -> None:
    """Each layout at lengths for which the default takes it, run at other lengths (the
    staged one only at reductions of 4 tiles or more, as the default requires)."""
    e, runs = CASES[name]
    symbols = sorted(str(s) for s in e.length_symbols)
    big = dict.fromkeys(symbols, 4000)
    p = generic().default(e, cpu(), big)
    assert p["px"] == 2 or p["rtile"] == tc.STAGED_TILE, p
    r = str(e.lengths[main_reduction(e)])
    lengths = [{s: n for s, n in zip(symbols, run, strict=True)} for run in runs]
    if p["rtile"] == tc.STAGED_TILE:
        lengths = [{**n, r: max(n[r], tc.MIN_STAGED_TERMS)} for n in lengths]
    assert check_configuration(generic(), e, p, lengths, cl_queue) is None


@pytest.mark.parametrize("name", ["A @ x", "A.T @ y"])
def test_matrix_vector_products_under_the_hook(name: str) -> None:
    """pytato's ``A @ x`` and ``A.T @ y`` of a matrix beyond the caches (1500 x 1500
    float64, 18 MB) on the CPU device: the hook takes generic's default, which is the
    layout of toolbox_cpu_rows, and the results are numpy's."""
    require_arraycontext()
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.opencl import get_device, get_queue

    cpu()
    actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False)
    rng = np.random.default_rng(7)
    a, v = rng.random((1500, 1500)), rng.random(1500)
    fn = (lambda m, w: m @ w) if name == "A @ x" else (
        lambda m, w: actx.einsum("ji,j->i", m, w))
    got, group = run_one_group(actx, fn, a, v)
    want = TWO_CHAINS if name == "A @ x" else {"rtile": tc.STAGED_TILE, "vec": 1}
    assert {k: group.params[k] for k in want} == want, group
    np.testing.assert_allclose(got, a @ v if name == "A @ x" else a.T @ v, rtol=1e-12)


@pytest.mark.parametrize("e", [
    _spec("j,j->", ("N",), ("N",)), _spec("ij->", ("N", "M"), reduction="max"),
    _spec("ij,j->i", (4, "N"), ("N",)), _spec("ij->i", (2, "N"), reduction="logsumexp")],
    ids=["dot", "max", "few rows", "logsumexp"])
def test_cpus_never_share_a_reduction(e: fs.BatchedEinsum) -> None:
    """PoCL runs a work-group on one core: work-items sharing a reduction read it
    interleaved (a dot product of 1e7 float64 took 135 ms shared, 11 ms not)."""
    p = generic().default(e, cpu(), {})
    assert p["rlocal"] == 1, p
    assert generic().default(e, MODELS["h200"].info, {})["rlocal"] > 1


@pytest.mark.parametrize("name", ["vdot", "sum", "norm", "max"])
def test_long_reductions_under_the_hook_on_a_cpu(name: str) -> None:
    """pytato's dot product, sum, norm and maximum of 10**6 values under the hook on the
    CPU device: split_reduction's vector chunks for the sums (the norm's ``abs(x)**2``
    computed on the vectors), generic's default (each output reduced in one work-item's
    loop) for the maximum; numpy's results."""
    require_arraycontext()
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.opencl import get_device, get_queue

    cpu()
    actx = FeinsumPytatoPyOpenCLArrayContext(get_queue(get_device()), feinsum_db=False)
    rng = np.random.default_rng(8)
    a, b = rng.random(10**6) - 0.5, rng.random(10**6)
    fns = {"vdot": (lambda x, y: actx.np.vdot(x, y), a @ b),
           "sum": (lambda x, y: actx.np.sum(x), a.sum()),
           "norm": (lambda x, y: actx.np.linalg.norm(x), np.linalg.norm(a)),
           "max": (lambda x, y: actx.np.max(x), a.max())}
    fn, want = fns[name]
    recipe = "generic" if name == "max" else "split_reduction"
    got, group = run_one_group(actx, fn, a, b, recipe=recipe)
    assert group.params.get("rlocal", 1) == 1, group
    np.testing.assert_allclose(got, want, rtol=1e-10)

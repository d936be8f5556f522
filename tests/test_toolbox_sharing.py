"""toolbox_sharing: generic's GPU default shares the reduction of the matrix-vector shapes.
Where it does and why not, the defaults run on the CPU device against evaluate (C and F
order, batched rows, max and logsumexp, lengths that fill no group), and the model's view
of the shared default against one output per work-item."""

from __future__ import annotations

import functools
from typing import Any

import pytest

import feinsum as fs
from feinsum.devices.models import MODELS
from feinsum.recipes.testing import check_configuration
from feinsum.spec.canonical import canonicalize
from feinsum.toolbox import sharing as ts
from feinsum.toolbox.core import main_reduction

H200 = MODELS["h200"].info


@functools.cache
def generic() -> Any:
    return fs.get_recipe("generic")


def _spec(subscripts: str, *shapes: tuple[Any, ...], dtype: str = "float64",
          order: str = "C", **kw: Any) -> fs.BatchedEinsum:
    arrays = [fs.array(f"a{k}", s, dtype, order=order if len(s) > 1 else "C")
              for k, s in enumerate(shapes)]
    return canonicalize(fs.einsum(subscripts, *arrays, **kw))


def _lanes(e: fs.BatchedEinsum, device: Any = H200, **lengths: int) -> Any:
    x = e.out_indices[-1] if e.out_indices else None
    return ts.shared_lanes(e, device, x, main_reduction(e), lengths)


def test_rows_read_with_a_stride_share_whatever_the_lengths() -> None:
    e = _spec("ij,j->i", ("N", "N"), ("N",))
    assert _lanes(e) == _lanes(e, n0=10**6) == (2, 64)
    assert _lanes(_spec("ij->i", ("M", "N"))) == (2, 64)
    assert _lanes(_spec("bij,bj->bi", (4, "N", "N"), (4, "N"))) == (2, 64)
    # a tall matrix of short rows: fewer work-items an output, more outputs a group
    assert _lanes(_spec("ij,j->i", ("M", 35), (35,))) == (16, 4)
    assert _lanes(_spec("ij,j->i", ("M", "N"), ("N",)), n0=10**6, n1=256) == (4, 16)


def test_strided_lanes_give_each_work_item_about_16_terms() -> None:
    assert [ts.strided_lanes(n) for n in (16, 64, 65, 128, 256, 1024, 10**6, None)] == [
        (16, 4), (16, 4), (8, 8), (8, 8), (4, 16), (2, 64), (2, 64), (2, 64)]


def test_consecutive_outputs_share_only_when_few() -> None:
    e = _spec("ji,j->i", ("N", "N"), ("N",))
    assert _lanes(e) is None  # unknown lengths: possibly enough outputs
    assert _lanes(e, n0=8000) == ts.FEW
    assert _lanes(e, n0=10**5) is None
    # F order turns the row-major product into the consecutive-outputs one
    assert _lanes(_spec("ij,j->i", ("N", "N"), ("N",), order="F"), n0=10**5) is None


@pytest.mark.parametrize(("why", "e", "lengths"), [
    ("a GEMM: lanes on j read B at consecutive addresses",
     _spec("ik,kj->ij", ("N", "N"), ("N", "N")), {}),
    ("rows shorter than a sector's worth", _spec("ij,j->i", ("N", 8), (8,)), {}),
    ("rows known to be that short", _spec("ij,j->i", ("N", "M"), ("M",)),
     {"n0": 10**6, "n1": 8}),
    ("a DG operator: small, every element reads it again from the caches",
     _spec("ij,ej->ei", (35, 35), ("E", 35)), {}),
    ("consecutive outputs, few, but a short reduction",
     _spec("ji,j->i", (64, "N"), (64,)), {"n0": 1000}),
    ("an argmin", _spec("ij->i", ("N", "N"), reduction="argmin"), {}),
    ("no reduction", _spec("ij,j->ij", ("N", "N"), ("N",)), {}),
])
def test_no_sharing(why: str, e: fs.BatchedEinsum, lengths: dict[str, int]) -> None:
    assert _lanes(e, **lengths) is None, why


def test_cpus_keep_their_default(cl_queue: Any) -> None:  # type: ignore[no-untyped-def]
    from feinsum.devices.opencl import device_info

    e = _spec("ij,j->i", ("N", "N"), ("N",))
    assert _lanes(e, device_info(cl_queue.device)) is None
    assert generic().default(e, cl_queue.device)["rlocal"] == 1


def test_the_default_respects_each_models_limits() -> None:
    e = _spec("ij,j->i", ("N", "N"), ("N",), dtype="float32")
    for name, model in MODELS.items():
        p = generic().default(e, model.info)  # validated against the model's limits
        if not model.info.is_cpu:
            assert (p["lx"], p["rlocal"], p["rtile"]) == (2, 64, 1), name


CASES = {
    "rows": (_spec("ij,j->i", ("N", "M"), ("M",)), {}),
    "rows_f32": (_spec("ij,j->i", ("N", "M"), ("M",), dtype="float32"), {}),
    "short_rows": (_spec("ij,j->i", ("N", 35), (35,)), {}),
    "columns_few": (_spec("ji,j->i", ("M", "N"), ("M",)), {"n0": 300, "n1": 300}),
    "fortran": (_spec("ij,j->i", ("N", "M"), ("M",), order="F"), {"n0": 300, "n1": 300}),
    "row_sums_max": (_spec("ij->i", ("N", "M"), reduction="max"), {}),
    "logsumexp": (_spec("ij->i", ("N", "M"), reduction="logsumexp"), {}),
    "batched": (canonicalize(fs.batched_einsum("ij,j->i", [
        [fs.array("A", ("N", "M"), "float64"), fs.array("x", ("M",), "float64")],
        [fs.array("A", ("N", "M"), "float64"), fs.array("y", ("M",), "float64")]])), {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("model", ["h200", "mi300x"])
def test_shared_defaults_compute_evaluates_result(name: str, model: str, cl_queue: Any
                                                  ) -> None:
    e, lengths = CASES[name]
    info = MODELS[model].info
    p = generic().default(e, info, lengths)
    assert p["rlocal"] > 1, p
    symbols = sorted(str(s) for s in e.length_symbols)
    runs = [dict.fromkeys(symbols, 300), dict(zip(symbols, (7, 1001), strict=False))]
    assert check_configuration(generic(), e, p, runs, cl_queue, device=info) is None


def test_the_model_prefers_the_shared_default() -> None:
    """The H200 model's view of the matrix-vector product (8000^2 float64): the shared
    default DRAM-bound, at 74% of the roofline (its L1 service added since the model puts
    compute and memory in sequence; the H200 measured the default at 83%), one output per
    work-item well below it."""
    from feinsum.prediction import predict_configuration

    e = _spec("ij,j->i", ("N", "N"), ("N",))
    lengths = {"n0": 8000}
    shared = generic().default(e, H200, lengths)
    alone = {**shared, "lx": 64, "rlocal": 1, "rtile": 4}
    p, q = (predict_configuration(generic(), e, c, "h200", lengths) for c in (shared, alone))
    assert p.fraction > 0.7 and p.limit == "dram", p
    assert q.seconds > 1.5 * p.seconds, (p, q)

"""Predicted times in the command line, through its real entry point (a subprocess):
``feinsum tune --dry-run [--model NAME]`` and ``feinsum show RECORD [--model NAME]``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_cli import as_json, feinsum

GEMM = ["ik,kj->ij", "-s", "i=I,k=K,j=J", "-l", "I=512,K=512,J=512"]


def test_tune_dry_run_on_a_model_without_the_device() -> None:
    d = as_json(feinsum("tune", *GEMM, "--dry-run", "--model", "h200", "--recipe",
                        "contraction", "--budget", "2", "--show", "3", "--json"))
    assert d["device"] == "NVIDIA H200" and d["model"] == "h200"
    rows = d["candidates"]
    assert [c["rank"] for c in rows] == [1, 2, 3] and {c["recipe"] for c in rows} == {
        "contraction"}
    times = [c["prediction"]["seconds"] for c in rows]
    assert times == sorted(times) and all(t > 0 for t in times)
    p = rows[0]["prediction"]
    assert 0 < p["roofline_fraction"] <= 1 and p["hardware"] == "h200"
    assert p["limit"] in p["components"] and p["kernels"][0]["groups"] > 0
    text = feinsum("tune", *GEMM, "--dry-run", "--model", "a100", "--recipe", "generic",
                   "--budget", "2", "--show", "1").stdout
    assert "generic" in text and "ms" in text and "nothing is measured" in text


def test_dry_run_json_stays_json_when_loopy_finds_no_schedule() -> None:
    """Two of generic's ranked candidates for this einsum are configurations loopy finds no
    schedule for: they are listed with the reason, and loopy's report of the failure stays
    off the output (it used to be printed into the JSON)."""
    p = feinsum("tune", "ik,jk->i", "-s", "i=64,j=N,k=3", "-l", "N=1000000", "--dry-run",
                "--model", "h200", "--recipe", "generic", "--show", "12", "--json")
    assert "Sorry" not in p.stdout and "Sorry" not in p.stderr
    rows = as_json(p)["candidates"]
    assert [c["why_not"] for c in rows if c["prediction"] is None], rows


def test_dry_run_of_a_dot_product_ranks_split_reduction() -> None:
    text = feinsum("tune", "j,j->", "-s", "j=N", "-l", "N=10000000", "--dry-run", "--model",
                   "h200", "--show", "1").stdout
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln.split()[:1] in (
        ["generic"], ["split_reduction"])}
    assert set(lines) == {"generic", "split_reduction"}, text
    # the names line up: one column width for every recipe
    assert lines["generic"].index(" 1") == lines["split_reduction"].index(" 1"), text


def test_tune_model_errors() -> None:
    p = feinsum("tune", *GEMM, "--dry-run", "--model", "nosuch", check=None)
    assert p.returncode != 0 and "h200" in p.stderr and "Traceback" not in p.stderr
    p = feinsum("tune", *GEMM, "--model", "h200", check=None)
    assert p.returncode != 0 and "--dry-run" in p.stderr and "Traceback" not in p.stderr


@pytest.fixture(scope="module")
def gpu_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two records of a GEMM: on a GPU named like the H200 (as OpenCL reads it, no model
    fields) and on a CPU."""
    from test_cli import _device

    import feinsum
    from feinsum.database import NewMeasurement, open_database
    from feinsum.devices.models import MODELS
    from feinsum.recipes import get_recipe

    path = tmp_path_factory.mktemp("cli-pred") / "gpu.sqlite"
    gpu = dataclasses.replace(MODELS["h200"].info, subgroup_width=0,
                              registers_per_work_item=0, registers_per_compute_unit=0,
                              l1_cache_size=0, fp64_rate=0.0, peak_bandwidth=0.0,
                              peak_flops_fp32=0.0, model="", compute_capability="",
                              clock_mhz=0)
    A, B = feinsum.array("A", ("I", "K")), feinsum.array("B", ("K", "J"))
    e = feinsum.einsum("ik,kj->ij", A, B)
    at = e.with_lengths({"I": 512, "K": 512, "J": 512})
    r = get_recipe("contraction")
    with open_database(path, include_shipped=False) as db:
        for dev in (gpu, _device()):
            db.add_measurement(NewMeasurement(
                einsum=at, device=dev, recipe_name="contraction", recipe_version=r.version,
                params=r.default(feinsum.canonicalize(e), dev), samples=[2e-4, 2.1e-4],
                flops=2.0 * 512**3, bytes=3 * 4.0 * 512**2))
    return path


def test_show_predicts_on_the_records_gpu_or_a_named_model(gpu_db: Path) -> None:
    d = as_json(feinsum("show", "1", "--no-code", "--json", db=gpu_db))
    assert d["prediction"]["hardware"] == "h200" and d["prediction"]["seconds"] > 0
    text = feinsum("show", "1", "--no-code", db=gpu_db).stdout
    assert "predicted" in text and "on h200" in text and "of the roofline" in text
    cpu = as_json(feinsum("show", "2", "--no-code", "--json", db=gpu_db))
    assert cpu["prediction"] is None and "--model" in cpu["prediction_note"]
    on = as_json(feinsum("show", "2", "--no-code", "--json", "--model", "mi300x", db=gpu_db))
    assert on["prediction"]["hardware"] == "mi300x"

"""The measurement protocol: statistics, tolerances, validation lengths, timing, roofline."""

from __future__ import annotations

import math

import numpy as np
import pytest

import feinsum as f
from feinsum.database import open_database
from feinsum.lowering.validation import compare, small_lengths, tolerance
from feinsum.timing.measurement import MeasureOptions, TimingStats
from feinsum.timing.single import measure


def local_operator(dtype=np.float64):  # type: ignore[no-untyped-def]
    D = f.array("D", (35, 35), dtype)
    u = f.array("u", ("E", 35), dtype)
    return f.einsum("ij,ej->ei", D, u)


# {{{ statistics and tolerances (no device)


def test_timing_stats():
    s = TimingStats.from_samples([1.0, 1.1, 1.0, 3.0, 1.05], spread_limit=0.2)
    assert s.min == 1.0
    assert s.median == 1.05
    assert s.samples == (1.0, 1.1, 1.0, 3.0, 1.05)
    assert s.spread == pytest.approx((np.percentile(s.samples, 90) - 1.0) / 1.05)
    assert s.noisy
    quiet = TimingStats.from_samples([2.0, 2.01, 2.02, 2.0, 2.0])
    assert not quiet.noisy and quiet.spread < 0.02
    with pytest.raises(f.TuningError):
        TimingStats.from_samples([])


def test_tolerance_by_dtype_and_length():
    assert tolerance(np.float64, 100) == 1e-10
    assert tolerance(np.float32, 100) == 1e-4
    assert tolerance(np.complex64, 100) == 1e-4
    assert tolerance(np.int32, 10**6) == 0.0
    # long float32 sums get eps * terms
    assert tolerance(np.float32, 10**5) == pytest.approx(np.finfo(np.float32).eps * 1e5)
    assert tolerance(np.float64, 10, rtol=0.5) == 0.5


def test_compare():
    ref = {"out0": np.array([1.0, 2.0, 4.0]), "out0_index": np.array([0, 1, 2], np.int32)}
    ok = {"out0": np.array([1.0, 2.0, 4.0 + 1e-12]), "out0_index": np.array([0, 1, 2])}
    err, why = compare(ok, ref, 1e-10)
    assert why is None and err < 1e-12
    err, why = compare({**ok, "out0": np.array([1.0, 2.0, 5.0])}, ref, 1e-10)
    assert err == pytest.approx(0.25) and "relative error" in why
    _, why = compare({**ok, "out0_index": np.array([0, 2, 2])}, ref, 1e-10)
    assert "indices differ" in why
    _, why = compare({**ok, "out0": np.array([1.0, np.nan, 4.0])}, ref, 1e-10)
    assert "NaN" in why
    _, why = compare({"out0_index": ok["out0_index"]}, ref, 1e-10)
    assert "missing" in why


def test_small_lengths_respect_assumptions():
    import islpy as isl

    assumptions = isl.BasicSet("[n0, n1] -> { : n0 mod 16 = 0 and n0 >= 16 and n1 >= 1 }")
    small = small_lengths(assumptions, {"n0": 50000, "n1": 4000}, 331)
    assert small["n0"] % 16 == 0 and 331 <= small["n0"] < 400
    assert small["n1"] == 331
    assert small_lengths(None, {"n0": 100}, 331) == {"n0": 100}


def test_options_overrides():
    o = MeasureOptions().with_overrides(min_samples=3)
    assert o.min_samples == 3 and o.min_time == 0.2
    with pytest.raises(f.TuningError, match="no_such"):
        MeasureOptions().with_overrides(no_such=1)


# }}}


# {{{ on the device


def test_measure_untransformed_in_process():
    m = measure(local_operator(), None, lengths={"E": 1000}, isolate=False, min_time=0.01)
    assert m.ok, m.message
    assert m.recipe_name == "untransformed"
    assert m.lengths == {"n0": 1000}
    assert m.flops == 2 * 35 * 35 * 1000
    assert m.timing is not None and len(m.timing.samples) >= 5
    assert m.validation_error is not None and m.validation_error < 1e-12
    assert m.gflops and m.gflops > 0
    assert set(m.phase_times) >= {"build", "first-run", "validate", "time"}


def test_measure_needs_lengths():
    with pytest.raises(f.TuningError, match="lengths"):
        measure(local_operator(), None, isolate=False)


def test_four_times_the_work_is_at_least_twice_as_slow():
    """The untransformed kernel is one sequential loop nest: 4x the elements is 4x the work.
    Both sizes are measured by one compiled program (the length is a runtime argument)."""
    e = local_operator()
    n = 20_000
    small = measure(e, None, lengths={"E": n}, min_samples=7, min_time=0.1)
    big = measure(e, None, lengths={"E": 4 * n}, min_samples=7, min_time=0.1)
    assert small.ok and big.ok, (small.message, big.message)
    assert big.flops == pytest.approx(4 * small.flops)
    assert big.timing.min >= 2 * small.timing.min, (small, big)
    assert big.timing.median >= 2 * small.timing.median, (small, big)


def test_validation_at_full_lengths():
    m = measure(local_operator(np.float32), None, lengths={"E": 3000}, isolate=False,
                validate_full=True, min_time=0.01)
    assert m.ok, m.message
    assert m.validation_error is not None and m.validation_error < 1e-5


# }}}


# {{{ roofline


def test_roofline_microbenchmarks_and_reuse(monkeypatch, tmp_path):
    from feinsum.timing import roofline as rl

    real = rl.run_microbenchmarks
    calls = []

    def quick(device, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(device)
        return real(device, quick=True)

    monkeypatch.setattr(rl, "run_microbenchmarks", quick)
    # reuse is the subject here, not the sanity checks (tests/test_bad_input.py has those):
    # a measurement on a loaded machine may fail them and would be measured again
    monkeypatch.setattr(rl, "roofline_problems", lambda *args, **kwargs: [])
    path = tmp_path / "roof.sqlite"  # named by its path, as every db= argument may be
    r1 = rl.measure_roofline(db=path)
    assert r1.bandwidth > 1e8 and r1.peak_flops["float32"] > 1e8
    assert r1.peak("complex64") == r1.peak_flops["float32"]
    assert r1.peak("int32") is None
    r2 = rl.measure_roofline(db=str(path))  # read back, not measured again
    assert len(calls) == 1 and r2 == r1
    with open_database(path, include_shipped=False) as db:
        assert db.revision() == 1  # one write: the roofline
    rl.measure_roofline(db=False)  # measured, stored nowhere
    assert len(calls) == 2
    # the bound: memory-bound at low intensity, flop-bound at high intensity
    assert r1.attainable("float32", 1.0, 1e9) == pytest.approx(r1.bandwidth / 1e9)
    assert r1.attainable("float32", 1e12, 1.0) == r1.peak_flops["float32"]
    assert math.isclose(r1.fraction("float32", 1e12, 1.0, 1e12 / r1.peak_flops["float32"]),
                        1.0)
    # a roofline stored by older microbenchmarks is measured again (and replaced)
    from feinsum.devices.opencl import device_info, get_device

    info = device_info(get_device())
    with open_database(path, include_shipped=False) as db:
        db.set_roofline(info, {**r1.as_dict(), "version": 1})
    r3 = rl.measure_roofline(db=path)
    assert len(calls) == 3 and r3.version == rl.ROOFLINE_VERSION
    with open_database(path, include_shipped=False) as db:
        assert (db.get_roofline(info) or {})["version"] == rl.ROOFLINE_VERSION


def test_fma_variants_follow_the_native_vector_width() -> None:
    from dataclasses import replace

    from feinsum.devices.opencl import DeviceInfo
    from feinsum.timing.roofline import _fma_variants

    avx2 = DeviceInfo(
        platform_name="p", platform_version="v", vendor="x", name="cpu", driver_version="1",
        opencl_version="OpenCL 3.0", device_type="CPU", compute_units=2,
        max_work_group_size=4096, max_work_item_sizes=(4096, 4096, 4096),
        local_mem_size=65536, global_mem_size=2**33, max_constant_buffer_size=65536,
        preferred_vector_width_float=8, preferred_vector_width_double=4,
        native_vector_width_float=8, native_vector_width_double=4, has_fp64=True)
    # 8 or 12 vector registers of accumulators: double4 x 8/12, double8 x 4/6
    assert _fma_variants(avx2, "float64") == [(4, (8, 12)), (8, (4, 6))]
    assert _fma_variants(avx2, "float32") == [(8, (8, 12)), (16, (4, 6))]
    gpu = replace(avx2, native_vector_width_float=1, native_vector_width_double=1)
    assert _fma_variants(gpu, "float32") == [(1, (8, 12)), (2, (4, 6))]


# }}}

# vim: foldmethod=marker

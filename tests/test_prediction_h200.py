"""The performance model against measured GPU times: 21 records of the H200 run of
2026-11-26 (tests/data/h200_records.json, written by ``benchmarks/calibrate_model.py
--json``: per workload the fastest, the slowest and the median configuration, outliers
included), each one's code generated again exactly as it ran and predicted for the ``h200``
model. docs/performance-model.rst has the check of all 63 records.

A record whose recipe no longer generates the code that was measured (its fingerprint
differs) cannot check the model: it is skipped, saying so; the summary needs at least 15
records that still can. A recipe that changes the code of a recorded configuration must
give it a parameter and an ``upgrade`` that keeps the old code reachable (as ``staging``
did for dg_operator and dg_transposed): ``test_every_record_regenerates`` fails
otherwise."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import pytest

from feinsum.prediction.calibration import (
    MeasuredConfiguration,
    Summary,
    check_records,
    summarise,
)
from feinsum.prediction.model import Prediction

DATA = Path(__file__).parent / "data" / "h200_records.json"


@functools.cache
def records() -> tuple[MeasuredConfiguration, ...]:
    return tuple(MeasuredConfiguration.from_dict(d) for d in json.loads(DATA.read_text()))


@functools.cache
def checked() -> tuple[tuple[MeasuredConfiguration, Prediction, bool], ...]:
    """Each record predicted, its code generated with the timing workers' hash seed (else
    a record's code may depend on the test process's seed)."""
    return tuple((r, *found) for r, found in zip(records(), check_records(records(), "h200"),
                                                 strict=True))


def _current() -> list[tuple[MeasuredConfiguration, Prediction]]:
    return [(r, p) for r, p, same in checked() if same]


def test_the_subset_covers_every_workload() -> None:
    assert {r.workload for r in records()} == {
        "local", "divergence", "gradient", "face_mass", "gemm", "two_index", "gaussian"}
    assert len(records()) == 21


def _assert_regenerated(rows: tuple[tuple[MeasuredConfiguration, Prediction, bool], ...]
                        ) -> None:
    changed = [(r.id, r.recipe) for r, _, same in rows if not same]
    assert not changed, (
        f"these records' recipes no longer generate the code measured: {changed}; make the "
        "change a parameter with an upgrade() that maps the records to the old code")


def _assert_fastest_predicted_faster(rows: list[tuple[MeasuredConfiguration, Prediction]]
                                     ) -> None:
    """Per workload, the measured fastest is predicted faster than the measured slowest."""
    by: dict[str, list[tuple[MeasuredConfiguration, Prediction]]] = {}
    for r, p in rows:
        by.setdefault(r.workload, []).append((r, p))
    for w, rp in by.items():
        fast = min(rp, key=lambda x: x[0].seconds)
        slow = max(rp, key=lambda x: x[0].seconds)
        if fast is not slow:
            assert fast[1].seconds < slow[1].seconds, (w, fast[0].id, slow[0].id)


def test_every_record_regenerates() -> None:
    _assert_regenerated(checked())


@pytest.mark.parametrize("index", range(21))
def test_each_record_within_the_known_spread(index: int) -> None:
    """Every record within 0.15-4x (the worst here: 0.16x, record 31, and 1.95x, record 9); the
    outliers are named in docs/performance-model.rst."""
    r, p, same = checked()[index]
    if not same:
        pytest.skip(f"record {r.id} ({r.recipe}): the recipe no longer generates the code "
                    "that was measured")
    ratio = p.seconds / r.seconds
    assert 0.15 <= ratio <= 4.0, (r.id, r.workload, r.recipe, ratio, p.components)
    assert p.limit in ("issue", "fp", "sfu", "lsu", "dram", "latency")
    assert 0 < p.fraction <= 1.0 and p.roofline_seconds > 0


def test_spread_and_order() -> None:
    rows = _current()
    if len(rows) < 15:
        pytest.skip(f"only {len(rows)} records still generate their measured code")
    s: Summary = summarise(rows)
    assert s.within_2x >= 0.75, s.ratios
    assert s.geometric_error <= 1.7, s.ratios
    _assert_fastest_predicted_faster(rows)
    ordered = [v for v in s.pairs.values() if not math.isnan(v)]
    assert sum(ordered) / len(ordered) >= 0.75, s.pairs


# {{{ the H200 run of 2026-11-27: the GPU schedules

NEW = Path(__file__).parent / "data" / "h200_records_2026-11-27.json"


@functools.cache
def new_records() -> tuple[MeasuredConfiguration, ...]:
    """48 records of the run of 2026-11-27 (``calibrate_model.py`` 's subset of 2 per
    workload and lengths, the fastest and the slowest, plus the gradient dg_nodes records
    9, 41 (132 work-groups of 64) and 95, 142 (264 of 224) at E = 5e4 and 1e6)."""
    return tuple(MeasuredConfiguration.from_dict(d) for d in json.loads(NEW.read_text()))


@functools.cache
def new_checked() -> tuple[tuple[MeasuredConfiguration, Prediction, bool], ...]:
    return tuple((r, *found) for r, found in zip(
        new_records(), check_records(new_records(), "h200"), strict=True))


def _new_current() -> list[tuple[MeasuredConfiguration, Prediction]]:
    return [(r, p) for r, p, same in new_checked() if same]


def test_the_new_subset_covers_every_workload() -> None:
    names = {r.workload.split(" [")[0] for r in new_records()}
    assert {"local", "divergence", "gradient", "face_mass", "gemm", "ttm", "gaussian",
            "fewrows", "inner", "matvec"} <= names
    assert {r.run for r in new_records()} == {"h200-2026-11-27"}
    assert len(new_records()) == 48


def test_every_new_record_regenerates() -> None:
    _assert_regenerated(new_checked())


def test_new_records_within_the_known_spread() -> None:
    """Every record within 0.12-2.5x (the worst: 0.14x, record 39, face mass dg_transposed
    with 16 blocks, and 1.5x, record 15, gaussian4's tiled_1d default; record 3, the
    gemm_gpu default, was 2.3x before independent copies issued back to back);
    docs/performance-model.rst names the outliers."""
    rows = _new_current()
    bad = [(r.id, r.workload, r.recipe, round(p.seconds / r.seconds, 3)) for r, p in rows
           if not 0.12 <= p.seconds / r.seconds <= 2.5]
    assert not bad, bad


def test_new_spread_and_order() -> None:
    rows = _new_current()
    if len(rows) < 35:
        pytest.skip(f"only {len(rows)} records still generate their measured code")
    s = summarise(rows)
    # 0.71 (0.38 before the warps' issue interval, 0.50 before DRAM and the L1 service
    # were added to the compute side, 0.67 before spills and independent copies)
    assert s.within_2x >= 0.65, s.ratios
    assert s.geometric_error <= 1.85, s.ratios  # 1.70 (3.03, 2.06, then 1.73 before)
    _assert_fastest_predicted_faster(rows)


@pytest.mark.parametrize(("fast", "slow"), [(95, 9), (142, 41)])
def test_few_resident_warps_are_slow(fast: int, slow: int) -> None:
    """gradient, dg_nodes: 132 work-groups of 64 (one per SM, 2 warps, looping over the
    elements) took 0.149 ms at E = 5e4 and 2.80 ms at 1e6; 264 of 224 (2 per SM, 14 warps)
    0.046 and 0.76 ms. Two resident warps issue one instruction per dependent-issue
    interval each: the model must order them as measured (it predicted the 132 groups
    faster before, from the SM's full issue rate)."""
    by = {r.id: (r, p) for r, p in _new_current()}
    if fast not in by or slow not in by:
        pytest.skip("the records no longer generate their measured code")
    assert by[fast][0].seconds < by[slow][0].seconds
    assert by[fast][1].seconds < by[slow][1].seconds, (by[fast][1], by[slow][1])
    assert by[slow][1].limit == "latency"

# }}}

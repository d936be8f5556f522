"""The tuner measures in the performance model's order on a GPU with a model; elsewhere
its strategies are unchanged."""

from __future__ import annotations

from typing import Any

import pytest

import feinsum
from feinsum.devices.models import MODELS
from feinsum.recipes import IntRange, ParameterSpace, PowersOfTwo
from feinsum.timing.measurement import MeasureOptions, Target
from feinsum.tuning.ranking import Predicted, pool_size, predictor_for
from feinsum.tuning.session import _make_arm
from feinsum.tuning.strategies import ModelBased, RandomSearch


def _space() -> ParameterSpace:
    return ParameterSpace({"a": IntRange(1, 8), "b": PowersOfTwo(1, 64)})


def _cost(c: Any) -> float:
    return abs(c["a"] - 5) + abs(c["b"] - 16) / 8


def test_predicted_order_then_random() -> None:
    calls = []

    def predictor(cs: Any, seconds: float) -> list[float | None]:
        calls.extend(dict(c) for c in cs)
        return [None if c["a"] == 3 else _cost(c) for c in cs]

    s = Predicted(_space(), predictor=predictor, pool=12, seed=1, default={"a": 1, "b": 1},
                  measured=[_space().canonical({"a": 5, "b": 16})])
    asked = [s.ask() for _ in range(20)]
    assert all(a is not None for a in asked)
    ranked = [t for _, t in s.ranking]
    assert len(ranked) == len(calls) == 12
    assert {"a": 1, "b": 1} in [c for c, _ in s.ranking]  # the default is in the pool
    known = [t for t in ranked if t is not None]
    assert known == sorted(known) and ranked[len(known):] == [None] * (12 - len(known))
    # the default first, whatever its prediction; then the model's order
    assert asked[0] == {"a": 1, "b": 1}
    assert asked[1:12] == [c for c, _ in s.ranking if c != {"a": 1, "b": 1}]
    keys = [_space().canonical(a) for a in asked if a is not None]
    assert len(set(keys)) == 20 and _space().canonical({"a": 5, "b": 16}) not in keys


def test_predictions_are_time_bounded() -> None:
    """In this process and in a pool of workers: what is not predicted in time is not
    ranked."""
    _, target = _gemm()
    r = feinsum.get_recipe("contraction")
    for workers in (1, 2):
        predictor = predictor_for(r, target.spec, MODELS["h200"].info, target.lengths,
                                  workers)
        assert predictor is not None
        s = Predicted(r.space(target.spec, MODELS["h200"].info), predictor=predictor,
                      pool=6, seconds=0.0, seed=0)
        assert s.ask() is not None
        assert all(t is None for _, t in s.ranking)  # none in time: the random order stays


def test_predictions_in_workers_match_this_process() -> None:
    _, target = _gemm()
    r = feinsum.get_recipe("contraction")
    h200 = MODELS["h200"].info
    configs = [r.default(target.spec, h200)]
    here = predictor_for(r, target.spec, h200, target.lengths, 1)
    there = predictor_for(r, target.spec, h200, target.lengths, 2)
    assert here is not None and there is not None
    (a,), (b,) = here(configs, 600.0), there(configs, 600.0)
    assert a is not None and b == pytest.approx(a, rel=1e-9)


def test_pool_grows_with_the_share() -> None:
    assert pool_size(None) == 16 and pool_size(2) == 12 and pool_size(8) == 32


def _gemm() -> tuple[Any, Target]:
    A, B = feinsum.array("A", (256, 256)), feinsum.array("B", (256, 256))
    e = feinsum.einsum("ik,kj->ij", A, B)
    return e, Target.make(e)


class _NoRecords:
    def records(self, name: str, version: str) -> list[Any]:
        return []


def test_auto_ranks_on_a_gpu_model_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import feinsum.tuning.ranking

    monkeypatch.setattr(feinsum.tuning.ranking, "RANKING_SECONDS", 600.0)  # a loaded machine
    _, target = _gemm()
    r = feinsum.get_recipe("contraction")
    h200 = MODELS["h200"].info
    arm = _make_arm(r, target, h200, _NoRecords(), "auto", 1, 0, None,  # type: ignore[arg-type]
                    MeasureOptions(), None)
    assert isinstance(arm.strategy, Predicted)
    first = arm.strategy.ask()
    assert arm.strategy.default is not None
    assert first == arm.strategy.space.validate(arm.strategy.default)  # the default first
    second = arm.strategy.ask()
    times = [t for _, t in arm.strategy.ranking if t is not None]
    assert len(times) == pool_size(1) and times == sorted(times)
    assert second == next(c for c, _ in arm.strategy.ranking if c != first)
    cpu = feinsum.DeviceInfo(
        platform_name="Portable Computing Language", platform_version="OpenCL 3.0 PoCL",
        vendor="GenuineIntel", name="pthread-x", driver_version="5", opencl_version="3.0",
        device_type="CPU", compute_units=2, max_work_group_size=4096,
        max_work_item_sizes=(4096, 4096, 4096), local_mem_size=1 << 20,
        global_mem_size=1 << 33, max_constant_buffer_size=1 << 20,
        preferred_vector_width_float=8, preferred_vector_width_double=4,
        native_vector_width_float=8, native_vector_width_double=4, has_fp64=True)
    assert predictor_for(r, target.spec, cpu, target.lengths) is None
    arm = _make_arm(r, target, cpu, _NoRecords(), "auto", 4, 0, None,  # type: ignore[arg-type]
                    MeasureOptions(), None)
    assert isinstance(arm.strategy, (ModelBased, RandomSearch)) or arm.strategy.name in (
        "exhaustive", "model")
    with pytest.raises(feinsum.TuningError, match="does not describe"):
        _make_arm(r, target, cpu, _NoRecords(), "predicted", 4, 0, None,  # type: ignore[arg-type]
                  MeasureOptions(), None)


def test_ranking_keeps_to_the_time_limit() -> None:
    """Without a limit each recipe ranks for RANKING_SECONDS; under one, all the rankings
    together take at most RANKING_SHARE of it (never under a second each)."""
    from feinsum.tuning.ranking import RANKING_SECONDS, RANKING_SHARE, ranking_seconds

    assert ranking_seconds(None, 4) == RANKING_SECONDS
    assert ranking_seconds(1e4, 4) == RANKING_SECONDS
    assert ranking_seconds(40.0, 4) == pytest.approx(RANKING_SHARE * 40.0 / 4)
    assert ranking_seconds(2.0, 6) == 1.0
    _, target = _gemm()
    r = feinsum.get_recipe("contraction")
    arm = _make_arm(r, target, MODELS["h200"].info, _NoRecords(), "auto", 4, 0,  # type: ignore[arg-type]
                    None, MeasureOptions(), None, 1, ranking_seconds(12.0, 3))
    assert isinstance(arm.strategy, Predicted) and arm.strategy.seconds == 1.0

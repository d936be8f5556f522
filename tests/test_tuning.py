"""The autotuner: strategies, competing recipes, planted failures, interruption and resume."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import feinsum as f
from feinsum.recipes import (
    Boolean,
    Choice,
    Constraint,
    ParameterSpace,
    PowersOfTwo,
    TupleOf,
    canonical_json,
)
from feinsum.tuning import Exhaustive, ModelBased, RandomSearch, autotune
from feinsum.tuning.session import _Arm, _choose
from feinsum.tuning.strategies import _Encoding, restrict

TEST_RECIPES = Path(__file__).parent / "recipes_for_tests"


def space() -> ParameterSpace:
    return ParameterSpace(
        a=PowersOfTwo(1, 64), b=PowersOfTwo(1, 64), c=Boolean(), d=Choice(["x", "y"]),
        constraints=[Constraint("ab", lambda p: p["a"] * p["b"] <= 256, "a*b <= 256")])


def landscape(p: dict) -> float:
    """A smooth synthetic cost with its minimum 1.0 at a=8, b=4, c=False, d='y'."""
    return ((math.log2(p["a"]) - 3) ** 2 + (math.log2(p["b"]) - 2) ** 2
            + 0.5 * p["c"] + 0.3 * (p["d"] == "x") + 1.0)


def drive(strategy, n: int) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        p = strategy.ask()
        if p is None:
            break
        out.append(p)
        strategy.tell(p, landscape(p))
    return out


# {{{ strategies (no device)


def test_exhaustive_covers_the_valid_space_once_default_first():
    sp = space()
    default = {"a": 2, "b": 2, "c": True, "d": "y"}
    got = drive(Exhaustive(sp, default=default), 10_000)
    keys = [canonical_json(p) for p in got]
    assert got[0] == default
    assert len(keys) == len(set(keys)) == sum(1 for _ in sp.enumerate())
    assert all(sp.is_valid(p) for p in got)


def test_random_is_seeded_and_resumes_the_same_sequence():
    sp = space()
    first = drive(RandomSearch(sp, seed=3), 30)
    assert first == drive(RandomSearch(sp, seed=3), 30)
    assert first != drive(RandomSearch(sp, seed=4), 30)
    measured = {canonical_json(p) for p in first[:12]}
    assert drive(RandomSearch(sp, seed=3, measured=measured), 18) == first[12:]


def test_model_never_repeats_and_skips_known_configurations():
    sp = space()
    known = [({"a": 1, "b": 1, "c": False, "d": "x"}, 20.0), ({"a": 64, "b": 4, "c": True,
                                                                "d": "x"}, None)]
    measured = {canonical_json({"a": 2, "b": 1, "c": False, "d": "x"})}
    st = ModelBased(sp, seed=0, default={"a": 4, "b": 4, "c": True, "d": "y"}, known=known,
                    measured=measured)
    got = drive(st, 39)  # 25% of the 156 valid configurations
    keys = [canonical_json(p) for p in got]
    assert got[0] == {"a": 4, "b": 4, "c": True, "d": "y"}
    assert len(set(keys)) == len(keys)
    assert not {canonical_json(p) for p, _ in known} & set(keys)
    assert not measured & set(keys)
    assert all(sp.is_valid(p) for p in got)


def test_model_beats_random_search():
    sp = space()
    budget = 39  # 25% of the 156 valid configurations

    def median_best(make):  # type: ignore[no-untyped-def]
        return float(np.median([min(landscape(p) for p in drive(make(s), budget))
                                for s in range(5)]))

    model = median_best(lambda s: ModelBased(sp, seed=s))
    assert model <= 1.1
    assert model < median_best(lambda s: RandomSearch(sp, seed=s))


def test_encoding_roundtrip():
    sp = ParameterSpace(t=TupleOf(PowersOfTwo(1, 8), Choice(["u", "v"])), flag=Boolean(),
                        n=Choice([1, 3, 5, 7]))
    enc = _Encoding(sp)
    for p in sp.enumerate():
        assert sp.validate(enc.decode(enc.encode(p))) == sp.validate(p)
    assert set(enc.distributions) == {"t[0]", "t[1]", "flag", "n"}


def test_restrict_pins_parameters_and_keeps_constraints():
    sp = restrict(space(), {"a": 64, "d": "y"})
    got = list(sp.enumerate())
    assert {p["a"] for p in got} == {64} and {p["d"] for p in got} == {"y"}
    assert {p["b"] for p in got} == {1, 2, 4}  # a*b <= 256 still holds
    with pytest.raises(f.TuningError, match="unknown"):
        restrict(space(), {"zz": 1})
    with pytest.raises(f.TuningError, match="a=3"):
        restrict(space(), {"a": 3})


def test_arms_try_every_recipe_then_favour_the_fastest():
    from feinsum.timing.measurement import Measurement, TimingStats

    def arm(name: str, seconds: float | None, n: int) -> _Arm:
        a = _Arm(recipe=type("R", (), {"name": name})(), space=space(), strategy=None,
                 evaluated=n)
        if seconds is not None:
            a.best = Measurement("ok", name, "v", {}, {},
                                 timing=TimingStats.from_samples([seconds]))
        return a

    fast, slow, new = arm("fast", 1.0, 10), arm("slow", 4.0, 10), arm("new", None, 0)
    assert _choose([fast, slow, new]) is new
    assert _choose([fast, slow]) is fast
    fast.exhausted = True
    assert _choose([fast, slow]) is slow
    slow.exhausted = True
    assert _choose([fast, slow]) is None


# }}}


# {{{ autotune on the device


@pytest.fixture
def db(tmp_path, cl_device):  # type: ignore[no-untyped-def]
    """An empty database holding a roofline for the device (no microbenchmarks in tests)."""
    from feinsum.database import open_database
    from feinsum.devices.opencl import device_info
    from feinsum.timing.roofline import Roofline

    d = open_database(tmp_path / "t.sqlite", include_shipped=False)
    info = device_info(cl_device)
    d.set_roofline(info, Roofline(info.key, 2e10, 2e10, {"float32": 1e11, "float64": 5e10})
                   .as_dict())
    yield d
    d.close()


def local_operator():  # type: ignore[no-untyped-def]
    D = f.array("D", (35, 35), np.float64)
    u = f.array("u", ("E", 35), np.float64)
    return f.einsum("ij,ej->ei", D, u)


FAST = {"min_time": 0.01, "min_samples": 3, "progress": False, "recipe_path": TEST_RECIPES}


def records(db, e):  # type: ignore[no-untyped-def]
    return db.query(e, status=None)


def test_planted_failures_are_recorded_and_the_run_completes(db):
    e = local_operator()
    r = autotune(e, lengths={"E": 2000}, db=db, recipes=["planted"], strategy="exhaustive",
                 build_timeout=3.0, peers=False, **FAST)
    assert len(r.measurements) == 14  # 7 modes x 2 work-group sizes
    assert r.failures == {"compile-error": 6, "timeout": 2, "wrong-result": 2, "invalid": 2}
    assert r.best is not None and r.best.params["mode"] == "ok"
    stored = records(db, e.with_lengths({"E": 2000}))
    by_status = {}
    for rec in stored:
        if rec.recipe_name == "untransformed":
            continue
        by_status.setdefault(rec.status, set()).add(rec.params["mode"])
    assert by_status == {"ok": {"ok"}, "compile-error": {"abort", "segfault", "compile"},
                         "timeout": {"hang"}, "wrong-result": {"wrong"}, "invalid": {"invalid"}}
    assert r.baseline is not None and r.baseline.ok
    assert r.speedup_over_untransformed is not None


class Interrupt(KeyboardInterrupt):
    pass


def test_interrupted_run_resumes_without_measuring_anything_twice(db):
    e = local_operator()
    seen: list[str] = []

    def stop_after_three(m):  # type: ignore[no-untyped-def]
        if m.recipe_name == "split":
            seen.append(canonical_json(m.params))
            if len(seen) == 3:
                raise Interrupt

    with pytest.raises(Interrupt):
        autotune(e, lengths={"E": 3000}, db=db, recipes=["split"], strategy="random",
                 budget=7, peers=False, callback=stop_after_three, **FAST)
    r2 = autotune(e, lengths={"E": 3000}, db=db, recipes=["split"], strategy="random",
                  budget=7, peers=False, **FAST)
    assert r2.previous == 3 and len(r2.measurements) == 4
    again = {canonical_json(m.params) for m in r2.measurements}
    assert not again & set(seen)
    r3 = autotune(e, lengths={"E": 3000}, db=db, recipes=["split"], strategy="model",
                  budget=10, peers=False, **FAST)
    assert r3.previous == 7 and len(r3.measurements) == 3
    stored = [canonical_json(rec.params) for rec in records(db, e.with_lengths({"E": 3000}))
              if rec.recipe_name == "split"]
    assert len(stored) == len(set(stored)) == 10
    assert r3.baseline is not None and r3.baseline.ok  # measured once, by the first run
    assert sum(rec.recipe_name == "untransformed"
               for rec in records(db, e.with_lengths({"E": 3000}))) == 1
    assert r3.best is not None and r3.best.seconds == min(
        rec.min_time for rec in records(db, e.with_lengths({"E": 3000}))
        if rec.recipe_name == "split")


def test_competing_recipes_share_the_budget_and_peers_are_timed(db):
    e = local_operator()
    r = autotune(e, lengths={"E": 2000}, db=db, recipes=["split", "planted"], strategy="auto",
                 budget=6, peers=True, baseline=False, build_timeout=3.0, **FAST)
    assert r.recipe_stats["split"]["evaluated"] + r.recipe_stats["planted"]["evaluated"] == 6
    assert r.recipe_stats["split"]["evaluated"] >= 1
    assert r.recipe_stats["planted"]["evaluated"] >= 1
    assert "numpy.einsum" in r.peers and r.speedup_over_peer is not None
    text = str(r)
    assert "split" in text and "numpy.einsum" in text


# }}}

# vim: foldmethod=marker

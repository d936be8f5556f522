"""``feinsum.autotune``: search the recipes' parameter spaces for one einsum on one device.

Every measurement is written to the database as soon as it is taken, failures included,
so a configuration is never measured twice (for one einsum, lengths, device and recipe
version) and an interrupted run resumes where it stopped: the budget counts the records
already there, the strategies skip them and the model is seeded with them.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feinsum.errors import InvalidConfigurationError, RecipeError, TuningError
from feinsum.timing.measurement import (
    UNTRANSFORMED,
    Candidate,
    Measurement,
    MeasureOptions,
    Target,
    TimingStats,
    random_inputs,
)
from feinsum.tuning.ranking import Predicted, pool_size, predictor_for, ranking_seconds
from feinsum.tuning.strategies import (
    STRATEGIES,
    Strategy,
    make_strategy,
    restrict,
    valid_count,
)

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.recipes import ParameterSpace, Recipe
    from feinsum.spec.model import BatchedEinsum
    from feinsum.timing.roofline import Roofline

#: Evaluations per tuning run when no budget is given (shared by the competing recipes).
DEFAULT_BUDGET = 100
#: ``strategy="auto"``: a recipe whose space has at most this many valid configurations
#: (or no more than its share of the budget) is searched exhaustively, else model-based.
EXHAUSTIVE_LIMIT = 32


# {{{ the result


@dataclass
class TuningResult:
    """What :func:`autotune` found. ``best`` is the fastest configuration overall (this run
    and earlier ones); ``measurements`` are those taken in this run."""

    title: str
    canonical_key: str
    device_name: str
    lengths: dict[str, int]
    flops: float
    best: Measurement | None
    best_per_recipe: dict[str, Measurement]
    baseline: Measurement | None
    peers: dict[str, float]
    measurements: list[Measurement]
    recipe_stats: dict[str, dict[str, int]]
    previous: int
    elapsed: float
    roofline: Roofline | None = None
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def fastest_peer(self) -> str | None:
        return min(self.peers, key=self.peers.__getitem__) if self.peers else None

    @property
    def configs_per_minute(self) -> float:
        """Configurations measured per minute of this run (failures included)."""
        return 60.0 * len(self.measurements) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def speedup_over_untransformed(self) -> float | None:
        b = self.baseline.seconds if self.baseline is not None else None
        s = self.best.seconds if self.best is not None else None
        return b / s if b and s else None

    @property
    def speedup_over_peer(self) -> float | None:
        peer = self.fastest_peer
        if self.best is None or peer is None or not self.best.seconds:
            return None
        return self.peers[peer] / self.best.seconds

    def table(self) -> Any:
        from feinsum.tuning.progress import result_table

        return result_table(self)

    def __str__(self) -> str:
        from rich.console import Console

        console = Console(width=160, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(self.table())
        return console.export_text()


# }}}


# {{{ the database side


class _Records:
    """The tuning run's view of the database: records of this einsum, lengths and device."""

    def __init__(self, db: Any, einsum: BatchedEinsum, target: Target, device: DeviceInfo,
                 origin: Mapping[str, Any] | None = None):
        self.db = db
        self.einsum = einsum
        self.target = target
        self.device = device
        self.origin = origin

    def records(self, recipe_name: str, version: str) -> list[Any]:
        if self.db is None:
            return []
        return list(self.db.query(self.einsum, device=self.device,
                                  recipe=(recipe_name, version), status=None,
                                  lengths=self.target.lengths))

    def revalidate(self, recipes: Sequence[Recipe], jobs: int) -> None:
        """Move the records of older versions of *recipes* (and of the untransformed kernel)
        whose code is unchanged to the current versions (retiring the others), so that the
        run resumes from them instead of measuring them again."""
        if self.db is None:
            return
        from feinsum.tuning.codecheck import CurrentRecipes

        self.db.query(self.einsum, device=self.device, status=None,
                      lengths=self.target.lengths,
                      recipe_versions=CurrentRecipes(recipes, jobs=jobs))

    def add(self, m: Measurement) -> None:
        if self.db is None:
            return
        from feinsum.database import NewMeasurement

        t = m.timing
        self.db.add_measurement(NewMeasurement(
            einsum=self.einsum, device=self.device, recipe_name=m.recipe_name,
            recipe_version=m.recipe_version, params=m.params, status=m.status,
            lengths=m.lengths, samples=t.samples if t else (),
            min_time=t.min if t else None, median_time=t.median if t else None,
            spread=t.spread if t else None, flops=m.flops, bytes=m.nbytes,
            validation_error=m.validation_error, message=m.message or None,
            started_at=_stamp(m.started_at), timing_started_at=_stamp(m.timing_started),
            timing_ended_at=_stamp(m.timing_ended), origin=self.origin,
            code_fingerprint=m.fingerprint,
        ))

    def add_peers(self, times: Mapping[str, float]) -> None:
        if self.db is not None and times:
            self.db.add_peer_timings(self.einsum, self.device, times,
                                     lengths=self.target.lengths, origin=self.origin)


def _stamp(t: float) -> _dt.datetime | None:
    return _dt.datetime.fromtimestamp(t, _dt.UTC) if t else None


def _from_record(r: Any, target: Target, spread_limit: float, roofline: Roofline | None
                 ) -> Measurement:
    timing = (TimingStats.from_samples(list(r.samples), spread_limit)
              if r.status == "ok" and r.samples else None)
    fraction = (roofline.fraction(target.dtype, target.flops, target.nbytes, timing.min)
                if roofline is not None and timing is not None else None)
    return Measurement(status=r.status, recipe_name=r.recipe_name,
                       recipe_version=r.recipe_version, params=dict(r.params),
                       lengths=dict(r.lengths), message=r.message or "", timing=timing,
                       flops=target.flops, nbytes=target.nbytes, roofline_fraction=fraction,
                       validation_error=r.validation_error, fingerprint=r.code_fingerprint)


# }}}


# {{{ recipes competing for the budget


@dataclass
class _Arm:
    recipe: Recipe
    space: ParameterSpace
    strategy: Strategy
    evaluated: int = 0
    failed: int = 0
    in_flight: int = 0
    exhausted: bool = False
    best: Measurement | None = None

    def record(self, m: Measurement) -> None:
        self.evaluated += 1
        if not m.ok:
            self.failed += 1
        elif self.best is None or _seconds(m) < _seconds(self.best):
            self.best = m


def _choose(arms: list[_Arm], exploration: float = 0.5) -> _Arm | None:
    """The recipe to try next: each gets one evaluation first (its default), then an upper
    confidence bound on its best speed relative to the best overall."""
    live = [a for a in arms if not a.exhausted]
    if not live:
        return None
    fresh = [a for a in live if a.evaluated + a.in_flight == 0]
    if fresh:
        return fresh[0]
    bests = [a.best.seconds for a in arms if a.best is not None and a.best.seconds]
    top = min(bests) if bests else None
    total = sum(a.evaluated + a.in_flight for a in arms) + 1

    def score(a: _Arm) -> float:
        n = a.evaluated + a.in_flight
        quality = top / a.best.seconds if top and a.best and a.best.seconds else 0.0
        return quality + exploration * math.sqrt(math.log(total) / max(n, 1))

    return max(live, key=score)


def _resolve_recipes(recipes: Sequence[Recipe | str] | None, spec: BatchedEinsum,
                     device: DeviceInfo, path: Any) -> tuple[list[Recipe], dict[str, str]]:
    from feinsum.recipes import Recipe, get_recipe
    from feinsum.recipes import recipes as all_recipes

    if recipes is None:
        candidates = all_recipes(path)
    else:
        candidates = [r if isinstance(r, Recipe) else get_recipe(r, path) for r in recipes]
    chosen, skipped = [], {}
    for r in candidates:
        try:
            reason = r.applies(spec, device)
        except RecipeError as exc:
            reason = str(exc)
        if reason is None:
            chosen.append(r)
        else:
            skipped[r.name] = reason
    return chosen, skipped


def _strategy_for(kind: str, space: ParameterSpace, share: int | None) -> str:
    if kind != "auto":
        return kind
    limit = max(EXHAUSTIVE_LIMIT, share or 0)
    if space.size <= limit:
        return "exhaustive"
    n = valid_count(space)  # None: too large to count
    return "exhaustive" if n is not None and n <= limit else "model"


# }}}


def autotune(
    einsum: BatchedEinsum,
    *,
    device: Any = None,
    db: Any = None,
    recipes: Sequence[Recipe | str] | None = None,
    strategy: str = "auto",
    budget: int | None = None,
    time_limit: float | None = None,
    lengths: Mapping[str, int] | None = None,
    seed: int = 0,
    progress: bool = True,
    recipe_path: Any = None,
    workers: int | None = None,
    peers: bool = True,
    baseline: bool = True,
    callback: Callable[[Measurement], None] | None = None,
    fixed: Mapping[str, Mapping[str, Any]] | None = None,
    timing_lock: Any = None,
    origin: Mapping[str, Any] | None = None,
    **options: Any,
) -> TuningResult:
    """Tune *einsum* on *device*: search the applicable recipes' configurations, measure
    each in an isolated worker, record everything in *db*, and return the best.

    :arg db: a :class:`~feinsum.database.Database`, a path, an SQLAlchemy URL, ``None``
        (the default database) or ``False`` (record nothing: no resume, the roofline
        measured again).
    :arg recipes: recipes (objects or names) to consider; default: every recipe on
        *recipe_path*, ``FEINSUM_RECIPE_PATH`` and the shipped ones that applies.
    :arg strategy: ``"exhaustive"``, ``"random"``, ``"model"`` (optuna TPE),
        ``"predicted"`` (the performance model's order, :mod:`feinsum.tuning.ranking`) or
        ``"auto"``: predicted on a GPU the performance model describes, else exhaustive for
        small spaces and model-based for the others.
    :arg budget: evaluations in all (shared by the recipes, records already in the
        database for this einsum, lengths, device and recipe versions included);
        default :data:`DEFAULT_BUDGET`, or every configuration with ``"exhaustive"``.
    :arg time_limit: seconds after which no new candidate is started.
    :arg lengths: values of the einsum's length symbols.
    :arg workers: parallel build workers (default: CPU count, at most 4).
    :arg peers: time numpy/opt_einsum/torch (or :func:`feinsum.evaluate`) for comparison.
    :arg baseline: time the untransformed kernel (once per database).
    :arg callback: called with every new measurement (after it is recorded).
    :arg fixed: per recipe name, parameters pinned to a value (``{"generic": {"vec":
        False}}``): only the others are searched.
    :arg timing_lock: held whenever this run times anything (the roofline, the peers, each
        candidate): a lock shared with the other processes that time on the same
        physical device (``threading.Lock``-like; a campaign passes a
        ``distributed.Lock``). The interval each candidate held it is recorded.
    :arg origin: how the einsum was given, recorded with it the first time
        (:func:`feinsum.database.einsum_origin`; default: *einsum* and *lengths* as given).
    :arg options: :class:`~feinsum.timing.measurement.MeasureOptions` fields (``min_samples``,
        ``min_time``, ``build_timeout``, ``run_timeout``, ``validate_full``, ...).
    """
    from feinsum import checks
    from feinsum.database.resolve import optional_database
    from feinsum.devices.opencl import device_info, get_device
    from feinsum.timing.roofline import measure_roofline
    from feinsum.tuning.codecheck import default_jobs
    from feinsum.tuning.peers import time_peers

    if strategy not in ("auto", "predicted") and strategy not in STRATEGIES:
        raise TuningError(f"unknown strategy {strategy!r}; one of auto, predicted, "
                          f"{', '.join(STRATEGIES)}")
    budget = checks.optional_count("budget", budget)
    time_limit = checks.optional_seconds("time_limit", time_limit)
    workers = checks.processes("workers", workers)
    seed = checks.seed("seed", seed)
    lengths = checks.lengths("lengths", lengths)
    t_start = time.monotonic()
    dev = get_device(device)
    info = device_info(dev)
    store = optional_database(db)
    opts = MeasureOptions().with_overrides(**options)
    target = Target.make(einsum, lengths)
    if target.nbytes > info.global_mem_size > 0:
        raise TuningError(
            f"the arrays of {einsum.subscripts} at these lengths take "
            f"{target.nbytes / 2**30:.3g} GiB, more than the {info.global_mem_size / 2**30:.3g}"
            f" GiB of global memory of {info.name}: tune at smaller lengths")
    if store is not None and origin is None:
        from feinsum.database import einsum_origin

        origin = einsum_origin(einsum, lengths)
    records = _Records(store, einsum.with_lengths(dict(lengths)) if lengths else einsum,
                       target, info, origin)
    chosen, skipped = _resolve_recipes(recipes, target.spec, info, recipe_path)
    if not chosen and not baseline:
        raise TuningError(f"no recipe applies to {einsum}: "
                          + "; ".join(f"{k}: {v}" for k, v in skipped.items()))

    records.revalidate(chosen, workers or default_jobs())
    with _holding(timing_lock):
        roof = measure_roofline(dev, db=False if store is None else store)
        peer_times: dict[str, float] = {}
        if peers:  # before any worker starts: nothing else runs on the CPU
            inputs = random_inputs(target.spec, target.lengths, opts.seed)
            peer_times = time_peers(target.spec.with_lengths(target.lengths), inputs,
                                    min_samples=opts.min_samples, min_time=opts.min_time)
            records.add_peers(peer_times)

    if budget is None and strategy != "exhaustive":
        budget = DEFAULT_BUDGET
    share = None if budget is None else max(1, budget // max(1, len(chosen)))
    ranking = ranking_seconds(time_limit, len(chosen))
    arms = [_make_arm(r, target, info, records, strategy, share, seed,
                      (fixed or {}).get(r.name), opts, roof, workers or default_jobs(),
                      ranking)
            for r in chosen]
    base_m: Measurement | None = None
    if baseline:
        from feinsum.timing.measurement import untransformed_version

        old = records.records(UNTRANSFORMED, untransformed_version())
        base_m = _from_record(old[0], target, opts.spread_limit, roof) if old else None

    title = einsum.subscripts
    if target.lengths:  # in the user's names where the origin has them (E=2048, not n0=2048)
        from feinsum.database.origins import lengths_label

        title += f" at {lengths_label(origin, target.lengths)}"
    run = _Run(target, info, arms, records, opts, roof, budget, time_limit, t_start,
               callback, timing_lock)
    new, measured_base = run.search(workers, title, progress,
                                    need_baseline=baseline and base_m is None,
                                    known_baseline=base_m)
    base_m = measured_base or base_m

    best_per_recipe = {a.recipe.name: a.best for a in arms if a.best is not None}
    result = TuningResult(
        title=title, canonical_key=target.key, device_name=info.name,
        lengths=dict(target.lengths), flops=target.flops,
        best=min(best_per_recipe.values(), key=_seconds, default=None),
        best_per_recipe=best_per_recipe, baseline=base_m, peers=peer_times,
        measurements=new,
        recipe_stats={a.recipe.name: {"evaluated": a.evaluated, "failed": a.failed}
                      for a in arms},
        previous=run.previous, elapsed=time.monotonic() - t_start, roofline=roof,
        failures=dict(collections.Counter(m.status for m in new if not m.ok)),
    )
    if progress:
        import sys

        from rich.console import Console

        # rich assumes 80 columns when stdout is not a terminal: too narrow for the table
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(result.table())
        if skipped:
            console.print("not applicable: " + "; ".join(f"{k}: {v}"
                                                         for k, v in skipped.items()))
    return result


def _seconds(m: Measurement) -> float:
    return m.seconds or math.inf


@contextlib.contextmanager
def _holding(lock: Any) -> Iterator[None]:
    if lock is None:
        yield
        return
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _make_arm(r: Recipe, target: Target, info: DeviceInfo, records: _Records, strategy: str,
              share: int | None, seed: int, pins: Mapping[str, Any] | None,
              opts: MeasureOptions, roof: Roofline | None, workers: int = 1,
              ranking: float | None = None) -> _Arm:
    """A recipe's arm: its (restricted) space and strategy, seeded with its records
    (*ranking*: seconds its predictions may take, see :func:`ranking_seconds`)."""
    space = r.space(target.spec, info)
    default: dict[str, Any] | None = r.default(target.spec, info, target.lengths)
    if pins:
        space = restrict(space, pins)
        try:
            default = space.validate({**(default or {}), **pins})
        except InvalidConfigurationError:
            default = None
    old = records.records(r.name, r.version)
    known = [(dict(rec.params), rec.min_time if rec.status == "ok" else None)
             for rec in old]
    strat: Strategy
    predictor = (predictor_for(r, target.spec, info, target.lengths, workers)
                 if strategy in ("auto", "predicted") else None)
    if predictor is not None:
        strat = Predicted(space, predictor=predictor, pool=pool_size(share), seed=seed,
                          default=default, known=known, seconds=ranking)
    elif strategy == "predicted":
        raise TuningError(f"strategy 'predicted': the performance model does not describe "
                          f"{info.name} (a CPU, or a GPU without a device model); use "
                          "'auto'")
    else:
        strat = make_strategy(_strategy_for(strategy, space, share), space, seed=seed,
                              default=default, known=known)
    arm = _Arm(r, space, strat, evaluated=len(old), failed=sum(rec.status != "ok" for rec in old))
    ok = [_from_record(rec, target, opts.spread_limit, roof) for rec in old if rec.status == "ok"]
    arm.best = min(ok, key=_seconds, default=None)
    return arm


class _Run:
    """The search loop: candidates to the worker pool, results to the database and the
    strategies, until the budget, the time limit or every space is spent."""

    def __init__(self, target: Target, info: DeviceInfo, arms: list[_Arm], records: _Records,
                 opts: MeasureOptions, roof: Roofline | None, budget: int | None,
                 time_limit: float | None, t_start: float,
                 callback: Callable[[Measurement], None] | None, timing_lock: Any) -> None:
        self.target, self.info, self.arms, self.records = target, info, arms, records
        self.opts, self.roof, self.budget = opts, roof, budget
        self.time_limit, self.t_start, self.callback = time_limit, t_start, callback
        self.timing_lock = timing_lock
        self.previous = sum(a.evaluated for a in arms)

    def _total(self) -> int | None:
        if self.budget is not None:
            return self.budget
        counts = [valid_count(a.space) for a in self.arms]
        return None if None in counts else sum(c or 0 for c in counts)

    def search(self, workers: int | None, title: str, progress: bool, need_baseline: bool,
               known_baseline: Measurement | None) -> tuple[list[Measurement],
                                                              Measurement | None]:
        from feinsum.timing.isolation import WorkerPool
        from feinsum.tuning.progress import Progress

        bar = Progress(progress, self._total(), self.time_limit, title)
        bar.update(previous=self.previous)
        new: list[Measurement] = []
        baseline: Measurement | None = None
        submitted = self.previous
        pool = WorkerPool(self.info, workers, roofline=self.roof, timing_lock=self.timing_lock)
        for known in [*(a.best for a in self.arms), known_baseline]:
            if known is not None and known.seconds:
                pool.note_best(self.target.key, known.seconds)
        try:
            if need_baseline:
                pool.submit(Candidate.make(self.target, None, None, self.opts))
            while True:
                out_of_time = (self.time_limit is not None
                               and time.monotonic() - self.t_start >= self.time_limit)
                while (not out_of_time and pool.capacity() > 0
                       and (self.budget is None or submitted < self.budget)):
                    arm = _choose(self.arms)
                    if arm is None:
                        break
                    config = arm.strategy.ask()
                    if config is None:
                        arm.exhausted = True
                        continue
                    arm.in_flight += 1
                    submitted += 1
                    pool.submit(Candidate.make(self.target, arm.recipe, config, self.opts))
                if out_of_time:
                    pool.cancel()
                if not pool.in_flight:
                    break
                for m in pool.poll(0.25):
                    self.records.add(m)
                    if m.recipe_name == UNTRANSFORMED:
                        baseline = m
                    else:
                        arm = next(a for a in self.arms if a.recipe.name == m.recipe_name)
                        arm.in_flight -= 1
                        arm.record(m)
                        arm.strategy.tell(m.params, m.seconds if m.ok else None)
                        new.append(m)
                        bar.update(m, previous=self.previous)
                    if self.callback is not None:
                        self.callback(m)
                bar.update(previous=self.previous)
        finally:
            pool.close()
            bar.close()
        return new, baseline


# vim: foldmethod=marker

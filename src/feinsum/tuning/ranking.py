"""Candidates measured in the performance model's order (:class:`Predicted`).

On a GPU the performance model describes (:func:`feinsum.prediction.hardware_for`), the
tuner's ``auto`` strategy ranks a pool of each recipe's configurations by their predicted
time before measuring any: the recipe's default and random valid configurations, up to
:func:`pool_size` of them, predicted for at most :data:`RANKING_SECONDS` (what is not
predicted by then, or cannot be, follows in its random order). The budget is then spent on
the default first, whatever its prediction (it is the schedule a user gets untuned, so a
tuned result is never worse than it, even where the model ranks it wrongly: on the H200
run of 2026-11-27 the model ranked a looping grid of one work-group per compute unit
ahead of the DG gradient's default, which measured 3.3x faster), then on the
best-predicted; when the pool is spent, random configurations follow.

The predictions run in a pool of spawned processes (the tuner's ``workers``) with the hash
seed the timing workers generate code with (:data:`feinsum.timing.hashseed.CODE_HASH_SEED`:
loopy's code for some kernels depends on it), so the code predicted is the code timed.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from feinsum.recipes import Config, ParameterSpace
from feinsum.timing.hashseed import seeded_pool
from feinsum.tuning.strategies import RandomSearch, Strategy

#: Seconds one recipe's ranking may take (a prediction takes about one to five).
RANKING_SECONDS = 20.0

#: predicted seconds of each configuration (None: not predicted) within a time budget
Predictor = Callable[[Sequence[Mapping[str, Any]], float], list[float | None]]


#: The share of the tuner's time limit that the rankings of all its recipes may take.
RANKING_SHARE = 0.25


def ranking_seconds(time_limit: float | None, recipes: int) -> float:
    """Seconds each of *recipes* recipes' ranking may take: :data:`RANKING_SECONDS`, and
    under a time limit at most :data:`RANKING_SHARE` of it spread over the recipes (a
    ranking of 20 s a recipe would eat a short tuning's time: on the H200 run of
    2026-11-27, 25-50 s a workload at budget 8). At least a second: less ranks nothing."""
    if time_limit is None:
        return RANKING_SECONDS
    return max(1.0, min(RANKING_SECONDS, RANKING_SHARE * time_limit / max(1, recipes)))


def pool_size(share: int | None) -> int:
    """Configurations ranked for a recipe whose share of the budget is *share*."""
    return max(12, 4 * (share or 4))


class Predicted(Strategy):
    """The default, then random configurations best predicted first (*predictor*: the
    configurations' predicted seconds within a time budget, None for those it cannot
    predict)."""

    name = "predicted"

    def __init__(self, space: ParameterSpace, *, predictor: Predictor, pool: int = 16,
                 seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self.predictor = predictor
        self.pool = pool
        #: seconds of predictions (default :data:`RANKING_SECONDS`)
        self.seconds = RANKING_SECONDS if seconds is None else seconds
        self._random = RandomSearch(space, seed=self.seed, default=self.default,
                                    measured=set(self.seen))
        self._ranked: Iterator[Config] | None = None
        self._default_done = self.default is None
        #: (configuration, predicted seconds or None) in the order they will be measured
        self.ranking: list[tuple[Config, float | None]] = []

    def rank(self) -> list[tuple[Config, float | None]]:
        """The pool, best predicted first (computed once)."""
        if self._ranked is None:
            pool: list[Config] = []
            while len(pool) < self.pool:
                config = self._random.ask()
                if config is None:
                    break
                pool.append(config)
            times = self.predictor(pool, self.seconds)
            scored = [(t if t is not None else math.inf, i, c, t)
                      for i, (c, t) in enumerate(zip(pool, times, strict=True))]
            scored.sort(key=lambda s: (s[0], s[1]))
            self.ranking = [(c, t) for _, _, c, t in scored]
            self._ranked = iter([c for c, _ in self.ranking])
        return self.ranking

    def ask(self) -> Config | None:
        if not self._default_done:
            self._default_done = True
            if self.default is not None and self._fresh(self.default):
                return self._take(self.default)
        self.rank()
        if self._ranked is not None:
            for config in self._ranked:
                if self._fresh(config):
                    return self._take(config)
        while True:
            nxt = self._random.ask()
            if nxt is None:
                return None
            if self._fresh(nxt):
                return self._take(nxt)


def predictor_for(recipe: Any, spec: Any, device: Any, lengths: Mapping[str, int],
                  workers: int = 1) -> Predictor | None:
    """A :data:`Predictor` of *recipe*'s configurations of canonical *spec* at *lengths* on
    *device* (a ``DeviceInfo``), in *workers* spawned processes (1: in this one); None when
    the performance model does not describe the device (a CPU, a GPU without a model)."""
    from feinsum.errors import FeinsumError
    from feinsum.prediction import hardware_for

    try:
        hardware_for(device)
    except FeinsumError:
        return None
    from feinsum.spec.serialize import spec_to_json

    name, source, version = recipe.name, str(recipe.source_path or ""), recipe.version
    spec_json = spec_to_json(spec)

    def predict(configs: Sequence[Mapping[str, Any]], seconds: float) -> list[float | None]:
        deadline = time.monotonic() + seconds
        if workers <= 1:
            return [_predict_here(recipe, spec, device, lengths, c)
                    if time.monotonic() < deadline else None for c in configs]
        pool = seeded_pool(workers)
        futures = [pool.submit(_predict_job, name, source, version, spec_json, device,
                               dict(lengths), dict(c)) for c in configs]
        done, late = concurrent.futures.wait(futures, max(0.0, deadline - time.monotonic()))
        for f in late:
            f.cancel()
        return [f.result() if f in done and f.exception() is None else None
                for f in futures]

    return predict


def _predict_here(recipe: Any, spec: Any, device: Any, lengths: Mapping[str, int],
                  config: Mapping[str, Any]) -> float | None:
    from feinsum.prediction import predict_configuration

    try:
        return predict_configuration(recipe, spec, config, device, lengths).seconds
    except Exception:  # a configuration the model cannot read: measured unranked
        return None


def _predict_job(name: str, source: str, version: str, spec_json: dict[str, Any], device: Any,
                 lengths: Mapping[str, int], config: Mapping[str, Any]) -> float | None:
    """One prediction in a worker process: the recipe loaded again (by name, from its
    directory), None if that is not the same version."""
    from pathlib import Path

    from feinsum.recipes import get_recipe
    from feinsum.spec.serialize import spec_from_json

    try:
        recipe = get_recipe(name, [str(Path(source).parent)] if source else None)
    except Exception:
        return None
    if recipe.version != version:
        return None
    return _predict_here(recipe, spec_from_json(spec_json), device, lengths, config)


"""Candidates measured in the performance model's order (:class:`Predicted`).

On a GPU the performance model describes (:func:`feinsum.prediction.hardware_for`), the
tuner's ``auto`` strategy ranks a pool of each recipe's configurations by their predicted
time before measuring any: the recipe's default and random valid configurations, up to
:func:`pool_size` of them, predicted for at most :data:`RANKING_SECONDS` (what is not
predicted by then, or cannot be, follows in its random order). The budget is then spent on
the best-predicted first; when the pool is spent, random configurations follow.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from feinsum.recipes import Config, ParameterSpace
from feinsum.tuning.strategies import RandomSearch, Strategy

#: Seconds one recipe's ranking may take (a prediction takes about one to five).
RANKING_SECONDS = 20.0

Predictor = Callable[[Mapping[str, Any]], float | None]


def pool_size(share: int | None) -> int:
    """Configurations ranked for a recipe whose share of the budget is *share*."""
    return max(12, 4 * (share or 4))


class Predicted(Strategy):
    """The default and random configurations, best predicted first (*predictor*: a
    configuration's predicted seconds, None if it cannot be predicted)."""

    name = "predicted"

    def __init__(self, space: ParameterSpace, *, predictor: Predictor, pool: int = 16,
                 seconds: float = RANKING_SECONDS, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self.predictor = predictor
        self.pool = pool
        self.seconds = seconds
        self._random = RandomSearch(space, seed=self.seed, default=self.default,
                                    measured=set(self.seen))
        self._ranked: Iterator[Config] | None = None
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
            deadline = time.monotonic() + self.seconds
            scored: list[tuple[float, int, Config, float | None]] = []
            for i, config in enumerate(pool):
                t = self.predictor(config) if time.monotonic() < deadline else None
                scored.append((t if t is not None else math.inf, i, config, t))
            scored.sort(key=lambda s: (s[0], s[1]))
            self.ranking = [(c, t) for _, _, c, t in scored]
            self._ranked = iter([c for c, _ in self.ranking])
        return self.ranking

    def ask(self) -> Config | None:
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


def predictor_for(recipe: Any, spec: Any, device: Any, lengths: Mapping[str, int]
                  ) -> Predictor | None:
    """Predicted seconds of *recipe*'s configurations of canonical *spec* at *lengths* on
    *device* (a ``DeviceInfo``); None when the performance model does not describe the
    device (a CPU, a GPU without a model)."""
    from feinsum.errors import FeinsumError
    from feinsum.prediction import hardware_for, predict_configuration

    try:
        hardware_for(device)
    except FeinsumError:
        return None

    def predict(config: Mapping[str, Any]) -> float | None:
        try:
            return predict_configuration(recipe, spec, config, device, lengths).seconds
        except Exception:  # a configuration the model cannot read: measured unranked
            return None

    return predict

"""Search strategies over one recipe's :class:`~feinsum.recipes.ParameterSpace`.

A strategy proposes configurations (:meth:`Strategy.ask`) and is told the measured time
(:meth:`Strategy.tell`, ``None`` for a failure). It never proposes a configuration it was
told is already measured (``measured``, e.g. the database's records) nor one it proposed
before. Three strategies:

* :class:`Exhaustive`: every valid configuration, the recipe's default first;
* :class:`RandomSearch`: valid configurations in a seeded random order, default first;
* :class:`ModelBased`: optuna's TPE sampler through its ask/tell interface, seeded with the
  default (evaluated first) and with the known results (added as finished trials).
  Ordered parameters (integer ranges, powers of two, tuple entries) are searched as
  ordinal indices, so the model sees that 16 lies between 8 and 32; choices and booleans
  are categorical. A proposal that violates a constraint is told as a failure at once (the
  model learns the region is bad) and another is asked for.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from feinsum.errors import TuningError
from feinsum.recipes import (
    Boolean,
    Choice,
    Config,
    IntRange,
    Parameter,
    ParameterSpace,
    PowersOfTwo,
    TupleOf,
)

#: The objective told to the model for failures and constraint violations (values are
#: log-seconds; TPE only ranks them, so any value above all real ones works).
FAILURE_VALUE = 1e3
#: A space with at most this many configurations (before constraints) is enumerated.
ENUMERATE_LIMIT = 20_000


def config_key(space: ParameterSpace, config: Mapping[str, Any]) -> str:
    """The canonical JSON of a valid configuration (what the database stores)."""
    return space.canonical(config)


def valid_count(space: ParameterSpace, limit: int = ENUMERATE_LIMIT) -> int | None:
    """The number of valid configurations, or None if the space is too large to count."""
    if space.size > limit:
        return None
    return sum(1 for _ in space.enumerate())


def restrict(space: ParameterSpace, fixed: Mapping[str, Any]) -> ParameterSpace:
    """*space* with the parameters in *fixed* pinned to one value (constraints kept)."""
    unknown = set(fixed) - set(space.params)
    if unknown:
        raise TuningError(f"cannot fix unknown parameter(s) {', '.join(sorted(unknown))}; "
                          f"the space has {', '.join(space.names)}")
    params = dict(space.params)
    for name, value in fixed.items():
        try:
            v = params[name].normalize(value)
        except (ValueError, TypeError) as exc:
            raise TuningError(f"cannot fix {name}={value!r}: {exc}") from None
        params[name] = (TupleOf(*(Choice([x]) for x in v)) if isinstance(v, tuple)
                        else Choice([v]))
    return ParameterSpace(params, space.constraints)


class Strategy(ABC):
    """Proposes configurations of *space*, skipping those in *measured* (canonical JSON)."""

    name = "strategy"

    def __init__(self, space: ParameterSpace, *, seed: int = 0,
                 default: Mapping[str, Any] | None = None,
                 measured: Iterable[str] = (),
                 known: Iterable[tuple[Mapping[str, Any], float | None]] = ()) -> None:
        self.space = space
        self.seed = seed
        self.default = dict(default) if default is not None else None
        self.seen: set[str] = set(measured)
        self.known = [(dict(p), v) for p, v in known]
        self.seen.update(k for k in (self._key(p) for p, _ in self.known) if k is not None)

    def _key(self, config: Mapping[str, Any]) -> str | None:
        try:
            return config_key(self.space, config)
        except Exception:  # a record from an older space: not a member any more
            return None

    def _fresh(self, config: Mapping[str, Any]) -> bool:
        key = self._key(config)
        return key is not None and key not in self.seen

    def _take(self, config: Mapping[str, Any]) -> Config:
        """Mark a fresh (valid, unseen) configuration proposed; its normalised form."""
        self.seen.add(self.space.canonical(config))
        return self.space.validate(config)

    @abstractmethod
    def ask(self) -> Config | None:
        """The next configuration to measure, or None when the space is exhausted."""

    def tell(self, config: Mapping[str, Any], seconds: float | None) -> None:  # noqa: B027
        """The time of *config* (``None``: it failed); the default ignores it."""


class _OrderedStrategy(Strategy):
    """Proposes the default, then configurations from :meth:`_order` not yet seen."""

    def __init__(self, space: ParameterSpace, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._iter: Iterator[Config] | None = None
        self._default_done = self.default is None

    @abstractmethod
    def _order(self) -> Iterator[Config]: ...

    def ask(self) -> Config | None:
        if not self._default_done:
            self._default_done = True
            if self.default is not None and self._fresh(self.default):
                return self._take(self.default)
        if self._iter is None:
            self._iter = self._order()
        for config in self._iter:
            if self._fresh(config):
                return self._take(config)
        return None


class Exhaustive(_OrderedStrategy):
    """Every valid configuration in declared order (the default first)."""

    name = "exhaustive"

    def _order(self) -> Iterator[Config]:
        return self.space.enumerate()


class RandomSearch(_OrderedStrategy):
    """Valid configurations in a random order fixed by *seed* (the default first), so a
    resumed run continues the same sequence."""

    name = "random"

    def _order(self) -> Iterator[Config]:
        rng = np.random.default_rng(self.seed)
        if self.space.size <= ENUMERATE_LIMIT:
            pool = list(self.space.enumerate())
            for k in rng.permutation(len(pool)):
                yield pool[int(k)]
            return
        misses = 0
        while misses < 1000:
            try:
                config = self.space.sample(rng)
            except Exception:
                return
            if self._fresh(config):
                misses = 0
                yield config
            else:
                misses += 1


# {{{ model-based (optuna TPE)


class _Encoding:
    """Maps configurations to optuna parameters and back (ordinal indices for ordered
    parameters, categories for choices; tuple entries flattened)."""

    def __init__(self, space: ParameterSpace) -> None:
        from optuna.distributions import CategoricalDistribution, IntDistribution

        self.slots: list[tuple[str, int | None, Parameter]] = []
        for name, p in space.params.items():
            if isinstance(p, TupleOf):
                self.slots.extend((name, k, e) for k, e in enumerate(p.elements))
            else:
                self.slots.append((name, None, p))
        self.distributions: dict[str, Any] = {}
        for name, k, p in self.slots:
            vals = p.values()
            if _ordered(p):
                dist: Any = IntDistribution(0, len(vals) - 1)
            else:
                dist = CategoricalDistribution(list(range(len(vals))))
            self.distributions[_slot_name(name, k)] = dist

    def encode(self, config: Mapping[str, Any]) -> dict[str, int]:
        out = {}
        for name, k, p in self.slots:
            v = config[name] if k is None else tuple(config[name])[k]
            out[_slot_name(name, k)] = list(p.values()).index(p.normalize(v))
        return out

    def decode(self, params: Mapping[str, int]) -> Config:
        config: dict[str, Any] = {}
        for name, k, p in self.slots:
            v = p.values()[int(params[_slot_name(name, k)])]
            if k is None:
                config[name] = v
            else:
                config[name] = (*config.get(name, ()), v)
        return config


def _ordered(p: Parameter) -> bool:
    if isinstance(p, (IntRange, PowersOfTwo)):
        return True
    if isinstance(p, (Boolean, TupleOf)):
        return False
    if isinstance(p, Choice):
        vals = p.values()
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
        return numeric and list(vals) == sorted(vals) and len(vals) > 2
    return False


def _slot_name(name: str, k: int | None) -> str:
    return name if k is None else f"{name}[{k}]"


class ModelBased(Strategy):
    """optuna's TPE sampler (multivariate, constant liar for proposals in flight) through
    ask/tell, with local refinement: the default is evaluated first, known results seed the
    model, and every *local_every*-th proposal (once *n_startup* results are in) is an
    unseen neighbour of the best configuration so far (one parameter one step away), which
    finds the last few percent TPE's density model leaves on the table."""

    name = "model"

    def __init__(self, space: ParameterSpace, *, n_startup: int = 8, local_every: int = 4,
                 max_retries: int = 200, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._enc = _Encoding(space)
        sampler = optuna.samplers.TPESampler(
            seed=self.seed, n_startup_trials=n_startup, multivariate=True,
            constant_liar=True,
        )
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._pending: dict[str, Any] = {}  # key -> its optuna trial (None: not asked of it)
        self._values: dict[str, float] = {}  # key -> objective told
        self._best: tuple[float, Config] | None = None
        self._n_startup, self._local_every, self._asked = n_startup, local_every, 0
        self._max_retries = max_retries
        self._rng = np.random.default_rng(self.seed + 7919)
        for config, value in self.known:
            self._add(config, value)
        if self.default is not None and self._fresh(self.default):
            self.study.enqueue_trial(self._enc.encode(self.space.validate(self.default)))

    def _note(self, config: Mapping[str, Any], seconds: float | None) -> None:
        key = self._key(config)
        if key is None:
            return
        self._values[key] = _objective(seconds)
        if seconds is not None and (self._best is None or seconds < self._best[0]):
            self._best = (seconds, self.space.validate(config))

    def _add(self, config: Mapping[str, Any], seconds: float | None) -> None:
        import optuna

        try:
            params = self._enc.encode(config)
        except (KeyError, ValueError, TypeError):
            return  # not in this space
        self.study.add_trial(optuna.trial.create_trial(
            params=params, distributions=self._enc.distributions, value=_objective(seconds)))
        self._note(config, seconds)

    def _neighbour(self) -> Config | None:
        """An unseen neighbour of the best configuration so far, if it is time for one."""
        self._asked += 1
        if (self._best is None or len(self._values) < self._n_startup
                or self._asked % self._local_every):
            return None
        return next((c for c in self.space.neighbors(self._best[1]) if self._fresh(c)), None)

    def ask(self) -> Config | None:
        import optuna

        local = self._neighbour()
        if local is not None:
            self._pending[self.space.canonical(local)] = None
            return self._take(local)
        for _ in range(self._max_retries):
            trial = self.study.ask(self._enc.distributions)
            config = self._enc.decode(trial.params)
            key = self._key(config)
            if key is None:  # violates a constraint: a failure, at once
                self.study.tell(trial, FAILURE_VALUE)
            elif key in self._values:  # proposed again: what is known of it
                self.study.tell(trial, self._values[key])
            elif key in self.seen:  # in flight (or measured without a result here)
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                self._pending[key] = trial
                return self._take(config)
        # the model keeps proposing what is known: fall back to an unseen random one
        fallback = RandomSearch(self.space, seed=int(self._rng.integers(2**31)),
                                measured=self.seen).ask()
        if fallback is None:
            return None
        self._pending[self.space.canonical(fallback)] = None
        return self._take(fallback)

    def tell(self, config: Mapping[str, Any], seconds: float | None) -> None:
        key = self._key(config)
        if key is None:
            return
        trial = self._pending.pop(key, None)
        if trial is None:
            self._add(config, seconds)
        else:
            self.study.tell(trial, _objective(seconds))
            self._note(config, seconds)


def _objective(seconds: float | None) -> float:
    return FAILURE_VALUE if seconds is None or not seconds > 0 else math.log(seconds)


# }}}


STRATEGIES: dict[str, type[Strategy]] = {
    "exhaustive": Exhaustive,
    "random": RandomSearch,
    "model": ModelBased,
}


def make_strategy(kind: str, space: ParameterSpace, **kwargs: Any) -> Strategy:
    """A strategy by name (``exhaustive``, ``random`` or ``model``)."""
    try:
        cls = STRATEGIES[kind]
    except KeyError:
        raise TuningError(
            f"unknown strategy {kind!r}; one of {', '.join(STRATEGIES)} or 'auto'") from None
    return cls(space, **kwargs)


# vim: foldmethod=marker

"""Parameter spaces: the typed, finite sets of configurations a recipe may be applied with.

A configuration is a JSON object (a ``dict`` of name -> JSON value). A
:class:`ParameterSpace` holds one :class:`Parameter` per name and a list of named
:class:`Constraint` predicates between parameters and against the device. Every
parameter type can enumerate its values, sample one, tell whether it contains a
value, list a value's neighbours (for local search) and describe itself as JSON.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from feinsum.errors import InvalidConfigurationError, RecipeFailure

Config: TypeAlias = dict[str, Any]


def canonical_json(config: Mapping[str, Any]) -> str:
    """The canonical JSON text of a configuration: sorted keys, no spaces (for dedup and
    database keys). Tuples are written as JSON lists."""
    return json.dumps(dict(config), sort_keys=True, separators=(",", ":"))


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


# {{{ parameter types


class Parameter(ABC):
    """One parameter's set of values. Subclasses are immutable and finite."""

    @abstractmethod
    def values(self) -> tuple[Any, ...]:
        """Every value, in increasing/declared order."""

    def enumerate(self) -> Iterator[Any]:
        return iter(self.values())

    def __len__(self) -> int:
        return len(self.values())

    def sample(self, rng: np.random.Generator) -> Any:
        vals = self.values()
        return vals[int(rng.integers(len(vals)))]

    def normalize(self, value: Any) -> Any:
        """*value* in this parameter's Python form (JSON lists become tuples, numpy ints
        become ints); raises ``ValueError`` saying why a value is not in the set."""
        if value not in self.values():
            raise ValueError(f"{value!r} is not one of {self.describe()}")
        return value

    def contains(self, value: Any) -> bool:
        try:
            self.normalize(value)
        except (ValueError, TypeError):
            return False
        return True

    def neighbors(self, value: Any) -> list[Any]:
        """Values next to *value* (the previous and next in order): moves for local search."""
        vals = list(self.values())
        k = vals.index(self.normalize(value))
        return [vals[j] for j in (k - 1, k + 1) if 0 <= j < len(vals)]

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """A JSON description, read back by :func:`parameter_from_json`."""

    @abstractmethod
    def describe(self) -> str:
        """Short human-readable text of the set."""

    def __repr__(self) -> str:
        return self.describe()


@dataclass(frozen=True, repr=False)
class IntRange(Parameter):
    """The integers ``lo, lo + step, ..., <= hi`` (both ends inclusive)."""

    lo: int
    hi: int
    step: int = 1

    def __post_init__(self) -> None:
        if not (_is_int(self.lo) and _is_int(self.hi) and _is_int(self.step)) or self.step < 1:
            raise ValueError(f"IntRange({self.lo!r}, {self.hi!r}, {self.step!r}): bad bounds")
        if self.hi < self.lo:
            raise ValueError(f"IntRange({self.lo}, {self.hi}): empty range")

    def values(self) -> tuple[int, ...]:
        return tuple(range(self.lo, self.hi + 1, self.step))

    def __len__(self) -> int:
        return (self.hi - self.lo) // self.step + 1

    def normalize(self, value: Any) -> int:
        if not _is_int(value):
            raise TypeError(f"{value!r} is not an integer")
        v = int(value)
        if not (self.lo <= v <= self.hi) or (v - self.lo) % self.step:
            raise ValueError(f"{v} is not in {self.describe()}")
        return v

    def sample(self, rng: np.random.Generator) -> int:
        return self.lo + self.step * int(rng.integers(len(self)))

    def neighbors(self, value: Any) -> list[int]:
        v = self.normalize(value)
        return [w for w in (v - self.step, v + self.step) if self.lo <= w <= self.hi]

    def to_json(self) -> dict[str, Any]:
        return {"type": "IntRange", "lo": self.lo, "hi": self.hi, "step": self.step}

    def describe(self) -> str:
        step = "" if self.step == 1 else f" step {self.step}"
        return f"integers {self.lo}..{self.hi}{step}"


@dataclass(frozen=True, repr=False)
class PowersOfTwo(Parameter):
    """The powers of two ``lo <= 2**k <= hi`` (*lo* and *hi* powers of two)."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        for v in (self.lo, self.hi):
            if not _is_int(v) or v < 1 or v & (v - 1):
                raise ValueError(
                    f"PowersOfTwo({self.lo!r}, {self.hi!r}): {v!r} is not a power of two"
                )
        if self.hi < self.lo:
            raise ValueError(f"PowersOfTwo({self.lo}, {self.hi}): empty")

    def values(self) -> tuple[int, ...]:
        return tuple(1 << k for k in range(self.lo.bit_length() - 1, self.hi.bit_length()))

    def normalize(self, value: Any) -> int:
        if not _is_int(value):
            raise TypeError(f"{value!r} is not an integer")
        v = int(value)
        if v < self.lo or v > self.hi or v & (v - 1):
            raise ValueError(f"{v} is not in {self.describe()}")
        return v

    def to_json(self) -> dict[str, Any]:
        return {"type": "PowersOfTwo", "lo": self.lo, "hi": self.hi}

    def describe(self) -> str:
        return f"powers of two {self.lo}..{self.hi}"


_JSON_SCALARS = (str, int, float, bool, type(None))


@dataclass(frozen=True, repr=False)
class Choice(Parameter):
    """One of a list of JSON scalars (strings, numbers, booleans, null), in declared order."""

    options: tuple[Any, ...]

    def __init__(self, options: Sequence[Any]) -> None:
        opts = tuple(int(o) if _is_int(o) else o for o in options)
        if not opts:
            raise ValueError("Choice() needs at least one option")
        for o in opts:
            if not isinstance(o, _JSON_SCALARS):
                raise ValueError(f"Choice option {o!r} is not a JSON scalar")
        if len({canonical_json({"v": o}) for o in opts}) != len(opts):
            raise ValueError(f"Choice{opts!r}: repeated option")
        object.__setattr__(self, "options", opts)

    def values(self) -> tuple[Any, ...]:
        return self.options

    def normalize(self, value: Any) -> Any:
        for o in self.options:
            # 1 == True in Python: compare types too
            if o == value and isinstance(value, bool) == isinstance(o, bool):
                return o
        raise ValueError(f"{value!r} is not {self.describe()}")

    def to_json(self) -> dict[str, Any]:
        return {"type": "Choice", "options": list(self.options)}

    def describe(self) -> str:
        return "one of " + ", ".join(json.dumps(o) for o in self.options)


@dataclass(frozen=True, repr=False)
class Boolean(Parameter):
    """``False`` or ``True``."""

    def values(self) -> tuple[bool, ...]:
        return (False, True)

    def normalize(self, value: Any) -> bool:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{value!r} is not a boolean")
        return bool(value)

    def to_json(self) -> dict[str, Any]:
        return {"type": "Boolean"}

    def describe(self) -> str:
        return "a boolean"


@dataclass(frozen=True, repr=False)
class TupleOf(Parameter):
    """A tuple with one value from each element parameter (JSON: a list).
    ``TupleOf.repeat(PowersOfTwo(1, 8), 3)`` is three powers of two."""

    elements: tuple[Parameter, ...]

    def __init__(self, *elements: Parameter) -> None:
        if len(elements) == 1 and isinstance(elements[0], (tuple, list)):
            elements = tuple(elements[0])
        if not all(isinstance(p, Parameter) for p in elements):
            raise ValueError(f"TupleOf{elements!r}: elements must be parameters")
        object.__setattr__(self, "elements", tuple(elements))

    @classmethod
    def repeat(cls, element: Parameter, n: int) -> TupleOf:
        return cls(*([element] * n))

    def values(self) -> tuple[tuple[Any, ...], ...]:
        return tuple(itertools.product(*(p.values() for p in self.elements)))

    def __len__(self) -> int:
        return math.prod(len(p) for p in self.elements)

    def enumerate(self) -> Iterator[tuple[Any, ...]]:
        return itertools.product(*(p.enumerate() for p in self.elements))

    def sample(self, rng: np.random.Generator) -> tuple[Any, ...]:
        return tuple(p.sample(rng) for p in self.elements)

    def normalize(self, value: Any) -> tuple[Any, ...]:
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"{value!r} is not a tuple/list")
        if len(value) != len(self.elements):
            raise ValueError(f"{value!r} has {len(value)} entries, expected {len(self.elements)}")
        out = []
        for k, (p, v) in enumerate(zip(self.elements, value, strict=True)):
            try:
                out.append(p.normalize(v))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"entry {k}: {exc}") from None
        return tuple(out)

    def neighbors(self, value: Any) -> list[tuple[Any, ...]]:
        v = self.normalize(value)
        return [
            (*v[:k], w, *v[k + 1:]) for k, p in enumerate(self.elements) for w in p.neighbors(v[k])
        ]

    def to_json(self) -> dict[str, Any]:
        return {"type": "TupleOf", "elements": [p.to_json() for p in self.elements]}

    def describe(self) -> str:
        return "(" + ", ".join(p.describe() for p in self.elements) + ")"


_TYPES: dict[str, Callable[[dict[str, Any]], Parameter]] = {
    "IntRange": lambda d: IntRange(d["lo"], d["hi"], d.get("step", 1)),
    "PowersOfTwo": lambda d: PowersOfTwo(d["lo"], d["hi"]),
    "Choice": lambda d: Choice(d["options"]),
    "Boolean": lambda d: Boolean(),
    "TupleOf": lambda d: TupleOf(*(parameter_from_json(e) for e in d["elements"])),
}


def parameter_from_json(d: Mapping[str, Any]) -> Parameter:
    """Read back a :meth:`Parameter.to_json` description."""
    try:
        return _TYPES[d["type"]](dict(d))
    except KeyError as exc:
        raise ValueError(f"not a parameter description: {d!r}") from exc


# }}}


# {{{ constraints and spaces


@dataclass(frozen=True)
class Constraint:
    """A named predicate a configuration must satisfy, e.g.
    ``Constraint("work_group_size", lambda p: p["lx"] * p["ly"] <= device.max_work_group_size,
    "lx*ly <= the device's max_work_group_size")``.

    *predicate* receives the normalised configuration and returns whether it is
    satisfied; *explain*, if given, returns the detail of a violation (with the numbers).
    """

    name: str
    predicate: Callable[[Config], bool]
    description: str = ""
    explain: Callable[[Config], str] | None = None

    def message(self, config: Config) -> str:
        text = f"violates constraint {self.name!r}"
        if self.description:
            text += f" ({self.description})"
        if self.explain is not None:
            with contextlib.suppress(Exception):  # the explanation is best-effort
                text += f": {self.explain(config)}"
        return text


def at_most(name: str, value: Callable[[Config], float],
            limit: float | Callable[[Config], float], what: str) -> Constraint:
    """A constraint ``value(config) <= limit`` whose violation message gives both numbers,
    e.g. ``at_most("work_group_size", lambda p: p["lx"] * p["ly"],
    device.max_work_group_size, "work-items per group <= max_work_group_size")``; *limit*
    may depend on the configuration (a function of it)."""
    def bound(p: Config) -> float:
        return limit(p) if callable(limit) else limit

    return Constraint(
        name, lambda p: value(p) <= bound(p), what, lambda p: f"{value(p)} > {bound(p)}"
    )


class ParameterSpace:
    """Named parameters and the constraints a configuration must satisfy.

    Every parameter is always present in a configuration (a parameter that does
    not matter for some other choice is ignored by the recipe there).
    """

    def __init__(
        self,
        params: Mapping[str, Parameter] | None = None,
        constraints: Sequence[Constraint] = (),
        **kwargs: Parameter,
    ) -> None:
        merged = dict(params or {})
        merged.update(kwargs)
        for name, p in merged.items():
            if not isinstance(p, Parameter):
                raise TypeError(f"parameter {name!r}: {p!r} is not a Parameter")
        names = [c.name for c in constraints]
        if len(set(names)) != len(names):
            raise ValueError(f"constraint names repeat: {names}")
        self.params: dict[str, Parameter] = merged
        self.constraints: tuple[Constraint, ...] = tuple(constraints)

    def __repr__(self) -> str:
        ps = ", ".join(f"{k}={p.describe()}" for k, p in self.params.items())
        cs = ", ".join(c.name for c in self.constraints)
        return f"ParameterSpace({ps}; constraints: {cs or 'none'})"

    def __contains__(self, config: object) -> bool:
        return isinstance(config, Mapping) and not self.violations(config)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.params)

    @property
    def size(self) -> int:
        """Number of configurations before constraints (an upper bound on the valid ones)."""
        return math.prod(len(p) for p in self.params.values())

    def constrain(self, *constraints: Constraint) -> ParameterSpace:
        """A copy with more constraints."""
        return ParameterSpace(self.params, (*self.constraints, *constraints))

    def violations(self, config: Mapping[str, Any]) -> list[str]:
        """Why *config* is not valid (empty when it is)."""
        problems = [f"unknown parameter {k!r}" for k in config if k not in self.params]
        problems += [f"missing parameter {k!r}" for k in self.params if k not in config]
        normal: Config = {}
        for k, p in self.params.items():
            if k in config:
                try:
                    normal[k] = p.normalize(config[k])
                except (ValueError, TypeError) as exc:
                    problems.append(f"parameter {k!r}: {exc}")
        if problems:
            return problems
        for c in self.constraints:
            try:
                ok = c.predicate(normal)
            except Exception as exc:  # a bug in the recipe, not a property of the config
                raise RecipeFailure(
                    f"constraint {c.name!r} raised {type(exc).__name__}: {exc} on "
                    f"{canonical_json(_jsonable(normal))}"
                ) from exc
            if not ok:
                problems.append(c.message(normal))
        return problems

    def validate(self, config: Mapping[str, Any], what: str = "configuration") -> Config:
        """The normalised configuration (tuples for :class:`TupleOf`, keys in declared order),
        or :class:`~feinsum.InvalidConfigurationError` naming every problem."""
        if not isinstance(config, Mapping):
            raise InvalidConfigurationError(f"{what}: {config!r} is not a JSON object (a dict)")
        problems = self.violations(config)
        if problems:
            raise InvalidConfigurationError(
                f"{what} {canonical_json(_jsonable(config))} is invalid: " + "; ".join(problems)
            )
        return {k: p.normalize(config[k]) for k, p in self.params.items()}

    def is_valid(self, config: Mapping[str, Any]) -> bool:
        return not self.violations(config)

    def enumerate(self, valid_only: bool = True) -> Iterator[Config]:
        """Every configuration (in declared order, the last parameter varying fastest)."""
        names = list(self.params)
        for combo in itertools.product(*(p.enumerate() for p in self.params.values())):
            config = dict(zip(names, combo, strict=True))
            if not valid_only or self.is_valid(config):
                yield config

    def sample(
        self, rng: np.random.Generator | int | None = None, n: int | None = None,
        max_tries: int = 2_000,
    ) -> Any:
        """A random valid configuration (or a list of *n* distinct ones, fewer if the space
        has fewer). A small space is enumerated; otherwise rejection sampling, then (for
        spaces whose constraints reject almost everything) a randomised depth-first search
        that checks each constraint as soon as the parameters it reads are chosen."""
        rng = np.random.default_rng(rng)
        count = 1 if n is None else n
        if self.size <= 4 * max(count, 256):
            pool = list(self.enumerate())
            picks = rng.permutation(len(pool))[:count]
            out = [pool[int(k)] for k in picks]
        else:
            out, seen = [], set()

            def keep(config: Config | None) -> None:
                key = canonical_json(_jsonable(config)) if config is not None else None
                if config is not None and key not in seen and self.is_valid(config):
                    seen.add(key)
                    out.append(config)

            for _ in range(max_tries):
                keep({k: p.sample(rng) for k, p in self.params.items()})
                if len(out) == count:
                    break
            for _ in range(4 * (count - len(out))):
                if len(out) == count:
                    break
                keep(self._search(rng))
        if not out:
            raise InvalidConfigurationError(f"{self!r} has no valid configuration")
        return out[0] if n is None else out

    def _search(self, rng: np.random.Generator, budget: int = 20_000) -> Config | None:
        """A valid configuration by randomised depth-first search (None if none is found
        within *budget* partial configurations)."""
        names = list(self.params)
        steps = [0]

        def decided_ok(partial: Config) -> bool:
            view = _Partial(partial)
            for c in self.constraints:
                try:
                    if not c.predicate(view):
                        return False
                except Exception:  # reads an unchosen parameter: not decided yet
                    continue
            return True

        def rec(k: int, partial: Config) -> Config | None:
            if k == len(names):
                return dict(partial)
            values = list(self.params[names[k]].values())
            for j in rng.permutation(len(values)):
                steps[0] += 1
                if steps[0] > budget:
                    return None
                partial[names[k]] = values[int(j)]
                if decided_ok(partial) and (found := rec(k + 1, partial)) is not None:
                    return found
            del partial[names[k]]
            return None

        return rec(0, {})

    def neighbors(self, config: Mapping[str, Any]) -> list[Config]:
        """Valid configurations differing from *config* in one parameter by one step."""
        base = self.validate(config)
        out = []
        for k, p in self.params.items():
            for v in p.neighbors(base[k]):
                cand = {**base, k: v}
                if self.is_valid(cand):
                    out.append(cand)
        return out

    def to_json(self) -> dict[str, Any]:
        """JSON description: parameter types, and constraint names/descriptions (predicates
        are code and are not stored)."""
        return {
            "params": {k: p.to_json() for k, p in self.params.items()},
            "constraints": [{"name": c.name, "description": c.description}
                            for c in self.constraints],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ParameterSpace:
        """The parameters of a :meth:`to_json` description (without the constraints, which
        are code: get the space from the recipe to check them)."""
        return cls({k: parameter_from_json(v) for k, v in d["params"].items()})

    def to_jsonable(self, config: Mapping[str, Any]) -> Config:
        """*config* with tuples as lists, ready for ``json.dumps``."""
        return _jsonable(config)

    def canonical(self, config: Mapping[str, Any]) -> str:
        """The canonical JSON of a validated configuration."""
        return canonical_json(_jsonable(self.validate(config)))


class _Partial(dict):  # type: ignore[type-arg]
    """A partial configuration: reading an unchosen parameter raises (undecided)."""

    def __missing__(self, key: str) -> Any:
        raise LookupError(f"{key} not chosen yet")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


# }}}

# vim: foldmethod=marker

"""Checks of count, size and time arguments, worded the same wherever they are given.

The CLI (as argparse types: ``feinsum tune --workers -2`` is a usage error), the PLAN reader
(its lines are parsed by ``feinsum tune``'s parser) and the Python API
(:func:`feinsum.autotune`, :class:`~feinsum.timing.measurement.MeasureOptions`, the worker
pool, :func:`feinsum.revalidate`...) call these functions, so a bad value is refused before
anything starts, in the same words: ``workers must be a whole number from 1 to 256, got
-2``. Each raises :class:`~feinsum.errors.ArgumentError` naming the argument as the caller
spells it (``workers`` in Python); the argparse types at the end give argparse the same
words, which it prefixes with the option (``argument --workers: must be ...``).
"""

from __future__ import annotations

import argparse
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from feinsum.errors import ArgumentError

#: The most processes one option may start (tuning workers, code-generation jobs): each
#: is a Python interpreter that imports loopy.
MAX_PROCESSES = 256
#: The largest length: length symbols are ``int32`` kernel arguments.
MAX_LENGTH = 2**31 - 1
#: The most rows of a batched einsum (256 canonicalise in seconds; 100000 exhaust nauty).
MAX_ROWS = 256
#: The largest seed (optuna's samplers take seeds below 2**32).
MAX_SEED = 2**32 - 1


def _whole(value: Any) -> int | None:
    """*value* as an int if it is a whole number (text included), else None."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None
    return int(value)


def count_problem(value: Any, *, minimum: int = 1, maximum: int | None = None) -> str | None:
    """Why *value* (a number, or its text) is not a whole number in the range, or None."""
    n = _whole(value)
    wanted = (f"a whole number of at least {minimum}" if maximum is None
              else f"a whole number from {minimum} to {maximum}")
    if n is None or n < minimum or (maximum is not None and n > maximum):
        return f"must be {wanted}, {_got(value)}"
    return None


def _real(value: Any) -> float | None:
    """*value* as a finite float (text included), else None."""
    x: float | None
    if isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            x = None
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        x = None
    else:
        x = float(value)
    return x if x is not None and math.isfinite(x) else None


def _got(value: Any) -> str:
    return f"got {value!r}" if isinstance(value, str) else f"got {value}"


def seconds_problem(value: Any, *, zero: bool = False, unit: str = "seconds") -> str | None:
    """Why *value* (a number, or its text) is not a finite positive (*zero*: or zero)
    number of seconds (or of another *unit*), or None."""
    x = _real(value)
    if x is None or x < 0 or (x == 0 and not zero):
        wanted = f"a finite number of {unit}, 0 or more" if zero else (
            f"a finite positive number of {unit}")
        return f"must be {wanted}, {_got(value)}"
    return None


def number(name: str, value: Any) -> float:
    """*value* as a finite float, 0 or more (a ratio, a factor), or an
    :class:`ArgumentError`."""
    x = _real(value)
    if x is None or x < 0:
        raise ArgumentError(f"{name} must be a finite number, 0 or more, {_got(value)}")
    return x


def count(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    """*value* as an int, or an :class:`ArgumentError` naming *name* and the range."""
    problem = count_problem(value, minimum=minimum, maximum=maximum)
    if problem is not None:
        raise ArgumentError(f"{name} {problem}")
    return int(value)


def optional_count(name: str, value: Any, *, minimum: int = 1,
                   maximum: int | None = None) -> int | None:
    """:func:`count`, None passing through (the default)."""
    return None if value is None else count(name, value, minimum=minimum, maximum=maximum)


def processes(name: str, value: Any) -> int | None:
    """A count of worker processes (None: the default), 1 to :data:`MAX_PROCESSES`."""
    return optional_count(name, value, maximum=MAX_PROCESSES)


def seconds(name: str, value: Any, *, zero: bool = False) -> float:
    """*value* as a float of seconds, or an :class:`ArgumentError`."""
    problem = seconds_problem(value, zero=zero)
    if problem is not None:
        raise ArgumentError(f"{name} {problem}")
    return float(value)


def optional_seconds(name: str, value: Any, *, zero: bool = False) -> float | None:
    """:func:`seconds`, None passing through (no limit)."""
    return None if value is None else seconds(name, value, zero=zero)


def seed(name: str, value: Any) -> int:
    """A random seed: 0 to :data:`MAX_SEED`."""
    return count(name, value, minimum=0, maximum=MAX_SEED)


def lengths(name: str, values: Mapping[str, Any] | None) -> dict[str, int] | None:
    """Values of length symbols (``{"E": 50000}``), each 1 to :data:`MAX_LENGTH`."""
    if values is None:
        return None
    if not isinstance(values, Mapping):
        raise ArgumentError(f"{name} must map length symbols to lengths "
                            f"({{'E': 50000}}), got {values!r}")
    return {str(k): count(f"{name}: {k}", v, maximum=MAX_LENGTH) for k, v in values.items()}


# {{{ argparse types: a bad value is a usage error naming the option


def count_type(*, minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number in the range (:mod:`feinsum.checks`' wording)."""
    def parse(text: str) -> int:
        problem = count_problem(text, minimum=minimum, maximum=maximum)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return int(text)

    parse.__name__ = "N"  # argparse names the type in some messages
    return parse


def seconds_type(*, zero: bool = False, unit: str = "seconds") -> Callable[[str], float]:
    """An argparse type: a finite positive (*zero*: or zero) number of seconds (or of
    another *unit*)."""
    def parse(text: str) -> float:
        problem = seconds_problem(text, zero=zero, unit=unit)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return float(text)

    parse.__name__ = unit.upper()
    return parse


def processes_type() -> Callable[[str], int]:
    """An argparse type: a count of worker processes (1 to ``checks.MAX_PROCESSES``)."""
    return count_type(maximum=MAX_PROCESSES)


def seed_type() -> Callable[[str], int]:
    """An argparse type: a random seed (0 to ``checks.MAX_SEED``)."""
    return count_type(minimum=0, maximum=MAX_SEED)


# }}}

"""The autotuner: search strategies, budget shared by competing recipes, resume, progress.

:func:`autotune` is the entry point (``feinsum.autotune``); see ``docs/autotuning.rst``.
"""

from feinsum.tuning.session import DEFAULT_BUDGET, TuningResult, autotune
from feinsum.tuning.strategies import (
    STRATEGIES,
    Exhaustive,
    ModelBased,
    RandomSearch,
    Strategy,
    make_strategy,
)

__all__ = [
    "DEFAULT_BUDGET",
    "STRATEGIES",
    "Exhaustive",
    "ModelBased",
    "RandomSearch",
    "Strategy",
    "TuningResult",
    "autotune",
    "make_strategy",
]

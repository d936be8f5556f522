"""The compiler integration hook: every einsum of a loopy program, transformed by the best
record of the timing database.

* :func:`transform_program` — ``(t_unit, report)``; a structural cache keyed by the program,
  device, options and database revision makes a repeated call cheap;
* :class:`FeinsumTransformMixin` — ``transform_loopy_program`` for array contexts;
* :class:`HookReport`, :class:`GroupReport`, :class:`KernelReport` — what was applied,
  from which rung, and what was done to each kernel;
* :data:`PREFERENCE` — the recipe order of the ``"default"`` rung;
* :class:`TuningLock` — the cross-process lock that makes one process tune a spec.

See the compiler writer's guide (``docs/compiler-guide.rst``, "The hook").
"""

from feinsum.hook.choice import PREFERENCE, default_choices, ordered_recipes
from feinsum.hook.locks import TuningLock, lock_directory
from feinsum.hook.mixin import FeinsumTransformMixin
from feinsum.hook.program import ON_MISS, clear_cache, program_key, transform_program
from feinsum.hook.report import GroupReport, HookReport, KernelReport

__all__ = [
    "ON_MISS",
    "PREFERENCE",
    "FeinsumTransformMixin",
    "GroupReport",
    "HookReport",
    "KernelReport",
    "TuningLock",
    "clear_cache",
    "default_choices",
    "lock_directory",
    "ordered_recipes",
    "program_key",
    "transform_program",
]

"""The compiler integration hook: every einsum of a loopy program, transformed by the best
record of the timing database.

* :func:`transform_program` — ``(t_unit, report)``; caches keyed by the program, device,
  code and options (this process's, and a persistent one on disk: :mod:`feinsum.hook.store`)
  make a repeated call, and a later process's first, cheap;
* :class:`FeinsumTransformMixin` — ``transform_loopy_program`` for array contexts;
* :class:`HookReport`, :class:`GroupReport`, :class:`KernelReport` — what was applied,
  from which rung, what was done to each kernel, how long each phase took;
* :class:`HookWarning`, :class:`CacheWarning` — the hook left a program as it was, the
  persistent cache could not be read or written;
* :data:`PREFERENCE` — the recipe order of the ``"default"`` rung (:func:`preference`:
  as one einsum on one device takes it);
* :class:`TuningLock` — the cross-process lock that makes one process tune a spec (a
  :class:`FileLock`, which also makes one process transform a given program).

See the compiler writer's guide (``docs/compiler-guide.rst``, "The hook").
"""

from feinsum.hook.choice import PREFERENCE, default_choices, ordered_recipes, preference
from feinsum.hook.locks import FileLock, TuningLock, lock_directory
from feinsum.hook.mixin import FeinsumTransformMixin
from feinsum.hook.program import ON_MISS, clear_cache, program_key, transform_program
from feinsum.hook.report import GroupReport, HookReport, HookWarning, KernelReport
from feinsum.hook.store import CacheWarning

__all__ = [
    "ON_MISS",
    "PREFERENCE",
    "CacheWarning",
    "FeinsumTransformMixin",
    "FileLock",
    "GroupReport",
    "HookReport",
    "HookWarning",
    "KernelReport",
    "TuningLock",
    "clear_cache",
    "default_choices",
    "lock_directory",
    "ordered_recipes",
    "preference",
    "program_key",
    "transform_program",
]

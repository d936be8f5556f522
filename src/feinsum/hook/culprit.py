"""The einsum group whose code keeps a kernel from running, found by halves.

When the whole-program check (:mod:`feinsum.hook.check`) fails for a kernel with several
transformed groups, one group's code is usually the cause: a recipe's code the device's
compiler refuses, or a schedule loopy cannot find beside the others. Rather than lose
every group of the kernel, the groups are given back to the default schedule by halves,
as for a single culprit: ``ceil(log2 n) + 1`` attempts for ``n`` groups, each a
transformation of the kernel (the planner's parts are cached: assembly only) and a check.
The attempt that runs with the fewest groups given back is kept. If none runs (two
culprits, a failure only together, the time budget spent), the caller reverts the kernel
as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from feinsum.hook.report import GroupReport, KernelReport

#: a kernel transformed with some groups given back: (translation unit, its groups'
#: reports, the kernel's report)
Attempt = tuple[Any, list[GroupReport], KernelReport]


def without_culprit(groups: Sequence[GroupReport], why: str,
                    attempt: Callable[[dict[tuple[str, ...], str]], Attempt | None],
                    runs: Callable[[Attempt], bool]) -> Attempt | None:
    """The attempt that runs with the fewest of *groups*' transformed groups given back
    (see the module docstring), or None. *why*: what the check said of the kernel with
    all of them; *attempt*: the kernel transformed with the given groups (by statements)
    left to the default schedule for the given reasons (None: no time left to try);
    *runs*: whether an attempt passes the check."""
    suspects = [g.insn_ids for g in groups if g.transformed]
    if len(suspects) < 2:
        return None
    note = (f"given back to the default schedule: the transformed kernel could not run "
            f"({why}) until this group was given back")
    best: Attempt | None = None
    while True:
        half = suspects[:len(suspects) // 2] or suspects
        tried = attempt(dict.fromkeys(half, note))
        if tried is None:
            return best
        if runs(tried):
            best = tried
            if len(half) == 1:
                return best
            suspects = half
        elif len(suspects) == 1:
            return best
        else:
            suspects = suspects[len(suspects) // 2:]

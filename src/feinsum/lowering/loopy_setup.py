"""Process-wide loopy settings feinsum relies on.

loopy's scheduler stops at ``input("Enter:")`` when it finds no schedule for a kernel,
unless told otherwise. A recipe configuration that cannot be scheduled is an ordinary
outcome for an autotuner or a compiler hook (and a hang under MPI), so feinsum turns that
debugger prompt off: an unschedulable kernel raises loopy's error instead.
"""

from __future__ import annotations


def make_scheduler_noninteractive() -> None:
    """Make loopy's schedule debugger non-interactive (idempotent)."""
    from loopy.schedule import ScheduleDebugger

    defaults = ScheduleDebugger.__init__.__defaults__
    if defaults is not None and len(defaults) == 2:
        ScheduleDebugger.__init__.__defaults__ = (defaults[0], False)


make_scheduler_noninteractive()

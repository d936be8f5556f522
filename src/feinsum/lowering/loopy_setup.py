"""Process-wide loopy settings feinsum relies on.

loopy's scheduler stops at ``input("Enter:")`` when it finds no schedule for a kernel,
unless told otherwise. A recipe configuration that cannot be scheduled is an ordinary
outcome for an autotuner or a compiler hook (and a hang under MPI), so feinsum turns that
debugger prompt off: an unschedulable kernel raises loopy's error instead.

Before raising, loopy prints its report onto standard output: the scheduler a banner
("Sorry--loopy did not find a schedule") and its longest dead end, the checks the failing
translation unit, type inference and a few transformations what they could not do. On
standard output it would land in the middle of a command's table or its ``--json`` output,
or of the output of a program whose compiler called the hook. What those modules
(:data:`REPORTING_MODULES`) print while feinsum's own code is on the calling thread's
stack goes to the ``feinsum.loopy`` logger at debug level instead (feinsum reports the
failure in its own words); loopy's output for anyone else's call is left as it is.
"""

from __future__ import annotations

import builtins
import logging
import sys
from typing import Any

#: Where loopy's report goes when feinsum made the call.
LOG = logging.getLogger("feinsum.loopy")
#: loopy's modules that print a report onto standard output when they fail.
REPORTING_MODULES = ("loopy.schedule", "loopy.check", "loopy.type_inference",
                     "loopy.kernel.tools", "loopy.kernel.creation",
                     "loopy.transform.precompute")


def make_scheduler_noninteractive() -> None:
    """Make loopy's schedule debugger non-interactive (idempotent)."""
    from loopy.schedule import ScheduleDebugger

    defaults = ScheduleDebugger.__init__.__defaults__
    if defaults is not None and len(defaults) == 2:
        ScheduleDebugger.__init__.__defaults__ = (defaults[0], False)


def called_from_feinsum() -> bool:
    """Whether a frame of feinsum's own modules (this one aside) is on the calling
    thread's stack."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != __name__ and (name == "feinsum" or name.startswith("feinsum.")):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _report_print(*args: Any, sep: str | None = " ", end: str | None = "\n",
                  file: Any = None, flush: bool = False) -> None:
    """``print`` as loopy's :data:`REPORTING_MODULES` see it (see the module docstring)."""
    if (file is None or file is sys.stdout) and called_from_feinsum():
        LOG.debug("%s", (" " if sep is None else sep).join(map(str, args)))
        return
    builtins.print(*args, sep=sep, end=end, file=file, flush=flush)


def route_loopy_reports() -> None:
    """Send loopy's reports to :data:`LOG` in feinsum's calls (idempotent): the name
    ``print`` in the globals of each of :data:`REPORTING_MODULES` shadows the built-in
    there, and only there."""
    import importlib

    for name in REPORTING_MODULES:
        module = importlib.import_module(name)
        setattr(module, "print", _report_print)  # noqa: B010


make_scheduler_noninteractive()
route_loopy_reports()

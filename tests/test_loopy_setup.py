"""feinsum's process-wide loopy settings."""

import subprocess
import sys


def test_scheduler_never_prompts() -> None:
    code = (
        "import feinsum.lowering.kernel\n"
        "from loopy.schedule import ScheduleDebugger\n"
        "assert ScheduleDebugger().interactive is False\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

"""Running the command line in the test's process."""

from __future__ import annotations

import contextlib
import io


def run_cli(*argv: str) -> tuple[int, str, str]:
    """``feinsum ARGV`` in this process: (exit code, stdout, stderr)."""
    from feinsum.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()

"""What an OpenCL compiler prints to the process's stderr while it builds.

PoCL's compiler (clang) writes its diagnostics' summary, ``1 error generated.``, to file
descriptor 2 whatever the caller does, and the build log pyopencl raises repeats the
error itself. A refused build that feinsum handles (the hook's check keeps a smaller
transformation and reports why) then left that one line on the user's terminal, with
nothing to tie it to. :func:`compiler_output` captures descriptor 2 while a build runs;
:func:`echo` writes the capture back, without the summary line where the refusal is
reported anyway. Nothing else written meanwhile (another thread's output included) is
lost: it comes out after the build.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

#: clang's summary of a build's diagnostics (``1 error generated.``, ``2 warnings and 1
#: error generated.``).
SUMMARY = re.compile(r"^\d+ (warnings? and \d+ )?errors? generated\.$")


@dataclass
class Captured:
    """The text written to descriptor 2 during the block (set when it ends)."""

    text: str = ""


@contextlib.contextmanager
def compiler_output() -> Iterator[Captured]:
    """Descriptor 2 into a temporary file while the block runs; the text is in the
    yielded :class:`Captured` afterwards. Where descriptor 2 cannot be redirected (closed,
    or no temporary file), nothing is captured."""
    got = Captured()
    with contextlib.ExitStack() as stack:
        tmp = None
        try:
            sys.stderr.flush()
            saved = os.dup(2)
            stack.callback(os.close, saved)
            tmp = stack.enter_context(tempfile.TemporaryFile())
        except (OSError, ValueError):
            pass
        if tmp is None:
            yield got
            return
        os.dup2(tmp.fileno(), 2)
        try:
            yield got
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            tmp.seek(0)
            got.text = tmp.read().decode(errors="replace")


def echo(captured: Captured, refused: bool) -> None:
    """Write *captured* back to stderr; where the build was *refused* (and the refusal is
    reported), without clang's summary line."""
    lines = captured.text.splitlines(keepends=True)
    if refused:
        lines = [ln for ln in lines if not SUMMARY.match(ln.strip())]
    if lines:
        sys.stderr.write("".join(lines))
        sys.stderr.flush()

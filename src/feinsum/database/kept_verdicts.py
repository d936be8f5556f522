"""The verdicts of lazy revalidation on the shipped records, kept across processes.

The shipped records are read from an immutable SQLite file, so the verdicts lazy
revalidation reaches on them (:mod:`.lazy`) cannot be written back as they are for the
user's database. Without this file every new process would generate the code of the same
records again (seconds per einsum, at each program's first call). The verdicts live in a
JSON file beside the cached SQLite file, keyed like the in-memory overlay by (record uid,
current recipe version, loopy version), so that a new recipe or loopy version checks again.
A verdict depends only on that key, so concurrent writers may overwrite one another's
additions (they are then decided again); writes are atomic, and a file that cannot be read
or written is ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .revalidation import Verdict

#: (record uid, current recipe version, loopy version)
Key = tuple[str, str, str]
_FORMAT = 1


def load(path: Path) -> dict[Key, Verdict]:
    """The verdicts kept in *path* (none when it is missing, damaged or foreign)."""
    try:
        data = json.loads(path.read_text())
        if data.get("format") != _FORMAT:
            return {}
        return {(e["uid"], e["version"], e["loopy"]): Verdict(**e["verdict"])
                for e in data["verdicts"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def save(path: Path, verdicts: Iterable[tuple[Key, Verdict]]) -> None:
    """Add *verdicts* to those kept in *path* (written atomically; failures ignored)."""
    kept = load(path)
    new = dict(verdicts)
    if all(kept.get(k) == v for k, v in new.items()):
        return
    kept.update(new)
    text = json.dumps({"format": _FORMAT, "verdicts": [
        {"uid": k[0], "version": k[1], "loopy": k[2], "verdict": dataclasses.asdict(v)}
        for k, v in sorted(kept.items())]})
    with contextlib.suppress(OSError):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

"""The feinsum modules each Python file imports, kept on disk across processes.

A recipe's version hashes the source of every feinsum module it imports, transitively
(:func:`feinsum.recipes.recipe.code_dependencies`), which parses each of those files with
:mod:`ast`: about a second of every new process that asks a recipe's version (the hook's
first program, ``feinsum best``...). What a file imports is kept here per (path, size,
modification time), in ``recipe-imports-v1.json`` in ``$FEINSUM_CACHE_DIR`` or the user
cache directory, so that a file is parsed again only when it changes. Writes are atomic;
a file that cannot be read or written is ignored (the files are then parsed).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path

_NAME = "recipe-imports-v1.json"
_lock = threading.Lock()
_known: dict[str, list[str]] | None = None
_new: dict[str, list[str]] = {}


def _file() -> Path:
    env = os.environ.get("FEINSUM_CACHE_DIR")
    if env:
        return Path(env) / _NAME
    import platformdirs

    return Path(platformdirs.user_cache_dir("feinsum")) / _NAME


def _key(path: Path, size: int, mtime_ns: int) -> str:
    return f"{path}\0{size}\0{mtime_ns}"


def _read(path: Path) -> dict[str, list[str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items()
            if isinstance(v, list) and all(isinstance(n, str) for n in v)}


def known(path: Path, size: int, mtime_ns: int) -> list[str] | None:
    """The modules *path* (of that size and time) imports, if kept; None: parse it."""
    global _known
    with _lock:
        if _known is None:
            _known = _read(_file())
        return _known.get(_key(path, size, mtime_ns))


def remember(path: Path, size: int, mtime_ns: int, names: list[str]) -> None:
    """Keep what *path* imports (written by :func:`flush`)."""
    with _lock:
        _new[_key(path, size, mtime_ns)] = sorted(names)


def flush() -> None:
    """Write what :func:`remember` was told since the last flush (merged with the file,
    entries of files that no longer exist dropped)."""
    with _lock:
        if not _new:
            return
        new = dict(_new)
        _new.clear()
    target = _file()
    kept = {k: v for k, v in _read(target).items() if os.path.exists(k.split("\0", 1)[0])}
    kept.update(new)
    with _lock:
        if _known is not None:
            _known.update(new)
    with contextlib.suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{_NAME}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(kept, f)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

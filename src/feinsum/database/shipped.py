"""The records shipped with feinsum: JSON-lines exports in ``db/`` (the wheel's
``feinsum/_shipped/db``), loaded read-only on first use into a cached SQLite file.

The cache (``$FEINSUM_CACHE_DIR``, else the user cache directory) is keyed by the content of
the files, built once atomically and then opened immutable; when it cannot be written the
records are loaded into memory instead. Beside it, lazy revalidation keeps its verdicts on
the shipped records (:mod:`.kept_verdicts`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from feinsum.errors import DatabaseError

from .models import SCHEMA_VERSION
from .sharing import FORMAT_VERSION, import_file
from .store import Store


def default_shipped_dirs() -> list[Path]:
    """Where the shipped records live: the wheel's ``feinsum/_shipped/db`` and a source
    checkout's ``db/``."""
    import feinsum

    pkg = Path(feinsum.__file__).resolve().parent
    dirs = [pkg / "_shipped" / "db"]
    repo = pkg.parents[1]
    if (repo / "pyproject.toml").is_file():
        dirs.append(repo / "db")
    return dirs


#: environment variable overriding where (or whether) shipped records are read
SHIPPED_ENV_VAR = "FEINSUM_SHIPPED"


def shipped_files(spec: bool | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                  ) -> list[Path]:
    """The export files *spec* names (True: the default locations; a path or a list of
    paths: those files, or the ``*.jsonl[.gz]`` files in those directories)."""
    if spec is True:
        # $FEINSUM_SHIPPED overrides the default: "none" (or "0"/"off") for no shipped
        # records, else os.pathsep-separated export files or directories
        env = os.environ.get(SHIPPED_ENV_VAR)
        if env is not None:
            spec = False if env.strip().lower() in ("", "0", "none", "off") else [
                p for p in env.split(os.pathsep) if p]
    if spec is False:
        return []
    if spec is True:
        places: list[Path] = default_shipped_dirs()
    elif isinstance(spec, (str, os.PathLike)):
        places = [Path(spec)]
    else:
        places = [Path(p) for p in spec]
    files: dict[Path, None] = {}
    for p in places:
        if p.is_dir():
            for f in sorted([*p.glob("*.jsonl"), *p.glob("*.jsonl.gz")]):
                files[f.resolve()] = None
        elif p.is_file():
            files[p.resolve()] = None
        elif spec is not True:
            raise DatabaseError(f"no shipped records at {p}")
    return list(files)


def cache_dir() -> Path:
    env = os.environ.get("FEINSUM_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("feinsum"))


def _schema_signature() -> str:
    """The tables and columns of the models: two builds that both call their schema by the
    same revision number (parallel branches) must not share a cache."""
    from .models import Base

    return ";".join(f"{t.name}:{','.join(c.name for c in t.columns)}"
                    for t in Base.metadata.sorted_tables)


def _digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    h.update(f"schema {SCHEMA_VERSION} format {FORMAT_VERSION}\n".encode())
    h.update(_schema_signature().encode() + b"\n")
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def _fill(store: Store, files: Sequence[Path]) -> None:
    for f in files:
        import_file(store, f)


def open_shipped(files: Sequence[Path]) -> Store | None:
    """A read-only store of the shipped records: a cached SQLite file built once per set of
    files (in ``$FEINSUM_CACHE_DIR`` or the user cache directory), else in memory."""
    from .engine import ensure_schema, make_engine

    if not files:
        return None
    try:
        digest = _digest(files)
    except OSError as exc:
        raise DatabaseError(f"cannot read the shipped records: {exc}") from exc
    where = "shipped records (" + ", ".join(f.name for f in files) + ")"
    directory = cache_dir()
    target = directory / f"shipped-{digest[:24]}.sqlite"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        writable = os.access(directory, os.W_OK)
    except OSError:
        writable = False
    if target.is_file():
        try:
            return _open_cached(target, where)
        except DatabaseError:
            with contextlib.suppress(OSError):
                target.unlink()
    if writable:
        tmp = directory / f".shipped-{digest[:24]}.{os.getpid()}.tmp"
        engine = make_engine(tmp, journal="delete")
        try:
            ensure_schema(engine, where=where)
            _fill(Store(engine, source="shipped", where=where, readonly=False), files)
            engine.dispose()
            os.replace(tmp, target)
            _clean_old_caches(directory, keep=target)
            return _open_cached(target, where)
        except OSError:
            pass  # fall back to memory
        finally:
            engine.dispose()
            with contextlib.suppress(OSError):
                tmp.unlink()
    engine = make_engine(":memory:")
    ensure_schema(engine, where=where)
    mem = Store(engine, source="shipped", where=where, readonly=False)
    _fill(mem, files)
    mem.readonly = True
    return mem


def _open_cached(path: Path, where: str) -> Store:
    from .engine import ensure_schema, make_engine

    engine = make_engine(path, readonly=True, immutable=True)
    ensure_schema(engine, readonly=True, where=where)
    store = Store(engine, source="shipped", where=where, readonly=True)
    if os.access(path.parent, os.W_OK):
        store.verdicts_file = path.with_name(f"{path.stem}.verdicts.json")
    return store


def _clean_old_caches(directory: Path, keep: Path) -> None:
    cutoff = time.time() - 30 * 86400
    for p in directory.glob("shipped-*.sqlite"):
        with contextlib.suppress(OSError):
            if p != keep and p.stat().st_mtime < cutoff:
                p.unlink()
                p.with_name(f"{p.stem}.verdicts.json").unlink(missing_ok=True)

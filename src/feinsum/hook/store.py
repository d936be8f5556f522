"""The persistent cache of transformed programs: what the hook made of a program, kept on
disk for every later process (and MPI rank) on the machine.

An entry is keyed by (:func:`entry_key`) the untransformed program (loopy's persistent
hash), the device's identity (:attr:`~feinsum.devices.info.DeviceInfo.steady`: not the
global memory PoCL reads from the machine's memory at start), the code that transforms
(feinsum's version and a fingerprint of its source files and of every recipe file: an
edited recipe or toolbox changes it) and the hook's options; it holds the transformed
program, its report, and what decided it: the state of the timing database (its
revision, read without SQLAlchemy, and the shipped record files' size and time) and, per
einsum looked up, the uid of the record chosen (None: a default). An entry is used when
the database is unchanged, or, when it changed, when every einsum still gets the same
record (:func:`feinsum.hook.program.transform_program` asks again): a new record that
changes a choice invalidates exactly the programs it changes.

The store is pytools' :class:`~pytools.persistent_dict.PersistentDict` (SQLite: atomic
writes, one entry per key however many processes write it, safe for concurrent readers
and writers), in ``$FEINSUM_CACHE`` (a directory; ``none`` turns it off), else
``programs/`` in the user cache directory (platformdirs). It holds at most
:data:`MAX_BYTES`: beyond, the oldest entries go. An entry that cannot be read (corrupt,
or written by another version) is ignored, with one warning, and replaced. While one process
transforms a program, a lock file in ``locks/`` makes the others wait for its entry
(:func:`feinsum.hook.program.transform_program`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_VAR = "FEINSUM_CACHE"
#: The most the cache's entries may hold, in bytes (the oldest entries go first).
MAX_BYTES = 512 * 1024 * 1024
#: Bumped when the layout of an entry changes (older entries are then never read).
FORMAT = 1
_IDENTIFIER = f"feinsum-programs-v{FORMAT}"


class CacheWarning(UserWarning):
    """The persistent cache of transformed programs could not be read or written (the
    hook went on without it)."""


@dataclass(frozen=True)
class Entry:
    """What the hook made of one program, and what decided it."""

    t_unit: Any
    report: Any
    #: the database's state when the decisions were taken (:func:`database_state`;
    #: None: it has none)
    db_state: tuple[Any, ...] | None
    #: its revision then (None: no database)
    db_revision: int | None
    #: per einsum looked up: (the einsum at its lengths, the chosen record's uid or None)
    decisions: tuple[tuple[Any, str | None], ...] = ()
    #: the device identity decisions are asked again for
    device: Any = None
    format: int = field(default=FORMAT)


# {{{ where, and what keys an entry


def cache_directory() -> Path | None:
    """The cache's directory: ``$FEINSUM_CACHE``, else ``programs/`` in the user cache
    directory; None when ``FEINSUM_CACHE`` is ``none`` (or ``off``, ``0``, empty)."""
    env = os.environ.get(ENV_VAR)
    if env is not None:
        if env.strip().lower() in ("", "none", "off", "0", "false"):
            return None
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("feinsum")) / "programs"


_FINGERPRINTS: dict[tuple[str, ...], str] = {}


def code_fingerprint(recipe_dirs: Sequence[Path]) -> str:
    """feinsum's version, loopy's data model and the name, size and time of every Python
    file of feinsum's package and of *recipe_dirs* (remembered per process)."""
    import feinsum

    key = tuple(str(d) for d in recipe_dirs)
    hit = _FINGERPRINTS.get(key)
    if hit is not None:
        return hit
    from loopy.version import DATA_MODEL_VERSION

    h = hashlib.sha256(f"{feinsum.__version__}\0{DATA_MODEL_VERSION}\0".encode())
    for root in [os.path.dirname(os.path.abspath(feinsum.__file__)), *map(str, recipe_dirs)]:
        for path, size, mtime in sorted(_python_files(root)):
            h.update(f"{path}\0{size}\0{mtime}\n".encode())
    _FINGERPRINTS[key] = digest = h.hexdigest()
    return digest


def forget_fingerprints() -> None:
    """Compute :func:`code_fingerprint` again on its next call (files were edited)."""
    _FINGERPRINTS.clear()


def _python_files(root: str) -> list[tuple[str, int, int]]:
    """(path, size, time) of the Python files under *root* (or of *root*, a file)."""
    found: list[tuple[str, int, int]] = []
    try:
        if os.path.isfile(root):
            st = os.stat(root)
            return [(root, st.st_size, st.st_mtime_ns)]
        todo = [root]
        while todo:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    if entry.is_dir() and not entry.name.startswith((".", "__pycache__")):
                        todo.append(entry.path)
                    elif entry.name.endswith(".py"):
                        st = entry.stat()
                        found.append((entry.path, st.st_size, st.st_mtime_ns))
    except OSError:  # a directory that went away: what was found so far
        pass
    return found


def entry_key(*parts: Any) -> str:
    """The key of an entry: sha256 over the text of *parts*."""
    h = hashlib.sha256(_IDENTIFIER.encode())
    for p in parts:
        h.update(b"\0" + repr(p).encode())
    return h.hexdigest()


def database_state(db: Any) -> tuple[Any, ...] | None:
    """What changes when the records of database *db* (a ``db=`` argument) change, read
    without opening it through SQLAlchemy (a second's import): the revision of the SQLite
    file (which every added or pruned record bumps; read with the standard library) and the
    size and time of the shipped record files. None when that cannot be told so (a server,
    a :class:`~feinsum.database.Database` object, a file that cannot be read so): the hook
    then opens the database and asks its revision."""
    if db is False:
        return ()
    if db is None:
        db = os.environ.get("FEINSUM_DB") or _default_database()
    if not isinstance(db, (str, os.PathLike)) or "://" in str(db) or str(db) == ":memory:":
        return None
    revision = sqlite_revision(Path(db).expanduser().absolute())
    if revision is None:
        return None
    return (revision, files_state(_shipped_locations()))


def sqlite_revision(path: Path) -> int | None:
    """The revision of feinsum's SQLite database *path* (-1: there is no such file yet;
    None: it cannot be read so). Mirrors ``feinsum.database.statements.REVISION``."""
    import sqlite3

    if not path.exists():
        return -1
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute("SELECT revision FROM feinsum_state WHERE id = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return 0 if row is None or row[0] is None else int(row[0])


# The database package cannot be imported without SQLAlchemy (a second), nor the recipes
# without loading them: these three mirror feinsum.database.engine.default_path,
# feinsum.database.shipped.shipped_files and feinsum.recipes.loading.default_directories
# (tests/test_program_cache.py checks that they agree).


def recipe_directories(recipe_path: Any = None) -> list[Path]:
    """Where recipes are found: *recipe_path*, ``FEINSUM_RECIPE_PATH``, the checkout's and
    the wheel's ``transforms/``."""
    import feinsum

    if recipe_path is None:
        dirs = []
    elif isinstance(recipe_path, (str, os.PathLike)):
        dirs = [Path(recipe_path)]
    else:
        dirs = [Path(p) for p in recipe_path]
    dirs += [Path(p) for p in os.environ.get("FEINSUM_RECIPE_PATH", "").split(os.pathsep)
             if p]
    pkg = Path(feinsum.__file__).resolve().parent
    if (pkg.parents[1] / "pyproject.toml").is_file() and (pkg.parents[1] / "transforms").is_dir():
        dirs.append(pkg.parents[1] / "transforms")
    dirs.append(pkg / "_shipped" / "transforms")
    return dirs


def _default_database() -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir("feinsum")) / "feinsum.sqlite"


def _shipped_locations() -> list[Path]:
    """The shipped record files and the directories they are found in."""
    import feinsum

    env = os.environ.get("FEINSUM_SHIPPED")
    if env is not None:
        if env.strip().lower() in ("", "0", "none", "off"):
            return []
        places = [Path(p) for p in env.split(os.pathsep) if p]
    else:
        pkg = Path(feinsum.__file__).resolve().parent
        places = [pkg / "_shipped" / "db"]
        if (pkg.parents[1] / "pyproject.toml").is_file():
            places.append(pkg.parents[1] / "db")
    found: list[Path] = []
    for p in places:
        found.append(p)
        if p.is_dir():
            found.extend(sorted([*p.glob("*.jsonl"), *p.glob("*.jsonl.gz")]))
    return found


def files_state(paths: Sequence[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, size, time) of every file of *paths* (-1, -1 for a missing one)."""
    out = []
    for p in paths:
        try:
            st = p.stat()
            out.append((str(p), st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((str(p), -1, -1))
    return tuple(out)


# }}}


# {{{ the store


_WARNED: set[str] = set()
_LOCK = threading.Lock()


def warn_once(what: str, text: str) -> None:
    """One :class:`CacheWarning` *text* per process for each *what*."""
    with _LOCK:
        if what in _WARNED:
            return
        _WARNED.add(what)
    warnings.warn(text, CacheWarning, stacklevel=4)


class ProgramCache:
    """The entries in one directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        from pytools.persistent_dict import PersistentDict

        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._dict: Any = PersistentDict(_IDENTIFIER, container_dir=str(directory),
                                         safe_sync=False)

    @property
    def path(self) -> Path:
        return Path(self._dict.filename)

    def get(self, key: str) -> Entry | None:
        """The entry under *key*; None when there is none or it cannot be read (one warning
        per entry: corrupt, or written by another version)."""
        from pytools.persistent_dict import NoSuchEntryError

        try:
            value = self._dict.fetch(key)
        except NoSuchEntryError:
            return None
        except Exception as exc:  # unpickling a damaged or foreign entry: anything goes
            warn_once(f"read {self.path} {key}",
                      f"feinsum's program cache {self.path}: an entry cannot be read "
                      f"({type(exc).__name__}: {exc}); it is ignored and will be replaced")
            return None
        if not isinstance(value, Entry) or value.format != FORMAT:
            warn_once(f"foreign {self.path} {key}",
                      f"feinsum's program cache {self.path}: an entry was not written by "
                      "this version of feinsum; it is ignored and will be replaced")
            return None
        return value

    def put(self, key: str, entry: Entry) -> None:
        """Store *entry* under *key* (replacing any), then drop the oldest entries while the
        cache holds more than :data:`MAX_BYTES`."""
        self._dict.store(key, entry)
        if self.nbytes() > MAX_BYTES:
            self._shrink(MAX_BYTES * 3 // 4)

    def __len__(self) -> int:
        return len(self._dict)

    def nbytes(self) -> int:
        """The bytes the entries hold."""
        (total,) = next(self._dict._exec_sql("SELECT COALESCE(SUM(LENGTH(key_value)), 0) "
                                             "FROM dict"))
        return int(total)

    def _shrink(self, target: int) -> None:
        rows = list(self._dict._exec_sql(
            "SELECT keyhash, LENGTH(key_value) FROM dict ORDER BY rowid"))
        total = sum(n for _, n in rows)
        drop = []
        for keyhash, n in rows:
            if total <= target:
                break
            drop.append(keyhash)
            total -= n
        for keyhash in drop:
            self._dict._exec_sql("DELETE FROM dict WHERE keyhash=?", (keyhash,))
        self._dict._exec_sql("VACUUM")

    def clear(self) -> int:
        """Remove every entry; returns how many there were."""
        n = len(self)
        self._dict.clear()
        self._dict._exec_sql("VACUUM")
        return n


_OPEN: dict[Path, ProgramCache | None] = {}


def open_cache(directory: Path | None = None) -> ProgramCache | None:
    """The cache in *directory* (default :func:`cache_directory`), opened once per process;
    None when it is turned off or cannot be opened (one warning)."""
    directory = cache_directory() if directory is None else directory
    if directory is None:
        return None
    with _LOCK:
        if directory in _OPEN:
            return _OPEN[directory]
    try:
        cache: ProgramCache | None = ProgramCache(directory)
    except Exception as exc:  # a directory we cannot write, a damaged file
        warn_once(f"open {directory}",
                  f"feinsum's program cache in {directory} cannot be opened "
                  f"({type(exc).__name__}: {exc}): going on without it (set {ENV_VAR} to "
                  "a writable directory, or to none)")
        cache = None
    with _LOCK:
        _OPEN[directory] = cache
    return cache


def safely(cache: ProgramCache | None, op: str, *args: Any) -> Any:
    """``cache.op(*args)``, or None (one warning) when the store fails underneath."""
    if cache is None:
        return None
    try:
        return getattr(cache, op)(*args)
    except Exception as exc:  # SQLite errors, a full disk: the hook goes on without it
        warn_once(f"{op} {cache.directory}",
                  f"feinsum's program cache {cache.path}: {op} failed "
                  f"({type(exc).__name__}: {exc}); going on without it")
        return None


# }}}


# vim: foldmethod=marker

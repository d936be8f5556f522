"""Files named on the command line: what kind each is, and rewriting one safely.

A file is a SQLite database, a JSON-lines export (its first line a feinsum header, plain or
gzip-compressed), empty, or something else; a command never turns one kind into another.
A file is rewritten by writing a new one beside it and renaming it over the old (one
atomic step: a reader sees the old file or the new one, never half of one), and only when
its content changes.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias

from feinsum.errors import DatabaseError

#: The ``format`` of an export's header line.
EXPORT_FORMAT = "feinsum-timings"

FileKind: TypeAlias = Literal["missing", "directory", "empty", "sqlite", "export", "other"]

SQLITE_MAGIC = b"SQLite format 3\0"
GZIP_MAGIC = b"\x1f\x8b"
#: How exports are named (``feinsum db export`` writes gzip for ``.gz``).
EXPORT_SUFFIXES = (".jsonl", ".jsonl.gz")
#: The first line of an export is at most this long.
_HEADER_LIMIT = 4096


def named_as_export(path: str | os.PathLike[str]) -> bool:
    """Whether *path*'s name says it is an export (``.jsonl``, ``.jsonl.gz``)."""
    return str(path).lower().endswith(EXPORT_SUFFIXES)


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether *path* starts as gzip data does."""
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def _first_line(path: Path, gz: bool) -> bytes:
    opener: Any = gzip.open if gz else open
    with opener(path, "rb") as f:
        return f.readline(_HEADER_LIMIT)  # type: ignore[no-any-return]


def file_kind(path: str | os.PathLike[str]) -> FileKind:
    """What *path* is (see the module docstring); ``"other"``: neither a SQLite database
    nor a feinsum export (a foreign or damaged file)."""
    p = Path(path)
    try:
        if not p.exists():
            return "missing"
        if p.is_dir():
            return "directory"
        if p.stat().st_size == 0:
            return "empty"
        with open(p, "rb") as f:
            magic = f.read(len(SQLITE_MAGIC))
        if magic == SQLITE_MAGIC:
            return "sqlite"
        line = _first_line(p, magic.startswith(GZIP_MAGIC))
    except (OSError, EOFError, gzip.BadGzipFile):
        return "other"
    try:
        header = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "other"
    ok = isinstance(header, dict) and header.get("type") == "header" and (
        header.get("format") == EXPORT_FORMAT)
    return "export" if ok else "other"


def describe(kind: FileKind) -> str:
    """*kind* in words, for messages."""
    return {"missing": "does not exist", "directory": "is a directory",
            "empty": "is empty (0 bytes)", "sqlite": "is a SQLite database",
            "export": "is a feinsum JSON-lines export",
            "other": "is neither a feinsum database nor a feinsum export"}[kind]


def check_database_path(path: Path) -> None:
    """Refuse to open (and so create) a SQLite database at *path* where that would change
    a file's kind: an export, or a file named as one (foreign files: the engine's
    ``check_sqlite_file``)."""
    kind = file_kind(path)
    if kind == "export" or (kind in ("missing", "empty") and named_as_export(path)):
        what = describe(kind) if kind == "export" else (
            f"{'is new' if kind == 'missing' else describe(kind)} and named as a "
            "JSON-lines export")
        raise DatabaseError(
            f"{path} {what}, not a database: feinsum does not make it one (`feinsum db "
            "import` reads an export into a database; name a database FILE.sqlite)")
    if kind == "directory":
        raise DatabaseError(f"{path} is a directory, not a database file")


def revalidation_target(path: Path) -> Literal["sqlite", "export"]:
    """The kind of file *path* names for ``feinsum db revalidate``, or a
    :class:`DatabaseError` saying why it is left as it is."""
    kind = file_kind(path)
    if kind in ("sqlite", "export"):
        return kind
    if kind == "missing":
        raise DatabaseError(f"no database or export at {str(path)!r}")
    raise DatabaseError(
        f"{path} {describe(kind)}: there is nothing to revalidate, and the file is left as "
        "it is (`feinsum db export FILE.jsonl` writes an export)")


def open_export(path: Path) -> IO[bytes]:
    """*path* opened to read an export's bytes (gzip-compressed or not); a SQLite database
    or an unreadable file is a :class:`DatabaseError`."""
    try:
        with open(path, "rb") as probe:
            magic = probe.read(len(SQLITE_MAGIC))
        if magic == SQLITE_MAGIC:
            raise DatabaseError(
                f"{path} is a SQLite database, not a JSON-lines export: merge it "
                "(`Database.merge(path)`, `python -m feinsum.database merge`) instead")
        return _reader(path)
    except OSError as exc:
        raise DatabaseError(f"cannot read {path}: {exc}") from exc


def _reader(path: Path) -> IO[bytes]:
    opener: Any = gzip.open if is_gzip(path) else open
    return opener(path, "rb")  # type: ignore[no-any-return]


def same_content(a: Path, b: Path) -> bool:
    """Whether two files hold the same text (gzip-compressed or not)."""
    with _reader(a) as fa, _reader(b) as fb:
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                return False
            if not ca:
                return True


def write_beside(path: str | os.PathLike[str], write: Callable[[Path], object], *,
                 only_if_changed: bool = False) -> bool:
    """Write *path* through ``write(temporary path beside it)``, then rename that over
    *path* (atomic); *only_if_changed*: leave *path* untouched (bytes and time) when the
    new content is the same. Returns whether *path* was (re)written."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        if only_if_changed and path.is_file() and same_content(tmp, path):
            return False
        os.replace(tmp, path)
        return True
    except OSError as exc:
        raise DatabaseError(f"cannot write {path}: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()

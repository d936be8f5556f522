"""Locks that work across processes: ``fcntl.flock`` on a file (:class:`FileLock`). One per
(canonical key, device) makes one process tune an einsum (:class:`TuningLock`); one per
program makes one process transform it (:func:`feinsum.transform_program`, next to the
persistent cache: ``<cache>/locks/``).

The tuning lock files live next to the SQLite database (``<db>.locks/``), else (server or
in-memory databases) in ``$FEINSUM_LOCK_DIR`` or the per-user cache directory. The kernel
releases a ``flock`` when its process dies, so a crashed tuner never leaves a stale lock.
Processes on other hosts sharing a server database need ``FEINSUM_LOCK_DIR`` on a
filesystem they share (with working ``flock``).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from feinsum.errors import DatabaseError, FeinsumError

ENV_VAR = "FEINSUM_LOCK_DIR"


def lock_directory(db: Any) -> Path:
    """Where the tuning locks of database *db* (a :class:`~feinsum.database.Database` or
    None) live."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    path = getattr(db, "path", None)
    if path is not None and str(path) not in ("", ":memory:"):
        return Path(f"{path}.locks")
    import platformdirs

    return Path(platformdirs.user_cache_dir("feinsum")) / "locks"


class LockError(FeinsumError):
    """A lock file cannot be created (its directory cannot be written)."""


class FileLock:
    """An exclusive, cross-process lock: ``flock`` on the file *path* (*label* names what it
    guards). The kernel releases it when its process dies.

    ``acquire(wait=False)`` returns False at once when another process holds it;
    ``acquire(wait=True, timeout=...)`` waits (polling) and returns whether it got it.
    Use as a context manager after a successful acquire, or call :meth:`release`.
    """

    def __init__(self, path: str | os.PathLike[str], label: str) -> None:
        self.path = Path(path)
        self.label = label
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, wait: bool = False, timeout: float | None = None,
                poll: float = 0.05) -> bool:
        import fcntl

        if self._fd is not None:
            return True
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise self._cannot_create(exc) from exc
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait or (deadline is not None and time.monotonic() >= deadline):
                    os.close(fd)
                    return False
                time.sleep(poll)
                continue
            if not _still_linked(fd, self.path):
                # remove_unheld took the file away between our open and flock: start over
                os.close(fd)
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                except OSError as exc:
                    raise self._cannot_create(exc) from exc
                continue
            self._fd = fd
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return True

    def release(self) -> None:
        import fcntl

        fd, self._fd = self._fd, None
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _cannot_create(self, exc: OSError) -> FeinsumError:
        return LockError(f"cannot create the lock {self.path} ({self.label}): {exc}; make "
                         f"{self.path.parent} writable")

    def __enter__(self) -> FileLock:
        if not self.held:
            self.acquire(wait=True)
        return self

    def __exit__(self, t: type[BaseException] | None, v: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _still_linked(fd: int, path: Path) -> bool:
    """Whether *path* still names the file open as *fd*."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def remove_unheld(directory: str | os.PathLike[str]) -> tuple[int, int]:
    """Delete the lock files (``*.lock``) in *directory* that no process holds; returns how
    many were removed and how many are held. A process about to take a removed lock notices
    and takes a fresh file (:meth:`FileLock.acquire`)."""
    import fcntl

    removed = held = 0
    for path in sorted(Path(directory).glob("*.lock")):
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held += 1
                continue
            if _still_linked(fd, path):
                try:
                    path.unlink()
                except OSError:
                    continue
                removed += 1
        finally:
            os.close(fd)
    return removed, held


class TuningLock(FileLock):
    """The lock on one (canonical key, device key) pair that one tuning process holds (see
    :class:`FileLock`)."""

    def __init__(self, directory: str | os.PathLike[str], canonical_key: str,
                 device_key: str) -> None:
        digest = hashlib.sha256(f"{canonical_key}\n{device_key}".encode()).hexdigest()[:24]
        super().__init__(Path(directory) / f"tune-{digest}.lock",
                         f"{canonical_key} on {device_key}")

    def _cannot_create(self, exc: OSError) -> FeinsumError:
        return DatabaseError(f"cannot create the tuning lock {self.path}: {exc}; set "
                             f"{ENV_VAR} to a writable directory")

    def __enter__(self) -> TuningLock:
        super().__enter__()
        return self

"""One way to name a database everywhere: what every public ``db=`` argument accepts.

A :class:`~feinsum.database.Database`; a path (``str`` or :class:`os.PathLike`: a SQLite
file); an SQLAlchemy URL (``"postgresql+psycopg://..."`` or a
:class:`sqlalchemy.engine.URL`); or None, the default database (``$FEINSUM_DB``, else the
per-user SQLite file). Functions that can work without a database (the autotuner, the hook,
:func:`feinsum.compile`, :func:`feinsum.measure_roofline`) also take ``False``: none.

A named database is opened once per process and location and kept open (the caller did not
open it, so it is not the caller's to close).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from sqlalchemy.engine import URL

from feinsum.errors import DatabaseError

if TYPE_CHECKING:
    from .api import Database

#: What a ``db=`` argument may be (see the module docstring).
DatabaseLike: TypeAlias = "Database | str | os.PathLike[str] | URL | None"

_OPEN: dict[str, Database] = {}
_LOCK = threading.Lock()


def resolve_database(db: DatabaseLike) -> Database:
    """The :class:`~feinsum.database.Database` *db* names (see the module docstring)."""
    from .api import Database
    from .engine import display_url, resolve_url

    if isinstance(db, Database):
        return db
    if db is not None and (isinstance(db, bool) or not isinstance(db, (str, os.PathLike, URL))):
        raise DatabaseError(
            f"db={db!r}: name a database by a feinsum.database.Database, a path, an "
            "SQLAlchemy URL, or None for the default one")
    key = f"{display_url(resolve_url(db))}#{os.getpid()}"
    with _LOCK:
        found = _OPEN.get(key)
        if found is None:
            found = _OPEN[key] = Database(db)
        return found


def optional_database(db: DatabaseLike | Literal[False] | Any) -> Database | None:
    """:func:`resolve_database`, or None for ``db=False`` (no database)."""
    if db is False:
        return None
    return resolve_database(db)

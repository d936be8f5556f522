"""One way to name a database everywhere: what every public ``db=`` argument accepts, and
:func:`query` and :func:`best` on a database so named.

A :class:`~feinsum.database.Database`; a path (``str`` or :class:`os.PathLike`: a SQLite
file); an SQLAlchemy URL (``"postgresql+psycopg://..."`` or a
:class:`sqlalchemy.engine.URL`); or None, the default database (``$FEINSUM_DB``, else the
per-user SQLite file). Functions that can work without a database (the autotuner, the hook,
:func:`feinsum.compile`, :func:`feinsum.measure_roofline`) also take ``False``: none.

A named database is opened once per process and location and kept open (the caller did not
open it, so it is not the caller's to close).
"""

from __future__ import annotations

import datetime as _dt
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from sqlalchemy.engine import URL

from feinsum.errors import DatabaseError

from .api import Database
from .engine import display_url, resolve_url

if TYPE_CHECKING:
    from .api import DeviceLike, EinsumLike
    from .records import Answer, Record

#: What a ``db=`` argument may be (see the module docstring).
DatabaseLike: TypeAlias = Database | str | os.PathLike[str] | URL | None

_OPEN: dict[str, Database] = {}
_LOCK = threading.Lock()


#: The methods of a :class:`~feinsum.database.Database` an object must have to stand in
#: for one (a campaign's worker relays its measurements to the client through such a store).
STORE_METHODS = ("query", "add_measurement", "get_roofline", "set_roofline")


def resolve_database(db: DatabaseLike) -> Database:
    """The :class:`~feinsum.database.Database` *db* names (see the module docstring); an
    object with every method of :data:`STORE_METHODS` stands for itself."""
    if isinstance(db, Database):
        return db
    if all(callable(getattr(db, m, None)) for m in STORE_METHODS):
        return db  # type: ignore[return-value]
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


def query(
    einsum: EinsumLike | None,
    device: DeviceLike | str | None = None,
    db: DatabaseLike = None,
    *,
    recipe: str | tuple[str, str] | None = None,
    status: str | Sequence[str] | None = "ok",
    loopy_version: str | None = None,
    pyopencl_version: str | None = None,
    driver_version: str | None = None,
    max_age: _dt.timedelta | None = None,
    limit: int | None = None,
    **kwargs: Any,
) -> list[Record]:
    """The records of *einsum* (same canonical key) on *device* (any device if None),
    fastest first: by minimum time (the autotuner's figure of merit), ties by median time,
    then insertion order; records without a time (failures) last.

    Filters: *recipe* (a name or ``(name, version)``), *status* (``"ok"`` by default; a
    list, or None for all), library versions, *driver_version*, *max_age* (a timedelta),
    *limit*; also ``lengths=`` (only records timed at these canonical lengths),
    ``recipe_versions=`` ({name: version}), ``feinsum_version=``,
    ``include_shipped=``. *db*: a :class:`Database`, a path, an SQLAlchemy URL, or None
    for the default database."""
    return resolve_database(db).query(
        einsum, device, recipe=recipe, status=status, loopy_version=loopy_version,
        pyopencl_version=pyopencl_version, driver_version=driver_version, max_age=max_age,
        limit=limit, **kwargs,
    )


def best(
    einsum: EinsumLike,
    device: DeviceLike,
    db: DatabaseLike = None,
    **kwargs: Any,
) -> Answer:
    """The fastest known configuration for *einsum* on *device*, down the fallback chain:

    1. ``"exact"``: this canonical einsum at the lengths it fixes, on this device;
    2. ``"nearest-lengths"``: this device, same ``structure_key``, the nearest lengths
       (same canonical key first, then the smallest sum of abs(log2(length ratio)));
    3. ``"same-vendor"``: another device of the same vendor and device type (same device
       name first, then nearest lengths);
    4. ``"default"``: nothing known: ``Answer.record``/``recipe``/``params`` are None and
       the caller applies its recipe's heuristic default.

    "Fastest" is the smallest minimum time, as the autotuner ranks (ties: the smaller
    median time, then the earlier record). Only ``ok`` records count. Keyword filters:
    ``lengths=``, ``recipe=``, ``recipe_versions=`` ({name: current version}: ignore
    records of other versions),
    ``loopy_version=``, ``pyopencl_version=``, ``max_age=``."""
    return resolve_database(db).best(einsum, device, **kwargs)

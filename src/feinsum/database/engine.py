"""Engines: URL resolution, SQLite set-up (WAL, busy timeout), schema version check and upgrade.

``open_database(None)`` uses ``$FEINSUM_DB`` (a path or a SQLAlchemy URL), else a per-user
SQLite file (``platformdirs.user_data_dir("feinsum")/feinsum.sqlite``). A path is a SQLite
file; anything that looks like ``dialect+driver://...`` is handed to SQLAlchemy as is.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.pool import StaticPool

from feinsum.errors import DatabaseError

from .models import FEINSUM_TABLES, KNOWN_VERSIONS, SCHEMA_VERSION, VERSION_TABLE, Base, State

#: Seconds a SQLite writer waits for another writer's lock before giving up.
BUSY_TIMEOUT_S = 60.0
#: Environment variable naming the database (a path or a SQLAlchemy URL).
ENV_VAR = "FEINSUM_DB"
APPLICATION = "feinsum"
#: PostgreSQL advisory lock key held while creating or upgrading the schema.
_PG_LOCK_KEY = 0x6665696E  # "fein"

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")


def default_path() -> Path:
    """The per-user SQLite file used when neither an argument nor ``$FEINSUM_DB`` names one."""
    import platformdirs

    return Path(platformdirs.user_data_dir("feinsum")) / "feinsum.sqlite"


def resolve_url(url: str | os.PathLike[str] | URL | None = None) -> URL:
    """The SQLAlchemy URL for *url* (see the module docstring)."""
    if url is None:
        url = os.environ.get(ENV_VAR) or default_path()
    if isinstance(url, URL):
        return url
    if isinstance(url, os.PathLike):
        return _sqlite_url(Path(url))
    text = str(url).strip()
    if not text:
        raise DatabaseError("empty database location")
    if text == ":memory:":
        return URL.create("sqlite")
    if _URL_RE.match(text):
        try:
            return sa.make_url(text)
        except sa.exc.ArgumentError as exc:
            raise DatabaseError(f"cannot parse database URL {text!r}: {exc}") from exc
    return _sqlite_url(Path(text))


def _sqlite_url(path: Path) -> URL:
    return URL.create("sqlite", database=str(path.expanduser().absolute()))


def display_url(url: URL) -> str:
    """*url* with any password hidden, for messages."""
    return url.render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    """The file of a SQLite URL (None for other backends and in-memory databases)."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        return None
    if db.startswith("file:"):
        db = db[5:].split("?", 1)[0]
    return Path(db)


def check_sqlite_file(path: Path) -> None:
    """Refuse a file that is not a SQLite database or is visibly truncated, before SQLite
    sees it (SQLite would only fail on the first page it cannot read, possibly much later)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseError(f"cannot read the database file {path}: {exc}") from exc
    if size == 0:
        return  # SQLite treats an empty file as an empty database
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise DatabaseError(f"cannot read the database file {path}: {exc}") from exc
    if not header.startswith(b"SQLite format 3\x00"):
        hint = ""
        if header.lstrip().startswith(b"{"):
            hint = (
                " It looks like a JSON-lines export: import it with "
                "`python -m feinsum.database import FILE` instead of opening it."
            )
        raise DatabaseError(
            f"{path} is not a feinsum database: it is not a SQLite file "
            f"(no SQLite header).{hint}"
        )
    if len(header) < 100:
        raise DatabaseError(
            f"{path} is truncated: {size} bytes, shorter than a SQLite header"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    header_valid = header[24:28] == header[92:96]
    wal = path.with_name(path.name + "-wal")
    wal_active = wal.exists() and wal.stat().st_size > 0
    if header_valid and not wal_active and page_count and size < page_size * page_count:
        raise DatabaseError(
            f"{path} is truncated: the file has {size} bytes but its header says "
            f"{page_count} pages of {page_size} bytes ({page_count * page_size} bytes). "
            "Restore it from a copy, or re-import an export."
        )


def make_engine(
    url: str | os.PathLike[str] | URL | None = None,
    *,
    readonly: bool = False,
    busy_timeout: float = BUSY_TIMEOUT_S,
    journal: str = "wal",
    immutable: bool = False,
    **kwargs: Any,
) -> Engine:
    """An engine for *url*; for SQLite: WAL journal, busy timeout, foreign keys, and real
    transactions (``BEGIN IMMEDIATE`` for writes, so concurrent writers queue instead of
    failing). *journal* ``"delete"`` keeps SQLite's rollback journal (single-writer files
    that are later opened *immutable*, read-only and without locking)."""
    url = resolve_url(url)
    backend = url.get_backend_name()
    if backend != "sqlite":
        try:
            return sa.create_engine(url, pool_pre_ping=True, **kwargs)
        except Exception as exc:  # missing driver, bad arguments
            raise DatabaseError(f"cannot open database {display_url(url)}: {exc}") from exc

    path = sqlite_path(url)
    if path is None:
        engine = sa.create_engine(
            "sqlite://",
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
            **kwargs,
        )
    else:
        check_sqlite_file(path)
        if readonly:
            if not path.exists():
                raise DatabaseError(f"no database at {path} (opened read-only)")
            target = f"file:{quote(str(path))}?mode=ro" + ("&immutable=1" if immutable else "")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            target = f"file:{quote(str(path))}"
        def connect() -> sqlite3.Connection:
            return sqlite3.connect(
                target, uri=True, timeout=busy_timeout, check_same_thread=False
            )

        engine = sa.create_engine("sqlite://", creator=connect, **kwargs)
    _setup_sqlite(
        engine, wal=path is not None and not readonly and journal == "wal",
        busy_timeout=busy_timeout,
    )
    return engine


def _setup_sqlite(engine: Engine, *, wal: bool, busy_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's begin() events drive transactions instead of pysqlite's
        # implicit ones (which do not cover DDL and cannot BEGIN IMMEDIATE).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            cur.execute("PRAGMA foreign_keys = ON")
            if wal:
                cur.execute("PRAGMA journal_mode = WAL")
                # In WAL mode NORMAL loses no committed transaction when a process dies
                # (only on power loss, the last ones).
                cur.execute("PRAGMA synchronous = NORMAL")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if not conn.get_execution_options().get("feinsum_write", False):
            conn.exec_driver_sql("BEGIN")
            return
        _begin_immediate(conn.connection.dbapi_connection, busy_timeout)


def _begin_immediate(dbapi_conn: Any, busy_timeout: float) -> None:
    """``BEGIN IMMEDIATE``, waiting up to *busy_timeout* for the write lock.

    SQLite's own busy handler sleeps longer and longer (up to 100 ms) between tries, so
    writers of short transactions mostly wait on a lock nobody holds; polling every
    millisecond or so keeps several tuning processes writing at full speed."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.0005
    dbapi_conn.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                dbapi_conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.5, 0.01)
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")


@contextlib.contextmanager
def write_connection(engine: Engine) -> Iterator[Connection]:
    """A connection in a write transaction (committed on success, rolled back on error).

    On SQLite the transaction starts with ``BEGIN IMMEDIATE``: it takes the write lock at
    once (waiting up to the busy timeout), so it can never fail half-way for a lock."""
    with engine.connect() as conn:
        conn.execution_options(feinsum_write=True)
        with conn.begin():
            yield conn


@contextlib.contextmanager
def read_connection(engine: Engine) -> Iterator[Connection]:
    """A connection for reading, in a transaction (SQLite) or in autocommit mode (an engine
    from :func:`read_engine`: no BEGIN/ROLLBACK round trips)."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite" or engine.get_execution_options().get(
            "feinsum_autocommit"
        ) is None:
            with conn.begin():
                yield conn
        else:
            yield conn


def read_engine(engine: Engine) -> Engine:
    """The engine reads use: *engine* itself for SQLite, else a second engine on the same
    server whose connections stay in autocommit mode (records are only ever added, so one
    snapshot per statement is enough, and a query costs one round trip)."""
    if engine.dialect.name == "sqlite":
        return engine
    return sa.create_engine(
        engine.url, pool_pre_ping=True, isolation_level="AUTOCOMMIT",
        execution_options={"feinsum_autocommit": True},
    )


# {{{ schema version


def _lock_schema(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})


def _inspect(conn: Connection) -> tuple[set[str], list[str]]:
    tables = set(sa.inspect(conn).get_table_names())
    versions: list[str] = []
    if VERSION_TABLE in tables:
        versions = [
            r[0] for r in conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}"))
        ]
    return tables, versions


def _alembic_config(conn: Connection) -> Any:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.attributes["connection"] = conn
    return cfg


def version_table() -> sa.Table:
    """Alembic's version table, as Alembic itself creates it."""
    return sa.Table(
        VERSION_TABLE,
        sa.MetaData(),
        sa.Column("version_num", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )


def create_schema(conn: Connection) -> None:
    """Create the current schema in an empty database and stamp its version (what running
    every migration would do, in one step; a test checks the two agree)."""
    Base.metadata.create_all(conn)
    vt = version_table()
    vt.create(conn)
    conn.execute(vt.insert().values(version_num=SCHEMA_VERSION))
    conn.execute(
        sa.insert(State).values(id=1, application=APPLICATION, revision=0)
    )


def run_migrations(conn: Connection, target: str = "head") -> None:
    """Run Alembic migrations on *conn* (inside the caller's transaction)."""
    from alembic import command

    command.upgrade(_alembic_config(conn), target)


def _foreign(where: str, tables: set[str]) -> DatabaseError:
    shown = ", ".join(sorted(tables)[:8]) + (" ..." if len(tables) > 8 else "")
    return DatabaseError(
        f"{where} is not a feinsum database: it has tables ({shown}) but no feinsum schema "
        f"version ({VERSION_TABLE}). Refusing to touch it; point FEINSUM_DB or "
        "open_database() at a feinsum database or at a new file."
    )


def _newer(where: str, version: str) -> DatabaseError:
    return DatabaseError(
        f"{where} has schema version {version}, newer than this feinsum "
        f"(feinsum knows versions up to {SCHEMA_VERSION}). Upgrade feinsum "
        "(`pip install -U feinsum`) to use it, or open a different database."
    )


def upgrade_command(where: str) -> str:
    return f"python -m feinsum.database upgrade {where}"


def ensure_schema(engine: Engine, *, readonly: bool = False, where: str = "") -> str:
    """Check the schema version; create the schema in an empty database, upgrade an older
    one. Returns the version. Raises :class:`DatabaseError` for a foreign or newer database
    (or an older one opened read-only, naming the command that upgrades it)."""
    where = where or display_url(engine.url)
    shared_ok = engine.dialect.name != "sqlite"
    with engine.connect() as conn:
        with conn.begin():
            tables, versions = _inspect(conn)
        status = _classify(where, tables, versions, shared_ok=shared_ok)
        if status == "current":
            return SCHEMA_VERSION
        if readonly:
            if status == "empty":
                raise DatabaseError(f"{where} holds no feinsum database (opened read-only)")
            raise DatabaseError(
                f"{where} has schema version {versions[0]}; this feinsum needs "
                f"{SCHEMA_VERSION}. It was opened read-only, so it was not upgraded: run "
                f"`{upgrade_command(where)}` (or open it writable) to upgrade it."
            )
        conn.execution_options(feinsum_write=True)
        with conn.begin():
            _lock_schema(conn)
            tables, versions = _inspect(conn)  # another process may have done it meanwhile
            status = _classify(where, tables, versions, shared_ok=shared_ok)
            if status == "empty":
                create_schema(conn)
            elif status == "old":
                run_migrations(conn)
                tables, versions = _inspect(conn)
                if versions != [SCHEMA_VERSION]:
                    raise DatabaseError(
                        f"upgrading {where} ended at version {versions}, not {SCHEMA_VERSION}"
                    )
    return SCHEMA_VERSION


def _classify(where: str, tables: set[str], versions: list[str], *, shared_ok: bool) -> str:
    """"current", "old" or "empty" (or raise for a foreign or newer database). A SQLite
    file must hold feinsum alone; a server database (*shared_ok*) may hold other
    applications' tables beside feinsum's."""
    if VERSION_TABLE not in tables:
        ours = tables & FEINSUM_TABLES
        if ours or (tables and not shared_ok):
            raise _foreign(where, tables)
        return "empty"
    if len(versions) != 1:
        raise DatabaseError(
            f"{where} has an unreadable schema version ({versions!r} in {VERSION_TABLE}); "
            "it may be damaged"
        )
    version = versions[0]
    if version == SCHEMA_VERSION:
        return "current"
    if version in KNOWN_VERSIONS:
        return "old"
    raise _newer(where, version)


def schema_version(engine: Engine) -> str | None:
    """The version recorded in the database (None if it has none)."""
    with read_connection(engine) as conn:
        _, versions = _inspect(conn)
    return versions[0] if versions else None


# }}}

"""One database behind one engine: reads and writes with parameterised SQL (internal).

:class:`feinsum.database.Database` holds a :class:`Store` for the user's database and,
lazily, one for the shipped records; this module knows nothing about the second.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from feinsum.errors import DatabaseError

from .engine import read_connection, read_engine, write_connection
from .records import (
    EinsumIdentity,
    MeasurementRow,
    Record,
    canonical_json,
    sha256,
)
from .statements import (
    BUMP_REVISION,
    BY_SPEED,
    ET,
    FASTEST,
    FASTEST_ORDER,
    GROUP_COLUMNS,
    GROUPS,
    INSERT_MEASUREMENT,
    LOOKUP,
    MEASURED,
    MT,
    Q_ONE,
    Q_ONE_LIMIT,
    RECORD_SELECT,
    REVISION,
    ROOFLINE,
    ROOFLINES,
    STRUCTURE,
    UPSERT,
    VENDOR,
    Filters,
    M,
    T,
    row_to_record,
)

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo

Item = TypeVar("Item")
Out = TypeVar("Out")


def device_values(info: DeviceInfo) -> dict[str, Any]:
    return {
        "key": info.key,
        "platform_name": info.platform_name,
        "platform_version": info.platform_version,
        "vendor": info.vendor,
        "name": info.name,
        "driver_version": info.driver_version,
        "opencl_version": info.opencl_version,
        "device_type": info.device_type,
        "compute_units": int(info.compute_units),
        "max_work_group_size": int(info.max_work_group_size),
        "local_mem_size": int(info.local_mem_size),
        "global_mem_size": int(info.global_mem_size),
        "has_fp64": bool(info.has_fp64),
        "info_json": canonical_json(info.as_dict()),
    }


def device_from_dict(d: Mapping[str, Any]) -> DeviceInfo:
    """A :class:`DeviceInfo` from its ``as_dict()`` (extra fields ignored, missing refused)."""
    from feinsum.devices.opencl import DeviceInfo

    if not isinstance(d, Mapping):
        raise DatabaseError(f"device information must be a JSON object, not {d!r}")
    names = [f.name for f in fields(DeviceInfo) if f.name in d or f.default is MISSING]
    missing = [n for n in names if n not in d]
    if missing:
        raise DatabaseError(f"device information lacks {', '.join(missing)}")
    try:
        info = DeviceInfo.from_dict({n: d[n] for n in names})
    except (TypeError, ValueError) as exc:
        raise DatabaseError(f"malformed device information: {exc}") from exc
    for f in fields(DeviceInfo):
        v = getattr(info, f.name)
        ok = {
            "str": isinstance(v, str),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
        }.get(str(f.type), True)
        if f.name == "max_work_item_sizes":
            ok = all(isinstance(n, int) for n in v)
        if not ok:
            raise DatabaseError(f"device field {f.name}={v!r} has the wrong type")
    return info


_SQLITE_HINTS = ("malformed", "not a database", "disk i/o", "file is encrypted")


@contextlib.contextmanager
def translate_errors(where: str, what: str) -> Iterator[None]:
    """Turn SQLAlchemy/driver errors into :class:`DatabaseError` saying where and what."""
    try:
        yield
    except DatabaseError:
        raise
    except sa.exc.SQLAlchemyError as exc:
        orig = getattr(exc, "orig", None) or exc
        text = str(orig).strip().splitlines()[0] if str(orig).strip() else repr(orig)
        hint = ""
        if any(h in text.lower() for h in _SQLITE_HINTS):
            hint = (
                " The file is damaged or truncated, or is not a feinsum database; restore it "
                "from a copy or re-import an export."
            )
        elif "locked" in text.lower() or "busy" in text.lower():
            hint = " Another process held the database too long; try again."
        raise DatabaseError(f"{what} in {where} failed: {text}.{hint}") from exc


def over_stores(stores: Iterable[Item], run: Callable[[Item], Out]) -> list[Out]:
    """``run(store)`` for every store (or store index), in order. Each store's failure is a
    :class:`DatabaseError` under that store's name; when several fail, one error says
    each (a damaged user's database is never blamed on the shipped records, nor the
    other way round)."""
    out: list[Out] = []
    failed: list[DatabaseError] = []
    for store in stores:
        try:
            out.append(run(store))
        except DatabaseError as exc:
            failed.append(exc)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise DatabaseError("; ".join(dict.fromkeys(str(e) for e in failed))) from failed[0]
    return out


@dataclass
class Txn:
    """A write transaction: its connection and the ids it created (cached after commit)."""

    conn: Connection
    new_ids: dict[tuple[str, Any], int] = field(default_factory=dict)
    #: einsum ids whose origin this transaction stored (or found stored)
    origins: set[int] = field(default_factory=set)


class Store:
    """Reads and writes of one database (see the module docstring)."""

    def __init__(self, engine: Engine, *, source: str, where: str, readonly: bool) -> None:
        self.engine = engine
        self.read_engine = read_engine(engine)
        self.source = source
        self.where = where
        self.readonly = readonly
        #: where lazy revalidation keeps its verdicts on this store's records when it
        #: cannot write them to it (:mod:`.kept_verdicts`; None: in memory only)
        self.verdicts_file: Path | None = None
        self._ids: dict[tuple[str, Any], int] = {}
        self._origins: set[int] = set()
        self._pid = os.getpid()
        self._lock = threading.Lock()

    # {{{ connections

    def _after_fork(self) -> None:
        pid = os.getpid()
        if pid != self._pid:
            # Never use a connection inherited from the parent process.
            self.engine.dispose(close=False)
            self.read_engine.dispose(close=False)
            self._pid = pid

    @contextlib.contextmanager
    def reading(self, what: str = "reading", *, snapshot: bool = False) -> Iterator[Connection]:
        """A connection for reading; *snapshot*: every statement sees the same state (one
        transaction; also what streaming large results needs on servers)."""
        self._after_fork()
        engine = self.engine if snapshot else self.read_engine
        with translate_errors(self.where, what), read_connection(engine) as conn:
            yield conn

    @contextlib.contextmanager
    def writing(self, what: str = "writing") -> Iterator[Txn]:
        if self.readonly:
            raise DatabaseError(f"{self.where} is open read-only; cannot {what}")
        self._after_fork()
        txn: Txn | None = None
        with translate_errors(self.where, what), write_connection(self.engine) as conn:
            txn = Txn(conn)
            yield txn
            conn.execute(BUMP_REVISION)
        # committed: the new rows exist for good
        with self._lock:
            self._ids.update(txn.new_ids)
            self._origins |= txn.origins

    def dispose(self) -> None:
        self.engine.dispose()
        self.read_engine.dispose()

    # }}}

    # {{{ reference rows

    def _cached(self, kind: str, key: Any) -> int | None:
        return self._ids.get((kind, key))

    def lookup_id(self, conn: Connection, kind: str, key: Any) -> int | None:
        """The id of a reference row (device by key, einsum by canonical key, recipe by
        (name, version), configuration by params JSON), or None."""
        cached = self._ids.get((kind, key))
        if cached is not None:
            return cached
        if kind == "recipe":
            params = {"k0": key[0], "k1": key[1]}
        else:
            params = {"k0": sha256(key) if kind == "config" else key}
        with translate_errors(self.where, f"looking up a {kind}"):
            found = conn.execute(LOOKUP[kind], params).scalar()
        if found is not None:
            with self._lock:
                self._ids[(kind, key)] = found
        return found

    def _get_or_create(
        self, txn: Txn, kind: str, key: Any, unique: Sequence[str],
        make_values: Callable[[], Mapping[str, Any]],
    ) -> int:
        found = txn.new_ids.get((kind, key))
        if found is None:
            found = self.lookup_id(txn.conn, kind, key)
        if found is not None:
            return found
        values = make_values()
        conn = txn.conn
        name = conn.dialect.name
        t = T[kind]
        if name in ("sqlite", "postgresql"):
            stmt = UPSERT.get((name, kind))
            if stmt is None:
                from sqlalchemy.dialects import postgresql, sqlite

                dialect_insert: Any = sqlite.insert if name == "sqlite" else postgresql.insert
                stmt = dialect_insert(t).on_conflict_do_nothing(index_elements=list(unique))
                if conn.dialect.insert_returning:
                    stmt = stmt.returning(t.c.id)
                UPSERT[(name, kind)] = stmt
            result = conn.execute(stmt, dict(values))
            new_id = result.scalar() if result.returns_rows else None
        else:  # other backends: a savepoint absorbs a concurrent insert of the same row
            new_id = None
            try:
                with conn.begin_nested():
                    conn.execute(t.insert(), dict(values))
            except sa.exc.IntegrityError:
                pass
        if new_id is None:  # inserted meanwhile by another writer (or no RETURNING)
            new_id = self.lookup_id(conn, kind, key)
        if new_id is None:  # pragma: no cover - the row was just inserted or found
            raise DatabaseError(f"{self.where}: could not store a {kind} row")
        with self._lock:  # not cached until the transaction commits
            self._ids.pop((kind, key), None)
        txn.new_ids[(kind, key)] = new_id
        return int(new_id)

    def device_id_for_write(self, txn: Txn, info: DeviceInfo) -> int:
        def values() -> dict[str, Any]:
            return {**device_values(info), "created_at": _dt.datetime.now(_dt.UTC)}

        return self._get_or_create(txn, "device", info.key, ("key",), values)

    def einsum_id_for_write(self, txn: Txn, ident: EinsumIdentity) -> int:
        def values() -> dict[str, Any]:
            for name in ("canonical_key", "structure_key"):
                v = getattr(ident, name)
                if not isinstance(v, str) or not v or len(v) > 64:
                    raise DatabaseError(
                        f"einsum {name} must be a string of 1-64 chars, not {v!r}"
                    )
            return {
                "canonical_key": ident.canonical_key,
                "structure_key": ident.structure_key,
                "canonical_text": ident.canonical_text,
                "spec_json": ident.spec_json,
                "origin_json": ident.origin_json,
                "created_at": _dt.datetime.now(_dt.UTC),
            }

        eid = self._get_or_create(txn, "einsum", ident.canonical_key, ("canonical_key",), values)
        if ident.origin_json is not None and eid not in self._origins | txn.origins:
            # an einsum recorded without an origin (before revision 0005) gets its first one
            txn.conn.execute(ET.update().where(ET.c.id == eid, ET.c.origin_json.is_(None))
                             .values(origin_json=ident.origin_json))
            txn.origins.add(eid)
        return eid

    def recipe_id_for_write(self, txn: Txn, name: str, version: str) -> int:
        return self._get_or_create(
            txn, "recipe", (name, version), ("name", "version"),
            lambda: {"name": name, "version": version, "created_at": _dt.datetime.now(_dt.UTC)},
        )

    def config_id_for_write(self, txn: Txn, params_json: str) -> int:
        return self._get_or_create(
            txn, "config", params_json, ("params_hash",),
            lambda: {"params_hash": sha256(params_json), "params_json": params_json},
        )

    # }}}

    # {{{ writes

    def add_device(self, info: DeviceInfo) -> int:
        with self.writing("adding a device") as txn:
            return self.device_id_for_write(txn, info)

    def _row_values(self, txn: Txn, row: MeasurementRow) -> dict[str, Any]:
        values = dict(row.values)
        values["einsum_id"] = self.einsum_id_for_write(txn, row.identity)
        values["device_id"] = self.device_id_for_write(txn, row.device)
        values["recipe_id"] = self.recipe_id_for_write(txn, row.recipe_name, row.recipe_version)
        values["configuration_id"] = self.config_id_for_write(txn, row.params_json)
        values["lengths_key"] = row.lengths_key
        return values

    def add_measurement(self, row: MeasurementRow) -> int:
        with self.writing("adding a measurement") as txn:
            values = self._row_values(txn, row)
            result = txn.conn.execute(INSERT_MEASUREMENT, values)
            pk = result.inserted_primary_key
            if pk is None or pk[0] is None:
                raise DatabaseError(
                    f"{self.where}: the database driver returned no id for the new "
                    "measurement, so it was not stored (rolled back); use a driver that "
                    "reports inserted primary keys (RETURNING or lastrowid)"
                )
            return int(pk[0])

    def add_measurements(self, rows: Iterable[MeasurementRow], *, skip_existing: bool = False,
                         what: str = "adding measurements",
                         also: Callable[[Txn], Any] | None = None) -> tuple[int, int]:
        """Insert *rows* in one transaction; returns (added, skipped). *skip_existing*:
        rows whose uid is already present are skipped (imports, merges); *also* writes more
        in the same transaction."""
        added = skipped = 0
        with self.writing(what) as txn:
            batch: list[MeasurementRow] = []

            def flush() -> None:
                nonlocal added, skipped
                if not batch:
                    return
                todo = batch
                if skip_existing:
                    uids = [r.values["uid"] for r in batch]
                    present = set(
                        txn.conn.execute(sa.select(M.uid).where(M.uid.in_(uids))).scalars()
                    )
                    seen: set[str] = set()
                    todo = []
                    for r in batch:
                        u = r.values["uid"]
                        if u in present or u in seen:
                            skipped += 1
                        else:
                            seen.add(u)
                            todo.append(r)
                if todo:
                    txn.conn.execute(
                        INSERT_MEASUREMENT, [self._row_values(txn, r) for r in todo]
                    )
                    added += len(todo)
                batch.clear()

            for row in rows:
                batch.append(row)
                if len(batch) >= 500:
                    flush()
            flush()
            if also is not None:
                also(txn)
        return added, skipped

    def set_roofline(self, info: DeviceInfo, data_json: str,
                     updated_at: _dt.datetime | None = None,
                     *, only_if_newer: bool = False) -> bool:
        with self.writing("storing a roofline") as txn:
            did = self.device_id_for_write(txn, info)
            now = updated_at or _dt.datetime.now(_dt.UTC)
            existing = txn.conn.execute(
                sa.select(ROOFLINES.c.id, ROOFLINES.c.updated_at)
                .where(ROOFLINES.c.device_id == did)
            ).first()
            if existing is None:
                txn.conn.execute(
                    ROOFLINES.insert().values(device_id=did, data_json=data_json, updated_at=now)
                )
                return True
            if only_if_newer and existing[1] is not None and existing[1] >= now:
                return False
            txn.conn.execute(
                ROOFLINES.update().where(ROOFLINES.c.id == existing[0]).values(
                    data_json=data_json, updated_at=now
                )
            )
            return True

    def delete_measurements(self, conds: Sequence[sa.ColumnElement[bool]],
                            *, dry_run: bool = False) -> int:
        if dry_run:
            with self.reading("counting records to prune") as conn:
                return int(
                    conn.execute(sa.select(sa.func.count()).select_from(MT).where(*conds))
                    .scalar_one()
                )
        with self.writing("pruning") as txn:
            result = txn.conn.execute(sa.delete(MT).where(*conds))
            return int(result.rowcount or 0)

    # }}}

    # {{{ reads

    def revision(self) -> int:
        with self.reading("reading the revision") as conn:
            return int(conn.execute(REVISION).scalar() or 0)

    def get_roofline(self, device_key: str) -> str | None:
        with self.reading("reading a roofline") as conn:
            did = self.lookup_id(conn, "device", device_key)
            if did is None:
                return None
            return conn.execute(ROOFLINE, {"did": did}).scalar()  # type: ignore[no-any-return]

    def count(self, status: str | None = None) -> int:
        with self.reading("counting") as conn:
            stmt = sa.select(sa.func.count()).select_from(MT)
            if status is not None:
                stmt = stmt.where(M.status == status)
            return int(conn.execute(stmt).scalar_one())

    def query(
        self,
        canonical_key: str | None,
        device_key: str | None,
        filters: Filters,
        limit: int | None = None,
    ) -> list[Record]:
        with self.reading("querying") as conn:
            eid = did = None
            if canonical_key is not None:
                eid = self.lookup_id(conn, "einsum", canonical_key)
                if eid is None:
                    return []
            if device_key is not None:
                did = self.lookup_id(conn, "device", device_key)
                if did is None:
                    return []
            if filters.plain and eid is not None and did is not None:
                params = {"eid": eid, "did": did, "status": filters.status}
                if limit is None:
                    rows = conn.execute(Q_ONE, params)
                else:
                    rows = conn.execute(Q_ONE_LIMIT, {**params, "limit": limit})
            else:
                conds = filters.conditions(joined=True)
                if eid is not None:
                    conds.append(M.einsum_id == eid)
                if did is not None:
                    conds.append(M.device_id == did)
                stmt = RECORD_SELECT.where(*conds).order_by(*BY_SPEED)
                if limit is not None:
                    stmt = stmt.limit(limit)
                rows = conn.execute(stmt)
            return [row_to_record(r, self.source) for r in rows.all()]

    def measured_params(
        self, canonical_key: str, device_key: str, recipe: tuple[str, str], lengths_key: str
    ) -> set[str]:
        with self.reading("reading measured parameters") as conn:
            eid = self.lookup_id(conn, "einsum", canonical_key)
            did = self.lookup_id(conn, "device", device_key)
            rid = self.lookup_id(conn, "recipe", recipe)
            if eid is None or did is None or rid is None:
                return set()
            params = {"eid": eid, "did": did, "rid": rid, "lk": lengths_key}
            return set(conn.execute(MEASURED, params).scalars())

    def structure_einsums(self, conn: Connection, structure_key: str) -> dict[int, str]:
        """einsum id -> canonical key of every einsum with this structure key."""
        with translate_errors(self.where, "finding einsums of the same structure"):
            return {r[0]: r[1] for r in conn.execute(STRUCTURE, {"sk": structure_key})}

    def vendor_devices(self, conn: Connection, vendor: str, device_type: str,
                       exclude_key: str) -> dict[int, tuple[str, str]]:
        """device id -> (key, name) of the other devices of this vendor and type."""
        with translate_errors(self.where, "finding devices of the same vendor"):
            rows = conn.execute(VENDOR, {"vendor": vendor, "type": device_type,
                                         "key": exclude_key})
            return {r[0]: (r[1], r[2]) for r in rows}

    def groups(
        self, conn: Connection, einsum_ids: Sequence[int], device_ids: Sequence[int],
        filters: Filters,
    ) -> list[tuple[int, int, str, float]]:
        """(device id, einsum id, lengths key, fastest minimum time) per group of records."""
        if not einsum_ids or not device_ids:
            return []
        with translate_errors(self.where, "grouping records"):
            return self._groups(conn, einsum_ids, device_ids, filters)

    def _groups(
        self, conn: Connection, einsum_ids: Sequence[int], device_ids: Sequence[int],
        filters: Filters,
    ) -> list[tuple[int, int, str, float]]:
        if filters.plain:
            rows = conn.execute(GROUPS, {"eids": list(einsum_ids), "dids": list(device_ids),
                                          "status": filters.status})
        else:
            conds = filters.conditions(joined=False)
            conds += [M.einsum_id.in_(list(einsum_ids)), M.device_id.in_(list(device_ids))]
            rows = conn.execute(
                sa.select(*GROUP_COLUMNS).where(*conds)
                .group_by(M.device_id, M.einsum_id, M.lengths_key)
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows if r[3] is not None]

    def fastest(
        self, conn: Connection, einsum_id: int, device_id: int, lengths_key: str,
        filters: Filters,
    ) -> Record | None:
        with translate_errors(self.where, "reading the fastest record"):
            return self._fastest(conn, einsum_id, device_id, lengths_key, filters)

    def _fastest(
        self, conn: Connection, einsum_id: int, device_id: int, lengths_key: str,
        filters: Filters,
    ) -> Record | None:
        if filters.plain:
            row = conn.execute(FASTEST, {"eid": einsum_id, "did": device_id,
                                          "status": filters.status, "lk": lengths_key}).first()
        else:
            conds = filters.conditions(joined=True)
            conds += [M.einsum_id == einsum_id, M.device_id == device_id,
                      M.lengths_key == lengths_key, M.min_time.is_not(None)]
            stmt = RECORD_SELECT.where(*conds).order_by(*FASTEST_ORDER).limit(1)
            row = conn.execute(stmt).first()
        return None if row is None else row_to_record(row, self.source)

    # }}}

"""Read-only look-ups the CLI needs beyond :class:`~feinsum.database.Database`'s API: a record
by id or uid, an einsum's canonical text and spec, the devices and per-group summaries."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from feinsum.errors import DatabaseError

if TYPE_CHECKING:
    from feinsum.database import Database, Record
    from feinsum.devices.opencl import DeviceInfo


def open_db(url: str | None, *, write: bool = False) -> Database:
    """The database named by ``--db`` (else ``$FEINSUM_DB``, else the per-user one). A
    database that is read must exist when it was named explicitly."""
    from feinsum.database import open_database

    named = url or os.environ.get("FEINSUM_DB")
    if (named and not write and "://" not in named and named != ":memory:"
            and not Path(named).exists()):
        raise DatabaseError(f"no database at {named!r}: check --db / FEINSUM_DB, or create "
                                "one with `feinsum tune ...` or `feinsum db upgrade PATH`")
    readonly = not write and named is not None and "://" not in named
    return open_database(url, readonly=readonly)


def _stores(db: Database) -> list[Any]:
    shipped = db.shipped_store
    return [db.user_store] if shipped is None else [db.user_store, shipped]


def find_record(db: Database, ref: str) -> Record:
    """The record *ref* names: its id (``12``, ``user#12``, ``shipped#3``) or its uid."""
    import sqlalchemy as sa

    from feinsum.database.models import Device, Einsum, Measurement

    source, _, rest = ref.partition("#")
    if not rest:
        source, rest = "", ref
    stmt = (sa.select(Einsum.canonical_key, Device.key, Measurement.id, Measurement.uid)
            .join(Einsum, Measurement.einsum_id == Einsum.id)
            .join(Device, Measurement.device_id == Device.id))
    for store in _stores(db):
        if source and store.source != source:
            continue
        conds = [Measurement.uid == rest]
        if rest.isdigit() and (source or store.source == "user"):
            conds.append(Measurement.id == int(rest))
        cond = sa.or_(*conds)
        with store.reading("finding a record") as conn:
            row = conn.execute(stmt.where(cond)).first()
        if row is None:
            continue
        for r in db.query(row[0], row[1], status=None, include_retired=True):
            if r.source == store.source and r.uid == row[3]:
                return r
    raise DatabaseError(f"no record {ref!r} in {db.where}: `feinsum query` and `feinsum list` "
                        "show record ids")


def _einsum_rows(db: Database, canonical_key: str, *columns: Any) -> Iterator[Any]:
    """The einsum's row in the user's database, then in the shipped records."""
    import sqlalchemy as sa

    from feinsum.database.models import Einsum

    for store in _stores(db):
        with store.reading("reading an einsum") as conn:
            row = conn.execute(sa.select(*columns)
                               .where(Einsum.canonical_key == canonical_key)).first()
        if row is not None:
            yield row


def einsum_text(db: Database, canonical_key: str) -> tuple[str, str] | None:
    """(canonical text, canonical spec JSON) of an einsum the database knows."""
    from feinsum.database.models import Einsum

    for row in _einsum_rows(db, canonical_key, Einsum.canonical_text, Einsum.spec_json):
        return str(row[0]), str(row[1])
    return None


def einsum_origin_of(db: Database, canonical_key: str) -> dict[str, Any] | None:
    """How an einsum was first recorded (:mod:`feinsum.database.origins`): the user's
    database's, else the shipped records'; None if neither knows."""
    from feinsum.database.models import Einsum
    from feinsum.database.origins import parse_origin

    for (text,) in _einsum_rows(db, canonical_key, Einsum.origin_json):
        found = parse_origin(text)
        if found is not None:
            return found
    return None


def devices(db: Database) -> dict[str, DeviceInfo]:
    """device key -> identity, for every device with records (user's and shipped)."""
    import sqlalchemy as sa

    from feinsum.database.models import Device
    from feinsum.database.store import over_stores
    from feinsum.devices.opencl import DeviceInfo

    def rows(store: Any) -> list[Any]:
        with store.reading("listing devices") as conn:
            return conn.execute(sa.select(Device.key, Device.info_json)).all()

    out: dict[str, DeviceInfo] = {}
    for part in over_stores(_stores(db), rows):
        for key, info in part:
            if key not in out:
                out[key] = DeviceInfo.from_dict(json.loads(info))
    return out


def pick_device(db: Database, text: str | None) -> DeviceInfo | None:
    """The database device *text* names (part of its name or key, case-insensitive); None
    for None. Several or none matching is an error listing them."""
    if text is None:
        return None
    known = devices(db)
    found = [i for k, i in known.items() if text.lower() in k.lower()]
    if len(found) == 1:
        return found[0]
    names = "; ".join(i.name for i in known.values()) or "none"
    if not found:
        raise DatabaseError(f"no device matching {text!r} in {db.where} (devices: {names})")
    raise DatabaseError(f"{text!r} matches {len(found)} devices ({names}): be more specific")


@dataclass(frozen=True)
class Group:
    """The records of one einsum on one device; ``label``: its subscripts as first
    recorded (else the canonical ones)."""

    canonical_key: str
    canonical_text: str
    label: str
    device_key: str
    device_name: str
    records: int
    ok: int
    lengths: int
    best_gflops: float | None


def groups(db: Database) -> list[Group]:
    """One :class:`Group` per (einsum, device) with records, user's and shipped merged; the
    best GFLOP/s is derived as the records' (:mod:`feinsum.database.rates`)."""
    import sqlalchemy as sa

    from feinsum.cli.common import einsum_label
    from feinsum.database.models import Device, Einsum, Measurement
    from feinsum.database.origins import einsum_label as user_label
    from feinsum.database.origins import parse_origin
    from feinsum.database.rates import derived

    ok = sa.case((Measurement.status == "ok", 1), else_=0)
    fastest = sa.func.min(sa.case((Measurement.status == "ok", Measurement.min_time)))
    stored = sa.func.max(sa.case((Measurement.status == "ok", Measurement.gflops)))
    stmt = (sa.select(Einsum.canonical_key, Einsum.canonical_text, Einsum.spec_json,
                      Einsum.origin_json, Device.key, Device.name, Measurement.lengths_key,
                      sa.func.count(), sa.func.sum(ok), fastest, stored)
            .join(Einsum, Measurement.einsum_id == Einsum.id)
            .join(Device, Measurement.device_id == Device.id)
            .group_by(Einsum.canonical_key, Einsum.canonical_text, Einsum.spec_json,
                      Einsum.origin_json, Device.key, Device.name, Measurement.lengths_key))
    from feinsum.database.store import over_stores

    def summary(store: Any) -> list[Any]:
        with store.reading("summarising") as conn:
            return conn.execute(stmt).all()

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for rows in over_stores(_stores(db), summary):
        for ck, text, sj, oj, dk, dn, lk, n, n_ok, t, gf in rows:
            g = found.setdefault((ck, dk), {"text": text, "spec": sj, "name": dn, "n": 0,
                                            "ok": 0, "lengths": set(), "gflops": None,
                                            "origin": None})
            g["origin"] = g["origin"] or parse_origin(oj)
            g["n"] += n
            g["ok"] += n_ok or 0
            g["lengths"].add(lk)
            rate = derived(ck, sj, lk, t, None, None, gf)[2]
            if rate is not None and (g["gflops"] is None or rate > g["gflops"]):
                g["gflops"] = rate
    out = [Group(ck, g["text"], user_label(g["origin"], einsum_label(g["spec"], ck)), dk,
                 g["name"], int(g["n"]), int(g["ok"]), len(g["lengths"]), g["gflops"])
           for (ck, dk), g in found.items()]
    return sorted(out, key=lambda g: (g.device_name, g.label, g.canonical_key))

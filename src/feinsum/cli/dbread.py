"""Read-only look-ups the CLI needs beyond :class:`~feinsum.database.Database`'s API: a record
by id or uid, an einsum's canonical text and spec, the devices and per-group summaries."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from feinsum.errors import DatabaseError

if TYPE_CHECKING:
    from feinsum.database import Database, Record
    from feinsum.devices import DeviceInfo


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


def einsum_text(db: Database, canonical_key: str) -> tuple[str, str] | None:
    """(canonical text, canonical spec JSON) of an einsum the database knows."""
    import sqlalchemy as sa

    from feinsum.database.models import Einsum

    for store in _stores(db):
        with store.reading("reading an einsum") as conn:
            row = conn.execute(sa.select(Einsum.canonical_text, Einsum.spec_json)
                               .where(Einsum.canonical_key == canonical_key)).first()
        if row is not None:
            return str(row[0]), str(row[1])
    return None


def devices(db: Database) -> dict[str, DeviceInfo]:
    """device key -> identity, for every device with records (user's and shipped)."""
    import sqlalchemy as sa

    from feinsum.database.models import Device
    from feinsum.devices import DeviceInfo

    out: dict[str, DeviceInfo] = {}
    for store in _stores(db):
        with store.reading("listing devices") as conn:
            for key, info in conn.execute(sa.select(Device.key, Device.info_json)):
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
    """The records of one einsum on one device."""

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
    """One :class:`Group` per (einsum, device) with records, user's and shipped merged."""
    import sqlalchemy as sa

    from feinsum.database.models import Device, Einsum, Measurement

    ok = sa.case((Measurement.status == "ok", 1), else_=0)
    from feinsum.cli.common import einsum_label

    stmt = (sa.select(Einsum.canonical_key, Einsum.canonical_text, Einsum.spec_json,
                      Device.key, Device.name,
                      sa.func.count(), sa.func.sum(ok),
                      sa.func.count(sa.distinct(Measurement.lengths_key)),
                      sa.func.max(sa.case((Measurement.status == "ok", Measurement.gflops))))
            .join(Einsum, Measurement.einsum_id == Einsum.id)
            .join(Device, Measurement.device_id == Device.id)
            .group_by(Einsum.canonical_key, Einsum.canonical_text, Einsum.spec_json,
                      Device.key, Device.name))
    merged: dict[tuple[str, str], Group] = {}
    for store in _stores(db):
        with store.reading("summarising") as conn:
            for ck, text, sj, dk, dn, n, n_ok, nl, gf in conn.execute(stmt):
                old = merged.get((ck, dk))
                if old is not None:
                    gf = max((g for g in (gf, old.best_gflops) if g is not None), default=None)
                    n, n_ok, nl = n + old.records, (n_ok or 0) + old.ok, max(nl, old.lengths)
                merged[(ck, dk)] = Group(ck, text, einsum_label(sj, ck), dk, dn, int(n),
                                         int(n_ok or 0), int(nl),
                                         None if gf is None else float(gf))
    return sorted(merged.values(), key=lambda g: (g.device_name, g.label, g.canonical_key))

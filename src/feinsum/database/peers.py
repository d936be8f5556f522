"""Peers' timings: how long numpy, opt_einsum, torch... took for an einsum at some lengths,
timed by the autotuner on the host beside a device's tuning run (``peer_timings``, schema
revision 0005), and their lines in an export (internal)."""

from __future__ import annotations

import datetime as _dt
import json
import math
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from feinsum.errors import DatabaseError

from .models import Device, Einsum, PeerTiming
from .records import EinsumIdentity, hostname, lengths_key

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo

    from .store import Store, Txn

P, E, D = PeerTiming, Einsum, Device


@dataclass(frozen=True)
class PeerRecord:
    """One peer's time for an einsum at some lengths, beside a device's tuning run."""

    uid: str
    source: str
    canonical_key: str
    device_key: str
    lengths: Mapping[str, int]
    peer: str
    seconds: float
    host: str | None
    measured_at: _dt.datetime


@dataclass(frozen=True)
class PeerRow:
    """A checked peer timing, ready to insert."""

    identity: EinsumIdentity
    device: DeviceInfo
    values: dict[str, Any]


def peer_rows(ident: EinsumIdentity, device: DeviceInfo, lengths: Mapping[str, int],
              times: Mapping[str, float], host: str | None = None) -> list[PeerRow]:
    """Rows for the peers' minimum times *times* (name -> seconds), measured now."""
    now = _dt.datetime.now(_dt.UTC)
    lk = lengths_key(lengths)
    rows = []
    for name, seconds in times.items():
        if not isinstance(name, str) or not 0 < len(name) <= 255:
            raise DatabaseError(f"a peer's name must be 1-255 characters, not {name!r}")
        t = float(seconds)
        if not math.isfinite(t) or t <= 0:
            raise DatabaseError(f"peer {name!r}: {seconds!r} is not a positive time")
        rows.append(PeerRow(ident, device, {
            "uid": uuid.uuid4().hex, "lengths_key": lk, "peer": name, "seconds": t,
            "host": (host or hostname())[:255], "measured_at": now}))
    return rows


def insert_peer_rows(store: Store, txn: Txn, rows: list[PeerRow]) -> int:
    """Insert *rows* in *txn*, skipping uids already present; returns how many were new."""
    if not rows:
        return 0
    uids = [r.values["uid"] for r in rows]
    present = set(txn.conn.execute(sa.select(P.uid).where(P.uid.in_(uids))).scalars())
    todo = []
    for r in rows:
        if r.values["uid"] in present:
            continue
        present.add(r.values["uid"])
        todo.append({**r.values, "einsum_id": store.einsum_id_for_write(txn, r.identity),
                     "device_id": store.device_id_for_write(txn, r.device)})
    if todo:
        txn.conn.execute(sa.insert(P), todo)
    return len(todo)


def read_peers(store: Store, canonical_key: str | None, device_key: str | None
               ) -> list[PeerRecord]:
    """Every peer timing of an einsum (None: all) beside a device (None: any)."""
    stmt = (sa.select(P.uid, E.canonical_key, D.key, P.lengths_key, P.peer, P.seconds,
                      P.host, P.measured_at)
            .join(E, P.einsum_id == E.id).join(D, P.device_id == D.id))
    if canonical_key is not None:
        stmt = stmt.where(E.canonical_key == canonical_key)
    if device_key is not None:
        stmt = stmt.where(D.key == device_key)
    with store.reading("reading peer timings") as conn:
        rows = conn.execute(stmt.order_by(P.seconds, P.id)).all()
    return [PeerRecord(r[0], store.source, r[1], r[2], json.loads(r[3]), r[4], r[5], r[6],
                       r[7]) for r in rows]


# {{{ export lines


def export_peer_lines(conn: sa.Connection, einsum_ids: Any, device_ids: Any,
                      iso: Any) -> Iterator[dict[str, Any]]:
    """The ``peer`` lines of an export: the timings of the exported einsums and devices."""
    stmt = (sa.select(P.uid, E.canonical_key, D.key, P.lengths_key, P.peer, P.seconds,
                      P.host, P.measured_at)
            .join(E, P.einsum_id == E.id).join(D, P.device_id == D.id)
            .where(P.einsum_id.in_(einsum_ids), P.device_id.in_(device_ids))
            .order_by(E.canonical_key, D.key, P.lengths_key, P.peer, P.measured_at, P.uid))
    for r in conn.execute(stmt):
        yield {"type": "peer", "uid": r[0], "einsum": r[1], "device": r[2],
               "lengths": json.loads(r[3]), "peer": r[4], "seconds": r[5], "host": r[6],
               "measured_at": iso(r[7])}


def check_peer_line(obj: Mapping[str, Any], where: str, einsums: Mapping[str, EinsumIdentity],
                    devices: Mapping[str, DeviceInfo], parse_time: Any) -> PeerRow:
    """A ``peer`` line of an export, checked (its einsum and device defined above)."""
    def field(name: str, types: Any) -> Any:
        v = obj.get(name)
        if not isinstance(v, types) or isinstance(v, bool):
            raise DatabaseError(f"{where}: field {name!r} is missing or has the wrong type "
                                f"({v!r})")
        return v

    uid = field("uid", str)
    if not 0 < len(uid) <= 32 or not all(c.isalnum() or c in "-_" for c in uid):
        raise DatabaseError(f"{where}: invalid uid {uid!r}")
    ident = einsums.get(field("einsum", str))
    device = devices.get(field("device", str))
    if ident is None or device is None:
        raise DatabaseError(f"{where}: a peer timing of an einsum or device not defined above")
    try:
        (row,) = peer_rows(ident, device, field("lengths", dict),
                           {field("peer", str): field("seconds", (int, float))})
    except DatabaseError as exc:
        raise DatabaseError(f"{where}: {exc}") from exc
    host = obj.get("host")
    row.values.update(uid=uid, host=host[:255] if isinstance(host, str) else None,
                      measured_at=parse_time(obj, "measured_at", where, nullable=False))
    return row


# }}}

"""Sharing: the portable JSON-lines format, export/import/merge, shipped records (the
pruning of stale records is :mod:`feinsum.database.pruning`).

An export is UTF-8 text, one JSON object per line, sorted so that two exports of the same
records are byte-identical (the shipped ``db/*.jsonl`` files diff and review like code)::

    {"format":"feinsum-timings","format_version":3,"type":"header"}
    {"info":{...DeviceInfo...},"key":"<device key>","type":"device"}
    {"canonical_key":"fek1-...","canonical_text":"...","origin":{...},"spec":{...},"structure_key":"...","type":"einsum"}
    {"data":{...},"device":"<device key>","type":"roofline","updated_at":"..."}
    {"device":"<device key>","einsum":"fek1-...","lengths":{"n0":50000},"params":{...},
     "recipe":"...","status":"ok","uid":"...",...,"type":"measurement"}   (one line)
    {"device":"<device key>","einsum":"fek1-...","lengths":{...},"peer":"numpy.einsum",
     "seconds":0.0123,"uid":"...",...,"type":"peer"}                     (one line)
    {"type":"end"}

Devices and einsums come first and measurements name them by key. The ``end`` line marks a
complete file: a file without it was truncated. Version 3 of the format has, beside
version 1's fields, the measurements' timing intervals (``timing_started_at``,
``timing_ended_at``), the einsums' ``origin`` and the ``peer`` lines, and the
measurements' code fingerprints and retirement (``code_fingerprint``,
``fingerprint_origin``, ``code_loopy_version``, ``measured_recipe_version``,
``retired_at``, ``retired_reason``); every one of these is optional when read, so files of
versions 1 and 2 (which had some of them) are still read: without fingerprints, none
retired.

Reading never executes anything: every line is parsed with :func:`json.loads` and every
field checked before a single row is written, and an import is one transaction (all or
nothing); measurements whose ``uid`` is already present are skipped, so importing or
merging twice adds nothing (an import never changes a record already present).
"""

from __future__ import annotations

import datetime as _dt
import gzip
import io
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

import sqlalchemy as sa

from feinsum.errors import DatabaseError

from .files import EXPORT_FORMAT
from .models import Configuration, Device, Einsum, Measurement, Recipe, Roofline
from .peers import PeerRow, check_peer_line, export_peer_lines, insert_peer_rows
from .records import (
    FINGERPRINT_ORIGINS,
    STATUSES,
    EinsumIdentity,
    ImportReport,
    MeasurementRow,
    canonical_json,
    lengths_key,
    params_key,
    upgrade_timing,
)
from .store import Store, device_from_dict

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo

FORMAT = EXPORT_FORMAT
#: The export format version this code writes (and the newest it reads).
FORMAT_VERSION = 3

M, E, D, R, C = Measurement, Einsum, Device, Recipe, Configuration

_MEASUREMENT_FLOATS = (
    "min_time", "median_time", "spread", "flops", "bytes", "gflops", "tiles_kept_fraction",
)
_MEASUREMENT_STRINGS = (
    "message", "host", "loopy_version", "pyopencl_version", "feinsum_version",
    "code_fingerprint", "code_loopy_version", "retired_reason",
)
_STRING_LIMITS = {"code_fingerprint": 64, "code_loopy_version": 64}


def dumps(obj: Mapping[str, Any]) -> str:
    """One line of the format (no newline)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False)


def _iso(t: _dt.datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return t.astimezone(_dt.UTC).isoformat(timespec="microseconds")


def _encode_error(v: float | None) -> float | str | None:
    if v is None or math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


# {{{ export


def export_lines(store: Store, conds: Sequence[sa.ColumnElement[bool]] = ()) -> Iterator[
        dict[str, Any]]:
    """Every line of an export of *store* (measurements restricted by *conds*)."""
    yield {"type": "header", "format": FORMAT, "format_version": FORMAT_VERSION}
    with store.reading("exporting", snapshot=True) as conn:
        selected = sa.select(M.id).where(*conds) if conds else None

        def used(col: Any) -> Any:
            sub = sa.select(col)
            if selected is not None:
                sub = sub.where(M.id.in_(selected))
            return sub

        device_conds = [D.id.in_(used(M.device_id))]
        if not conds:
            device_conds.append(D.id.in_(sa.select(Roofline.device_id)))
        for key, info_json in conn.execute(
            sa.select(D.key, D.info_json).where(sa.or_(*device_conds)).order_by(D.key)
        ):
            yield {"type": "device", "key": key, "info": json.loads(info_json)}
        for ck, sk, text, spec, origin in conn.execute(
            sa.select(E.canonical_key, E.structure_key, E.canonical_text, E.spec_json,
                      E.origin_json)
            .where(E.id.in_(used(M.einsum_id)))
            .order_by(E.canonical_key)
        ):
            line = {"type": "einsum", "canonical_key": ck, "structure_key": sk,
                    "canonical_text": text, "spec": json.loads(spec)}
            if origin is not None:
                line["origin"] = json.loads(origin)
            yield line
        rstmt = (
            sa.select(D.key, Roofline.data_json, Roofline.updated_at)
            .join(D, Roofline.device_id == D.id)
            .order_by(D.key)
        )
        if conds:
            rstmt = rstmt.where(D.id.in_(used(M.device_id)))
        for dkey, data, updated in conn.execute(rstmt):
            yield {"type": "roofline", "device": dkey, "data": json.loads(data),
                   "updated_at": _iso(updated)}
        mstmt = (
            sa.select(
                M.uid, E.canonical_key, D.key, R.name, R.version, C.params_json, M.lengths_key,
                M.status, M.samples_json, M.sample_count, M.min_time, M.median_time, M.spread,
                M.flops, M.bytes, M.gflops, M.validation_error, M.message,
                M.tiles_kept_fraction, M.host, M.loopy_version, M.pyopencl_version,
                M.feinsum_version, M.started_at, M.measured_at, M.timing_started_at,
                M.timing_ended_at, M.code_fingerprint, M.fingerprint_origin,
                M.code_loopy_version, M.measured_recipe_version, M.retired_at,
                M.retired_reason,
            )
            .select_from(M)
            .join(E, M.einsum_id == E.id)
            .join(D, M.device_id == D.id)
            .join(R, M.recipe_id == R.id)
            .join(C, M.configuration_id == C.id)
            .where(*conds)
            .order_by(E.canonical_key, D.key, R.name, R.version, M.lengths_key,
                      C.params_json, M.measured_at, M.uid)
            .execution_options(yield_per=2000)
        )
        for r in conn.execute(mstmt):
            yield {
                "type": "measurement", "uid": r[0], "einsum": r[1], "device": r[2],
                "recipe": r[3], "recipe_version": r[4], "params": json.loads(r[5]),
                "lengths": json.loads(r[6]), "status": r[7], "samples": json.loads(r[8]),
                "sample_count": r[9], "min_time": r[10], "median_time": r[11],
                "spread": r[12], "flops": r[13], "bytes": r[14], "gflops": r[15],
                "validation_error": _encode_error(r[16]), "message": r[17],
                "tiles_kept_fraction": r[18], "host": r[19], "loopy_version": r[20],
                "pyopencl_version": r[21], "feinsum_version": r[22],
                "started_at": _iso(r[23]), "measured_at": _iso(r[24]),
                **({} if r[25] is None else {"timing_started_at": _iso(r[25]),
                                             "timing_ended_at": _iso(r[26])}),
                "code_fingerprint": r[27], "fingerprint_origin": r[28],
                "code_loopy_version": r[29], "measured_recipe_version": r[30],
                "retired_at": _iso(r[31]), "retired_reason": r[32],
            }
        yield from export_peer_lines(conn, used(M.einsum_id), used(M.device_id), _iso)
    yield {"type": "end"}


def export_file(store: Store, path: str | os.PathLike[str],
                conds: Sequence[sa.ColumnElement[bool]] = (), *,
                compress: bool | None = None, only_if_changed: bool = False) -> int:
    """Write an export of *store* to *path* (gzip-compressed when *compress*, by default
    when its name ends in ``.gz``), atomically: the file appears complete or not at all;
    *only_if_changed*: not at all when it would hold what it holds. A file there that is
    not an export (a database, anything else but an empty file) is refused, left as it
    is. Returns the measurement count."""
    from .files import describe, file_kind, write_beside

    path = Path(path)
    kind = file_kind(path)
    if kind not in ("missing", "empty", "export"):
        raise DatabaseError(f"{path} {describe(kind)}: an export would replace it; write "
                            "the export to another file")
    gz = path.name.endswith(".gz") if compress is None else compress
    n = 0

    def write(tmp: Path) -> None:
        nonlocal n
        with open(tmp, "wb") as raw:
            # gzip without a name or time in its header: the same records, the same bytes
            stream: IO[bytes] = cast(IO[bytes], gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, mtime=0)) if gz else raw
            with io.TextIOWrapper(stream, encoding="utf-8", newline="\n") as f:
                for obj in export_lines(store, conds):
                    n += obj["type"] == "measurement"
                    f.write(dumps(obj))
                    f.write("\n")

    write_beside(path, write, only_if_changed=only_if_changed)
    return n


# }}}


# {{{ reading and checking


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_file_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line of an export file; a line that is
    not a JSON object, or a last line without its newline, is a :class:`DatabaseError`."""
    from .files import open_export

    path = Path(path)
    with open_export(path) as raw:
        lineno = 0
        try:
            for line in raw:
                lineno += 1
                if not line.strip():
                    continue
                if not line.endswith(b"\n"):
                    raise DatabaseError(
                        f"{path}:{lineno}: the file ends in the middle of a line: it was "
                        "truncated"
                    )
                try:
                    obj = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
                except (UnicodeDecodeError, ValueError) as exc:
                    raise DatabaseError(
                        f"{path}:{lineno}: not a line of a feinsum export ({exc}); the file "
                        "is corrupt or is not a feinsum export"
                    ) from exc
                if not isinstance(obj, dict):
                    raise DatabaseError(
                        f"{path}:{lineno}: expected a JSON object, found "
                        f"{type(obj).__name__}: not a feinsum export"
                    )
                yield lineno, obj
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise DatabaseError(f"{path}:{lineno + 1}: cannot read: {exc} (truncated?)") from exc


class _Checked:
    """What the first pass over an export learnt: devices, einsums, rooflines, counts."""

    def __init__(self) -> None:
        self.devices: dict[str, DeviceInfo] = {}
        self.einsums: dict[str, EinsumIdentity] = {}
        self.rooflines: list[tuple[str, str, _dt.datetime | None]] = []
        self.measurements = 0
        self.peers: list[PeerRow] = []


def _req(obj: Mapping[str, Any], name: str, types: Any, where: str, *,
         nullable: bool = False) -> Any:
    if name not in obj:
        raise DatabaseError(f"{where}: missing field {name!r}")
    v = obj[name]
    if v is None and nullable:
        return None
    if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise DatabaseError(f"{where}: field {name!r} has the wrong type ({v!r})")
    if not isinstance(v, types):
        raise DatabaseError(f"{where}: field {name!r} has the wrong type ({v!r})")
    return v


def _key(obj: Mapping[str, Any], name: str, where: str, maxlen: int) -> str:
    v = _req(obj, name, str, where)
    if not v or len(v) > maxlen:
        raise DatabaseError(f"{where}: field {name!r} must be 1-{maxlen} characters")
    return v  # type: ignore[no-any-return]


def _time(obj: Mapping[str, Any], name: str, where: str, *, nullable: bool) -> _dt.datetime | None:
    v = _req(obj, name, str, where, nullable=nullable)
    if v is None:
        return None
    try:
        t = _dt.datetime.fromisoformat(v)
    except ValueError as exc:
        raise DatabaseError(f"{where}: field {name!r} is not an ISO timestamp ({v!r})") from exc
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t.astimezone(_dt.UTC)


def _number(obj: Mapping[str, Any], name: str, where: str) -> float | None:
    v = _req(obj, name, (int, float), where, nullable=True)
    if v is None:
        return None
    v = float(v)
    if not math.isfinite(v):
        raise DatabaseError(f"{where}: field {name!r} is not finite")
    return v


def _check_line(obj: dict[str, Any], where: str, checked: _Checked) -> None:
    kind = obj.get("type")
    if kind == "device":
        key = _key(obj, "key", where, 1000)
        info = device_from_dict_at(_req(obj, "info", dict, where), where)
        if info.key != key:
            raise DatabaseError(f"{where}: device key {key!r} does not match its information")
        checked.devices[key] = info
    elif kind == "einsum":
        ck = _key(obj, "canonical_key", where, 64)
        checked.einsums[ck] = EinsumIdentity(
            canonical_key=ck,
            structure_key=_key(obj, "structure_key", where, 64),
            canonical_text=_req(obj, "canonical_text", str, where),
            spec_json=canonical_json(_req(obj, "spec", (dict, list), where)),
            origin_json=(canonical_json(_req(obj, "origin", dict, where))
                         if obj.get("origin") is not None else None),
        )
    elif kind == "roofline":
        dkey = _req(obj, "device", str, where)
        if dkey not in checked.devices:
            raise DatabaseError(f"{where}: roofline of a device not defined above ({dkey!r})")
        data = canonical_json(_req(obj, "data", dict, where))
        checked.rooflines.append((dkey, data, _time(obj, "updated_at", where, nullable=True)))
    elif kind == "measurement":
        measurement_row(obj, where, checked)
        checked.measurements += 1
    elif kind == "peer":
        checked.peers.append(check_peer_line(obj, where, checked.einsums, checked.devices,
                                             _time))
    else:
        raise DatabaseError(
            f"{where}: unknown line type {kind!r}: not a feinsum export, or one written by a "
            "newer feinsum"
        )


def device_from_dict_at(d: Mapping[str, Any], where: str) -> DeviceInfo:
    try:
        return device_from_dict(d)
    except DatabaseError as exc:
        raise DatabaseError(f"{where}: {exc}") from exc


def measurement_row(obj: Mapping[str, Any], where: str, checked: _Checked) -> MeasurementRow:
    """Check one measurement line and turn it into a row to insert."""
    uid = _key(obj, "uid", where, 32)
    if not re.fullmatch(r"[A-Za-z0-9_\-]+", uid):
        raise DatabaseError(f"{where}: invalid uid {uid!r}")
    ck = _req(obj, "einsum", str, where)
    ident = checked.einsums.get(ck)
    if ident is None:
        raise DatabaseError(f"{where}: measurement of an einsum not defined above ({ck!r})")
    dkey = _req(obj, "device", str, where)
    device = checked.devices.get(dkey)
    if device is None:
        raise DatabaseError(f"{where}: measurement on a device not defined above ({dkey!r})")
    status = _req(obj, "status", str, where)
    if status not in STATUSES:
        raise DatabaseError(f"{where}: unknown status {status!r}")
    try:
        params = params_key(_req(obj, "params", dict, where))
        lengths = lengths_key(_req(obj, "lengths", dict, where))
    except DatabaseError as exc:
        raise DatabaseError(f"{where}: {exc}") from exc
    samples = _req(obj, "samples", list, where)
    for s in samples:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise DatabaseError(f"{where}: timing sample {s!r} is not a finite number")
    count = _req(obj, "sample_count", int, where)
    verr = obj.get("validation_error")
    if isinstance(verr, str) and verr in ("inf", "-inf", "nan"):
        verr = float(verr)
    elif verr is not None:
        verr = _number(obj, "validation_error", where)
    values: dict[str, Any] = {
        "uid": uid,
        "status": status,
        "sample_count": count,
        "samples_json": canonical_json([float(s) for s in samples]),
        "validation_error": verr,
        "started_at": _time(obj, "started_at", where, nullable=True),
        "measured_at": _time(obj, "measured_at", where, nullable=False),
        # optional (schema revision 0004): absent from older exports
        "timing_started_at": _time(obj, "timing_started_at", where, nullable=True)
        if "timing_started_at" in obj else None,
        "timing_ended_at": _time(obj, "timing_ended_at", where, nullable=True)
        if "timing_ended_at" in obj else None,
    }
    for name in _MEASUREMENT_FLOATS:
        values[name] = _number(obj, name, where) if name in obj else None
    for name in _MEASUREMENT_STRINGS:
        values[name] = _req(obj, name, str, where, nullable=True) if name in obj else None
        limit = _STRING_LIMITS.get(name)
        if limit is not None and values[name] is not None and len(values[name]) > limit:
            raise DatabaseError(f"{where}: field {name!r} is longer than {limit} characters")
    if status == "ok" and values["median_time"] is None:
        raise DatabaseError(f"{where}: an 'ok' measurement without median_time")
    upgrade_timing(values)
    recipe_version = _key(obj, "recipe_version", where, 255)
    values.update(_provenance(obj, where, values, recipe_version))
    return MeasurementRow(
        identity=ident,
        device=device,
        recipe_name=_key(obj, "recipe", where, 255),
        recipe_version=recipe_version,
        params_json=params,
        lengths_key=lengths,
        values=values,
    )


def _provenance(obj: Mapping[str, Any], where: str, values: Mapping[str, Any],
                recipe_version: str) -> dict[str, Any]:
    """The fingerprint origin, the recipe version timed with and the retirement time of a
    measurement line (each optional: older lines may lack them)."""
    origin = _req(obj, "fingerprint_origin", str, where, nullable=True) if (
        "fingerprint_origin" in obj) else None
    if values["code_fingerprint"] is None:
        origin = None
    elif origin not in FINGERPRINT_ORIGINS:
        raise DatabaseError(f"{where}: fingerprint_origin must be one of "
                            f"{', '.join(FINGERPRINT_ORIGINS)}, not {origin!r}")
    timed = (_key(obj, "measured_recipe_version", where, 255)
             if obj.get("measured_recipe_version") is not None else recipe_version)
    retired = _time(obj, "retired_at", where, nullable=True) if "retired_at" in obj else None
    if (retired is None) != (values["retired_reason"] is None):
        raise DatabaseError(f"{where}: retired_at and retired_reason go together")
    return {"fingerprint_origin": origin, "measured_recipe_version": timed,
            "retired_at": retired}


def check_lines(lines: Iterable[tuple[int, dict[str, Any]]], name: str) -> _Checked:
    """First pass: check the header, every line and the end marker."""
    checked = _Checked()
    state = "start"
    for lineno, obj in lines:
        where = f"{name}:{lineno}"
        if state == "start":
            if obj.get("type") != "header" or obj.get("format") != FORMAT:
                raise DatabaseError(
                    f"{where}: not a feinsum export (the first line is not a "
                    f"{FORMAT!r} header)"
                )
            version = obj.get("format_version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise DatabaseError(f"{where}: invalid format_version {version!r}")
            if version > FORMAT_VERSION:
                raise DatabaseError(
                    f"{where}: export format version {version} is newer than this feinsum "
                    f"reads ({FORMAT_VERSION}); upgrade feinsum (`pip install -U feinsum`)"
                )
            state = "body"
            continue
        if obj.get("type") == "header":
            raise DatabaseError(
                f"{where}: a second header: two exports were concatenated; import them one "
                "by one instead"
            )
        if state == "end":
            raise DatabaseError(f"{where}: content after the end line; the file is corrupt")
        if obj.get("type") == "end":
            state = "end"
            continue
        _check_line(obj, where, checked)
    if state == "start":
        raise DatabaseError(f"{name}: empty file: not a feinsum export")
    if state != "end":
        raise DatabaseError(
            f"{name}: no end line: the file was truncated (or cut by hand; every export "
            'ends with {"type":"end"})'
        )
    return checked


def import_lines(
    store: Store,
    lines: Callable[[], Iterable[tuple[int, dict[str, Any]]]],
    name: str,
) -> ImportReport:
    """Import an export into *store*: check everything first, then write it in one
    transaction, skipping measurements whose uid is present."""
    checked = check_lines(lines(), name)

    def rows() -> Iterator[MeasurementRow]:
        for lineno, obj in lines():
            if obj.get("type") == "measurement":
                yield measurement_row(obj, f"{name}:{lineno}", checked)

    for dkey, data, updated in checked.rooflines:
        store.set_roofline(checked.devices[dkey], data, updated, only_if_newer=True)
    peers: list[int] = []
    added, skipped = store.add_measurements(
        rows(), skip_existing=True, what=f"importing {name}",
        also=lambda txn: peers.append(insert_peer_rows(store, txn, checked.peers)),
    )
    return ImportReport(
        added=added, skipped=skipped, devices=len(checked.devices),
        einsums=len(checked.einsums), rooflines=len(checked.rooflines), peers=sum(peers),
    )


def import_file(store: Store, path: str | os.PathLike[str]) -> ImportReport:
    return import_lines(store, lambda: read_file_lines(path), str(path))


def import_store(store: Store, other: Store) -> ImportReport:
    """Merge every record of *other* into *store* (through the export format, so the same
    checks apply)."""

    def lines() -> Iterator[tuple[int, dict[str, Any]]]:
        # round-trip through text so that what is merged is exactly what an export holds
        for i, obj in enumerate(export_lines(other), 1):
            yield i, json.loads(dumps(obj))

    return import_lines(store, lines, other.where)


# }}}

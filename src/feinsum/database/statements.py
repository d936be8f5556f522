"""The SQL of the database, built once: Core tables of the models, prebuilt statements
(SQLAlchemy caches their compiled form; values are bound per call), the record row
decoder and the optional filters of query/best (internal)."""

from __future__ import annotations

import datetime as _dt
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from .models import Configuration, Device, Einsum, Measurement, Recipe, Roofline, State
from .rates import derived
from .records import Record

# Reads and writes use the Core tables of the ORM models: statements are built once
# (SQLAlchemy caches their compiled form; values are bound per call), which keeps a query
# well under a millisecond of Python.
MT, ET, DT, RT, CT = (
    cast(sa.Table, cls.__table__) for cls in (Measurement, Einsum, Device, Recipe, Configuration)
)
ST = cast(sa.Table, State.__table__)
ROOFLINES = cast(sa.Table, Roofline.__table__)
M, E, D, R, C = MT.c, ET.c, DT.c, RT.c, CT.c
T: dict[str, sa.Table] = {"device": DT, "einsum": ET, "recipe": RT, "config": CT}

LOOKUP = {
    "device": sa.select(D.id).where(D.key == sa.bindparam("k0")),
    "einsum": sa.select(E.id).where(E.canonical_key == sa.bindparam("k0")),
    "recipe": sa.select(R.id).where(R.name == sa.bindparam("k0"), R.version == sa.bindparam("k1")),
    "config": sa.select(C.id).where(C.params_hash == sa.bindparam("k0")),
}
INSERT_MEASUREMENT = MT.insert()
UPSERT: dict[tuple[str, str], Any] = {}
BUMP_REVISION = ST.update().where(ST.c.id == 1).values(revision=ST.c.revision + 1)

RECORD_COLUMNS = (
    M.id, M.uid, E.canonical_key, E.structure_key, M.lengths_key,
    D.key, D.name, D.vendor, D.device_type, D.driver_version, D.platform_name,
    R.name, R.version, C.params_json, M.status, M.samples_json, M.sample_count,
    M.min_time, M.median_time, M.spread, M.flops, M.bytes, M.gflops, M.validation_error,
    M.message, M.tiles_kept_fraction, M.host, M.loopy_version, M.pyopencl_version,
    M.feinsum_version, M.started_at, M.measured_at, M.timing_started_at, M.timing_ended_at,
    M.code_fingerprint, M.fingerprint_origin, M.code_loopy_version, M.measured_recipe_version,
    M.retired_at, M.retired_reason, E.spec_json,
)
#: Queries see the records revalidation did not retire.
LIVE = M.retired_at.is_(None)


RECORD_SELECT = (
    sa.select(*RECORD_COLUMNS)
    .select_from(MT)
    .join(ET, M.einsum_id == E.id)
    .join(DT, M.device_id == D.id)
    .join(RT, M.recipe_id == R.id)
    .join(CT, M.configuration_id == C.id)
)
#: How records are ranked: minimum time (the autotuner's figure of merit), then median
#: time, then insertion order; records without a time last (NULLs sort differently per
#: backend, hence the explicit IS NULL keys).
BY_SPEED = (M.min_time.is_(None), M.min_time, M.median_time.is_(None), M.median_time, M.id)
#: The fastest of one group: ``ok`` records always have a min_time (revision 0003), and the
#: IS NOT NULL condition lets the rank index deliver them in order on every backend.
FASTEST_ORDER = (M.min_time, M.median_time, M.id)
Q_ONE = RECORD_SELECT.where(
    M.einsum_id == sa.bindparam("eid"), M.device_id == sa.bindparam("did"),
    M.status == sa.bindparam("status"), LIVE,
).order_by(*BY_SPEED)
Q_ONE_LIMIT = Q_ONE.limit(sa.bindparam("limit"))
FASTEST = RECORD_SELECT.where(
    M.einsum_id == sa.bindparam("eid"), M.device_id == sa.bindparam("did"),
    M.status == sa.bindparam("status"), M.lengths_key == sa.bindparam("lk"),
    M.min_time.is_not(None), LIVE,
).order_by(*FASTEST_ORDER).limit(1)
#: (device, einsum, lengths) groups with their fastest minimum time.
GROUP_COLUMNS = (M.device_id, M.einsum_id, M.lengths_key, sa.func.min(M.min_time))
GROUPS = (
    sa.select(*GROUP_COLUMNS)
    .where(
        M.einsum_id.in_(sa.bindparam("eids", expanding=True)),
        M.device_id.in_(sa.bindparam("dids", expanding=True)),
        M.status == sa.bindparam("status"), LIVE,
    )
    .group_by(M.device_id, M.einsum_id, M.lengths_key)
)
STRUCTURE = sa.select(E.id, E.canonical_key).where(E.structure_key == sa.bindparam("sk"))
VENDOR = sa.select(D.id, D.key, D.name).where(
    D.vendor == sa.bindparam("vendor"), D.device_type == sa.bindparam("type"),
    D.key != sa.bindparam("key"),
)
MEASURED = (
    sa.select(C.params_json)
    .select_from(MT)
    .join(CT, M.configuration_id == C.id)
    .where(
        M.einsum_id == sa.bindparam("eid"), M.device_id == sa.bindparam("did"),
        M.recipe_id == sa.bindparam("rid"), M.lengths_key == sa.bindparam("lk"), LIVE,
    )
    .distinct()
)
REVISION = sa.select(ST.c.revision).where(ST.c.id == 1)
ROOFLINE = sa.select(ROOFLINES.c.data_json).where(ROOFLINES.c.device_id == sa.bindparam("did"))


@functools.lru_cache(maxsize=1024)
def _lengths_items(text: str) -> tuple[tuple[str, int], ...]:
    return tuple(json.loads(text).items())


def _lengths(text: str) -> dict[str, int]:
    """Lengths JSON (few distinct values, flat): parsed once, a fresh dict each time."""
    return dict(_lengths_items(text))


def row_to_record(row: Sequence[Any], source: str) -> Record:
    flops, nbytes, gflops = derived(row[2], row[40], row[4], row[17], row[20], row[21], row[22])
    return Record(
        id=row[0], uid=row[1], source=source, canonical_key=row[2], structure_key=row[3],
        lengths=_lengths(row[4]), device_key=row[5], device_name=row[6],
        device_vendor=row[7], device_type=row[8], driver_version=row[9],
        platform_name=row[10], recipe_name=row[11], recipe_version=row[12],
        params=json.loads(row[13]), status=row[14], samples=tuple(json.loads(row[15])),
        sample_count=row[16], min_time=row[17], median_time=row[18], spread=row[19],
        flops=flops, bytes=nbytes, gflops=gflops, validation_error=row[23],
        message=row[24], tiles_kept_fraction=row[25], host=row[26], loopy_version=row[27],
        pyopencl_version=row[28], feinsum_version=row[29], started_at=row[30],
        measured_at=row[31], timing_started_at=row[32], timing_ended_at=row[33],
        code_fingerprint=row[34], fingerprint_origin=row[35], code_loopy_version=row[36],
        measured_recipe_version=row[37], retired_at=row[38], retired_reason=row[39],
    )


@dataclass(frozen=True)
class Filters:
    """Optional conditions of query/best on measurements (and their recipe and device)."""

    recipe: str | tuple[str, str] | None = None
    recipe_versions: Mapping[str, str] | None = None
    status: str | Sequence[str] | None = "ok"
    loopy_version: str | None = None
    pyopencl_version: str | None = None
    feinsum_version: str | None = None
    driver_version: str | None = None
    max_age: _dt.timedelta | None = None
    lengths_key: str | None = None
    #: also the records revalidation retired
    retired: bool = False
    #: records (by uid) taken as current whatever their recipe version, and records left
    #: out (the verdicts of a lazy revalidation that could not be written back)
    kept: frozenset[str] = frozenset()
    dropped: frozenset[str] = frozenset()
    #: also records of the *recipe_versions* recipes at other versions that carry a code
    #: fingerprint: candidates of a lazy revalidation
    fingerprinted: bool = False

    @property
    def plain(self) -> bool:
        """Only a single status: the prebuilt statements apply."""
        return isinstance(self.status, str) and self == Filters(status=self.status)

    def _current(self, joined: bool) -> sa.ColumnElement[bool] | None:
        """The *recipe_versions* condition, widened by :attr:`fingerprinted` and
        :attr:`kept`."""
        if self.recipe_versions is None:
            return None
        exact: sa.ColumnElement[bool] = sa.or_(
            sa.false(), *[sa.and_(R.name == n, R.version == v)
                          for n, v in self.recipe_versions.items()])
        other: sa.ColumnElement[bool] = R.name.in_(list(self.recipe_versions))
        if not joined:
            exact = M.recipe_id.in_(sa.select(R.id).where(exact))
            other = M.recipe_id.in_(sa.select(R.id).where(other))
        cond = exact
        if self.fingerprinted:
            cond = sa.or_(cond, sa.and_(other, M.code_fingerprint.is_not(None)))
        if self.kept:
            cond = sa.or_(cond, M.uid.in_(sorted(self.kept)))
        return cond

    def conditions(self, *, joined: bool) -> list[sa.ColumnElement[bool]]:
        """WHERE clauses; *joined*: the recipe and device tables are in the FROM list
        (otherwise they are reached through sub-selects)."""
        out: list[sa.ColumnElement[bool]] = []
        if isinstance(self.status, str):
            out.append(M.status == self.status)
        elif self.status is not None:
            out.append(M.status.in_(list(self.status)))
        rconds: list[sa.ColumnElement[bool]] = []
        if isinstance(self.recipe, str):
            rconds.append(R.name == self.recipe)
        elif self.recipe is not None:
            name, version = self.recipe
            rconds.append(sa.and_(R.name == name, R.version == version))
        if rconds:
            if joined:
                out.extend(rconds)
            else:
                out.append(M.recipe_id.in_(sa.select(R.id).where(*rconds)))
        current = self._current(joined)
        if current is not None:
            out.append(current)
        if self.dropped:
            out.append(M.uid.not_in(sorted(self.dropped)))
        if not self.retired:
            out.append(LIVE)
        for col, value in (
            (M.loopy_version, self.loopy_version),
            (M.pyopencl_version, self.pyopencl_version),
            (M.feinsum_version, self.feinsum_version),
        ):
            if value is not None:
                out.append(col == value)
        if self.driver_version is not None:
            if joined:
                out.append(D.driver_version == self.driver_version)
            else:
                out.append(
                    M.device_id.in_(sa.select(D.id).where(D.driver_version == self.driver_version))
                )
        if self.max_age is not None:
            out.append(M.measured_at >= _dt.datetime.now(_dt.UTC) - self.max_age)
        if self.lengths_key is not None:
            out.append(M.lengths_key == self.lengths_key)
        return out

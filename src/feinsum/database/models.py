"""The schema: SQLAlchemy 2.0 typed ORM models of the timing database.

Normalised into reference tables (devices, einsums, recipes, configurations) that
measurements point at with foreign keys. Every free-form value (device details,
specification, parameters, lengths, samples, roofline data) is stored as JSON text:
nothing in a database is ever unpickled or executed.

The tables as they stand at :data:`SCHEMA_VERSION`; each change is an Alembic revision in
``migrations/versions`` (the migration test checks the two agree).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

#: The Alembic revision the models describe (the newest migration).
SCHEMA_VERSION = "0006"
#: Every revision this code can upgrade from, oldest first (ends with SCHEMA_VERSION).
KNOWN_VERSIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004", "0005", "0006")
#: Alembic's version table; prefixed so a shared server database may also hold an
#: application's own ``alembic_version``.
VERSION_TABLE = "feinsum_alembic_version"

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class UTCDateTime(TypeDecorator[_dt.datetime]):
    """A timezone-aware UTC timestamp on every backend.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so the value is stored
    as naive UTC and given its time zone back when read. Naive inputs are taken as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> _dt.datetime | None:
        if value is None:
            return None
        if not isinstance(value, _dt.datetime):
            raise TypeError(f"expected a datetime, got {type(value).__name__}")
        value = value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value.astimezone(_dt.UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> _dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=_dt.UTC)  # type: ignore[no-any-return]
        return value.astimezone(_dt.UTC)  # type: ignore[no-any-return]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class State(Base):
    """One row: marks the database as feinsum's and counts changes (:meth:`Database.revision`)."""

    __tablename__ = "feinsum_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    application: Mapped[str] = mapped_column(String(32))
    revision: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Device(Base):
    """An OpenCL device as :class:`feinsum.devices.info.DeviceInfo` identifies it."""

    __tablename__ = "devices"
    __table_args__ = (Index("ix_devices_vendor_type", "vendor", "device_type"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: ``DeviceInfo.key``: vendor | name | OpenCL version | driver version | platform version.
    key: Mapped[str] = mapped_column(String(1000), unique=True)
    platform_name: Mapped[str] = mapped_column(String(255))
    platform_version: Mapped[str] = mapped_column(String(255))
    vendor: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    driver_version: Mapped[str] = mapped_column(String(255))
    opencl_version: Mapped[str] = mapped_column(String(255))
    device_type: Mapped[str] = mapped_column(String(32))
    compute_units: Mapped[int] = mapped_column(Integer)
    max_work_group_size: Mapped[int] = mapped_column(Integer)
    local_mem_size: Mapped[int] = mapped_column(BigInteger)
    global_mem_size: Mapped[int] = mapped_column(BigInteger)
    has_fp64: Mapped[bool] = mapped_column(Boolean)
    #: The whole ``DeviceInfo.as_dict()`` as JSON.
    info_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Einsum(Base):
    """A canonical batched einsum (long lengths abstracted into symbols)."""

    __tablename__ = "einsums"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    canonical_key: Mapped[str] = mapped_column(String(64), unique=True)
    structure_key: Mapped[str] = mapped_column(String(64), index=True)
    canonical_text: Mapped[str] = mapped_column(Text)
    #: ``feinsum.spec.serialize.spec_to_json`` of the canonical spec.
    spec_json: Mapped[str] = mapped_column(Text)
    #: How it was first recorded (revision 0005): the user's spec, their names of the
    #: canonical length symbols, the kernel and statements it came from
    #: (``feinsum.database.origins``); NULL for einsums recorded before.
    origin_json: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Recipe(Base):
    """A recipe at one version (the version is a hash of its source and of the feinsum
    modules it generates code with)."""

    __tablename__ = "recipes"
    __table_args__ = (UniqueConstraint("name", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    version: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Configuration(Base):
    """A parameter assignment (canonical JSON: sorted keys, no spaces)."""

    __tablename__ = "configurations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: sha256 of ``params_json``: the unique key (long texts cannot be indexed everywhere).
    params_hash: Mapped[str] = mapped_column(String(64), unique=True)
    params_json: Mapped[str] = mapped_column(Text)


class Measurement(Base):
    """One timing of one configuration of one recipe for one einsum on one device."""

    __tablename__ = "measurements"
    # No single-column indexes on recipe_id/configuration_id: reference rows are never
    # deleted, and SQLite's planner would pick them over the lookup index.
    __table_args__ = (
        # best()/query(): by einsum and device, grouped by lengths, fastest first (minimum
        # time, ties by median; revision 0003 replaced the median-only lookup index). Live
        # records only (retired_at IS NULL, revision 0004): the index still covers best()'s
        # grouping query and still orders a group by time.
        Index(
            "ix_measurements_rank",
            "einsum_id",
            "device_id",
            "status",
            "retired_at",
            "lengths_key",
            "min_time",
            "median_time",
        ),
        Index("ix_measurements_device_id", "device_id"),
        Index("ix_measurements_measured_at", "measured_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: A random identity that survives export/import: merging skips uids already present.
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    einsum_id: Mapped[int] = mapped_column(ForeignKey("einsums.id", ondelete="RESTRICT"))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="RESTRICT"))
    recipe_id: Mapped[int] = mapped_column(ForeignKey("recipes.id", ondelete="RESTRICT"))
    configuration_id: Mapped[int] = mapped_column(
        ForeignKey("configurations.id", ondelete="RESTRICT")
    )
    #: The canonical lengths timed at, canonical JSON (``{"n0":50000}``).
    lengths_key: Mapped[str] = mapped_column(String(1000))
    #: ok, invalid, compile-error, runtime-error, timeout, wrong-result.
    status: Mapped[str] = mapped_column(String(32))
    sample_count: Mapped[int] = mapped_column(Integer, default=0)
    #: Every timing sample in seconds, a JSON list.
    samples_json: Mapped[str] = mapped_column(Text, default="[]")
    #: The figure of merit records are ranked by (ties: median_time, then id).
    min_time: Mapped[float | None] = mapped_column(Float)
    median_time: Mapped[float | None] = mapped_column(Float)
    #: (max - min) / median of the samples.
    spread: Mapped[float | None] = mapped_column(Float)
    flops: Mapped[float | None] = mapped_column(Float)
    bytes: Mapped[float | None] = mapped_column(Float)
    #: flops / min_time (before revision 0003 new records had flops / median_time). As
    #: measured: readers derive flops and GFLOP/s from the einsum (``rates.py``), older
    #: records having counted every term of the full index space.
    gflops: Mapped[float | None] = mapped_column(Float)
    validation_error: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    #: Block-sparse specs: the fraction of tiles the ranges kept (added in revision 0002).
    tiles_kept_fraction: Mapped[float | None] = mapped_column(Float)
    host: Mapped[str | None] = mapped_column(String(255))
    loopy_version: Mapped[str | None] = mapped_column(String(64))
    pyopencl_version: Mapped[str | None] = mapped_column(String(64))
    feinsum_version: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[_dt.datetime | None] = mapped_column(UTCDateTime)
    measured_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime)
    #: When the device was held for timing this candidate (wall clock; revision 0004): no
    #: two timings on one physical device overlap.
    timing_started_at: Mapped[_dt.datetime | None] = mapped_column(UTCDateTime)
    timing_ended_at: Mapped[_dt.datetime | None] = mapped_column(UTCDateTime)

    # Revision 0006: what was timed, and whether the record still stands.
    #: :mod:`feinsum.timing.fingerprint` of the generated code (None: measured before 0006 and not
    #: revalidated since, or no code was generated).
    code_fingerprint: Mapped[str | None] = mapped_column(String(64))
    #: "measured" (computed when timed) or "revalidated" (computed later for an older record).
    fingerprint_origin: Mapped[str | None] = mapped_column(String(16))
    #: The loopy version that last generated code with this fingerprint.
    code_loopy_version: Mapped[str | None] = mapped_column(String(64))
    #: The recipe version the timing was taken with (``recipe_id`` moves on to newer
    #: versions whose code is unchanged).
    measured_recipe_version: Mapped[str | None] = mapped_column(String(255))
    #: Set when revalidation found the code changed: queries ignore the record from then on.
    retired_at: Mapped[_dt.datetime | None] = mapped_column(UTCDateTime)
    retired_reason: Mapped[str | None] = mapped_column(Text)


class PeerTiming(Base):
    """How long another library (numpy, opt_einsum, torch...) took for an einsum at some
    lengths, timed by the autotuner on the host beside a device's tuning run (revision
    0005)."""

    __tablename__ = "peer_timings"
    __table_args__ = (Index("ix_peer_timings_einsum_id_device_id", "einsum_id", "device_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: A random identity that survives export/import, as measurements have.
    uid: Mapped[str] = mapped_column(String(32), unique=True)
    einsum_id: Mapped[int] = mapped_column(ForeignKey("einsums.id", ondelete="RESTRICT"))
    #: The device whose tuning run timed it (the peer itself ran on the host).
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="RESTRICT"))
    lengths_key: Mapped[str] = mapped_column(String(1000))
    #: The peer's name (``numpy.einsum``, ``opt_einsum``, ``torch.einsum``...).
    peer: Mapped[str] = mapped_column(String(255))
    #: Its minimum wall-clock time per call, seconds.
    seconds: Mapped[float] = mapped_column(Float)
    host: Mapped[str | None] = mapped_column(String(255))
    measured_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime)


class Roofline(Base):
    """A device's microbenchmark results (bandwidth, peak flop rates), JSON (revision 0002)."""

    __tablename__ = "rooflines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(
        ForeignKey("devices.id", ondelete="CASCADE"), unique=True
    )
    data_json: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[_dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


#: Tables a feinsum database has (used to tell a foreign database from an empty one).
FEINSUM_TABLES: frozenset[str] = frozenset(Base.metadata.tables) | {VERSION_TABLE}

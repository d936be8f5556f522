"""What callers hand the database and what they get back: frozen dataclasses, JSON helpers.

This module imports neither SQLAlchemy nor loopy.
"""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import socket
import statistics
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from feinsum.errors import DatabaseError

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.spec.model import BatchedEinsum

Status: TypeAlias = Literal["ok", "invalid", "compile-error", "runtime-error", "timeout",
                            "wrong-result"]
#: Every status a measurement can have.
STATUSES: tuple[str, ...] = ("ok", "invalid", "compile-error", "runtime-error", "timeout",
                             "wrong-result")
Rung: TypeAlias = Literal["exact", "nearest-lengths", "same-vendor", "default"]
#: The fallback chain of :func:`feinsum.database.best`, in order.
RUNGS: tuple[str, ...] = ("exact", "nearest-lengths", "same-vendor", "default")


# {{{ JSON


def canonical_json(value: Any) -> str:
    """The canonical JSON text of *value* (sorted keys, no spaces, ASCII), as stored.

    Raises :class:`DatabaseError` for anything JSON cannot hold exactly (objects,
    non-string keys, NaN/infinity)."""
    try:
        return json.dumps(
            _plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise DatabaseError(f"not storable as JSON: {value!r} ({exc})") from exc


def _plain(value: Any) -> Any:
    """Tuples to lists and numpy scalars to Python numbers; refuse everything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"JSON object keys must be strings, not {k!r}")
            out[k] = _plain(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    # numpy scalars (np.int64, np.float32, np.bool_) without importing numpy
    item = getattr(value, "item", None)
    if callable(item) and type(value).__module__ == "numpy":
        return _plain(item())
    raise TypeError(f"{type(value).__name__} is not JSON data")


def params_key(params: Mapping[str, Any]) -> str:
    """The canonical JSON of a parameter assignment: what
    :meth:`~feinsum.database.Database.measured_params` returns for it."""
    if not isinstance(params, Mapping):
        raise DatabaseError(f"parameters must be a JSON object (a dict), not {params!r}")
    return canonical_json(params)


def lengths_key(lengths: Mapping[str, int]) -> str:
    """The canonical JSON of a lengths assignment (symbol -> positive int)."""
    out: dict[str, int] = {}
    for k, v in lengths.items():
        if not isinstance(k, str) or isinstance(v, bool):
            raise DatabaseError(f"lengths must map symbol names to integers: {dict(lengths)!r}")
        try:
            iv = int(v)
        except (TypeError, ValueError) as exc:
            raise DatabaseError(f"length {k}={v!r} is not an integer") from exc
        if iv != v or iv < 0:
            raise DatabaseError(f"length {k}={v!r} is not a non-negative integer")
        out[k] = iv
    return canonical_json(out)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# }}}


# {{{ einsum identity


@dataclass(frozen=True)
class EinsumIdentity:
    """What the database keeps of a batched einsum: its keys, text, JSON spec (of the
    canonical spec) and the canonical lengths it fixes (symbols it leaves free are absent).

    :func:`einsum_identity` computes it from a :class:`feinsum.BatchedEinsum`; callers that
    already have the keys (imports, benchmarks) may build one directly."""

    canonical_key: str
    structure_key: str
    canonical_text: str = ""
    spec_json: str = "{}"
    lengths: Mapping[str, int] = field(default_factory=dict)
    #: How the einsum was given (:mod:`feinsum.database.origins`, canonical JSON), stored
    #: when the database first meets it with one.
    origin_json: str | None = None


@functools.lru_cache(maxsize=4096)
def _identity_cached(e: BatchedEinsum) -> EinsumIdentity:
    return _identity(e)


def _identity(e: BatchedEinsum) -> EinsumIdentity:
    from feinsum.spec.canonical import (
        canonical_key,
        canonical_lengths,
        canonical_text,
        canonicalize,
        structure_key,
    )
    from feinsum.spec.serialize import spec_to_json

    spec: Any = spec_to_json(canonicalize(e))
    return EinsumIdentity(
        canonical_key=canonical_key(e),
        structure_key=structure_key(e),
        canonical_text=canonical_text(e),
        spec_json=spec if isinstance(spec, str) else canonical_json(spec),
        lengths=dict(canonical_lengths(e)),
    )


def einsum_identity(einsum: BatchedEinsum | EinsumIdentity) -> EinsumIdentity:
    """The :class:`EinsumIdentity` of *einsum* (cached per spec)."""
    if isinstance(einsum, EinsumIdentity):
        return einsum
    try:
        return _identity_cached(einsum)
    except TypeError:  # unhashable (a spec holding unhashable metadata)
        return _identity(einsum)


@functools.lru_cache(maxsize=256)
def _own_origin(e: BatchedEinsum) -> str | None:
    from feinsum.database.origins import einsum_origin
    from feinsum.errors import FeinsumError

    try:
        return canonical_json(einsum_origin(e))
    except (FeinsumError, TypeError):  # a spec without a JSON form: no origin
        return None


def with_origin(ident: EinsumIdentity, einsum: Any, origin: Mapping[str, Any] | None
                ) -> EinsumIdentity:
    """*ident* with the origin given, else that of *einsum* itself (a spec's own names)."""
    from dataclasses import replace

    if origin is not None:
        return replace(ident, origin_json=canonical_json(origin))
    if ident.origin_json is not None or isinstance(einsum, EinsumIdentity):
        return ident
    try:
        own = _own_origin(einsum)
    except TypeError:  # unhashable metadata
        own = None
    return ident if own is None else replace(ident, origin_json=own)


# }}}


# {{{ measurements in


@functools.cache
def library_versions() -> dict[str, str | None]:
    """Installed versions of loopy, pyopencl and feinsum (without importing loopy)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("loopy", "pyopencl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    import feinsum

    out["feinsum"] = feinsum.__version__
    return out


@functools.cache
def hostname() -> str:
    return socket.gethostname()


def _finite(name: str, value: Any, *, allow_none: bool = True) -> float | None:
    if value is None:
        if allow_none:
            return None
        raise DatabaseError(f"{name} is required")
    try:
        f = float(value)
    except (TypeError, ValueError) as exc:
        raise DatabaseError(f"{name}={value!r} is not a number") from exc
    if not math.isfinite(f):
        raise DatabaseError(f"{name}={value!r} is not finite")
    return f


@dataclass(frozen=True)
class NewMeasurement:
    """One measurement to store with :meth:`Database.add_measurement`.

    Timing summaries (``min_time``, ``median_time``, ``spread``) are computed from
    ``samples`` when not given (a measurement given only a median gets it as its
    ``min_time``, records being ranked by ``min_time``, and one given only a minimum gets
    it as its median); ``gflops`` from ``flops`` and
    ``min_time``, the figure of merit the autotuner reports; ``lengths``
    defaults to the lengths the einsum fixes; library versions, host and timestamps are
    filled in automatically. A failed measurement (any status but ``"ok"``) may have no
    samples. ``validation_error`` may be ``inf``/``nan`` (a wrong result); it is stored as
    ``inf``.
    """

    einsum: BatchedEinsum | EinsumIdentity
    device: DeviceInfo
    recipe_name: str
    recipe_version: str
    params: Mapping[str, Any]
    status: str = "ok"
    lengths: Mapping[str, int] | None = None
    samples: Sequence[float] = ()
    min_time: float | None = None
    median_time: float | None = None
    spread: float | None = None
    flops: float | None = None
    bytes: float | None = None
    gflops: float | None = None
    validation_error: float | None = None
    message: str | None = None
    tiles_kept_fraction: float | None = None
    host: str | None = None
    loopy_version: str | None = None
    pyopencl_version: str | None = None
    feinsum_version: str | None = None
    started_at: _dt.datetime | None = None
    measured_at: _dt.datetime | None = None
    #: When the device was held for timing it (None: not timed, or not known).
    timing_started_at: _dt.datetime | None = None
    timing_ended_at: _dt.datetime | None = None
    #: A unique identity (a random one when None); kept through export/import.
    uid: str | None = None
    #: How the einsum was given (:func:`feinsum.database.origins.einsum_origin`); default:
    #: the spec passed as ``einsum`` itself. The database keeps the first it is given.
    origin: Mapping[str, Any] | None = None
    #: :func:`feinsum.timing.fingerprint.code_fingerprint` of the code timed (None: no code was
    #: generated); its loopy version defaults to ``loopy_version``.
    code_fingerprint: str | None = None
    code_loopy_version: str | None = None


#: Where a record's fingerprint comes from: computed when the code was timed; later, for a
#: record measured before fingerprints, at the recipe version it was timed with
#: ("revalidated"), or at a newer one, trusting that the code did not change ("adopted").
#: See docs/database.rst.
FINGERPRINT_ORIGINS: tuple[str, ...] = ("measured", "revalidated", "adopted")


@dataclass(frozen=True)
class MeasurementRow:
    """A validated, normalised :class:`NewMeasurement`, ready to insert (internal)."""

    identity: EinsumIdentity
    device: DeviceInfo
    recipe_name: str
    recipe_version: str
    params_json: str
    lengths_key: str
    values: dict[str, Any]


def _validate_uid(uid: str) -> str:
    if not isinstance(uid, str) or not (1 <= len(uid) <= 32) or not uid.isascii() or not all(
        c.isalnum() or c in "-_" for c in uid
    ):
        raise DatabaseError(f"invalid measurement uid {uid!r} (1-32 letters, digits, - or _)")
    return uid


def _fingerprint(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not (1 <= len(value) <= 64) or not value.isascii():
        raise DatabaseError(f"invalid code fingerprint {value!r} (1-64 ASCII characters)")
    return value


def normalise(m: NewMeasurement) -> MeasurementRow:
    """Check *m* and compute what it leaves out (summaries, versions, timestamps)."""
    if m.status not in STATUSES:
        raise DatabaseError(f"unknown status {m.status!r}; one of {', '.join(STATUSES)}")
    for name in ("recipe_name", "recipe_version"):
        v = getattr(m, name)
        if not isinstance(v, str) or not v or len(v) > 255:
            raise DatabaseError(f"{name} must be a non-empty string (<= 255 chars), not {v!r}")
    identity = with_origin(einsum_identity(m.einsum), m.einsum, m.origin)
    lengths = identity.lengths if m.lengths is None else m.lengths
    samples = [_finite("sample", s, allow_none=False) for s in m.samples]
    if any(s is not None and s < 0 for s in samples):
        raise DatabaseError("negative timing sample")
    min_time = _finite("min_time", m.min_time)
    median_time = _finite("median_time", m.median_time)
    spread = _finite("spread", m.spread)
    if samples:
        fs = [float(s) for s in samples if s is not None]
        min_time = min(fs) if min_time is None else min_time
        median_time = statistics.median(fs) if median_time is None else median_time
        if spread is None and median_time:
            spread = (max(fs) - min(fs)) / median_time
    if m.status == "ok" and median_time is None and min_time is None:
        raise DatabaseError("an 'ok' measurement needs samples, a min_time or a median_time")
    if min_time is None:
        min_time = median_time
    elif median_time is None:
        median_time = min_time
    if min_time is not None and median_time is not None and min_time > median_time:
        raise DatabaseError(f"min_time={min_time!r} exceeds median_time={median_time!r}")
    flops = _finite("flops", m.flops)
    gflops = _finite("gflops", m.gflops)
    if gflops is None and flops is not None and min_time:
        gflops = flops / min_time * 1e-9
    verr = m.validation_error
    if verr is not None:
        verr = float(verr)
        if math.isnan(verr):
            verr = math.inf
    tiles = _finite("tiles_kept_fraction", m.tiles_kept_fraction)
    versions = library_versions()
    now = _dt.datetime.now(_dt.UTC)
    loopy = m.loopy_version if m.loopy_version is not None else versions["loopy"]
    fingerprint = _fingerprint(m.code_fingerprint)
    values: dict[str, Any] = {
        "uid": _validate_uid(m.uid) if m.uid is not None else uuid.uuid4().hex,
        "status": m.status,
        "sample_count": len(samples),
        "samples_json": canonical_json(samples),
        "min_time": min_time,
        "median_time": median_time,
        "spread": spread,
        "flops": flops,
        "bytes": _finite("bytes", m.bytes),
        "gflops": gflops,
        "validation_error": verr,
        "message": None if m.message is None else str(m.message),
        "tiles_kept_fraction": tiles,
        "host": (m.host if m.host is not None else hostname())[:255],
        "loopy_version": loopy,
        "pyopencl_version": (
            m.pyopencl_version if m.pyopencl_version is not None else versions["pyopencl"]
        ),
        "feinsum_version": (
            m.feinsum_version if m.feinsum_version is not None else versions["feinsum"]
        ),
        "started_at": m.started_at,
        "measured_at": m.measured_at if m.measured_at is not None else now,
        "timing_started_at": m.timing_started_at,
        "timing_ended_at": m.timing_ended_at,
        "code_fingerprint": fingerprint,
        "fingerprint_origin": None if fingerprint is None else "measured",
        "code_loopy_version": None if fingerprint is None else (m.code_loopy_version or loopy),
        "measured_recipe_version": m.recipe_version,
        "retired_at": None,
        "retired_reason": None,
    }
    return MeasurementRow(
        identity=identity,
        device=m.device,
        recipe_name=m.recipe_name,
        recipe_version=m.recipe_version,
        params_json=params_key(m.params),
        lengths_key=lengths_key(lengths),
        values=values,
    )


def upgrade_timing(values: dict[str, Any]) -> None:
    """Bring measurement *values* written before schema revision 0003 to its rules, in
    place (what that revision does to a database file): a record timed by its median alone
    gets it as ``min_time``; a GFLOP/s derived from ``median_time`` is derived from
    ``min_time`` instead."""
    median, flops, gflops = values.get("median_time"), values.get("flops"), values.get("gflops")
    if values.get("min_time") is None:
        values["min_time"] = median
    low = values["min_time"]
    # (a record whose minimum is its median has nothing to re-derive: left as it is, an
    # import gives back the exported value to the last digit)
    if gflops is not None and flops and median and low and low != median and (
        abs(gflops * median - flops * 1e-9) <= 1e-9 * abs(flops) * 1e-9
    ):
        values["gflops"] = flops * 1e-9 / low


# }}}


# {{{ records out


@dataclass(frozen=True)
class Record:
    """One stored measurement, as :func:`query` and :func:`best` return it.

    ``flops``, ``bytes`` and ``gflops`` are derived from the einsum at the record's lengths
    when it is read (the flops of the cheapest contraction order over ``min_time``, as the
    autotuner counts them now), whatever count was stored when it was measured."""

    id: int
    uid: str
    #: "user" (the writable database) or "shipped" (the records in feinsum's ``db/``).
    source: str
    canonical_key: str
    structure_key: str
    lengths: Mapping[str, int]
    device_key: str
    device_name: str
    device_vendor: str
    device_type: str
    driver_version: str
    platform_name: str
    recipe_name: str
    recipe_version: str
    params: Mapping[str, Any]
    status: str
    samples: tuple[float, ...]
    sample_count: int
    min_time: float | None
    median_time: float | None
    spread: float | None
    flops: float | None
    bytes: float | None
    gflops: float | None
    validation_error: float | None
    message: str | None
    tiles_kept_fraction: float | None
    host: str | None
    loopy_version: str | None
    pyopencl_version: str | None
    feinsum_version: str | None
    started_at: _dt.datetime | None
    measured_at: _dt.datetime
    timing_started_at: _dt.datetime | None = None
    timing_ended_at: _dt.datetime | None = None
    #: The fingerprint of the code timed (:mod:`feinsum.timing.fingerprint`), where it comes from
    #: (:data:`FINGERPRINT_ORIGINS`) and the loopy version that last generated that code.
    code_fingerprint: str | None = None
    fingerprint_origin: str | None = None
    code_loopy_version: str | None = None
    #: The recipe version the timing was taken with (``recipe_version`` is the newest
    #: version revalidation found to generate the same code).
    measured_recipe_version: str | None = None
    #: When and why revalidation retired the record (queries ignore retired records).
    retired_at: _dt.datetime | None = None
    retired_reason: str | None = None

    @property
    def params_key(self) -> str:
        return params_key(self.params)

    def __repr__(self) -> str:
        t = "-" if self.min_time is None else f"{self.min_time:.3g}s"
        return (
            f"Record({self.source}#{self.id}, {self.canonical_key}, {dict(self.lengths)}, "
            f"{self.device_name!r}, {self.recipe_name}@{self.recipe_version[:8]}, "
            f"{self.params_key}, {self.status}, min={t})"
        )

    @property
    def seconds(self) -> float | None:
        """The figure of merit records are ranked by: the minimum time per call."""
        return self.min_time

    @property
    def rank_key(self) -> tuple[bool, float, bool, float, int]:
        """How :func:`query` orders records of one database: minimum time, then median
        time (records without a time last), then insertion order."""
        return (self.min_time is None, self.min_time or 0.0,
                self.median_time is None, self.median_time or 0.0, self.id)


@dataclass(frozen=True)
class Answer:
    """What :func:`best` found, and on which rung of the fallback chain.

    ``rung`` is ``"exact"`` (this einsum at these lengths on this device),
    ``"nearest-lengths"`` (this device, same structure, nearest lengths),
    ``"same-vendor"`` (another device of the same vendor and type) or ``"default"`` (no
    record: the caller applies its recipe's heuristic default; ``record``, ``recipe`` and
    ``params`` are then None)."""

    rung: Rung
    record: Record | None
    canonical_key: str
    lengths: Mapping[str, int]
    #: How far the record's lengths are from the asked ones (sum of abs(log2(ratio))).
    distance: float | None = None

    @property
    def recipe(self) -> str | None:
        return None if self.record is None else self.record.recipe_name

    @property
    def recipe_version(self) -> str | None:
        return None if self.record is None else self.record.recipe_version

    @property
    def params(self) -> Mapping[str, Any] | None:
        return None if self.record is None else self.record.params

    @property
    def is_default(self) -> bool:
        return self.rung == "default"


@dataclass(frozen=True)
class ImportReport:
    """What an import or merge did."""

    added: int = 0
    skipped: int = 0
    devices: int = 0
    einsums: int = 0
    rooflines: int = 0
    #: peer timings added
    peers: int = 0

    def __str__(self) -> str:
        return (
            f"{self.added} measurements added, {self.skipped} already present; "
            f"{self.devices} devices, {self.einsums} einsums, {self.rooflines} rooflines read"
            + (f"; {self.peers} peer timings added" if self.peers else "")
        )


# }}}

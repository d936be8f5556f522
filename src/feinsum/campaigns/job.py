"""One job on one device identity, as a dask task on a worker that owns such a device.

:func:`run_assignment` tunes the job's einsum with :func:`feinsum.autotune` on a device
the worker owns, holding that physical device's ``distributed.Lock`` whenever it times.
Its measurements go to the database one way or the other, each exactly once:

* **workers**: the worker opens the campaign's database itself (a shared PostgreSQL, or
  the client's SQLite file when it runs on the client's machine) and writes each
  measurement as it is taken;
* **client**: the worker cannot (or was told not to): each measurement is sent to the
  client as a dask event, and all of them again in the task's result; the client records
  them.

Every campaign measurement has a uid derived from what it measured (einsum, device
identity, lengths, recipe version, parameters), and records are added skipping uids
already present: a measurement delivered twice, or re-taken by a job that dask re-ran
after its worker died, is recorded once.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from feinsum.errors import DatabaseError

if TYPE_CHECKING:
    from feinsum.campaigns.plan import Job
    from feinsum.database import Database, NewMeasurement, Record
    from feinsum.devices.opencl import DeviceInfo

#: How long a worker may take to open the campaign's database before it sends its
#: measurements to the client instead.
CONNECT_TIMEOUT = 10


@dataclass(frozen=True)
class Assignment:
    """What one task does: *job* on a device of identity *device* (``as_dict()``)."""

    index: int
    job: Job
    device: dict[str, Any]
    topic: str
    #: the database URL workers write to (None: send measurements to the client)
    db_url: str | None
    client_host: str
    #: records known when the job was submitted (when the client records), as payloads
    known: tuple[dict[str, Any], ...] = ()
    roofline: dict[str, Any] | None = None

    @property
    def device_key(self) -> str:
        return str(self.device_info.key)

    @property
    def device_info(self) -> DeviceInfo:
        from feinsum.devices.opencl import DeviceInfo

        return DeviceInfo.from_dict(self.device)


@dataclass
class JobOutcome:
    """What a task returns: the tuning summary and, when the client records, every
    measurement it took (payloads)."""

    index: int
    worker: str
    device: str
    best: dict[str, Any] | None
    peer: str | None
    peer_seconds: float | None
    evaluated: int
    previous: int
    failures: dict[str, int]
    seconds: float
    recorded_by_worker: bool
    measurements: list[dict[str, Any]] = field(default_factory=list)


# {{{ measurements as event payloads


def measurement_uid(canonical_key: str, device_key: str, lengths_key: str, recipe: str,
                    version: str, params_key: str) -> str:
    """The uid of a campaign measurement: one per configuration measured."""
    text = "|".join((canonical_key, device_key, lengths_key, recipe, version, params_key))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _epoch(t: _dt.datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _when(t: float | None) -> _dt.datetime | None:
    return None if t is None else _dt.datetime.fromtimestamp(t, _dt.UTC)


def to_payload(m: NewMeasurement, device_key: str) -> dict[str, Any]:
    """*m* as plain data (an event, a task result), its uid set; versions and host of
    the process that took it."""
    from feinsum.database import einsum_identity, lengths_key, params_key
    from feinsum.database.records import hostname, library_versions

    ident = einsum_identity(m.einsum)
    lengths = dict(ident.lengths if m.lengths is None else m.lengths)
    versions = library_versions()
    uid = m.uid or measurement_uid(ident.canonical_key, device_key, lengths_key(lengths),
                                   m.recipe_name, m.recipe_version, params_key(m.params))
    return {
        "uid": uid, "recipe_name": m.recipe_name, "recipe_version": m.recipe_version,
        "params": dict(m.params), "status": m.status, "lengths": lengths,
        "samples": [float(s) for s in m.samples], "min_time": m.min_time,
        "median_time": m.median_time, "spread": m.spread, "flops": m.flops,
        "bytes": m.bytes, "validation_error": m.validation_error, "message": m.message,
        "host": m.host or hostname(), "loopy_version": versions["loopy"],
        "pyopencl_version": versions["pyopencl"], "feinsum_version": versions["feinsum"],
        "started_at": _epoch(m.started_at), "timing_started_at": _epoch(m.timing_started_at),
        "timing_ended_at": _epoch(m.timing_ended_at),
    }


def from_payload(p: Mapping[str, Any], einsum: Any, device: DeviceInfo) -> NewMeasurement:
    """The :class:`~feinsum.database.NewMeasurement` of a payload."""
    from feinsum.database import NewMeasurement

    return NewMeasurement(
        einsum=einsum, device=device, recipe_name=p["recipe_name"],
        recipe_version=p["recipe_version"], params=p["params"], status=p["status"],
        lengths=p["lengths"], samples=tuple(p["samples"]), min_time=p["min_time"],
        median_time=p["median_time"], spread=p["spread"], flops=p["flops"],
        bytes=p["bytes"], validation_error=p["validation_error"], message=p["message"],
        host=p["host"], loopy_version=p["loopy_version"],
        pyopencl_version=p["pyopencl_version"], feinsum_version=p["feinsum_version"],
        started_at=_when(p["started_at"]), timing_started_at=_when(p["timing_started_at"]),
        timing_ended_at=_when(p["timing_ended_at"]), uid=p["uid"])


def record_payloads(db: Database, payloads: Sequence[Mapping[str, Any]], einsum: Any,
                    device: DeviceInfo) -> int:
    """Add the measurements of *payloads* not yet in *db* (by uid); returns how many."""
    from feinsum.database.records import normalise

    rows = [normalise(from_payload(p, einsum, device)) for p in payloads]
    for attempt in range(3):
        try:
            added, _ = db.user_store.add_measurements(rows, skip_existing=True,
                                                      what="recording campaign measurements")
            return added
        except DatabaseError:  # another writer added one of these uids meanwhile
            if attempt == 2:
                raise
            time.sleep(0.1)
    return 0


@dataclass(frozen=True)
class _Known:
    """A record as the autotuner's resume reads it (from a payload)."""

    recipe_name: str
    recipe_version: str
    params: dict[str, Any]
    status: str
    lengths: dict[str, int]
    samples: tuple[float, ...]
    min_time: float | None
    message: str | None
    validation_error: float | None

    @classmethod
    def of(cls, p: Mapping[str, Any]) -> _Known:
        return cls(p["recipe_name"], p["recipe_version"], dict(p["params"]), p["status"],
                   dict(p["lengths"]), tuple(p["samples"]), p["min_time"], p["message"],
                   p["validation_error"])


def record_payload(r: Record) -> dict[str, Any]:
    """What a relaying worker needs to know of a record to resume."""
    return {"recipe_name": r.recipe_name, "recipe_version": r.recipe_version,
            "params": dict(r.params), "status": r.status, "lengths": dict(r.lengths),
            "samples": list(r.samples), "min_time": r.min_time, "message": r.message,
            "validation_error": r.validation_error}


# }}}


# {{{ the database as the autotuner sees it on a worker


class _Events:
    """Sends the campaign's events of one assignment from this worker."""

    def __init__(self, worker: Any, a: Assignment) -> None:
        self.worker, self.a = worker, a

    def send(self, kind: str, **data: Any) -> None:
        self.worker.log_event(self.a.topic, {"kind": kind, "index": self.a.index,
                                             "worker": self.worker.address, **data})


class _Records:
    """``query``/``add_measurement``/``get_roofline``/``set_roofline`` (what
    :func:`feinsum.autotune` calls) over the database, or over what the client sent."""

    def __init__(self, a: Assignment, events: _Events, db: Database | None,
                 known: Sequence[Mapping[str, Any]]) -> None:
        self.a, self.events, self.db = a, events, db
        self.known = [_Known.of(k) for k in known]
        self.payloads: list[dict[str, Any]] = []

    def query(self, einsum: Any, *, device: Any = None, recipe: tuple[str, str] | None = None,
              status: Any = None, lengths: Mapping[str, int] | None = None,
              **options: Any) -> list[Any]:
        if self.db is not None:
            return self.db.query(einsum, device, recipe=recipe, status=status, lengths=lengths,
                                 **options)
        return [k for k in self.known
                if (recipe is None or (k.recipe_name, k.recipe_version) == tuple(recipe))
                and (lengths is None or dict(k.lengths) == dict(lengths))]

    def add_measurement(self, m: NewMeasurement) -> None:
        p = to_payload(m, self.a.device_key)
        if self.db is not None:
            record_payloads(self.db, [p], m.einsum, self.a.device_info)
        else:
            self.payloads.append(p)
            self.known.append(_Known.of(p))
        self.events.send("measurement", recorded=self.db is not None, payload=p)

    def add_peer_timings(self, einsum: Any, device: Any, times: Mapping[str, float],
                         **options: Any) -> None:
        """The peers' timings go where the measurements go; the client's records keep
        measurements only."""
        if self.db is not None:
            self.db.add_peer_timings(einsum, device, times, **options)

    def get_roofline(self, info: DeviceInfo) -> dict[str, Any] | None:
        if self.db is not None:
            return self.db.get_roofline(info)
        return self.a.roofline

    def set_roofline(self, info: DeviceInfo, data: Mapping[str, Any]) -> None:
        if self.db is not None:
            self.db.set_roofline(info, data)
        else:
            self.events.send("roofline", data=dict(data))


def _open_database(a: Assignment) -> Database | None:
    """The campaign's database, if this worker can write to it."""
    if a.db_url is None:
        return None
    from feinsum.database import open_database
    from feinsum.database.engine import resolve_url, sqlite_path
    from feinsum.database.records import hostname

    url = resolve_url(a.db_url)
    if url.get_backend_name() == "sqlite":
        path = sqlite_path(url)
        if path is None or hostname() != a.client_host or not path.exists():
            return None  # another machine's file (or an in-memory database)
    elif url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
        url = url.update_query_dict({"connect_timeout": str(CONNECT_TIMEOUT)})
    try:
        return open_database(url)
    except DatabaseError:
        return None


def _known_since_submitted(a: Assignment) -> list[dict[str, Any]]:
    """What the client recorded of this assignment since it was submitted (a job re-run
    after its worker died resumes from there)."""
    from distributed import Variable

    try:
        value = Variable(f"{a.topic}-{a.index}").get(timeout=0.2)
    except Exception:  # never set: nothing recorded yet
        return []
    return list(value or [])


# }}}


@contextlib.contextmanager
def _device_of(worker: Any, a: Assignment) -> Iterator[tuple[Any, str]]:
    import pyopencl as cl

    from feinsum.campaigns.owner import owned

    with owned(worker).use(a.device_key) as dev:
        yield cl.get_platforms()[dev.platform_index].get_devices()[dev.device_index], \
            dev.physical


def run_assignment(a: Assignment) -> JobOutcome:
    """Tune *a*'s job on one of this worker's devices of *a*'s identity (a dask task)."""
    from distributed import Lock, get_worker

    from feinsum.campaigns.owner import lock_name
    from feinsum.tuning import autotune

    worker = get_worker()
    events = _Events(worker, a)
    t0 = time.monotonic()
    db = _open_database(a)
    known = [] if db is not None else [*a.known, *_known_since_submitted(a)]
    records = _Records(a, events, db, known)
    try:
        with _device_of(worker, a) as (device, physical):
            events.send("start", physical=physical)
            job = a.job
            result = autotune(job.einsum, device=device, db=records, progress=False,
                              timing_lock=Lock(lock_name(physical)), **job.tune_options())
    finally:
        if db is not None:
            db.close()
    best = result.best
    return JobOutcome(
        index=a.index, worker=worker.address, device=result.device_name,
        best=None if best is None else {
            "recipe": best.recipe_name, "params": dict(best.params), "seconds": best.seconds,
            "gflops": best.gflops},
        peer=result.fastest_peer,
        peer_seconds=result.peers.get(result.fastest_peer) if result.fastest_peer else None,
        evaluated=len(result.measurements), previous=result.previous,
        failures=dict(result.failures), seconds=time.monotonic() - t0,
        recorded_by_worker=db is not None, measurements=records.payloads)


# vim: foldmethod=marker

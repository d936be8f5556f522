"""The public API: :class:`Database`, :func:`open_database`, :func:`query`, :func:`best`.

A :class:`Database` is the user's writable database plus, read-only, the records shipped
with feinsum (``db/*.jsonl``); queries see both, writes go to the user's database only.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import URL

from feinsum.errors import DatabaseError

from .engine import (
    display_url,
    ensure_schema,
    make_engine,
    resolve_url,
    schema_version,
    sqlite_path,
)
from .lazy import Overlay, checked_best, checked_query
from .records import (
    Answer,
    EinsumIdentity,
    ImportReport,
    NewMeasurement,
    Record,
    Rung,
    canonical_json,
    einsum_identity,
    lengths_key,
    normalise,
    with_origin,
)
from .revalidation import CodeChecker
from .store import Filters, Store, over_stores

if TYPE_CHECKING:
    from feinsum.devices.opencl import DeviceInfo
    from feinsum.spec.model import BatchedEinsum

    from .peers import PeerRecord

    EinsumLike = BatchedEinsum | EinsumIdentity | str
    DeviceLike = DeviceInfo | Any

ShippedSpec = bool | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _device_info(device: Any) -> DeviceInfo:
    from feinsum.devices.opencl import DeviceInfo

    if isinstance(device, DeviceInfo):
        return device
    if hasattr(device, "platform") and hasattr(device, "max_compute_units"):
        from feinsum.devices.opencl import device_info

        return device_info(device)
    raise DatabaseError(
        f"expected a feinsum.devices.info.DeviceInfo or a pyopencl.Device, not {device!r}"
    )


def _device_key(device: Any) -> str | None:
    if device is None:
        return None
    if isinstance(device, str):
        return device
    return _device_info(device).key


_RUNG_NAMES: tuple[Rung, ...] = ("exact", "nearest-lengths", "same-vendor")


def lengths_distance(asked: Mapping[str, int], found: Mapping[str, int]) -> float:
    """How far *found* lengths are from *asked*: the sum of abs(log2(ratio)) over the symbols
    *asked* fixes (16 for one *found* lacks). Symbols *asked* leaves free cost nothing."""
    d = 0.0
    for s, v in asked.items():
        w = found.get(s)
        d += 16.0 if w is None else abs(math.log2(max(int(v), 1) / max(int(w), 1)))
    return d


def _agrees(asked: Mapping[str, int], found: Mapping[str, int]) -> bool:
    return all(found.get(s) == v for s, v in asked.items())


def _plain_versions(versions: Mapping[str, str] | CodeChecker | None
                    ) -> Mapping[str, str] | None:
    """A ``recipe_versions`` filter that is not a checker (the lazy path sets its own)."""
    return None if isinstance(versions, CodeChecker) else versions


class Database:
    """The timing database: see :func:`open_database`."""

    def __init__(
        self,
        url: str | os.PathLike[str] | URL | None = None,
        *,
        readonly: bool = False,
        include_shipped: ShippedSpec = True,
    ) -> None:
        self.url: URL = resolve_url(url)
        self.where = display_url(self.url)
        self.readonly = readonly
        path = sqlite_path(self.url)
        if path is not None:
            from .files import check_database_path

            check_database_path(path)
        engine = make_engine(self.url, readonly=readonly)
        try:
            from .store import translate_errors

            with translate_errors(self.where, "opening"):
                ensure_schema(engine, readonly=readonly, where=self.where)
        except BaseException:
            engine.dispose()
            raise
        self._user = Store(engine, source="user", where=self.where, readonly=readonly)
        self._shipped_spec: ShippedSpec = include_shipped
        self._shipped: Store | None = None
        self._shipped_count: int | None = None
        self._shipped_loaded = include_shipped is False
        self._lock = threading.Lock()
        #: verdicts of lazy revalidation not written back (see :mod:`.lazy`)
        self.overlay = Overlay()

    # {{{ plumbing

    @property
    def path(self) -> Path | None:
        """The SQLite file (None for a server database or an in-memory one)."""
        return sqlite_path(self.url)

    @property
    def user_store(self) -> Store:
        return self._user

    @property
    def shipped_store(self) -> Store | None:
        """The shipped records (loaded on first use; None when there are none)."""
        if not self._shipped_loaded:
            with self._lock:
                if not self._shipped_loaded:
                    from .shipped import open_shipped, shipped_files

                    store = open_shipped(shipped_files(self._shipped_spec))
                    self._shipped = store
                    if store is not None:
                        self.overlay.keep_in(store.verdicts_file)
                    self._shipped_loaded = True
        return self._shipped

    def _stores(self, include_shipped: bool = True) -> list[Store]:
        shipped = self.shipped_store if include_shipped else None
        return [self._user] if shipped is None else [self._user, shipped]

    def close(self) -> None:
        self._user.dispose()
        if self._shipped is not None:
            self._shipped.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ro = ", readonly" if self.readonly else ""
        return f"Database({self.where!r}{ro})"

    def schema_version(self) -> str | None:
        """The schema version the user's database records."""
        from .store import translate_errors

        with translate_errors(self.where, "reading the schema version"):
            return schema_version(self._user.engine)

    def revision(self) -> int:
        """A number that changes whenever records are added (or pruned) by any process:
        cache derived answers on it."""
        if self._shipped_count is None:  # the shipped records count from the first call on
            shipped = self.shipped_store
            self._shipped_count = 0 if shipped is None else shipped.count()
        return self._user.revision() + self._shipped_count

    def count(self, status: str | None = None, *, include_shipped: bool = False) -> int:
        """The number of measurements (with *status*, if given)."""
        return sum(over_stores(self._stores(include_shipped), lambda s: s.count(status)))

    # }}}

    # {{{ writing

    def add_device(self, info: DeviceInfo) -> int:
        """Store a device (if new); returns its id in the user's database."""
        return self._user.add_device(_device_info(info))

    def set_roofline(self, info: DeviceInfo, data: Mapping[str, Any]) -> None:
        """Store (replace) the roofline measurements of a device (JSON data)."""
        if not isinstance(data, Mapping):
            raise DatabaseError(f"roofline data must be a JSON object, not {data!r}")
        self._user.set_roofline(_device_info(info), canonical_json(data))

    def get_roofline(self, info: DeviceInfo) -> dict[str, Any] | None:
        """The device's roofline data (the user's, else the shipped one), or None."""
        key = _device_info(info).key
        for data in over_stores(self._stores(), lambda s: s.get_roofline(key)):
            if data is not None:
                return json.loads(data)  # type: ignore[no-any-return]
        return None

    def add_measurement(self, m: NewMeasurement) -> int:
        """Store one measurement in one short transaction; returns its id."""
        return self._user.add_measurement(normalise(m))

    def add_measurements(self, ms: Iterable[NewMeasurement]) -> int:
        """Store many measurements in one transaction (all or none); returns the count."""
        added, _ = self._user.add_measurements(normalise(m) for m in ms)
        return added

    def add_peer_timings(self, einsum: BatchedEinsum, device: DeviceInfo,
                         times: Mapping[str, float], *, lengths: Mapping[str, int] | None = None,
                         origin: Mapping[str, Any] | None = None) -> int:
        """Store the minimum times (seconds) of other libraries (``{"numpy.einsum": 0.012}``)
        for *einsum* at *lengths* (default: those it fixes), timed beside a tuning run on
        *device*; returns how many were stored."""
        from .peers import insert_peer_rows, peer_rows

        ident = with_origin(einsum_identity(einsum), einsum, origin)
        rows = peer_rows(ident, _device_info(device),
                         ident.lengths if lengths is None else lengths, times)
        with self._user.writing("storing peer timings") as txn:
            return insert_peer_rows(self._user, txn, rows)

    # }}}

    # {{{ reading

    def peer_timings(self, einsum: EinsumLike | None = None,
                     device: DeviceLike | str | None = None) -> list[PeerRecord]:
        """The peers' timings of *einsum* (default: every einsum) beside *device* (default:
        any), fastest first, the user's and the shipped ones."""
        from .peers import read_peers

        key = (einsum if isinstance(einsum, str) or einsum is None
               else einsum_identity(einsum).canonical_key)
        dkey = _device_key(device)
        found = [p for part in over_stores(self._stores(), lambda s: read_peers(s, key, dkey))
                 for p in part]
        return sorted(found, key=lambda p: p.seconds)

    def measured_params(
        self,
        einsum: BatchedEinsum | EinsumIdentity,
        device: DeviceInfo,
        recipe_name: str,
        recipe_version: str,
        lengths: Mapping[str, int] | None = None,
    ) -> set[str]:
        """Canonical JSON (:func:`params_key`) of every parameter assignment of this recipe
        version already measured (whatever the outcome) for this einsum at these lengths
        (default: the lengths the einsum fixes) on this device, in the user's database or
        the shipped records."""
        ident = einsum_identity(einsum)
        lk = lengths_key(ident.lengths if lengths is None else lengths)
        dkey = _device_info(device).key
        return set().union(*over_stores(self._stores(), lambda s: s.measured_params(
            ident.canonical_key, dkey, (recipe_name, recipe_version), lk)))

    def query(
        self,
        einsum: EinsumLike | None = None,
        device: DeviceLike | str | None = None,
        *,
        recipe: str | tuple[str, str] | None = None,
        recipe_versions: Mapping[str, str] | CodeChecker | None = None,
        status: str | Sequence[str] | None = "ok",
        lengths: Mapping[str, int] | None = None,
        loopy_version: str | None = None,
        pyopencl_version: str | None = None,
        feinsum_version: str | None = None,
        driver_version: str | None = None,
        max_age: _dt.timedelta | None = None,
        limit: int | None = None,
        include_shipped: bool = True,
        include_retired: bool = False,
    ) -> list[Record]:
        """Records of *einsum* (by canonical key: every length it was timed at unless
        *lengths* is given) on *device*, fastest first (minimum time; ties: median time,
        then insertion order, the user's records before shipped ones). See :func:`query`;
        *recipe_versions* may be :func:`feinsum.current_recipes` (records of other versions
        are revalidated first); *include_retired*: also the records revalidation retired."""
        from feinsum import checks

        limit = checks.optional_count("limit", limit)
        key: str | None
        if einsum is None:
            key = None
        elif isinstance(einsum, str):
            key = einsum
        else:
            key = einsum_identity(einsum).canonical_key
        checker = recipe_versions if isinstance(recipe_versions, CodeChecker) else None
        filters = Filters(
            recipe=recipe, recipe_versions=_plain_versions(recipe_versions), status=status,
            loopy_version=loopy_version, pyopencl_version=pyopencl_version,
            feinsum_version=feinsum_version, driver_version=driver_version, max_age=max_age,
            lengths_key=None if lengths is None else lengths_key(lengths),
            retired=include_retired,
        )
        dkey = _device_key(device)

        def run(f: Filters) -> list[Record]:
            return self._query(key, dkey, f, limit, include_shipped)

        return run(filters) if checker is None else checked_query(self, checker, filters, run)

    def _query(self, key: str | None, dkey: str | None, filters: Filters, limit: int | None,
               include_shipped: bool) -> list[Record]:
        records: list[Record] = []
        seen: set[str] = set()
        stores = self._stores(include_shipped)
        for part in over_stores(stores, lambda s: s.query(key, dkey, filters, limit)):
            for r in part:
                if r.uid not in seen:  # the user's copy of a shipped record wins
                    seen.add(r.uid)
                    records.append(r)
        if len(stores) > 1:
            records.sort(key=lambda r: (r.rank_key[:4], r.source != "user", r.id))
        return records if limit is None else records[:limit]

    def best(
        self,
        einsum: EinsumLike,
        device: DeviceLike,
        *,
        lengths: Mapping[str, int] | None = None,
        recipe: str | tuple[str, str] | None = None,
        recipe_versions: Mapping[str, str] | CodeChecker | None = None,
        loopy_version: str | None = None,
        pyopencl_version: str | None = None,
        max_age: _dt.timedelta | None = None,
    ) -> Answer:
        """The fastest record for *einsum* on *device*, down the fallback chain; see
        :func:`best`."""
        ident = self._identity_for_best(einsum)
        info = _device_info(device)
        asked = dict(ident.lengths if lengths is None else lengths)
        lengths_key(asked)  # validates
        if ident.structure_key == "":
            return Answer("default", None, ident.canonical_key, asked)
        checker = recipe_versions if isinstance(recipe_versions, CodeChecker) else None
        filters = Filters(
            recipe=recipe, recipe_versions=_plain_versions(recipe_versions), status="ok",
            loopy_version=loopy_version, pyopencl_version=pyopencl_version, max_age=max_age,
        )

        def run(f: Filters) -> Answer:
            return self._best(ident, info, asked, f)

        return run(filters) if checker is None else checked_best(self, checker, filters, run)

    def _best(self, ident: EinsumIdentity, info: DeviceInfo, asked: dict[str, int],
              filters: Filters) -> Answer:
        stores = self._stores()
        with contextlib.ExitStack() as stack:
            conns = [stack.enter_context(st.reading("finding the best record")) for st in stores]
            # (rung, sort key, store index, (einsum id, device id, lengths key), distance)
            Cand = tuple[int, tuple[Any, ...], int, tuple[int, int, str], float]
            cands: list[Cand] = []
            ems_of: list[dict[int, str] | None] = [None] * len(stores)

            def structure_mates(si: int) -> dict[int, str]:
                found = ems_of[si]
                if found is None:
                    found = ems_of[si] = stores[si].structure_einsums(
                        conns[si], ident.structure_key
                    )
                return found

            def near(si: int) -> list[Cand]:
                """Rungs 0 and 1: this device."""
                store, conn, out = stores[si], conns[si], list[Cand]()
                did = store.lookup_id(conn, "device", info.key)
                if did is None:
                    return []
                ems = structure_mates(si)
                for d, e, lk, mm in store.groups(conn, list(ems), [did], filters):
                    found = json.loads(lk)
                    same = ems[e] == ident.canonical_key
                    if same and _agrees(asked, found):
                        out.append((0, (mm,), si, (e, d, lk), 0.0))
                    else:
                        dist = lengths_distance(asked, found)
                        out.append((1, (not same, dist, mm), si, (e, d, lk), dist))
                return out

            def vendor(si: int) -> list[Cand]:
                """Rung 2: the other devices of this vendor and type."""
                store, conn, out = stores[si], conns[si], list[Cand]()
                devices = store.vendor_devices(conn, info.vendor, info.device_type, info.key)
                if not devices:
                    return []
                ems = structure_mates(si)
                for d, e, lk, mm in store.groups(conn, list(ems), list(devices), filters):
                    found = json.loads(lk)
                    same = ems[e] == ident.canonical_key
                    dist = lengths_distance(asked, found)
                    other_name = devices[d][1] != info.name
                    out.append((2, (not same, other_name, dist, mm), si, (e, d, lk), dist))
                return out

            indices = range(len(stores))
            cands += [c for part in over_stores(indices, near) for c in part]
            if not cands:
                cands += [c for part in over_stores(indices, vendor) for c in part]
            ordered = sorted(cands, key=lambda c: c[:3])
            i = 0
            while i < len(ordered):
                # Groups tied on rung and key (minimum time): their records' medians decide,
                # then the store (user first) and insertion order.
                j = i + 1
                while j < len(ordered) and ordered[j][:2] == ordered[i][:2]:
                    j += 1
                def fastest(c: Cand) -> Any:
                    rung, _, si, (e, d, lk), dist = c
                    record = stores[si].fastest(conns[si], e, d, lk, filters)
                    return None if record is None else (
                        record.rank_key[2:4], si, record.id, rung, dist, record)

                found = [f for f in over_stores(ordered[i:j], fastest) if f is not None]
                if found:
                    *_, rung, dist, record = min(found, key=lambda f: f[:3])
                    return Answer(_RUNG_NAMES[rung], record, ident.canonical_key, asked,
                                  distance=dist)
                i = j
        return Answer("default", None, ident.canonical_key, asked)

    def _identity_for_best(self, einsum: EinsumLike) -> EinsumIdentity:
        if not isinstance(einsum, str):
            return einsum_identity(einsum)
        import sqlalchemy as sa

        from .models import Einsum

        def structure_key(store: Store) -> str | None:
            with store.reading("looking up an einsum") as conn:
                return conn.execute(  # type: ignore[no-any-return]
                    sa.select(Einsum.structure_key).where(Einsum.canonical_key == einsum)
                ).scalar()

        for sk in over_stores(self._stores(), structure_key):
            if sk is not None:
                return EinsumIdentity(canonical_key=einsum, structure_key=sk)
        return EinsumIdentity(canonical_key=einsum, structure_key="")

    # }}}

    # {{{ sharing

    def export(
        self,
        path: str | os.PathLike[str],
        *,
        device: DeviceLike | str | None = None,
        status: str | Sequence[str] | None = None,
        recipe: str | tuple[str, str] | None = None,
        compress: bool | None = None,
        only_if_changed: bool = False,
    ) -> int:
        """Write the user's records (optionally only those on *device*, with *status*, of
        *recipe*) to a JSON-lines file (gzip if *compress*, by default if it ends in
        ``.gz``), atomically; *only_if_changed*: leave a file that holds the same records
        untouched. A file there that is not an export is refused. Returns the number of
        measurements. See :mod:`feinsum.database.sharing` for the format."""
        import sqlalchemy as sa

        from .models import Device, Measurement
        from .sharing import export_file

        conds = Filters(recipe=recipe, status=status, retired=True).conditions(joined=False)
        dkey = _device_key(device)
        if dkey is not None:
            conds.append(
                Measurement.device_id.in_(sa.select(Device.id).where(Device.key == dkey))
            )
        return export_file(self._user, path, conds, compress=compress,
                           only_if_changed=only_if_changed)

    def import_file(self, path: str | os.PathLike[str]) -> ImportReport:
        """Import a JSON-lines export (checked completely first; one transaction; records
        already present are skipped, so importing twice adds nothing)."""
        from .sharing import import_file

        return import_file(self._user, path)

    def merge(self, other: Database | str | os.PathLike[str] | URL) -> ImportReport:
        """Add every record of *other* (a :class:`Database`, a database path or URL, or a
        JSON-lines export) that this database lacks; merging twice adds nothing."""
        from .sharing import import_store

        if isinstance(other, Database):
            return import_store(self._user, other._user)
        if isinstance(other, (str, os.PathLike)):
            p = Path(other)
            if p.is_file() and not _is_sqlite(p):
                return self.import_file(p)
        with Database(other, readonly=True, include_shipped=False) as db:
            return import_store(self._user, db._user)

    def prune(
        self,
        *,
        older_than: _dt.timedelta | _dt.datetime | None = None,
        loopy_below: str | None = None,
        pyopencl_below: str | None = None,
        feinsum_below: str | None = None,
        recipe_versions: Mapping[str, str] | None = None,
        retired: bool = False,
        status: str | Sequence[str] | None = None,
        dry_run: bool = False,
    ) -> int:
        """Delete stale measurements from the user's database: those measured before
        *older_than* (an age or a time), with loopy/pyopencl/feinsum older than the given
        versions, with a recipe version other than the current one in *recipe_versions*
        ({name: current version}; revalidate first to keep the records whose code is
        unchanged), or *retired* by revalidation — any of these; restricted to *status*
        when given. Returns how many were (with *dry_run*: would be) deleted."""
        from .pruning import prune_conditions

        conds = prune_conditions(
            self._user, older_than=older_than, loopy_below=loopy_below,
            pyopencl_below=pyopencl_below, feinsum_below=feinsum_below,
            recipe_versions=recipe_versions, retired=retired, status=status,
        )
        return self._user.delete_measurements(conds, dry_run=dry_run)

    # }}}


def _is_sqlite(p: Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(16).startswith(b"SQLite format 3")
    except OSError:
        return False


def open_database(
    url: str | os.PathLike[str] | URL | None = None,
    *,
    readonly: bool = False,
    include_shipped: ShippedSpec = True,
) -> Database:
    """Open (creating or upgrading if needed) the timing database.

    *url*: a SQLite file path or any SQLAlchemy URL (``postgresql+psycopg://...``); None:
    ``$FEINSUM_DB``, else ``platformdirs.user_data_dir("feinsum")/feinsum.sqlite``.
    *readonly*: never write (an older schema is then an error naming the upgrade command).
    *include_shipped*: also see the records shipped with feinsum (True), none (False), or
    those in the given export files/directories.

    Raises :class:`feinsum.DatabaseError` for a foreign, corrupt, truncated or newer
    database."""
    return Database(url, readonly=readonly, include_shipped=include_shipped)

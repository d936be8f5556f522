"""What a report shows: per device and dtype, a roofline and one point per einsum and
lengths (the fastest record, the untransformed kernel, the fastest peer), labelled in the
user's names where the database knows them."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from feinsum.errors import FeinsumError
from feinsum.timing.roofline import PEAK_DTYPE

if TYPE_CHECKING:
    from feinsum.database import Database, Record
    from feinsum.devices.info import DeviceInfo
    from feinsum.timing.roofline import Roofline

#: Points measured within this time of the user's newest record count as their latest work.
LATEST_WINDOW = _dt.timedelta(hours=24)


class ReportError(FeinsumError):
    """A report was asked for something the options cannot give (a bad ``--since``)."""


@dataclass(frozen=True)
class Point:
    """One einsum at one lengths on one device: the fastest record and its references."""

    device_key: str
    device_name: str
    dtype: str
    canonical_key: str
    #: the user's subscripts (or kernel:statement), else the canonical ones
    einsum: str
    #: the lengths in the user's names (``E=50000``)
    lengths: str
    recipe: str
    record: str
    source: str
    measured_at: _dt.datetime
    seconds: float
    gflops: float | None
    intensity: float | None
    #: the roofline bound at this intensity (GFLOP/s), None without a roofline
    roof: float | None = None
    untransformed_seconds: float | None = None
    peer: str | None = None
    peer_seconds: float | None = None
    #: among the user's newest records (see :data:`LATEST_WINDOW`)
    latest: bool = False
    #: why the point is above its roof (None: it is not): (short label, explanation)
    above_roof: tuple[str, str] | None = None

    def rate(self, seconds: float | None) -> float | None:
        """The GFLOP/s of the same computation in *seconds*."""
        if seconds is None or self.gflops is None or not seconds:
            return None
        return self.gflops * self.seconds / seconds

    @property
    def untransformed_gflops(self) -> float | None:
        return self.rate(self.untransformed_seconds)

    @property
    def peer_gflops(self) -> float | None:
        return self.rate(self.peer_seconds)

    @property
    def speedup(self) -> float | None:
        """Over the untransformed kernel."""
        return self.untransformed_seconds / self.seconds if self.untransformed_seconds else None

    @property
    def vs_peer(self) -> float | None:
        """Over the fastest peer."""
        return self.peer_seconds / self.seconds if self.peer_seconds else None

    @property
    def fraction(self) -> float | None:
        """Of the roofline bound."""
        return self.gflops / self.roof if self.gflops and self.roof else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device_name, "device_key": self.device_key, "dtype": self.dtype,
            "canonical_key": self.canonical_key, "einsum": self.einsum,
            "lengths": self.lengths, "recipe": self.recipe, "record": self.record,
            "source": self.source, "measured_at": self.measured_at.isoformat(),
            "seconds": self.seconds, "gflops": self.gflops, "intensity": self.intensity,
            "roof_gflops": self.roof, "roof_fraction": self.fraction,
            "untransformed_seconds": self.untransformed_seconds,
            "untransformed_gflops": self.untransformed_gflops, "speedup": self.speedup,
            "peer": self.peer, "peer_seconds": self.peer_seconds,
            "peer_gflops": self.peer_gflops, "vs_peer": self.vs_peer, "latest": self.latest,
            "above_roof": None if self.above_roof is None else self.above_roof[1],
        }


@dataclass(frozen=True)
class Panel:
    """One device and dtype: its roofline (None if never measured) and points."""

    device_key: str
    device_name: str
    dtype: str
    roofline: Roofline | None
    points: list[Point] = field(default_factory=list)
    #: the sanity checks its roofline fails (:func:`feinsum.timing.roofline.roofline_problems`)
    problems: tuple[str, ...] = ()

    @property
    def peak(self) -> float | None:
        """GFLOP/s (None without a roofline, or for a dtype without a peak)."""
        if self.roofline is None or self.dtype not in PEAK_DTYPE:
            return None
        p = self.roofline.peak(self.dtype)
        return None if p is None else p / 1e9

    @property
    def bandwidth(self) -> float | None:
        """GB/s."""
        return None if self.roofline is None else self.roofline.bandwidth / 1e9


def parse_since(text: str | None, now: _dt.datetime | None = None) -> _dt.datetime | None:
    """``--since``: an ISO date or time (UTC unless it says), or an age (``90m``, ``12h``,
    ``7d``, ``2w``)."""
    if text is None:
        return None
    now = now or _dt.datetime.now(_dt.UTC)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*", text)
    if m:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[m.group(2)]
        return now - _dt.timedelta(**{unit: float(m.group(1))})
    try:
        t = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReportError(f"--since {text!r}: give a date (2026-11-20), a time "
                          "(2026-11-20T14:00) or an age (90m, 12h, 7d, 2w)") from None
    return t.replace(tzinfo=_dt.UTC) if t.tzinfo is None else t.astimezone(_dt.UTC)


def _matches(text: str, *candidates: str) -> bool:
    t = text.lower()
    return any(t in c.lower() for c in candidates)


def collect(db: Database, *, device: str | None = None, einsum: str | None = None,
            since: _dt.datetime | None = None) -> list[Panel]:
    """The panels of a report of *db*: devices whose name or key contains *device*, einsums
    whose user label, canonical key or canonical text contains *einsum*, the fastest record
    among those measured *since*."""
    from feinsum.cli.dbread import devices, einsum_origin_of, einsum_text
    from feinsum.database.origins import einsum_label, lengths_label
    from feinsum.database.rates import record_work
    from feinsum.timing.measurement import UNTRANSFORMED
    from feinsum.timing.roofline import Roofline, roofline_problems

    panels: dict[tuple[str, str], Panel] = {}
    for dkey, info in devices(db).items():
        if device is not None and not _matches(device, dkey, info.name):
            continue
        stored = db.get_roofline(info)
        roof = None if stored is None else Roofline.from_dict(stored)
        problems = () if roof is None else tuple(dict.fromkeys(
            [*roof.problems, *roofline_problems(roof, info)]))
        by_einsum: dict[str, list[Record]] = {}
        for r in db.query(None, dkey):
            by_einsum.setdefault(r.canonical_key, []).append(r)
        for ck, recs in by_einsum.items():
            text = einsum_text(db, ck)
            origin = einsum_origin_of(db, ck)
            label = einsum_label(origin, _canonical_label(text, ck))
            if einsum is not None and not _matches(einsum, label, ck,
                                                   "" if text is None else text[0]):
                continue
            peers = _fastest_peers(db, ck, dkey)
            for lk, group in _by_lengths(recs).items():
                best = next((r for r in group if r.recipe_name != UNTRANSFORMED
                             and (since is None or r.measured_at >= since)), None)
                if best is None or not best.min_time:
                    continue
                base = next((r for r in group if r.recipe_name == UNTRANSFORMED), None)
                work = record_work(ck, None if text is None else text[1], lk)
                dtype = "unknown dtype" if work is None else work.dtype
                peer = peers.get(lk)
                point = Point(
                    device_key=dkey, device_name=info.name, dtype=dtype, canonical_key=ck,
                    einsum=label, lengths=lengths_label(origin, best.lengths),
                    recipe=best.recipe_name, record=f"{best.source}#{best.id}",
                    source=best.source, measured_at=best.measured_at,
                    seconds=best.min_time, gflops=best.gflops,
                    intensity=(best.flops / best.bytes if best.flops and best.bytes
                               else None),
                    roof=(roof.attainable(dtype, best.flops, best.bytes) / 1e9
                          if roof is not None and work is not None and best.flops
                          and best.bytes else None),
                    untransformed_seconds=None if base is None else base.min_time,
                    peer=None if peer is None else peer[0],
                    peer_seconds=None if peer is None else peer[1])
                panel = panels.setdefault((dkey, dtype),
                                          Panel(dkey, info.name, dtype, roof, problems=problems))
                panel.points.append(replace(point, above_roof=above_roof(point, panel, info)))
    out = sorted(panels.values(), key=lambda p: (p.device_name, p.dtype))
    for panel in out:
        panel.points.sort(key=lambda p: (p.einsum, p.intensity or 0.0, p.lengths))
    return _mark_latest(out)


def above_roof(p: Point, panel: Panel, info: DeviceInfo) -> tuple[str, str] | None:
    """Why point *p* is above its roof, (short label, explanation); None when it is not."""
    if p.gflops is None or p.roof is None or p.gflops <= p.roof:
        return None
    pct = f"{100 * p.gflops / p.roof:.0f}% of its roof"
    if panel.problems:
        return ("suspicious roofline", f"{pct}: the roofline of {panel.device_name} is "
                "suspicious (said above it); `feinsum devices --roofline` measures it again")
    peak = panel.peak
    if peak is not None and p.roof >= peak * 0.999:
        return ("peak measured low", f"{pct}, above the {panel.dtype} peak the roofline "
                f"measured ({peak:,.1f} GFLOP/s): it was measured low, while the device was "
                "busy?; `feinsum devices --roofline` measures it again")
    from feinsum.timing.roofline import stream_bytes

    footprint = p.gflops * 1e9 * p.seconds / p.intensity if p.intensity else None
    streams = stream_bytes(info)
    if footprint is not None and footprint < streams:
        return ("cache", f"{pct}, above the memory roof: its arrays ({footprint / 2**20:,.3g}"
                f" MiB) are smaller than the roofline's streams ({streams / 2**20:,.0f} MiB) "
                "and are read from caches, faster than from memory")
    return ("bandwidth measured low", f"{pct}, above the memory roof: the roofline's "
            "bandwidth was measured low, while the device was busy?; `feinsum devices "
            "--roofline` measures it again")


def _canonical_label(text: tuple[str, str] | None, key: str) -> str:
    from feinsum.cli.common import einsum_label

    return einsum_label(None if text is None else text[1], key)


def _by_lengths(records: Sequence[Record]) -> dict[str, list[Record]]:
    """Records grouped by lengths (JSON text of the canonical lengths), fastest first."""
    from feinsum.database import lengths_key

    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(lengths_key(r.lengths), []).append(r)
    return out


def _fastest_peers(db: Database, canonical_key: str, device_key: str
                   ) -> Mapping[str, tuple[str, float]]:
    """lengths JSON -> (peer, seconds) of the fastest peer timed beside this device."""
    from feinsum.database import lengths_key

    out: dict[str, tuple[str, float]] = {}
    for p in db.peer_timings(canonical_key, device_key):  # fastest first
        out.setdefault(lengths_key(p.lengths), (p.peer, p.seconds))
    return out


def _mark_latest(panels: list[Panel]) -> list[Panel]:
    from dataclasses import replace

    newest = max((p.measured_at for panel in panels for p in panel.points
                  if p.source == "user"), default=None)
    if newest is None:
        return panels
    for panel in panels:
        panel.points[:] = [replace(p, latest=p.source == "user"
                                   and p.measured_at >= newest - LATEST_WINDOW)
                           for p in panel.points]
    return panels

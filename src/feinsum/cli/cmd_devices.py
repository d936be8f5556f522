"""``feinsum devices``: OpenCL platforms and devices, usable or not, with their roofline;
``--roofline`` measures the rooflines again and records them."""

from __future__ import annotations

import argparse
from typing import Any

from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    nothing_found,
    print_table,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_db_argument(parser)
    parser.add_argument("--roofline", action="store_true",
                        help="measure the roofline of every usable device (or of --device) "
                        "again and record it: a measurement far below the recorded one "
                        "is not recorded, and one that fails a sanity check says so")
    parser.add_argument("--device", metavar="DEVICE",
                        help='with --roofline: only this device ("PLATFORM:DEVICE" indices or '
                        "part of its name)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    import pyopencl as cl

    from feinsum.devices.opencl import all_devices, device_info
    from feinsum.errors import FeinsumError

    if args.device and not args.roofline:
        raise FeinsumError("--device goes with --roofline (`feinsum devices` lists them all)")
    db = None
    if args.roofline:
        from feinsum.cli.dbread import open_db

        db = open_db(args.db, write=True)  # where the measurements go: it must open
    else:
        try:
            from feinsum.database import open_database

            db = open_database(args.db)
        except Exception:  # the device list is useful without a database
            db = None
    chosen = None
    if args.device:
        from feinsum.devices.opencl import get_device

        chosen = get_device(args.device)
    entries = []
    platforms = cl.get_platforms()
    for d, why in all_devices():
        p_index = next(i for i, p in enumerate(platforms) if p == d.platform)
        d_index = d.platform.get_devices().index(d)
        info = device_info(d)
        entry: dict[str, Any] = {
            "id": f"{p_index}:{d_index}", "name": info.name, "platform": info.platform_name,
            "type": info.device_type, "compute_units": info.compute_units,
            "usable": why is None, "problem": why, "identity": info.as_dict()}
        if args.roofline and why is None and (chosen is None or d == chosen):
            entry.update(_measure(d, db))
        entry["roofline"] = db.get_roofline(info) if db is not None else None
        entry["roofline_problems"] = _problems(entry["roofline"], info)
        entries.append(entry)
    if db is not None:
        db.close()
    usable = any(e["usable"] for e in entries)
    none = "no OpenCL device here builds kernels (see scripts/bootstrap)"
    if args.json:
        emit_json(entries)
        return 0 if usable else nothing_found("devices", none)
    rows = []
    for e in entries:
        rows.append([e["id"], e["name"], e["type"], e["compute_units"],
                     "yes" if e["usable"] else f"no: {e['problem']}", _roof_text(e)])
    print_table("OpenCL devices", ["id", "name", "type", "CUs", "builds kernels", "roofline"],
                rows)
    for e in entries:
        if "measured" in e:
            print(f"{e['id']} {e['name']}: {_measured_text(e)}")
    return 0 if usable else nothing_found("devices", none)


def _measure(device: Any, db: Any) -> dict[str, Any]:
    """Measure *device*'s roofline again and record it in *db*, unless it is far below the
    recorded one: the measurement, and whether it was recorded."""
    from feinsum.devices.opencl import device_info
    from feinsum.timing.roofline import (
        record_roofline,
        recorded_roofline,
        run_microbenchmarks,
    )

    info = device_info(device)
    previous = recorded_roofline(db, info)
    roof = run_microbenchmarks(device, previous=previous)
    return {"measured": roof.as_dict(), "recorded": record_roofline(db, info, roof, previous)}


def _problems(stored: Any, info: Any) -> list[str]:
    """The sanity checks a recorded roofline fails (recorded with it, or found now)."""
    if not stored:
        return []
    from feinsum.timing.roofline import Roofline, roofline_problems

    roof = Roofline.from_dict(stored)
    return list(dict.fromkeys([*roof.problems, *roofline_problems(roof, info)]))


def _figures(data: dict[str, Any]) -> str:
    bw = max(data.get("copy_bandwidth", 0), data.get("triad_bandwidth", 0)) / 1e9
    peaks = data.get("peak_flops", {})
    return ", ".join([f"{bw:,.1f} GB/s", *(f"{k} {v / 1e9:,.1f} GFLOP/s"
                                           for k, v in sorted(peaks.items()))])


def _roof_text(e: dict[str, Any]) -> str:
    """The recorded roofline of a device entry, and why it is suspicious."""
    if not e["roofline"]:
        return "not measured"
    text = _figures(e["roofline"])
    if e["roofline_problems"]:
        text += " (suspicious: " + "; ".join(e["roofline_problems"]) + ")"
    return text


def _measured_text(e: dict[str, Any]) -> str:
    """What ``--roofline`` measured on a device entry, and what became of it."""
    m = e["measured"]
    text = f"roofline measured ({m['rounds']} rounds): {_figures(m)}"
    problems = "; ".join(m.get("problems", ()))
    if not e["recorded"]:
        return (f"{text}; NOT recorded: {problems}; the recorded roofline stays (measure "
                "again when the device is idle)")
    return f"{text}; recorded" + (f", but suspicious: {problems}" if problems else "")

"""``feinsum devices``: OpenCL platforms and devices, usable or not, with their roofline."""

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
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    import pyopencl as cl

    from feinsum.devices.opencl import all_devices, device_info

    db = None
    try:
        from feinsum.database import open_database

        db = open_database(args.db)
    except Exception:  # the device list is useful without a database
        db = None
    entries = []
    platforms = cl.get_platforms()
    for d, why in all_devices():
        p_index = next(i for i, p in enumerate(platforms) if p == d.platform)
        d_index = d.platform.get_devices().index(d)
        info = device_info(d)
        roof: Any = db.get_roofline(info) if db is not None else None
        entries.append({
            "id": f"{p_index}:{d_index}", "name": info.name, "platform": info.platform_name,
            "type": info.device_type, "compute_units": info.compute_units,
            "usable": why is None, "problem": why, "roofline": roof, "identity": info.as_dict(),
        })
    usable = any(e["usable"] for e in entries)
    none = "no OpenCL device here builds kernels (see scripts/bootstrap)"
    if args.json:
        emit_json(entries)
        return 0 if usable else nothing_found("devices", none)
    rows = []
    for e in entries:
        stored: dict[str, Any] = e["roofline"] or {}  # type: ignore[assignment]
        bw = max(stored.get("copy_bandwidth", 0), stored.get("triad_bandwidth", 0)) / 1e9
        rows.append([e["id"], e["name"], e["type"], e["compute_units"],
                     "yes" if e["usable"] else f"no: {e['problem']}",
                     f"{bw:.1f} GB/s" if bw else "not measured"])
    print_table("OpenCL devices", ["id", "name", "type", "CUs", "builds kernels", "roofline"], rows)
    return 0 if usable else nothing_found("devices", none)

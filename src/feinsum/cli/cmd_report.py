"""``feinsum report``: rooflines of the records (one per device and dtype) and their table."""

from __future__ import annotations

import argparse
import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    fmt_rate,
    print_table,
)

if TYPE_CHECKING:
    from feinsum.cli.report_data import Panel


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_db_argument(parser)
    parser.add_argument("--device", metavar="TEXT",
                        help="only devices whose name or key contains TEXT (default: every "
                        "device with records)")
    parser.add_argument("--einsum", metavar="TEXT",
                        help="only einsums whose subscripts (as you gave them, or canonical), "
                        "canonical key or canonical text contain TEXT")
    parser.add_argument("--since", metavar="WHEN",
                        help="only records measured since WHEN: a date (2026-11-20), a time "
                        "(2026-11-20T14:00, UTC) or an age (90m, 12h, 7d, 2w)")
    parser.add_argument("-o", "--output", default="feinsum-report.png", metavar="FILE",
                        help="the roofline figure, .png or .svg (default: %(default)s)")
    parser.add_argument("--no-plot", action="store_true",
                        help="only the table (matplotlib is not needed)")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML page (figure and sortable "
                        "table)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import open_db
    from feinsum.cli.report_data import collect, parse_since
    from feinsum.errors import FeinsumError

    out = Path(args.output)
    if not args.no_plot and out.suffix.lower() not in (".png", ".svg"):
        raise FeinsumError(f"--output {args.output!r}: give a .png or .svg file")
    since = parse_since(args.since)
    with open_db(args.db) as db:
        where = db.where
        panels = collect(db, device=args.device, einsum=args.einsum, since=since)
    points = [p for panel in panels for p in panel.points]
    chosen = _filters_text(args, since)
    if not points:
        if args.json:
            emit_json({"database": where, "panels": [], "points": [], "files": []})
        raise FeinsumError(f"nothing to report: {where} has no successful record"
                           + (f" {chosen}" if chosen else "")
                           + " (`feinsum list` shows what it holds)")
    title = "feinsum: fastest records on the roofline"
    ndev = len({p.device_key for p in points})
    if any(p.source == "shipped" for p in points):
        where += " and the records shipped with feinsum"
    meta = (f"{where}; {len(points)} einsums x lengths on {ndev} device{'s' * (ndev > 1)}"
            f"{'; ' + chosen if chosen else ''}; generated "
            f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC. GFLOP/s count the cheapest "
            "contraction order at the minimum time; click a column to sort.")
    written = _write(args, out, panels, title, meta)
    if args.json:
        emit_json({"database": where, "files": written,
                   "panels": [{"device": p.device_name, "device_key": p.device_key,
                               "dtype": p.dtype, "peak_gflops": p.peak,
                               "bandwidth_gbs": p.bandwidth,
                               "roofline_problems": list(p.problems),
                               "roofline": None if p.roofline is None
                               else p.roofline.as_dict()} for p in panels],
                   "points": [p.as_dict() for p in points]})
        return 0
    _print(panels)
    for w in written:
        print(f"wrote {w}")
    return 0


def _filters_text(args: argparse.Namespace, since: _dt.datetime | None) -> str:
    parts = [f"{k} {v!r}" for k, v in (("device", args.device), ("einsum", args.einsum))
             if v is not None]
    if since is not None:
        parts.append(f"measured since {since:%Y-%m-%d %H:%M} UTC")
    return ("matching " + ", ".join(parts)) if parts else ""


def _write(args: argparse.Namespace, out: Path, panels: list, title: str, meta: str
           ) -> list[str]:
    from feinsum.cli.report_page import page
    from feinsum.cli.report_plot import render
    from feinsum.database.files import write_beside

    written = []
    png: bytes | None = None
    if not args.no_plot:
        fmt = out.suffix.lower()[1:]
        data = render(panels, title, fmt)
        write_beside(out, lambda tmp: tmp.write_bytes(data))
        written.append(str(out))
        png = data if fmt == "png" else render(panels, title, "png")
    if args.html:
        text = page(title, meta, panels, png, [w for p in panels for w in warnings_of(p)])
        write_beside(args.html, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        written.append(args.html)
    return written


def _print(panels: list) -> None:
    from feinsum.cli.report_page import COLUMNS

    for panel in panels:
        roof = ("no roofline measured (`feinsum devices --roofline` measures it)"
                if panel.peak is None else f"roofline {fmt_rate(panel.bandwidth)} GB/s, "
                f"{fmt_rate(panel.peak)} GFLOP/s")
        cols = [c for c in COLUMNS if c[0] not in ("device", "dtype", "note")]
        print_table(f"{panel.device_name}, {panel.dtype}: {roof}",
                    [short for _, short, _, _ in cols],
                    [[_cell(short, get(p)) for _, short, get, _ in cols]
                     for p in panel.points])
        for line in warnings_of(panel):
            print(line)


def warnings_of(panel: Panel) -> list[str]:
    """What is wrong in *panel*, one line each: its roofline, and each point above its
    roof, with why."""
    out = [f"WARNING: suspicious roofline of {panel.device_name} ({panel.dtype}): {p}"
           for p in panel.problems]
    for k, p in enumerate(panel.points, 1):
        if p.above_roof is not None:
            out.append(f"WARNING: point {k}, {p.einsum} {p.lengths}, is at "
                       f"{p.above_roof[1]}")
    return out


def _cell(header: str, value: object) -> str:
    from feinsum.cli.report_page import cell_text

    if isinstance(value, float):
        if header in ("speed-up", "vs peer"):
            return f"{value:.2f}x" if value < 10 else f"{value:.0f}x"
        if header == "roof":
            return f"{value:.0f}%"
    if header == "measured" and isinstance(value, str):
        return value[5:]  # no year
    return cell_text(value)

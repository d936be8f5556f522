"""``feinsum report``: a roofline plot of a device's records and a table of speed-ups."""

from __future__ import annotations

import argparse
import html
import io
from pathlib import Path
from typing import Any

from feinsum.cli.common import (
    add_db_argument,
    add_json_argument,
    emit_json,
    fmt_float,
    lengths_text,
    print_table,
)


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    add_db_argument(parser)
    parser.add_argument("--device", metavar="TEXT",
                        help="the database device whose name or key contains TEXT (default: "
                        "the only one)")
    parser.add_argument("-o", "--output", default="feinsum-report.png", metavar="FILE",
                        help="the roofline plot, .png or .svg (default: %(default)s)")
    parser.add_argument("--no-plot", action="store_true",
                        help="only the table (matplotlib is not needed)")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML page (plot and table)")
    add_json_argument(parser)


def _rows(db: Any, info: Any) -> list[dict[str, Any]]:
    """Per einsum and lengths: the fastest record and the untransformed one (fastest: the
    smallest minimum time, the order of ``Database.query``; ``seconds`` is that time)."""
    from feinsum.cli.common import einsum_label
    from feinsum.cli.dbread import einsum_text, groups
    from feinsum.measurement import UNTRANSFORMED

    rows = []
    for g in groups(db):
        if g.device_key != info.key or not g.ok:
            continue
        found = einsum_text(db, g.canonical_key)
        label = einsum_label(found[1] if found else None, g.canonical_key)
        by_lengths: dict[str, list[Any]] = {}
        for r in db.query(g.canonical_key, info):
            by_lengths.setdefault(lengths_text(r.lengths), []).append(r)
        for lk, recs in sorted(by_lengths.items()):
            best = next((r for r in recs if r.recipe_name != UNTRANSFORMED), None)
            base = next((r for r in recs if r.recipe_name == UNTRANSFORMED), None)
            if best is None:
                continue
            rows.append({
                "einsum": label, "canonical_key": g.canonical_key, "lengths": lk,
                "record": f"{best.source}#{best.id}", "recipe": best.recipe_name,
                "gflops": best.gflops, "seconds": best.min_time,
                "intensity": (best.flops / best.bytes) if best.flops and best.bytes else None,
                "untransformed_gflops": None if base is None else base.gflops,
                "speedup": (base.min_time / best.min_time
                            if base is not None and base.min_time and best.min_time
                            else None),
            })
    return rows


def _plot(rows: list[dict[str, Any]], roof: Any, title: str, fmt: str) -> bytes:
    try:
        import matplotlib
    except ImportError:
        from feinsum.errors import FeinsumError

        raise FeinsumError("the roofline plot needs matplotlib: pip install 'feinsum[plot]' "
                           "(or pass --no-plot)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5.5))
    pts = [r for r in rows if r["intensity"] and r["gflops"]]
    xs = [r["intensity"] for r in pts] or [1.0]
    lo, hi = min(xs) / 4, max(xs) * 4
    if roof is not None:
        x = np.geomspace(min(lo, 0.01), max(hi, 100.0), 200)
        mem = x * roof.bandwidth / 1e9
        ax.plot(x, mem, "k--", lw=1, label=f"memory {roof.bandwidth / 1e9:.1f} GB/s")
        for dtype, peak in sorted(roof.peak_flops.items()):
            ax.plot(x, np.minimum(mem, peak / 1e9), lw=1.2, label=f"roofline {dtype}")
    for i, r in enumerate(pts):
        color = f"C{(i + 2) % 10}"
        ax.plot(r["intensity"], r["gflops"], "o", color=color,
                label=f"{r['einsum']} ({r['lengths']}): {r['recipe']}")
        if r["untransformed_gflops"]:
            ax.plot(r["intensity"], r["untransformed_gflops"], "o", mfc="none", color=color)
            ax.annotate("", (r["intensity"], r["gflops"]),
                        (r["intensity"], r["untransformed_gflops"]),
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (flop / byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title + "\n(hollow: untransformed kernel)", fontsize=10)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    plt.close(fig)
    return buf.getvalue()


def _html(title: str, svg: bytes | None, rows: list[dict[str, Any]]) -> str:
    head = ["einsum", "lengths", "recipe", "GFLOP/s", "untransformed GFLOP/s", "speed-up"]
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            r["einsum"], r["lengths"], r["recipe"], fmt_float(r["gflops"]),
            fmt_float(r["untransformed_gflops"]), fmt_float(r["speedup"]))) + "</tr>"
        for r in rows)
    figure = "" if svg is None else svg.decode("utf-8").split("?>", 1)[-1]
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:"
            "collapse}td,th{border:1px solid #aaa;padding:.3em .6em}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>{figure}<table><tr>"
            + "".join(f"<th>{h}</th>" for h in head) + f"</tr>{body}</table></body></html>\n")


def run(args: argparse.Namespace) -> int:
    from feinsum.cli.dbread import devices, open_db, pick_device
    from feinsum.errors import DatabaseError, FeinsumError
    from feinsum.roofline import Roofline

    out = Path(args.output)
    if not args.no_plot and out.suffix.lower() not in (".png", ".svg"):
        raise FeinsumError(f"--output {args.output!r}: give a .png or .svg file")
    with open_db(args.db) as db:
        info = pick_device(db, args.device)
        if info is None:
            known = list(devices(db).values())
            if len(known) != 1:
                names = "; ".join(i.name for i in known) or "none"
                raise DatabaseError(f"{db.where} has records of {len(known)} devices "
                                    f"({names}): choose one with --device")
            info = known[0]
        rows = _rows(db, info)
        stored = db.get_roofline(info)
    roof = None if stored is None else Roofline.from_dict(stored)
    title = f"feinsum on {info.name}"
    written = []
    if not args.no_plot:
        out.write_bytes(_plot(rows, roof, title, out.suffix.lower()[1:]))
        written.append(str(out))
    if args.html:
        svg = None if args.no_plot else _plot(rows, roof, title, "svg")
        Path(args.html).write_text(_html(title, svg, rows), encoding="utf-8")
        written.append(args.html)
    if args.json:
        emit_json({"device": info.name, "roofline": stored, "rows": rows, "files": written})
        return 0
    print_table(f"{title}: fastest record (minimum time) vs the untransformed kernel",
                ["einsum", "lengths", "recipe", "GFLOP/s", "untransformed", "speed-up",
                 "record"],
                [[r["einsum"], r["lengths"], r["recipe"], fmt_float(r["gflops"]),
                  fmt_float(r["untransformed_gflops"]),
                  "-" if r["speedup"] is None else f"{r['speedup']:.2f}x", r["record"]]
                 for r in rows])
    if roof is None:
        print("(no roofline measured for this device: `feinsum tune` measures it)")
    for w in written:
        print(f"wrote {w}")
    return 0

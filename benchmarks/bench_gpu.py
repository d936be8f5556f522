"""One command for a GPU: check the device, tune every reference workload with a small
budget, time the peers installed there, record everything as it goes, print one table.

    python benchmarks/bench_gpu.py [--device SPEC] [--out DIR] [--db PATH] [--budget 8]
                                   [--time-budget 450] [--lengths reference|gpu|quick]
                                   [--only NAME ...] [--no-peers] [--peer-limit S]

1. The device (``--device``, else ``PYOPENCL_CTX``, else the first usable GPU, else the CPU):
   the probe of :mod:`feinsum.devices.probe` must pass; its limits and the device model
   feinsum matched (:mod:`feinsum.devices.models`) are printed.
2. Its roofline, measured (:func:`feinsum.measure_roofline`), beside the model's datasheet
   peaks when there is a model.
3. Every reference workload of :mod:`feinsum.tuning.workloads` (DG plain and x4, tensor
   contractions, kernel reductions, the elementwise and reduction stand-ins; not the
   block-sparse one: ``bench_kernel_reductions.py``) tuned by :func:`feinsum.autotune`
   with ``--budget`` configurations, recorded in the database (``--db``, default
   ``DIR/bench-gpu.sqlite``; a re-run resumes and measures nothing twice), at
   workloads.md's GPU sizes on a GPU (the few-rows workload's 64 rows; 16 on a CPU).
   ``--lengths gpu``: GPU-sized problems (``E``, ``M`` and ``N`` = 1e6); ``quick`` (or
   ``--quick``): small ones (a smoke test).
4. The peers that import (``gpu_peers.py``: numpy, torch on CUDA, chunked for the kernel
   reductions, cupy, pykeops), each bounded in time: timed on a subsample of the long axis
   and scaled when the full size would not fit its bound (the table marks it ``~``), or
   reported as timed out.

The whole run keeps to ``--time-budget`` seconds (default 450: a budget-8 run fits in 8
minutes with the start-up): each workload gets an equal share of what is left (tuning at
most 60% of it, the peers the rest), and a workload whose share is under
:data:`MIN_SHARE` seconds is skipped and listed as such. Each row is printed, appended to
``DIR/rows.jsonl`` and the markdown table ``DIR/table.md`` rewritten as soon as its
workload completes, so a killed run keeps every finished row. ``DIR`` is ``--out``
(default ``bench-gpu-<device>`` here). See benchmarks/README.md for what a GPU machine needs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import feinsum as fs  # noqa: E402
from feinsum.tuning.workloads import workloads  # noqa: E402

FAMILIES = ("dg", "contraction", "kernel", "elementwise", "reduction")
#: The GPU-sized lengths of ``--lengths gpu`` (symbols not named keep their reference length).
GPU_LENGTHS = {"E": 1_000_000, "M": 1_000_000, "N": 1_000_000}
#: A workload whose share of the remaining time is below this (seconds) is skipped.
MIN_SHARE = 4.0
#: Fraction of a workload's share the tuner may use (the peers get the rest).
TUNE_FRACTION = 0.6
COLUMNS = ("workload", "recipe", "ms", "GFLOP/s", "roof", "sheet", "fastest peer", "peer ms",
           "ratio", "notes")


def check_device(spec: str | None) -> Any:
    """The device, probed; exits saying why when feinsum's code cannot run there."""
    from feinsum.devices.opencl import device_info, vector_problem

    dev = fs.get_device(spec)
    info = device_info(dev)
    try:
        why = vector_problem(dev)
    except fs.DeviceError as exc:
        raise SystemExit(f"device check failed: {exc}") from exc
    print(f"device: {info.name} ({info.device_type}, {info.platform_name}, driver "
          f"{info.driver_version}); vector code: {'ok' if why is None else why}")
    print(f"  {info.compute_units} compute units, work-groups <= {info.max_work_group_size}, "
          f"{info.local_mem_size >> 10} KiB local memory, model: {info.model or 'none'}")
    if info.device_type == "GPU" and not info.model:
        print("  (no device model matches: recipes assume feinsum.devices.info.GENERIC_GPU)")
    return dev


def datasheet_fraction(info: Any, dtype: Any, flops: float, nbytes: float,
                       seconds: float) -> float | None:
    """The fraction of the device model's datasheet roofline (None: no model)."""
    if not info.peak_bandwidth or not flops:
        return None
    peak = info.peak_flops_fp64 if np.dtype(dtype).itemsize == 8 else info.peak_flops_fp32
    bound = min(flops / nbytes * info.peak_bandwidth if nbytes else np.inf, peak or np.inf)
    return flops / seconds / bound


def lengths_of(w: Any, which: str) -> dict[str, int]:
    """The workload's lengths for ``--lengths`` *which*."""
    if which == "quick":
        return dict(w.small)
    if which == "gpu":
        return {k: GPU_LENGTHS.get(k, n) for k, n in w.lengths.items()}
    return dict(w.lengths)


class Recorder:
    """Prints each row as it completes, appends it to ``rows.jsonl`` and rewrites the
    markdown table ``table.md`` (with a header naming the device and the run)."""

    def __init__(self, out: Path, title: str) -> None:
        self.out, self.title = out, title
        self.rows: list[dict[str, Any]] = []
        out.mkdir(parents=True, exist_ok=True)
        self.jsonl = out / "rows.jsonl"
        self.jsonl.write_text("")
        self.table = out / "table.md"
        self._write_table()
        head = " ".join(f"{c:<{w}}" for c, w in zip(COLUMNS, _WIDTHS, strict=True))
        print(f"\n{title}\n{head}\n{'-' * len(head)}", flush=True)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        self._write_table()
        print(" ".join(f"{c:<{w}}" for c, w in zip(_cells(row), _WIDTHS, strict=True)),
              flush=True)

    def _write_table(self) -> None:
        lines = [f"# {self.title}", "", "| " + " | ".join(COLUMNS) + " |",
                 "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in self.rows]
        lines += ["", "roof: of the roofline measured in this run; sheet: of the datasheet's; "
                  "ratio > 1: feinsum faster; ~: peer timed on a subsample and scaled."]
        self.table.write_text("\n".join(lines) + "\n")


_WIDTHS = (15, 14, 9, 8, 5, 5, 22, 10, 6, 0)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _cells(row: dict[str, Any]) -> tuple[str, ...]:
    ms = row.get("ms")
    peer = row.get("fastest_peer")
    p = next((x for x in row.get("peers", []) if x["peer"] == peer), None)
    pms = "" if p is None else ("~" if p["how"].startswith("scaled") else "") + f"{p['ms']:.3f}"
    ratio = "" if p is None or ms is None else f"{p['ms'] / ms:.2f}x"
    notes = [row["status"]] if row["status"] != "ok" else []
    notes += [f"{x['peer']}: {x['how']}" for x in row.get("peers", []) if x["how"] != "measured"]
    return (row["workload"], row.get("recipe") or "-", "-" if ms is None else f"{ms:.3f}",
            "-" if row.get("gflops") is None else f"{row['gflops']:.1f}", _pct(row.get("roof")),
            _pct(row.get("sheet")), peer or "-", pms, ratio, "; ".join(notes))


def run_workload(name: str, w: Any, lengths: dict[str, int], share: float, args: Any,
                 dev: Any, info: Any, roof: Any, db_path: Path) -> dict[str, Any]:
    """Tune and time one workload within *share* seconds: its row."""
    import gpu_peers

    from feinsum.spec.costs import contraction_flops

    t0 = time.monotonic()
    row: dict[str, Any] = {"workload": name, "family": w.family, "lengths": lengths,
                           "status": "ok", "peers": []}
    tune_limit = TUNE_FRACTION * share
    if args.time_limit:
        tune_limit = min(tune_limit, args.time_limit)
    try:
        res = fs.autotune(w.spec, db=str(db_path), device=dev, lengths=lengths,
                          budget=args.budget, time_limit=tune_limit, peers=False,
                          baseline=False, progress=False)
        best = res.best
    except Exception as exc:  # a workload that cannot be tuned is a row, not the end
        best, res = None, None
        row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
    e = w.spec.with_lengths(lengths)
    if best is not None and best.timing is not None:
        t = best.timing.min
        flops = contraction_flops(e)
        row.update(recipe=best.recipe_name, params=best.params, ms=t * 1e3,
                   gflops=flops / t / 1e9,
                   roof=roof.fraction(e.value_dtype(0), flops, best.nbytes or 0, t),
                   sheet=datasheet_fraction(info, e.value_dtype(0), flops, best.nbytes or 0, t))
    elif row["status"] == "ok":
        row["status"] = f"nothing ran ({(res.failures if res else None) or 'no recipe applies'})"
    row["tune_s"] = time.monotonic() - t0
    if not args.no_peers:
        factories = gpu_peers.peers(name, w.spec, gpu_only=args.gpu_peers_only)
        for k, (pname, make) in enumerate(factories.items()):
            left = share - (time.monotonic() - t0)
            limit = left / (len(factories) - k)
            if args.peer_limit is not None:
                limit = min(limit, args.peer_limit)
            row["peers"].append(gpu_peers.measure_peer(pname, make, w.spec, lengths,
                                                       limit).to_json())
    timed = [p for p in row["peers"] if p["ms"] is not None]
    if timed:
        row["fastest_peer"] = min(timed, key=lambda p: p["ms"])["peer"]
    row["seconds"] = time.monotonic() - t0
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", help="platform:device indices or a name substring")
    ap.add_argument("--out", help="output folder (default bench-gpu-<device> here)")
    ap.add_argument("--db", help="the database file (default OUT/bench-gpu.sqlite)")
    ap.add_argument("--budget", type=int, default=8, help="configurations per workload")
    ap.add_argument("--time-budget", type=float, default=450.0,
                    help="seconds for the whole run (default 450)")
    ap.add_argument("--time-limit", type=float,
                    help="at most this many seconds of tuning per workload")
    ap.add_argument("--peer-limit", type=float, help="at most this many seconds per peer")
    ap.add_argument("--lengths", choices=("reference", "gpu", "quick"), default="reference")
    ap.add_argument("--quick", action="store_true", help="= --lengths quick (a smoke test)")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--gpu-peers-only", action="store_true", help="leave the numpy peers out")
    args = ap.parse_args()
    t_start = time.monotonic()
    which = "quick" if args.quick else args.lengths

    from feinsum.devices.opencl import device_info
    from feinsum.timing.roofline import measure_roofline

    dev = check_device(args.device)
    info = device_info(dev)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.name).strip("-").lower()
    out = Path(args.out or f"bench-gpu-{slug}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    db_path = Path(args.db).resolve() if args.db else out / "bench-gpu.sqlite"
    print(f"database: {db_path}\nrows: {out / 'rows.jsonl'}, {out / 'table.md'}")
    roof = measure_roofline(dev, db=str(db_path), quick=which == "quick")
    print(f"roofline measured: {roof}")
    if info.peak_bandwidth:
        print(f"datasheet ({info.model}): {info.peak_bandwidth / 1e9:.0f} GB/s, "
              f"{info.peak_flops_fp32 / 1e12:.1f} TFLOP/s fp32, "
              f"{info.peak_flops_fp64 / 1e12:.1f} fp64")
    chosen = workloads(small=which == "quick", families=FAMILIES, gpu=not info.is_cpu)
    if args.only:
        unknown = set(args.only) - set(chosen)
        if unknown:
            raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {sorted(chosen)}")
        chosen = {k: w for k, w in chosen.items() if k in args.only}
    rec = Recorder(out, f"{info.name}: budget {args.budget} per workload, {which} lengths, "
                        f"{time.strftime('%Y-%m-%d %H:%M')}")
    names = list(chosen)
    for k, name in enumerate(names):
        w = chosen[name]
        lengths = lengths_of(w, which)
        left = args.time_budget - (time.monotonic() - t_start)
        share = left / (len(names) - k)
        if share < MIN_SHARE:
            rec.add({"workload": name, "family": w.family, "lengths": lengths, "peers": [],
                     "status": f"skipped: out of time ({left:.0f} s left of "
                               f"--time-budget {args.time_budget:.0f})"})
            continue
        rec.add(run_workload(name, w, lengths, share, args, dev, info, roof, db_path))
    print(f"(roof: of the roofline measured this run; sheet: of the datasheet's; ratio > 1: "
          f"feinsum faster; ~: peer timed on a subsample and scaled; records in {db_path}, "
          f"rows in {out}; {time.monotonic() - t_start:.0f} s)")


if __name__ == "__main__":
    main()

"""One command for a GPU: check the device, tune every reference workload with a small
budget, time the peers installed there, record everything as it goes, print one table.

    python benchmarks/bench_gpu.py [--device SPEC] [--out DIR] [--db PATH] [--budget 8]
                                   [--time-budget 450] [--time-limit S] [--peer-limit S]
                                   [--lengths reference|gpu|quick] [--only NAME ...]
                                   [--no-peers] [--gpu-peers-only] [--dg-degree P]

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
   ``--quick``): small ones (a smoke test). ``--dg-degree P``: the DG operators at
   polynomial degree ``P`` on tetrahedra instead of 4 (named ``local_pP`` and so on;
   ``--only local_p6 divergence_x4_p6``): where the operator outgrows local memory
   (degree 6: 84 nodes), the hook's defaults change recipe.
4. The peers that import (``gpu_peers.py``: numpy, torch on CUDA, chunked for the kernel
   reductions, cupy, pykeops), each bounded in time: timed on a subsample of the long axis
   and scaled when the full size would not fit its bound (the table marks it ``~``), or
   reported as timed out.

Time. The whole run keeps to ``--time-budget`` seconds (default 450: a budget-8 run fits
in 8 minutes with the start-up), start-up and roofline included, finishing within it plus
at most about one workload's overrun:

* Each workload's *share* is an equal part of what is left (recomputed before every
  workload, so an overrun is taken from the workloads after it). When that is under
  :data:`MIN_SHARE` seconds, the next workload still runs, with :data:`MIN_SHARE` seconds
  and its budget cut in proportion (``budget * share / MIN_SHARE``, at least 1; the row
  says so), as long as :data:`MIN_SHARE` seconds are left: the workloads not yet run get a
  smaller budget before any is skipped. Those left when fewer than :data:`MIN_SHARE`
  seconds remain are skipped, and listed as such.
* The tuner gets :data:`TUNE_FRACTION` of the share (all of it with ``--no-peers``;
  ``--time-limit`` caps it). :func:`feinsum.autotune` honours its ``time_limit`` only
  between candidates: it starts none after it, but those already building (up to one per
  build worker, each code generation, an OpenCL build and its timing) finish, and the
  performance model's ranking of each recipe's candidates on a GPU it describes
  (:mod:`feinsum.tuning.ranking`, up to ``RANKING_SECONDS`` = 20 s a recipe) is not
  bounded by it at all. So the limit passed is the tuner's part of the share less the
  median overrun past their limits of the tunings before that ran into theirs (at least
  :data:`MIN_TUNE_LIMIT` seconds: the tuner's set-up must end before its limit for any
  candidate to start), and the ranking is bounded for the call to :data:`RANK_FRACTION` of
  the tuner's part over the candidates started at once (at least :data:`RANK_MIN_SECONDS`
  a recipe; the configurations not predicted by then are measured in random order). A
  tuning that still overruns its part by more than a second (and 10%) says so, and by how
  much, in the row's notes.
* The peers share what is left of the workload's share, but never less than the
  ``1 - TUNE_FRACTION`` of it reserved for them, however long the tuning took, nor
  :data:`PEER_MIN_SECONDS` a peer (``--peer-limit`` caps every peer): a peer whose full
  size does not fit is timed on a subsample and scaled, so a short bound still times it.

Each row is printed, appended to ``DIR/rows.jsonl`` (with the share, the budget, the
tuner's limit and time, and every peer's bound) and the markdown table ``DIR/table.md``
rewritten as soon as its workload completes, so a killed run keeps every finished row.
``DIR`` is ``--out`` (default ``bench-gpu-<device>`` here). See benchmarks/README.md for
what a GPU machine needs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import feinsum as fs  # noqa: E402
from feinsum.tuning.workloads import DG_DEGREE, workloads  # noqa: E402

FAMILIES = ("dg", "contraction", "kernel", "elementwise", "reduction")
#: The GPU-sized lengths of ``--lengths gpu`` (symbols not named keep their reference length).
GPU_LENGTHS = {"E": 1_000_000, "M": 1_000_000, "N": 1_000_000}
#: Seconds a workload gets at least: under it a workload runs with a cut budget, and
#: with fewer seconds than this left of the run the remaining workloads are skipped.
MIN_SHARE = 4.0
#: Fraction of a workload's share the tuner may use (the rest is reserved for the peers).
TUNE_FRACTION = 0.6
#: Seconds every peer gets at least, however long the tuning took.
PEER_MIN_SECONDS = 3.0
#: The shortest time limit passed to the tuner (nothing runs when its set-up outlasts it).
MIN_TUNE_LIMIT = 2.0
#: Fraction of the tuner's part of a share the performance model's rankings may take ...
RANK_FRACTION = 0.5
#: ... but at least this many seconds a recipe (predictions take one to five seconds).
RANK_MIN_SECONDS = 1.0
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
    notes += row.get("notes", [])
    notes += [f"{x['peer']}: {x['how']}" for x in row.get("peers", []) if x["how"] != "measured"]
    return (row["workload"], row.get("recipe") or "-", "-" if ms is None else f"{ms:.3f}",
            "-" if row.get("gflops") is None else f"{row['gflops']:.1f}", _pct(row.get("roof")),
            _pct(row.get("sheet")), peer or "-", pms, ratio, "; ".join(notes))


def plan_next(left: float, remaining: int, budget: int) -> tuple[float, int] | None:
    """The share (seconds) and budget of the next of *remaining* workloads when *left*
    seconds of the run are left; None: skip it (fewer than :data:`MIN_SHARE` seconds left).
    A share under :data:`MIN_SHARE` becomes :data:`MIN_SHARE` with the budget cut in
    proportion (at least 1)."""
    if left < MIN_SHARE:
        return None
    share = left / remaining
    if share >= MIN_SHARE:
        return share, budget
    return MIN_SHARE, max(1, min(budget, math.floor(budget * share / MIN_SHARE)))


def tune_limit(part: float, overrun: float) -> float:
    """The time limit to pass the tuner for it to end within *part* seconds, when it runs
    *overrun* seconds past its limit (see the module): *part* less the overrun, at least
    :data:`MIN_TUNE_LIMIT` (or *part*, when shorter)."""
    return min(part, max(MIN_TUNE_LIMIT, part - max(0.0, overrun)))


def ranking_bound(part: float, at_once: int) -> float:
    """Seconds for the ranking of one recipe's candidates when the tuner's part of the share
    is *part* seconds and *at_once* candidates start at once (each of another recipe:
    ranked one after the other, before the tuner next checks its time)."""
    from feinsum.tuning import ranking

    return min(ranking.RANKING_SECONDS,
               max(RANK_MIN_SECONDS, RANK_FRACTION * part / max(1, at_once)))


@contextlib.contextmanager
def ranking_seconds(seconds: float) -> Iterator[None]:
    """Bound the performance model's ranking of each recipe's candidates to *seconds* in the
    block (:data:`feinsum.tuning.ranking.RANKING_SECONDS`, read as each recipe's search is
    set up; autotune has no argument for it)."""
    from feinsum.tuning import ranking

    old = ranking.RANKING_SECONDS
    ranking.RANKING_SECONDS = seconds
    try:
        yield
    finally:
        ranking.RANKING_SECONDS = old


def peer_limit(peers_end: float, now: float, k: int, n: int, cap: float | None) -> float:
    """The bound of peer *k* of *n* at time *now* when the peers are to end at *peers_end*:
    an equal part of what is left, at least :data:`PEER_MIN_SECONDS` (a positive bound
    however late the tuning ended), at most *cap* (``--peer-limit``)."""
    limit = max(PEER_MIN_SECONDS, (peers_end - now) / (n - k))
    return limit if cap is None else min(limit, cap)


def peers_end(started: float, share: float, now: float) -> float:
    """When the peers of a workload started at *started* with *share* seconds are to end, the
    tuning having ended at *now*: at the end of the share, or later by what the tuning took
    of the ``1 - TUNE_FRACTION`` of it reserved for the peers."""
    return max(started + share, now + (1 - TUNE_FRACTION) * share)


def _median_overrun(overruns: Sequence[float]) -> float:
    return max(0.0, statistics.median(overruns)) if overruns else 0.0


def run_workload(name: str, w: Any, lengths: dict[str, int], share: float, budget: int,
                 overrun: float, args: Any, dev: Any, info: Any, roof: Any,
                 db_path: Path) -> dict[str, Any]:
    """Tune and time one workload within *share* seconds with *budget* configurations, the
    tuner running about *overrun* seconds past its limit (see the module): its row."""
    import gpu_peers

    from feinsum.spec.costs import contraction_flops
    from feinsum.tuning.codecheck import default_jobs

    t0 = time.monotonic()
    row: dict[str, Any] = {"workload": name, "family": w.family, "lengths": lengths,
                           "status": "ok", "peers": [], "notes": [], "share": share,
                           "budget": budget}
    if budget < args.budget:
        row["notes"].append(f"budget cut to {budget} (time short)")
    part = share if args.no_peers else TUNE_FRACTION * share
    if args.time_limit:
        part = min(part, args.time_limit)
    limit = tune_limit(part, overrun)
    rank_s = ranking_bound(part, min(budget, default_jobs()))
    row.update(tune_part=part, tune_limit=limit, ranking_s=rank_s)
    res = None
    try:
        with ranking_seconds(rank_s):
            res = fs.autotune(w.spec, db=str(db_path), device=dev, lengths=lengths,
                              budget=budget, time_limit=limit, peers=False,
                              baseline=False, progress=False)
        best = res.best
    except Exception as exc:  # a workload that cannot be tuned is a row, not the end
        best = None
        row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
    tune_s = time.monotonic() - t0
    row["tune_s"] = tune_s
    if res is not None and tune_s > limit:  # it ran into its limit: an estimate of the next
        row["tune_overrun"] = tune_s - limit
    if tune_s > part + max(1.0, 0.1 * part):
        row["notes"].append(f"tuning took {tune_s:.1f} s of its {part:.1f} s "
                            f"(+{tune_s - part:.1f} s)")
    e = w.spec.with_lengths(lengths)
    if best is not None and best.timing is not None:
        t = best.timing.min
        flops = contraction_flops(e)
        row.update(recipe=best.recipe_name, params=best.params, ms=t * 1e3,
                   gflops=flops / t / 1e9,
                   roof=roof.fraction(e.value_dtype(0), flops, best.nbytes or 0, t),
                   sheet=datasheet_fraction(info, e.value_dtype(0), flops, best.nbytes or 0, t))
    elif res is not None:
        why: Any = res.failures
        if not why and res.previous:
            why = f"the budget was spent by {res.previous} earlier records, none ok"
        elif not why:
            why = f"no candidate started within the tuner's {limit:.1f} s limit"
        row["status"] = f"nothing ran ({why})"
    if not args.no_peers:
        factories = gpu_peers.peers(name, w.spec, gpu_only=args.gpu_peers_only)
        end = peers_end(t0, share, time.monotonic())
        for k, (pname, make) in enumerate(factories.items()):
            bound = peer_limit(end, time.monotonic(), k, len(factories), args.peer_limit)
            p = gpu_peers.measure_peer(pname, make, w.spec, lengths, bound).to_json()
            p["limit_s"] = bound
            row["peers"].append(p)
    timed = [p for p in row["peers"] if p["ms"] is not None]
    if timed:
        row["fastest_peer"] = min(timed, key=lambda p: p["ms"])["peer"]
    row["seconds"] = time.monotonic() - t0
    return row


def _positive(text: str) -> float:
    x = float(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return x


def _count(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return n


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--device", help="platform:device indices or a name substring")
    ap.add_argument("--out", help="output folder (default bench-gpu-<device> here)")
    ap.add_argument("--db", help="the database file (default OUT/bench-gpu.sqlite)")
    ap.add_argument("--budget", type=_count, default=8, help="configurations per workload")
    ap.add_argument("--time-budget", type=_positive, default=450.0,
                    help="seconds for the whole run (default 450)")
    ap.add_argument("--time-limit", type=_positive,
                    help="at most this many seconds of tuning per workload")
    ap.add_argument("--peer-limit", type=_positive,
                    help="at most this many seconds per peer")
    ap.add_argument("--lengths", choices=("reference", "gpu", "quick"), default="reference")
    ap.add_argument("--quick", action="store_true", help="= --lengths quick (a smoke test)")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--gpu-peers-only", action="store_true", help="leave the numpy peers out")
    ap.add_argument("--dg-degree", type=_count, default=DG_DEGREE,
                    help="the DG operators' polynomial degree on tetrahedra (4: 35 nodes)")
    args = ap.parse_args(argv)
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
    chosen = workloads(small=which == "quick", families=FAMILIES, gpu=not info.is_cpu,
                       dg_degree=args.dg_degree)
    if args.only:
        unknown = set(args.only) - set(chosen)
        if unknown:
            raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {sorted(chosen)}")
        chosen = {k: w for k, w in chosen.items() if k in args.only}
    rec = Recorder(out, f"{info.name}: budget {args.budget} per workload, {which} lengths, "
                        f"{time.strftime('%Y-%m-%d %H:%M')}")
    names = list(chosen)
    overruns: list[float] = []  # seconds the tuner ran past its limit, per workload
    for k, name in enumerate(names):
        w = chosen[name]
        lengths = lengths_of(w, which)
        left = args.time_budget - (time.monotonic() - t_start)
        plan = plan_next(left, len(names) - k, args.budget)
        if plan is None:
            rec.add({"workload": name, "family": w.family, "lengths": lengths, "peers": [],
                     "status": f"skipped: out of time ({max(0.0, left):.0f} s of "
                               f"--time-budget {args.time_budget:.0f} left)"})
            continue
        share, budget = plan
        row = run_workload(name, w, lengths, share, budget, _median_overrun(overruns), args,
                           dev, info, roof, db_path)
        if "tune_overrun" in row:
            overruns.append(row["tune_overrun"])
        rec.add(row)
    print(f"(roof: of the roofline measured this run; sheet: of the datasheet's; ratio > 1: "
          f"feinsum faster; ~: peer timed on a subsample and scaled; records in {db_path}, "
          f"rows in {out}; {time.monotonic() - t_start:.0f} s of --time-budget "
          f"{args.time_budget:.0f})")

if __name__ == "__main__":
    main()

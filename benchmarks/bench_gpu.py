"""One command for a GPU: check the device, tune every reference workload with a small
budget, time the peers installed there, record everything, print one table.

    python benchmarks/bench_gpu.py [--device SPEC] [--db PATH] [--budget 8]
                                   [--time-limit 120] [--quick] [--only NAME ...]
                                   [--no-peers]

1. The device (``--device``, else ``PYOPENCL_CTX``, else the first usable GPU, else the CPU):
   the probe of :mod:`feinsum.devices.probe` (builds and runs scalar and vector kernels in a
   child process) must pass; its limits and the device model feinsum matched
   (:mod:`feinsum.devices.models`) are printed.
2. Its roofline, measured (:func:`feinsum.measure_roofline`), beside the model's datasheet
   peaks when there is a model.
3. Every reference workload of :mod:`feinsum.tuning.workloads` (the DG family plain and
   batched over 4 fields, the tensor contractions, the kernel reductions, the elementwise
   stand-in; not the block-sparse one, whose inputs must be clustered:
   ``bench_kernel_reductions.py``) tuned by :func:`feinsum.autotune` with ``--budget``
   configurations, recorded in the database ``--db`` (default
   ``bench-gpu-<device>.sqlite`` here; a re-run resumes and measures nothing twice).
4. The peers that import: numpy always (``numpy.einsum``, or :func:`feinsum.evaluate` for
   formulas and min/argmin/logsumexp), torch on CUDA (``torch.einsum``), cupy
   (``cupy.einsum``), pykeops on CUDA (the kernel reductions as LazyTensors).

The table gives feinsum's best time, GFLOP/s (cheapest contraction order), the fraction of
the measured roofline and of the datasheet roofline, the fastest peer and the ratio.
``--quick``: small lengths (a smoke test, e.g. on the CPU device). See benchmarks/README.md
for what a GPU machine needs and how to carry it to one without network.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import feinsum as fs  # noqa: E402
from feinsum.tuning.workloads import workloads  # noqa: E402

FAMILIES = ("dg", "contraction", "kernel", "elementwise")


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


def _sync() -> list[Any]:
    out = []
    try:
        import torch

        if torch.cuda.is_available():
            out.append(torch.cuda.synchronize)
    except ImportError:
        pass
    return out


def gpu_peers(name: str, e: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Zero-argument callables of the GPU peers that import (each waits for its result)."""
    from feinsum.tuning.peers import _plain_rows

    peers: dict[str, Any] = {}
    rows = _plain_rows(e)
    letters = {i: chr(ord("a") + k) for k, i in enumerate(e.indices)}
    subs = (",".join("".join(letters[i] for i in idx) for idx in e.in_indices) + "->"
            + "".join(letters[i] for i in e.out_indices))
    try:
        import torch

        if torch.cuda.is_available() and rows is not None:
            ops = [[torch.as_tensor(inputs[n], device="cuda") for n in r] for r in rows]
            peers["torch.einsum (cuda)"] = lambda: (
                [torch.einsum(subs, *o) for o in ops], torch.cuda.synchronize())
        if torch.cuda.is_available() and e.nrows == 1 and name in KEOPS:
            import pykeops.torch  # noqa: F401

            t = {k: torch.as_tensor(np.asarray(v), device="cuda") for k, v in inputs.items()
                 if np.ndim(v) == 2}
            peers["pykeops (cuda)"] = lambda: (KEOPS[name](t), torch.cuda.synchronize())
    except ImportError:
        pass
    try:
        import cupy

        if rows is not None and cupy.cuda.runtime.getDeviceCount() > 0:
            cops = [[cupy.asarray(inputs[n]) for n in r] for r in rows]
            peers["cupy.einsum"] = lambda: ([cupy.einsum(subs, *o) for o in cops],
                                           cupy.cuda.Device().synchronize())
    except Exception:
        pass
    return peers


def _keops_sqdist(t: dict[str, Any]) -> Any:
    from pykeops.torch import LazyTensor

    x, y = t["x"], t["y"]
    return ((LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2).sum(-1)


#: The kernel reductions as pykeops LazyTensor expressions (g = 1).
KEOPS = {
    "gaussian": lambda t: ((-_keops_sqdist(t)).exp() * t["b"][None, :, :]).sum(1),
    "gaussian4": lambda t: ((-_keops_sqdist(t)).exp() * t["b"][None, :, :]).sum(1),
    "softmin": lambda t: (t["b"][None, :, :] - _keops_sqdist(t)).logsumexp(1),
    "nearest": lambda t: _keops_sqdist(t).min_argmin(1),
}


def datasheet_fraction(info: Any, dtype: Any, flops: float, nbytes: float,
                       seconds: float) -> float | None:
    """The fraction of the device model's datasheet roofline (None: no model)."""
    if not info.peak_bandwidth or not flops:
        return None
    peak = info.peak_flops_fp64 if np.dtype(dtype).itemsize == 8 else info.peak_flops_fp32
    bound = min(flops / nbytes * info.peak_bandwidth if nbytes else np.inf, peak or np.inf)
    return flops / seconds / bound


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", help="platform:device indices or a name substring")
    ap.add_argument("--db", help="the database file (default bench-gpu-<device>.sqlite)")
    ap.add_argument("--budget", type=int, default=8, help="configurations per workload")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per workload")
    ap.add_argument("--quick", action="store_true", help="small lengths: a smoke test")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()

    from feinsum.devices.opencl import device_info
    from feinsum.lowering.validation import random_inputs
    from feinsum.spec.costs import contraction_flops
    from feinsum.timing.roofline import measure_roofline
    from feinsum.tuning.peers import time_peers

    dev = check_device(args.device)
    info = device_info(dev)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", info.name).strip("-").lower()
    db_path = Path(args.db or f"bench-gpu-{slug}.sqlite").resolve()
    print(f"database: {db_path}")
    roof = measure_roofline(dev, db=str(db_path), quick=args.quick)
    print(f"roofline measured: {roof}")
    if info.peak_bandwidth:
        print(f"datasheet ({info.model}): {info.peak_bandwidth / 1e9:.0f} GB/s, "
              f"{info.peak_flops_fp32 / 1e12:.1f} TFLOP/s fp32, "
              f"{info.peak_flops_fp64 / 1e12:.1f} fp64")
    chosen = workloads(small=args.quick, families=FAMILIES)
    if args.only:
        unknown = set(args.only) - set(chosen)
        if unknown:
            raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {sorted(chosen)}")
    rows = []
    for name, w in chosen.items():
        if args.only and name not in args.only:
            continue
        lengths = w.small if args.quick else w.lengths
        t0 = time.perf_counter()
        res = fs.autotune(w.spec, db=str(db_path), device=dev, lengths=lengths,
                          budget=args.budget, time_limit=args.time_limit, peers=False,
                          baseline=False, progress=False)
        e = w.spec.with_lengths(lengths)
        peers: dict[str, float] = {}
        if not args.no_peers:
            inputs = random_inputs(e, {}, 0)
            peers = time_peers(e, inputs, min_samples=3, min_time=0.05, max_time=5.0)
            from feinsum.tuning.peers import _time

            for pname, fn in gpu_peers(name, e, inputs).items():
                try:
                    peers[pname] = _time(fn, 3, 0.05, 5.0)
                except Exception as exc:
                    print(f"  {name}: peer {pname} failed: {type(exc).__name__}: {exc}")
        best = res.best
        rows.append((name, w, e, best, peers, time.perf_counter() - t0))
        if best is None or best.timing is None:
            print(f"  {name}: nothing ran ({res.failures or 'no recipe applies'})")

    head = (f"{'workload':<15} {'recipe':<14} {'ms':>9} {'GFLOP/s':>8} {'roof':>6} "
            f"{'sheet':>6} {'fastest peer':<22} {'peer ms':>9} {'ratio':>6}")
    print(f"\n{info.name}: budget {args.budget} per workload\n{head}\n{'-' * len(head)}")
    for name, _w, e, best, peers, _dt in rows:
        peer = min(peers, key=peers.__getitem__) if peers else None
        if best is None or best.timing is None:
            print(f"{name:<15} {'-':<14} {'failed':>9}")
            continue
        t = best.timing.min
        flops = contraction_flops(e)
        roof_f = roof.fraction(e.value_dtype(0), flops, best.nbytes or 0, t)
        sheet = datasheet_fraction(info, e.value_dtype(0), flops, best.nbytes or 0, t)
        pt = peers[peer] if peer else None
        print(f"{name:<15} {best.recipe_name:<14} {t * 1e3:9.3f} {flops / t / 1e9:8.1f} "
              f"{_pct(roof_f):>6} {_pct(sheet):>6} {peer or '-':<22} "
              f"{'' if pt is None else f'{pt * 1e3:9.3f}':>9} "
              f"{'' if pt is None else f'{pt / t:5.2f}x':>6}")
    print(f"(roof: of the roofline measured this run; sheet: of the datasheet's; ratio > 1: "
          f"feinsum faster; records in {db_path})")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


if __name__ == "__main__":
    main()

"""Elementwise einsums against the device's copy bandwidth, one process, one run.

    python benchmarks/bench_elementwise.py [--quick] [--only add ...] [--configs 12]

Einsums without a reduction (``ij,ij->ij``, ``ij,j->ij``...) move data and do almost no
arithmetic, so their yardstick is the copy bandwidth measured in the same run
(:func:`feinsum.measure_roofline`, bytes read + written). For each workload: the
``elementwise`` recipe's heuristic default, the best of a sweep of its space (the default
and ``--configs`` random valid configurations), and the peers
(``numpy.einsum(optimize=True)``, opt_einsum, ``torch.einsum`` with 2 threads), each
timed by its fastest call, like the copy microbenchmark and the peers. Bytes are
those of the specification (every input read once, the output written once). The target
of issue 4 is 80 % of the copy bandwidth. Compare only numbers from one run.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_einsum import Runner, sweep, sweep_configs

import feinsum as fs
from feinsum.spec.costs import cost
from feinsum.timing.roofline import measure_roofline


def min_time(fn: Any, repeat: int = 20, budget: float = 0.5) -> float:
    """Fastest of *repeat* calls (at least *budget* seconds in all): the statistic of the
    copy-bandwidth microbenchmark and of the peers, so the fractions compare like with like."""
    fn()
    samples: list[float] = []
    while len(samples) < repeat or sum(samples) < budget:
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= 10 * repeat:
            break
    return min(samples)


def workloads(quick: bool) -> dict[str, Any]:
    """name -> spec: the elementwise shapes of array codes, 64 MiB per float32 operand."""
    n = 512 if quick else 4096
    a = fs.array
    A, B = a("A", (n, n), "float32"), a("B", (n, n), "float32")
    row, col = a("r", (n,), "float32"), a("c", (n,), "float32")
    x, y = a("x", (n * n,), "float32"), a("y", (n * n,), "float32")
    A8, B8 = a("A", (n, n // 2), "float64"), a("B", (n, n // 2), "float64")
    return {
        "product": fs.einsum("ij,ij->ij", A, B),
        "scale_rows": fs.einsum("ij,i->ij", A, col),
        "scale_cols": fs.einsum("ij,j->ij", A, row),
        "vector": fs.einsum("i,i->i", x, y),
        "product_f64": fs.einsum("ij,ij->ij", A8, B8),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--only", nargs="*", help="workload names")
    ap.add_argument("--configs", type=int, default=None,
                    help="random configurations per workload (default 12; quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    nconf = args.configs if args.configs is not None else (2 if args.quick else 12)

    import pyopencl as cl

    from feinsum.devices.opencl import device_info, get_context, get_device
    from feinsum.lowering.kernel import generate_loopy
    from feinsum.lowering.validation import random_inputs
    from feinsum.recipes import get_recipe
    from feinsum.spec.canonical import canonical_lengths, canonicalize
    from feinsum.tuning.peers import time_peers

    try:
        import torch

        torch.set_num_threads(2)
    except ImportError:
        pass
    dev = get_device()
    info = device_info(dev)
    queue = cl.CommandQueue(get_context(dev))
    roof = measure_roofline(dev, db=False, quick=args.quick)
    copy = roof.copy_bandwidth
    recipe = get_recipe("elementwise")
    print(f"device: {info.name}; copy bandwidth this run {copy / 1e9:.1f} GB/s "
          f"(triad {roof.triad_bandwidth / 1e9:.1f} GB/s)")
    print(f"{'workload':12} {'who':22} {'seconds':>10} {'GB/s':>7} {'of copy':>8} "
          f"{'vs peer':>8}")
    for name, spec in workloads(args.quick).items():
        if args.only and name not in args.only:
            continue
        e, lengths = canonicalize(spec), canonical_lengths(spec)
        nbytes = float(cost(e, lengths).bytes)
        inputs = random_inputs(e, lengths, args.seed)
        run = Runner(e, lengths, inputs, queue)
        default = recipe.default(e, info)
        fn = run.executor(recipe.apply(generate_loopy(e), default, e, info))
        fn()
        problem = run.check()
        t_default = min_time(fn) if problem is None else float("inf")
        _, chosen, tried = sweep(e, run, info, [
            (recipe, c) for c in sweep_configs(recipe, e, info, nconf, args.seed)])
        cfg = chosen[1] if chosen else None
        t_best = min(t_default, min_time(run.executor(
            recipe.apply(generate_loopy(e), cfg, e, info)))) if cfg else t_default
        peers = time_peers(e, inputs, min_samples=5, min_time=0.2)
        fastest = min(peers.values()) if peers else None
        rows = [("feinsum default", t_default), ("feinsum tuned", t_best),
                *sorted(peers.items(), key=lambda kv: kv[1])]
        for who, t in rows:
            ratio = f"{fastest / t:7.2f}x" if fastest and np.isfinite(t) else "     n/a"
            print(f"{name:12} {who:22} {t:10.5f} {nbytes / t / 1e9:7.1f} "
                  f"{nbytes / t / copy:8.1%} {ratio:>8}")
        print(f"{'':12} default: {default}")
        print(f"{'':12} best of {tried} configurations: {cfg}")
        if problem:
            print(f"{'':12} ! the default configuration gave a wrong result: {problem}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

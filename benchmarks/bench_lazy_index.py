"""The nearest neighbour with and without ``lazy_index``, on points in three orders.

    python benchmarks/bench_lazy_index.py [--n 100000] [--device SPEC] [--repeat 5]
                                          [--model h200] [--json FILE]

With ``lazy_index`` (``tiled_1d``, an argmin over squared distances) a work-item looks for
the index only in a chunk of terms that holds one of its rows' new minimum, in a branch a
warp takes when one of its 32 rows does. How often depends on the order of the points:

* ``random``: uniform points in the unit cube, the order the performance model assumes
  (a row's chunk ``t`` holds a new minimum with probability ``1/t``);
* ``morton``: both clouds sorted along a Z-order curve, as simulation codes store them;
* ``worst``: the i-points near the origin and the j-points ever closer to it, so that
  every chunk holds every row's new minimum.

For each order the script times ``tiled_1d``'s GPU default (the device's model's, else
``--model``'s) with ``lazy_index`` on and off, on the same device arrays, best of
``--repeat`` after a warm-up, and checks that both give the same indices. Without a GPU
(PoCL) it runs the same code for the check; the times say little there. One run, one
machine: the ratio is the figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import feinsum  # noqa: E402
from feinsum.reductions.builder import kernel_reduction  # noqa: E402

ORDERS = ("random", "morton", "worst")


def nearest_spec() -> Any:
    return kernel_reduction("sqdist(x, y)", i_vars={"x": 3}, j_vars={"y": 3},
                            dtype=np.float32, reduction="argmin")


def _morton(points: np.ndarray) -> np.ndarray:
    """*points* (in [0, 1)^3) sorted along a Z-order curve of 2^10 cells a side."""
    cells = np.minimum((points * 1024).astype(np.uint64), 1023)
    code = np.zeros(len(points), dtype=np.uint64)
    for bit in range(10):
        for axis in range(3):
            code |= ((cells[:, axis] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(
                3 * bit + axis)
    return points[np.argsort(code, kind="stable")]


def points(order: str, m: int, n: int, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of *order* (:data:`ORDERS`), float32."""
    x, y = rng.random((m, 3), dtype=np.float32), rng.random((n, 3), dtype=np.float32)
    if order == "morton":
        return _morton(x), _morton(y)
    if order == "worst":
        x = (x * 1e-3).astype(np.float32)
        far = np.linalg.norm(y, axis=1)
        return x, y[np.argsort(-far, kind="stable")]
    if order != "random":
        raise SystemExit(f"unknown order {order!r}: one of {', '.join(ORDERS)}")
    return x, y


def gpu_default(spec: Any, device: Any, model: str) -> dict[str, Any]:
    """tiled_1d's GPU default for *device*'s model, else for the device model *model*."""
    from feinsum.devices.models import get_model
    from feinsum.devices.opencl import device_info
    from feinsum.recipes import get_recipe

    info = device_info(device)
    if info.is_cpu or not info.model:
        info = get_model(model)
    params = dict(get_recipe("tiled_1d").default(feinsum.canonicalize(spec), info))
    if not params.get("lazy_index"):
        raise SystemExit(f"tiled_1d's default on {info.name} has no lazy_index: {params}")
    return params


def best_of(fn: Any, queue: Any, repeat: int) -> float:
    fn()
    queue.finish()
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        queue.finish()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000, help="M = N (default 1e5)")
    ap.add_argument("--device", default=None, help="OpenCL device (feinsum.get_device)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", default="h200",
                    help="device model whose default is timed on a device without one")
    ap.add_argument("--orders", nargs="*", default=list(ORDERS), choices=ORDERS)
    ap.add_argument("--json", type=Path, default=None, help="append the rows here")
    args = ap.parse_args()
    if args.n < 1 or args.repeat < 1:
        raise SystemExit("--n and --repeat must be positive")
    import pyopencl.array as cla

    from feinsum.devices.opencl import get_device, get_queue

    device = get_device(args.device)
    queue = get_queue(device)
    spec = nearest_spec()
    params = gpu_default(spec, device, args.model)
    calls = {lazy: feinsum.compile(spec, device=device, db=False, recipe="tiled_1d",
                                   params={**params, "lazy_index": lazy})
             for lazy in (True, False)}
    print(f"# nearest neighbour, M = N = {args.n}, {device.name.strip()}; tiled_1d "
          f"{json.dumps(params, sort_keys=True)}")
    print(f"{'order':<8} {'lazy ms':>9} {'eager ms':>9} {'eager/lazy':>10}")
    rng = np.random.default_rng(0)
    for order in args.orders:
        x, y = points(order, args.n, args.n, rng)
        dev = {"x": cla.to_device(queue, x), "y": cla.to_device(queue, y)}
        out = {lazy: calls[lazy](queue=queue, **dev) for lazy in (True, False)}
        index = {lazy: o[1].get() if hasattr(o[1], "get") else np.asarray(o[1])
                 for lazy, o in out.items()}  # (value, index) pairs
        if not np.array_equal(index[True], index[False]):
            raise SystemExit(f"{order}: lazy_index found other neighbours "
                             f"({int((index[True] != index[False]).sum())} rows)")
        ms = {lazy: 1e3 * best_of(lambda c=calls[lazy], a=dev: c(queue=queue, **a), queue,
                                  args.repeat) for lazy in (True, False)}
        print(f"{order:<8} {ms[True]:9.3f} {ms[False]:9.3f} {ms[False] / ms[True]:10.2f}",
              flush=True)
        if args.json is not None:
            with args.json.open("a") as f:
                f.write(json.dumps({"order": order, "n": args.n, "device": device.name.strip(),
                                    "lazy_ms": ms[True], "eager_ms": ms[False],
                                    "params": params}) + "\n")


if __name__ == "__main__":
    main()

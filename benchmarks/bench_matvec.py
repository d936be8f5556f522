"""Matrix-vector products, row reductions and long sums on the CPU, one process, one run.

    python benchmarks/bench_matvec.py [--quick] [--only NAME ...] [--repeat 7]

For each shape (float64): feinsum's default until 2026-11-27 (*before*: for the products
and row reductions generic's default without :mod:`feinsum.toolbox.cpu_rows`, one output
per work-item and the reduction in tiles of 4; for the long sums generic's, the reduction
shared among 64 work-items of one group), the recipe the hook takes now with its default
(*now*: generic for the products and row reductions, split_reduction for the sums), and
numpy (``A @ x``, ``A.T @ y``, ``A.sum(1)``, ``A.max(1)``, ``x @ y``, ``x.sum()``,
``x @ x`` for the squared norm ``sum(abs(x)**2)``, on the same data), each timed by its
fastest call (:func:`feinsum.measure` for feinsum). The yardstick is numpy's time:
``now / numpy`` above 1 is slower than numpy. Compare only numbers from one run.
"""

from __future__ import annotations

import argparse
import functools
import timeit
import warnings
from collections.abc import Callable
from typing import Any, cast
from unittest import mock

import numpy as np

import feinsum as fs


def shapes(quick: bool) -> dict[str, tuple[str, tuple[int, int], str]]:
    """name -> (subscripts, matrix shape, reduction)."""
    k = 4 if quick else 1
    return {
        "A @ x 4000^2": ("ij,j->i", (4000 // k, 4000 // k), "sum"),
        "A @ x 20000 x 500": ("ij,j->i", (20000 // k, 500), "sum"),
        "A @ x 1e6 x 35": ("ij,j->i", (10**6 // k, 35), "sum"),
        "A.T @ y 4000^2": ("ji,j->i", (4000 // k, 4000 // k), "sum"),
        "A.T @ y 1500^2": ("ji,j->i", (1500 // k, 1500 // k), "sum"),
        "row sums 4000^2": ("ij->i", (4000 // k, 4000 // k), "sum"),
        "row maxima 4000^2": ("ij->i", (4000 // k, 4000 // k), "max"),
        "dot 1e7": ("j,j->", (1, 10**7 // k), "sum"),
        "sum 1e7": ("j->", (1, 10**7 // k), "sum"),
        "squared norm 1e7": ("j->", (1, 10**7 // k), "abs(x)**2"),
    }


def _numpy(subscripts: str, reduction: str) -> Callable[[Any, Any], Any]:
    if subscripts == "j,j->":
        return lambda a, v: a @ v
    if subscripts == "j->":
        return (lambda a, v: a.sum()) if reduction == "sum" else (lambda a, v: a @ a)
    if subscripts == "ij,j->i":
        return lambda a, v: a @ v
    if subscripts == "ji,j->i":
        return lambda a, v: a.T @ v
    return (lambda a, v: a.sum(1)) if reduction == "sum" else (lambda a, v: a.max(1))


def fastest(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of each length")
    parser.add_argument("--only", nargs="*", help="names (see the table)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from feinsum.devices.opencl import device_info, get_device

    device = get_device()
    info = device_info(device)
    generic, split = fs.get_recipe("generic"), fs.get_recipe("split_reduction")
    print(f"device: {info.name} ({'CPU' if info.is_cpu else 'not a CPU'})")
    print("| shape | before (ms) | now (ms) | numpy (ms) | now / numpy | before / now |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for name, (subs, shape, reduction) in shapes(args.quick).items():
        if args.only and name not in args.only:
            continue
        long_sum = subs.endswith("->")
        ops = [fs.array("A", shape[1:] if long_sum else shape, "float64")]
        if "," in subs:
            ops.append(fs.array("v", (shape[0] if subs.startswith("ji") else shape[1],),
                                "float64"))
        if reduction == "abs(x)**2":  # a formula operand, as pytato's norms write it
            ops = [fs.formula("sq", "j", "abs(x[j])**2", [fs.array("x", shape[1:], "float64")])]
        e = fs.einsum(subs, *ops, reduction="sum" if reduction == "abs(x)**2" else reduction)
        spec, lengths = fs.canonicalize(e), fs.canonical_lengths(e)
        if long_sum:
            now_recipe = split
            before = {**generic.default(spec, info, lengths), "rlocal": 64, "rtile": 1}
        else:
            now_recipe = generic
            with mock.patch("feinsum.toolbox.cpu_rows.cpu_rows", return_value=None):
                before = generic.default(spec, info, lengths)
        times = []
        for recipe, p in ((generic, before), (now_recipe, now_recipe.default(
                spec, info, lengths))):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = fs.measure(e, recipe, p, device=device, isolate=False,
                               min_samples=args.repeat)
            times.append(m.seconds if m.seconds else float("nan"))
        a = rng.random(shape[1:] if long_sum else shape)
        v = rng.random(cast(Any, ops[1].shape)[0]) if len(ops) > 1 else None
        ref = _numpy(subs, reduction)
        t_np = fastest(functools.partial(ref, a, v), args.repeat)
        t0, t1 = times
        print(f"| {name} | {t0 * 1e3:.3f} | {t1 * 1e3:.3f} | {t_np * 1e3:.3f} | "
              f"{t1 / t_np:.2f} | {t0 / t1:.2f} |", flush=True)


if __name__ == "__main__":
    main()

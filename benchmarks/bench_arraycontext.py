"""DG programs through arraycontext + pytato: untransformed, with feinsum, and numpy.

    .venv/bin/python benchmarks/bench_arraycontext.py [--elements 20000] [--tune N]

Each program of ``dg_programs.py`` (the four DG workloads, the DG step, an RHS of 20
einsums with elementwise work) is written once against the array-context interface and run
through arraycontext's ``PytatoPyOpenCLArrayContext`` (what pytato's users have: one
work-item runs everything) and through feinsum's drop-in subclass of it, then computed by
numpy (``einsum(optimize=True)``), in one process and one run. Every program is checked
against numpy first. Times are the fastest of ``--repeat`` calls (``queue.finish()``
included; the transfer of the result to the host is not), ratios against the untransformed
program and against numpy. The untransformed program is first timed at a hundredth of the
elements; where that projects to more than ``--slow-limit`` seconds a call at the full size
(the mid-2025 pytato inlines the RHS's einsums into each other: 27 s a call at E = 200),
its time at the full size is that projection (work per element is the same for every
element), marked ``~``.

``--tune N`` tunes each einsum the first time feinsum's context compiles it (the hook's
``on_miss="tune"``, N evaluations, records in ``--db``); without it the records already in
``--db`` are replayed and the recipe defaults cover the rest (``--db none``: defaults only).

Whole programs against their einsums: for each program of ``dg_programs.EINSUMS`` (the DG
step, the step with the inverse mass matrix, the RHS), the whole program through feinsum's
context is timed against the sum of its einsums, each run alone as a program of its own
through the same context (same shapes, same pool), calls interleaved round by round and the
fastest of each kept; the table gives the ratio and, from the hook's report, the device
kernels and global temporaries of the program before and after the hook. This is what the
elementwise work, the launches and the allocations around the einsums cost (1.0: nothing).
``--whole-only`` skips the untransformed program and numpy.
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
import dg_programs as dp


def fastest(f: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def time_program(fn: Any, host: dict[str, np.ndarray], reference: np.ndarray | None,
                 queue: Any, db: Any, args: Any, repeat: int, feinsum: bool = False
                 ) -> tuple[float, Any]:
    """The fastest of *repeat* calls of program *fn* compiled by pytato (through feinsum's
    context if *feinsum*), after checking it against *reference*; and feinsum's report."""
    import pyopencl.tools as clt
    from arraycontext import PytatoPyOpenCLArrayContext

    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    if feinsum:
        actx: Any = FeinsumPytatoPyOpenCLArrayContext(
            queue, feinsum_db=db, feinsum_on_miss="tune" if args.tune else "default",
            feinsum_budget=args.tune or None)
    else:
        actx = PytatoPyOpenCLArrayContext(queue, clt.MemoryPool(clt.ImmediateAllocator(queue)))
    arrays = {k: actx.from_numpy(a) for k, a in host.items()}
    step = actx.compile(lambda **kw: fn(actx, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = actx.to_numpy(step(**arrays))
        if feinsum:  # the transformed program, once the background worker made it
            actx.feinsum_wait()
            out = actx.to_numpy(step(**arrays))
    if reference is not None:
        err = float(np.abs(out - reference).max() / np.abs(reference).max())
        if err > 1e-8:
            raise SystemExit(f"{fn.__name__} ({'feinsum' if feinsum else 'untransformed'}): "
                             f"relative error {err:.1e} against numpy")

    def call() -> None:
        step(**arrays)
        queue.finish()

    return fastest(call, repeat), getattr(actx, "feinsum_last_report", None)


def whole_vs_einsums(name: str, E: int, queue: Any, db: Any, repeat: int
                     ) -> tuple[float, float, Any]:
    """The fastest call of program *name* through feinsum's context, the sum of the fastest
    calls of its einsums alone (interleaved with it), and the whole program's report."""
    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext

    actx = FeinsumPytatoPyOpenCLArrayContext(queue, feinsum_db=db)

    def compiled(prog: str) -> Any:
        fn, inputs = dp.PROGRAMS[prog]
        arrays = {k: actx.from_numpy(a) for k, a in dp.inputs(inputs, E).items()}
        step = actx.compile(lambda **kw: fn(actx, **kw))

        def call() -> None:
            step(**arrays)
            queue.finish()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call()
            actx.feinsum_wait()  # then the next call runs the transformed program
            call()
        return call

    whole = compiled(name)
    report = actx.feinsum_last_report
    alone = {k: compiled(k) for k in dp.EINSUMS[name]}
    best = {k: float("inf") for k in [name, *alone]}
    for _ in range(repeat):
        for k, call in [(name, whole), *alone.items()]:
            best[k] = min(best[k], fastest(call, 1))
    total = sum(best[k] * n for k, n in dp.EINSUMS[name].items())
    return best[name], total, report


def _kernels(launches: Any) -> str:
    if launches is None:
        return "?"
    total = launches.temporary_bytes
    size = f" {total / 1e6:.1f} MB" if total else ""
    return f"{len(launches.launches)} / {len(launches.temporaries)}{size}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=20_000)
    parser.add_argument("--only", nargs="*", help="programs to run (default: all)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--slow-limit", type=float, default=10.0,
                        help="seconds an untransformed call may take at full size before "
                        "its time is projected from a smaller size")
    parser.add_argument("--tune", type=int, default=0, metavar="N")
    parser.add_argument("--db", default="none",
                        help="feinsum's timing database (a path), or none: defaults only")
    parser.add_argument("--whole-only", action="store_true",
                        help="only the whole programs against their einsums alone")
    args = parser.parse_args()

    from feinsum.devices.opencl import device_info, get_device, get_queue

    dev = get_device()
    queue = get_queue(dev)
    db: Any = False if args.db == "none" else args.db
    if args.tune and db is False:
        parser.error("--tune records what it measures: give --db PATH")
    print(f"device: {device_info(dev).name}; E = {args.elements}; float64; fastest of "
          f"{args.repeat} calls")
    names = args.only or list(dp.PROGRAMS)
    rows = []
    for name in [] if args.whole_only else names:
        fn, inputs = dp.PROGRAMS[name]
        host = dp.inputs(inputs, args.elements)
        reference = dp.numpy_version(name)(**host)
        t_numpy = fastest(lambda: dp.numpy_version(name)(**host), max(2, args.repeat // 3))  # noqa: B023
        probe = max(1, args.elements // 100)
        t_probe, _ = time_program(fn, dp.inputs(inputs, probe), None, queue, db, args, 2)
        t_plain = t_probe * args.elements / probe
        slow = t_plain > args.slow_limit
        if not slow:
            t_plain, _ = time_program(fn, host, reference, queue, db, args, args.repeat)
        t_fe, report = time_program(fn, host, reference, queue, db, args, args.repeat,
                                    feinsum=True)
        rows.append((name, t_plain, slow, t_fe, t_numpy, report))
    print(f"\n{'program':18s} {'untransformed':>14s} {'feinsum':>10s} {'numpy':>10s} "
          f"{'vs untransformed':>17s} {'vs numpy':>9s}  recipes")
    for name, t_plain, slow, t_fe, t_np, report in rows:
        recipes = sorted({g.recipe for g in report.groups if g.recipe} if report else set())
        print(f"{name:18s} {'~' if slow else ' '}{t_plain * 1e3:10.2f} ms {t_fe * 1e3:7.2f} ms "
              f"{t_np * 1e3:7.2f} ms "
              f"{'~' if slow else ' '}{t_plain / t_fe:15.1f}x {t_np / t_fe:8.2f}x  "
              f"{', '.join(recipes)}")
    wholes = [n for n in names if n in dp.EINSUMS]
    if not wholes:
        return
    print(f"\nwhole programs against their einsums alone (feinsum's context, fastest of "
          f"{args.repeat} interleaved calls each; launches / global temporaries before -> "
          "after the hook):")
    print(f"{'program':18s} {'whole':>10s} {'einsums alone':>14s} {'ratio':>7s}  "
          f"{'untransformed':>22s} -> {'feinsum':<22s}")
    for name in wholes:
        t_whole, t_alone, report = whole_vs_einsums(name, args.elements, queue, db,
                                                    args.repeat)
        before = _kernels(report.untransformed_launches if report else None)
        after = _kernels(report.launches if report else None)
        print(f"{name:18s} {t_whole * 1e3:7.2f} ms {t_alone * 1e3:11.2f} ms "
              f"{t_whole / t_alone:6.2f}x  {before:>22s} -> {after:<22s}")


if __name__ == "__main__":
    main()

"""Einsums with factors around them, through arraycontext + pytato, against the plain
einsum and numpy, in one run.

    .venv/bin/python benchmarks/bench_factors.py [--elements 20000] [--n 1000] [--repeat 5]

Each program is an einsum with a constant, a scalar or a factor of an operand
(``0.4 * gradient``, ``dt * divergence`` with ``dt`` a 0-d device array, ``A @
(w[:, None]*B)``, ``A @ (B*C)``) or with a costly operand expression (``(exp(A)/(1 + A)) @
B``), compiled by pytato through feinsum's context; its *plain* counterpart is the same
einsum without the factor, through the same context (what the factor costs: 1.0x is
nothing), and the peer is numpy (``einsum(optimize=True)``, ``@``). Each is checked against
numpy first; times are the fastest of ``--repeat`` calls (``queue.finish()`` included),
taken in rounds over every program (the first program timed in a process ran 2-3x slower
than later ones), and the recipe is the hook's. See ``docs/compiler-guide.rst``
(constant and scalar factors, factors folded into an operand's loads, operand expressions
and what they cost).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_arraycontext import fastest


def _programs(E: int, n: int) -> dict[str, tuple[Any, Any, Any, dict[str, np.ndarray]]]:
    """name -> (program(np_like, **arrays), its plain counterpart, numpy, arrays)."""
    rng = np.random.default_rng(0)
    dg = {"J": rng.random((3, 3, E)), "D": rng.random((3, 35, 35)),
          "u": rng.random((E, 35)), "v": rng.random((3, E, 35)), "dt": np.array(0.1)}
    mm = {"A": rng.random((n, 64)), "B": rng.random((64, n)), "C": rng.random((64, n)),
          "w": rng.random(64)}

    def grad(x: Any, J: Any, D: Any, u: Any, **_: Any) -> Any:
        return x.einsum("xre,rij,ej->xei", J, D, u)

    def div(x: Any, J: Any, D: Any, v: Any, **_: Any) -> Any:
        return x.einsum("xre,rij,xej->ei", J, D, v)

    def prod(x: Any, A: Any, B: Any, **_: Any) -> Any:
        return x.einsum("ik,kj->ij", A, B)

    return {
        "0.4 * gradient": (lambda x, **a: 0.4 * grad(x, **a), grad,
                           lambda a: 0.4 * np.einsum("xre,rij,ej->xei", a["J"], a["D"], a["u"],
                                                     optimize=True), dg),
        "divergence of 2v": (lambda x, v, **a: div(x, v=2 * v, **a), div,
                             lambda a: 2 * np.einsum("xre,rij,xej->ei", a["J"], a["D"],
                                                     a["v"], optimize=True), dg),
        "dt * divergence": (lambda x, dt, **a: dt * div(x, **a), div,
                            lambda a: 0.1 * np.einsum("xre,rij,xej->ei", a["J"], a["D"],
                                                      a["v"], optimize=True), dg),
        "A @ (w*B)": (lambda x, A, B, w, **a: prod(x, A, w.reshape(64, 1) * B), prod,
                      lambda a: a["A"] @ (a["w"][:, None] * a["B"]), mm),
        "A @ (B*C)": (lambda x, A, B, C, **a: prod(x, A, B * C), prod,
                      lambda a: a["A"] @ (a["B"] * a["C"]), mm),
        "exp(A)/(1+A) @ B": (lambda x, A, B, **a: prod(x, x.np.exp(A) / (1 + A), B), prod,
                             lambda a: (np.exp(a["A"]) / (1 + a["A"])) @ a["B"], mm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=20_000, help="E of the DG einsums")
    parser.add_argument("--n", type=int, default=1000, help="n of the n x 64 x n products")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="programs to run (default: all)")
    args = parser.parse_args()

    from feinsum.arraycontext import FeinsumPytatoPyOpenCLArrayContext
    from feinsum.devices.opencl import device_info, get_device, get_queue

    queue = get_queue(get_device())
    actx = FeinsumPytatoPyOpenCLArrayContext(queue, feinsum_db=False)
    print(f"device: {device_info(queue.device).name}; E = {args.elements}, n = {args.n}; "
          f"float64; fastest of {args.repeat} calls\n")
    calls: dict[tuple[str, int], Callable[[], Any]] = {}
    recipes: dict[tuple[str, int], str] = {}
    peers: dict[str, Callable[[], Any]] = {}
    for name, (program, plain, numpy_version, host) in _programs(args.elements,
                                                                 args.n).items():
        if args.only and name not in args.only:
            continue
        arrays = {k: actx.from_numpy(v) for k, v in host.items()}
        for which, fn in enumerate((program, plain)):
            step = actx.compile(lambda fn=fn, **kw: fn(actx, **kw))

            def call(step: Any = step, arrays: dict[str, Any] = arrays) -> Any:
                out = step(**arrays)
                queue.finish()
                return out

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
                actx.feinsum_wait()  # the next call runs the transformed program
                got = actx.to_numpy(call())
            if which == 0:
                want = numpy_version(host)
                err = float(np.abs(got - want).max() / np.abs(want).max())
                if err > 1e-10:
                    raise SystemExit(f"{name}: relative error {err:.1e} against numpy")
            report = actx.feinsum_last_report
            recipes[name, which] = (",".join(sorted({g.recipe or "-" for g in report.groups}))
                                    if report else "?")
            calls[name, which] = call
        peers[name] = lambda h=host, f=numpy_version: f(h)
    # rounds over every program, so that none pays the process's warm-up alone
    best = dict.fromkeys([*calls, *peers], float("inf"))
    for _ in range(args.repeat):
        for key, f in [*calls.items(), *peers.items()]:
            best[key] = min(best[key], fastest(f, 1))
    print(f"{'program':20s} {'feinsum':>10s} {'plain':>10s} {'numpy':>10s} "
          f"{'vs plain':>9s} {'vs numpy':>9s}  recipe")
    for name in peers:
        t, t_plain, t_np = best[name, 0], best[name, 1], best[name]
        print(f"{name:20s} {t * 1e3:7.2f} ms {t_plain * 1e3:7.2f} ms {t_np * 1e3:7.2f} ms "
              f"{t / t_plain:8.2f}x {t_np / t:8.2f}x  {recipes[name, 0]} "
              f"(plain: {recipes[name, 1]})")


if __name__ == "__main__":
    main()
